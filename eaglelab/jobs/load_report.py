"""The load question's answer: the model's rows per concurrency, the logs' groups, the crossover and the band.

:class:`LoadReport` is what :func:`eaglelab.jobs.load.speculation_under_load` returns; ``perf``, ``plan`` and notebook
01 show its lines. Numbers only: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eaglelab.jobs.load_settings import LoadSettings
from eaglelab.outputs import table
from eaglelab.serving.load import CONCURRENCY_GRID, LoadModel
from eaglelab.serving.load_band import LoadBand
from eaglelab.serving.load_checks import Calibration
from eaglelab.serving.load_tables import LoadRow, scales_table
from eaglelab.views import Column, View


@dataclass
class LoadReport:
    """The answer per concurrency: the model's rows, the measurements' rows, and up to which concurrency it pays.

    Attributes:
        rows: the calibrated model at each concurrency (:func:`eaglelab.serving.load_tables.by_concurrency`).
        log_rows: the speculative log grouped by concurrency (:func:`eaglelab.serving.logs.log_by_concurrency`).
        tau: the τ the model's rows use (the entered one, else the logs' median).
        pays_up_to: from ``at_concurrency`` up, the largest concurrency (then powers of two to 1024) up to
            which speculation pays at ``tau`` with the KV cache fitting; None when it does not pay at
            ``at_concurrency`` itself.
        model: the calibrated model, ``source``: what it is of, in words, ``calibrated_on``: the points that fixed it.
        calibration: how the model reproduces those points
            (:class:`~eaglelab.serving.load_checks.Calibration`); the table is called calibrated only where it does.
        residuals: each measured step beside the model's (measured and model ms, relative error).
        why: the reasons at the crossover, in words (the cycle's largest parts there).
    """

    settings: LoadSettings
    rows: list[LoadRow]
    log_rows: list[dict]
    tau: float | None
    pays_up_to: int | None
    model: LoadModel | None = None
    calibrated_on: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    calibration: Calibration | None = None
    source: str = ""
    residuals: list[dict] = field(default_factory=list)
    why: list[str] = field(default_factory=list)
    band: LoadBand | None = None

    def to_json(self) -> dict[str, Any]:
        return {"by_concurrency": [r.to_json() for r in self.rows], "log_by_concurrency": self.log_rows, "accept_len": self.tau,
                "k": self.settings.k, "pays_up_to": self.pays_up_to, "source": self.source,
                "model": self.model.to_json() if self.model is not None else None,
                "parameters": self.model.parameters() if self.model is not None else [],
                "calibrated_on": self.calibrated_on, "residuals": self.residuals, "notes": self.notes, "why": self.why,
                "calibration": self.calibration.to_json() if self.calibration is not None else None,
                "band": self.band.to_json() if self.band is not None else None}

    def view(self) -> View:
        """The model's table, one row per concurrency: what ``table()`` and ``perf --concurrency`` show."""
        ratio = Column(f"speedup (τ {self.tau:.2f})" if self.tau is not None else "speedup", "{:.2f}x")
        band = [Column("band")] if self.band is not None else []
        columns = [Column("concurrency"), Column("decode ms", "{:.1f}"), Column("verify ms", "{:.1f}"),
                   Column("cycle ms", "{:.1f}"), ratio, *band, Column("break-even τ", "{:.2f}"), Column("best k"),
                   Column("at best k", "{:.2f}x")]
        return View.of(columns, [[r.concurrency, r.decode_ms, r.verify_ms, r.cycle_ms, r.speedup,
                                  *([self.band.cell(r.concurrency)] if self.band is not None else []),
                                  r.break_even_tau, r.best_k, r.best_speedup] for r in self.rows], index="concurrency")

    def log_view(self) -> View:
        """The speculative log's groups by concurrency (with the plain log's tok/s and the measured speedup)."""
        columns = [Column("concurrency"), Column("n (log)"), Column("accept len", "{:.2f}"), Column("tok/s", "{:.1f}"),
                   Column("plain tok/s", "{:.1f}"), Column("measured", "{:.2f}x")]
        return View.of(columns, [[r["concurrency"], r["n"], r["accept_len"], r["throughput"], r.get("plain_throughput"),
                                  r.get("speedup")] for r in self.log_rows], index="concurrency")

    def table(self):
        """The model's table as a DataFrame (the columns ``perf --concurrency`` prints)."""
        return self.view().frame()

    def findings(self, tag: str = "") -> dict[str, str]:
        """Named sentences (markdown) for a notebook to pick and order: ``load`` (the model's source, the crossover,
        each row's speedup, break-even τ and best k, the reason at the crossover) and ``band`` (over what was not
        given; empty without a band). ``tag``: the evidence tag of the measured point (``[entered]``...)."""
        at = self.settings.at_concurrency
        t = f" {tag}" if tag else ""
        rows = ", ".join(f"{r.concurrency} request{'s' if r.concurrency != 1 else ''} {r.speedup:.2f}× (break-even τ "
                         f"{r.break_even_tau:.2f}, best k {r.best_k})" for r in self.rows)
        why = f"; {self.why[0]}" if self.why else ""
        band = " ".join(line[0].upper() + line[1:] + "." for line in self.band.lines()) if self.band else ""
        return {"load": f"**Under load** ({self.source}, calibrated at {at} request{'s' if at != 1 else ''} in flight"
                        f"{t}): {self.crossover()}; {rows} [derived]{why}.",
                "band": band}

    def lines(self) -> list[str]:
        """What ``eaglelab perf --concurrency`` prints: the logs' groups, the model's table, its residuals, the crossover."""
        out = []
        if self.log_rows:
            out += self.log_view().text().splitlines() + [""]
        if self.rows:
            out += self.view().text().splitlines()
            out.append(f"({self.source}" + (f", {self.calibration.line()})" if self.calibration is not None else ")"))
        if len(self.residuals) > 2 and self.model is not None:
            out += [""] + table([[r["concurrency"], r["what"], r["k"] or "-", "-" if r["context"] is None else r["context"],
                                  f"{r['measured_ms']:.2f}", f"{r['model_ms']:.2f}", f"{100 * r['error']:+.1f}%"]
                                 for r in self.residuals],
                                ["concurrency", "measured", "k", "context", "measured ms", "model ms", "residual"]).splitlines()
            out.append("each term, measured over its datasheet value: " + ", ".join(
                f"{r['term']} {r['multiplier']:.2f}x" for r in scales_table(self.model)))
        return out + [self.crossover(), *(self.band.lines() if self.band else []), *self.why, *self.k_hint(), *self.notes]

    def k_hint(self) -> list[str]:
        """At most one line: the first concurrency of the table where speculation does not pay at ``k`` but would at
        another k whose KV cache fits there (the table's own ``best_k`` and ``best_speedup``)."""
        k = self.settings.k
        other = [r for r in self.rows if not r.pays and r.best_k != k and r.best_speedup >= 1.0
                 and self.model is not None and bool(self.model.kv_fits(r.concurrency, r.best_k))]
        return [f"with k = {r.best_k} instead (the same per-draft acceptance) it would pay at {r.concurrency} "
                f"request{'s' if r.concurrency != 1 else ''} in flight: {r.best_speedup:.2f}x" for r in other[:1]]

    def crossover(self) -> str:
        """One line: up to which concurrency speculation pays, per the model at τ."""
        if self.model is None or self.tau is None:
            return "no model: give a measured point (--baseline-tps, --cycle-ms), a plain log or a cost table"
        at = self.settings.at_concurrency
        per = "" if self.calibration is None or self.calibration.calibrated else \
            " (per a model fitted to, not calibrated on, the points measured)"
        if self.pays_up_to is None:
            line = f"at τ {self.tau:.2f} speculation does not pay at {at} request{'s' if at != 1 else ''} in flight"
        elif self.pays_up_to >= 1024:
            line = f"at τ {self.tau:.2f} speculation pays at every concurrency up to 1024"
        else:
            beyond = next(b for b in CONCURRENCY_GRID if b > self.pays_up_to)
            line = (f"at τ {self.tau:.2f} speculation pays up to {self.pays_up_to} concurrent requests; at {beyond} their "
                    "KV cache does not fit beside the weights" if not bool(self.model.kv_fits(beyond, self.settings.k))
                    else f"at τ {self.tau:.2f} speculation pays up to {self.pays_up_to} concurrent requests and loses "
                         "beyond")
        return line + self._rows_beside() + per

    def _rows_beside(self) -> str:
        """What the table's rows add to the crossover: where it pays beyond it (the rows not monotone), or that it
        pays at no concurrency answered."""
        upto = self.pays_up_to or 0
        again = [r for r in self.rows if r.pays and r.concurrency > upto]
        if again:
            where = ", ".join(f"{r.concurrency} ({r.speedup:.2f}x)" for r in again[:4])
            return (f", yet by the table it pays at {where}: the speedup is not monotone in the load here, so read "
                    "the rows, not one crossover")
        if self.pays_up_to is None and self.rows:
            return f" nor at any concurrency of the table ({', '.join(str(r.concurrency) for r in self.rows)})"
        return ""


def tps_cell(x: float | None) -> str:
    """A tok/s in a table cell: one decimal, ``-`` when not measured."""
    return "-" if x is None else f"{x:.1f}"
