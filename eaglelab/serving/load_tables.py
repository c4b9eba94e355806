"""The serving-cost model's tables: its answer per concurrency, a dense curve for a figure, each term's multiplier.

Only numpy: ``perf`` and ``plan`` stay metadata commands.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from eaglelab.errors import ParameterError, is_whole
from eaglelab.serving.load import TERM_MEANING, LoadModel, Scales


@dataclass(frozen=True)
class LoadRow:
    """The model at one concurrency: its steps (ms), the speedup at τ and break-even τ, the KV fit, the best k.

    ``pays``: the speedup is at least 1 and the KV cache fits; ``best_k`` / ``best_speedup``: the k (KV fitting) that
    speeds up most at the same per-draft acceptance.
    """

    concurrency: int
    accept_len: float
    decode_ms: float
    verify_ms: float
    cycle_ms: float
    speedup: float
    break_even_tau: float
    kv_fits: bool
    pays: bool
    best_k: int
    best_speedup: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def by_concurrency(model: LoadModel, concurrency: Sequence[int], k: int, tau, taus: Sequence[float] | None = None
                   ) -> list[LoadRow]:
    """The model's table: at each concurrency the steps, the speedup and break-even τ, the KV fit and the best k.

    Args:
        tau: the τ for every concurrency, unless ``taus`` gives one per concurrency.
    """
    rows = []
    taus = list(taus) if taus is not None else [tau] * len(concurrency)
    for b, t in zip(concurrency, taus):
        if not is_whole(b):
            raise ParameterError("--concurrency", f"must be whole numbers >= 1, got {b!r}")
        speedup = float(model.speedup(b, k, t))
        fits = bool(model.kv_fits(b, k))
        kk, best = model.best_k(b, t, k)
        rows.append(LoadRow(b, t, 1e3 * float(model.decode_s(b)), 1e3 * float(model.verify_s(b, k)),
                            1e3 * float(model.cycle_s(b, k)), speedup, float(model.break_even_tau(b, k)), fits,
                            fits and speedup >= 1.0, kk, best))
    return rows


def load_curve(model: LoadModel, k: int, tau: float, grid: Sequence[float] | None = None) -> dict[str, np.ndarray]:
    """The model's speedup and break-even τ over a dense grid of concurrencies (for a figure)."""
    b = np.asarray(grid if grid is not None else np.geomspace(1, 1024, 64))
    return {"concurrency": b, "speedup": model.speedup(b, k, tau), "break_even_tau": model.break_even_tau(b, k),
            "kv_fits": model.kv_fits(b, k)}


def scales_table(model: LoadModel) -> list[dict]:
    """Each term's multiplier with what it is (1: the datasheet's value)."""
    return [{"term": f.name, "multiplier": getattr(model.scales, f.name), "what": TERM_MEANING[f.name]}
            for f in fields(Scales)]
