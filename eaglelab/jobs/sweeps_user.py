"""The published sweeps driven as a user would: ``perf`` given only what each source states (issue #55).

A fixture (``data/fixtures/load_sweeps/*.json``) names in ``stated`` the flags its source gives (the GPU and count, the
context, the KV dtype, the weights' bits); :func:`drive_as_user` runs :func:`~eaglelab.jobs.load.speculation_under_load`
with those, the target's config written as a user has it, k, and the first published point as the one measurement
(plain and speculative tok/s per request where the source prints them, else its speedup). Everything else takes
``perf``'s own default or range: no τ (the band spans what published chains accept), the default context when none
is stated. The answer's band is scored against the published speedups: the share of held-out points inside it, the
band's centre's median error, and whether the published crossover lies inside the band's. The best-case check with
each fixture's chosen τ and context (:mod:`eaglelab.serving.sweeps`) is the other, labelled, figure. No torch.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eaglelab.errors import EaglelabError
from eaglelab.jobs.load import LoadSettings, speculation_under_load
from eaglelab.serving.sweeps import SWEEPS, Sweep, crossover, read_sweep

#: The budget on the user's path (issue #55): points inside the band, the centre's median error.
MIN_COVERAGE = 0.8
MAX_CENTRE_ERROR = 0.10


@dataclass(frozen=True)
class UserPathRow:
    """One published point against the answer a user gets: the band's centre and ends (0: the KV cache is full)."""

    concurrency: int
    published: float
    centre: float
    low: float
    high: float
    held_out: bool

    @property
    def inside(self) -> bool:
        return self.low - 1e-9 <= self.published <= self.high + 1e-9


@dataclass(frozen=True)
class UserPathCheck:
    """One sweep on the user's path: what was given, what the answer left to its ranges, and how it scored."""

    sweep: Sweep
    settings: dict[str, Any]
    unstated: tuple[str, ...]
    rows: tuple[UserPathRow, ...]
    published_crossover: int | None
    crossover_range: tuple[int | None, int | None]

    @property
    def held_out(self) -> list[UserPathRow]:
        return [r for r in self.rows if r.held_out]

    @property
    def coverage(self) -> float:
        """The share of held-out published points inside the band."""
        return float(np.mean([r.inside for r in self.held_out]))

    @property
    def centre_error(self) -> float:
        """The median relative error of the band's centre (the table's speedup column) over the held-out points."""
        return float(np.median([abs(r.centre / r.published - 1.0) for r in self.held_out]))

    @property
    def crossover_inside(self) -> bool:
        """The published crossover (the last point up to which every point pays) lies inside the band's range, read
        on the sweep's own grid; a sweep that pays at its last point is inside when the band's high end reaches it."""
        low, high = self.crossover_range
        last = self.rows[-1].concurrency
        rank = {None: -1, **{r.concurrency: i for i, r in enumerate(self.rows)}}
        if self.published_crossover == last:
            return rank[high] == rank[last]
        return rank[low] <= rank[self.published_crossover] <= rank[high]

    def budget_met(self) -> bool:
        return self.coverage >= MIN_COVERAGE and self.centre_error <= MAX_CENTRE_ERROR and self.crossover_inside

    def to_json(self) -> dict[str, Any]:
        return {"name": self.sweep.name, "source": self.sweep.source, "given": self.settings, "unstated": list(self.unstated),
                "rows": [{**r.__dict__, "inside": r.inside} for r in self.rows], "coverage": self.coverage,
                "centre_error": self.centre_error, "published_crossover": self.published_crossover,
                "crossover_range": list(self.crossover_range), "crossover_inside": self.crossover_inside,
                "scored": self.sweep.scored, "budget_met": self.budget_met()}


def user_settings(sweep: Sweep, config_dir: str) -> dict[str, Any]:
    """The settings a user gives ``perf`` for ``sweep``: its stated flags (:func:`~eaglelab.serving.sweeps.read_sweep`
    checked their names), its config, k, its loads and first point."""
    stated = dict(sweep.stated)
    first = sweep.points[0]
    c = int(first["concurrency"])
    if first.get("baseline_tok_s") and first.get("spec_tok_s"):  # aggregate tok/s: per request, as perf takes them
        measured = {"baseline_tps": first["baseline_tok_s"] / c, "spec_tps": first["spec_tok_s"] / c}
    else:
        measured = {"speedup": float(first["speedup"])}
    tree = {} if sweep.draft_tokens in (None, sweep.k + 1) else {"draft_tokens": sweep.draft_tokens}
    return {**stated, "target_config": config_dir, "k": sweep.k, **tree, "at_concurrency": c,
            "concurrency": tuple(int(p["concurrency"]) for p in sweep.points), **measured}


def drive_as_user(sweep: Sweep) -> UserPathCheck:
    """``perf`` on ``sweep`` given what its source states, the answer's band against every published point."""
    with tempfile.TemporaryDirectory(prefix="eaglelab-sweep-") as folder:
        Path(folder, "config.json").write_text(json.dumps(sweep.config))
        given = user_settings(sweep, folder)
        report = speculation_under_load(LoadSettings(**given))
    band, conc = report.band, [int(p["concurrency"]) for p in sweep.points]
    centre = {r.concurrency: float(r.speedup) if r.kv_fits else 0.0 for r in report.rows}
    low = band.low if band is not None else centre
    high = band.high if band is not None else centre
    rows = tuple(UserPathRow(c, float(p["speedup"]), centre[c], low[c], high[c], held_out=i > 0)
                 for i, (c, p) in enumerate(zip(conc, sweep.points)))
    reach = (crossover(conc, [low[c] for c in conc]), crossover(conc, [high[c] for c in conc]))
    shown = {k: v for k, v in given.items() if k not in ("target_config", "concurrency")}
    return UserPathCheck(sweep, shown, band.unstated if band is not None else (), rows,
                         crossover(conc, [float(p["speedup"]) for p in sweep.points]), reach)


def user_path_all(folder: str | Path = SWEEPS) -> list[UserPathCheck | tuple[Sweep, str]]:
    """Every sweep in ``folder`` on the user's path, in name order; a sweep ``perf`` refuses is (sweep, why)."""
    out: list[UserPathCheck | tuple[Sweep, str]] = []
    for path in sorted(Path(folder).glob("*.json")):
        sweep = read_sweep(path)
        try:
            out.append(drive_as_user(sweep))
        except EaglelabError as exc:
            out.append((sweep, str(exc)))
    return out
