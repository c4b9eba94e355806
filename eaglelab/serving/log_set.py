"""The serving logs a notebook reads, as one result: every file parsed, their records, counts and median τ.

:meth:`LogSet.read` parses each file once (:func:`eaglelab.serving.logs.parse_log`); notebook 01's section 4 shows its
tables and its findings say what was read. Numbers only: no torch.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any

from eaglelab.serving.logs import ParsedLog, log_by_concurrency, parse_log
from eaglelab.views import Column, View


@dataclass(frozen=True)
class LogSet:
    """Several server logs, each parsed once."""

    logs: tuple[ParsedLog, ...]

    @classmethod
    def read(cls, paths: Sequence[str]) -> LogSet:
        return cls(tuple(parse_log(p) for p in paths))

    @cached_property
    def records(self) -> list[dict[str, Any]]:
        """Every metrics line of every file, as JSON rows (``source``, ``accept_len``, ``throughput``...)."""
        return [asdict(r) for log in self.logs for r in log.records]

    @property
    def median_tau(self) -> float | None:
        taus = [r["accept_len"] for r in self.records if r.get("accept_len") is not None]
        return float(statistics.median(taus)) if taus else None

    def view(self) -> View:
        """One row per file: its metrics lines, median τ and tok/s, the lines skipped and malformed."""
        columns = [Column("file"), Column("metrics lines"), Column("median τ", "{:.2f}"), Column("median tok/s"),
                   Column("skipped"), Column("malformed")]
        rows = []
        for log in self.logs:
            s = log.summary()
            rows.append([log.path, s["n"], s["median_accept_len"], s["median_throughput"], log.skipped_lines,
                         log.n_malformed])
        return View.of(columns, rows, index="file")

    def table(self):
        return self.view().frame()

    def by_concurrency(self):
        """Each file's records grouped by concurrency (:func:`eaglelab.serving.logs.log_by_concurrency`), one frame."""
        import pandas as pd

        return pd.DataFrame([{"file": log.path, **g} for log in self.logs for g in log_by_concurrency(log)])

    def findings(self, tag: str = "") -> dict[str, str]:
        """``logs``: how many metrics lines from how many files, what was skipped or malformed, the median τ."""
        t = f" {tag}" if tag else ""
        tau = self.median_tau
        median = f"; median τ {tau:.2f}" if tau is not None else "; no τ logged"
        return {"logs": f"**Logs{t}:** {sum(log.n_records for log in self.logs)} metrics lines parsed from "
                        f"{len(self.logs)} files ({sum(log.skipped_lines for log in self.logs)} other lines skipped, "
                        f"{sum(log.n_malformed for log in self.logs)} malformed){median}."}
