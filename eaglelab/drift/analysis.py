"""From a sweep's records to what notebook 05 shows: the table, the fitted laws, the held-out choice, the calibration.

Pure Python and numpy: everything here reads the records of :func:`eaglelab.drift.sweep.run_sweep`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from eaglelab.atomic import write_json_atomic
from eaglelab.drift.predictors import (
    PREDICTORS,
    HeldOut,
    by_name,
    choose,
    fit_gamma,
    held_out_bands,
    leave_one_family_out,
    rank_predictors,
)

#: the measures notebook 05 plots τ against: key -> axis label
MEASURE_PANELS = {"agreement": "top-1 agreement of A and B'", "tv": "total variation of next-token distributions",
                  "kl": "KL(A || B')", "cos_last": "cosine at the last layer"}
#: the predictor whose fitted law each panel draws
PANEL_LAWS = {"agreement": "agreement^γ", "tv": "(1 - TV)^γ", "kl": "exp(-γ KL)", "cos_last": "cos(last)^γ"}
FAMILY_TITLES = {"path": "A + α (B - A)", "quant": "quantized A", "train": "A trained on docstrings"}


def table_rows(records: Sequence[dict]) -> list[dict]:
    """One flat row per point: family, point, weight distance, measures, τ (teacher forced, conditional, measured)."""
    rows = []
    for r in records:
        m = r.get("measured") or {}
        rows.append({"family": r["point"]["family"], "point": r["point"]["label"],
                     "weight_dist": r["weight_distance"], **r["measures"],
                     "tau_on_a": r["on_a"]["accept_len"], "tau_tf": r["on_b"]["accept_len"],
                     "tau_tf_walk": r["on_b"]["walk_accept_len"], "tau_measured": m.get("accept_len"),
                     "tau_walk_own_text": m.get("walk_own_text"), "speedup": m.get("speedup")})
    return rows


def laws(records: Sequence[dict], points: int = 60) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each panel's law fitted on all records: measure key -> (x grid, τ).

    The drafter's chain on A is the sweep's (every record of one world shares it).
    """
    chain = records[0]["on_a"]["chain"]
    out = {}
    for key, name in PANEL_LAWS.items():
        p = by_name(name)
        g = fit_gamma(p, records)
        xs = np.array([r["measures"][key] for r in records])
        grid = np.linspace(xs.min(), xs.max(), points)
        out[key] = (grid, np.array([p.predict(chain, {key: x}, g) for x in grid]))
    return out


def law_errors(records: Sequence[dict]) -> dict[str, float]:
    """How well one law per measure fits every family at once: measure key -> worst |relative error| of τ."""
    out = {}
    for key, name in PANEL_LAWS.items():
        p = by_name(name)
        g = fit_gamma(p, records)
        out[key] = max(abs(p.predict(r["on_a"]["chain"], r["measures"], g) / r["on_b"]["accept_len"] - 1) for r in records)
    return out


def family_ranges(records: Sequence[dict]) -> dict[str, dict]:
    """Per family, its mildest and strongest point (by weight distance) and the τ there."""
    out = {}
    for fam in FAMILY_TITLES:
        rs = sorted((r for r in records if r["point"]["family"] == fam), key=lambda r: r["weight_distance"])
        if rs:
            out[fam] = {"mild": rs[0]["point"]["label"], "mild_tau": rs[0]["on_b"]["accept_len"],
                        "far": rs[-1]["point"]["label"], "far_tau": rs[-1]["on_b"]["accept_len"],
                        "far_agreement": rs[-1]["measures"]["agreement"]}
    return out


def held_out_choice(records: Sequence[dict], pair: Sequence[dict] = ()) -> dict:
    """Leave one family out for every predictor, rank them, choose, and fit the chosen ones on everything.

    Returns:
        ``held_out`` (list of :class:`HeldOut`), ``summary`` (rows of :func:`rank_predictors`), ``chosen`` and
        ``chosen_engine`` (names), and ``gamma_all`` (each predictor's γ fitted on all records).
    """
    held = leave_one_family_out(records, extra=pair)
    rows = rank_predictors(held, held_out_bands(held, records, pair))
    return {"held_out": held, "summary": rows, "chosen": choose(rows)["predictor"],
            "chosen_engine": choose(rows, engine_only=True)["predictor"],
            "gamma_all": {p.name: fit_gamma(p, records) for p in PREDICTORS}}


def prediction_rows(records: Sequence[dict], pair: Sequence[dict], held: Sequence[HeldOut], predictor: str) -> list[dict]:
    """The held-out predictions of one predictor next to the teacher-forced and measured τ, per point.

    ``walk``: the teacher-forced hits on A's replies replayed cycle by cycle; ``walk_own_text``: the same
    on the very text measured decoding produced.
    """
    truth = {(r["point"]["family"], r["point"]["label"]): r for r in [*records, *pair]}
    rows = []
    for h in held:
        if h.predictor != predictor:
            continue
        for label, pred in zip(h.labels, h.predicted):
            r = truth[(h.family, label)]
            m = r.get("measured") or {}
            rows.append({"family": h.family, "point": label, "predicted": pred, "teacher_forced": r["on_b"]["accept_len"],
                         "walk": r["on_b"]["walk_accept_len"], "measured": m.get("accept_len"),
                         "walk_own_text": m.get("walk_own_text")})
    return rows


def magnitude_series(records: Sequence[dict]) -> dict[str, dict]:
    """Per family: the drift's size (relative weight distance from A; A at 0) and the drafter's per-draft accuracy on B'."""
    zero = next(r for r in records if r["point"]["family"] == "none")
    out = {}
    for fam, title in FAMILY_TITLES.items():
        rs = sorted((r for r in records if r["point"]["family"] == fam), key=lambda r: r["weight_distance"])
        if rs:
            out[title] = {"magnitudes": [0.0, *[r["weight_distance"] for r in rs]],
                          "acc": [zero["on_b"]["acc"], *[r["on_b"]["acc"] for r in rs]],
                          "labels": ["A", *[r["point"]["label"] for r in rs]],
                          "xlabel": "relative weight distance from A"}
    return out


def gap_text(gaps: Sequence[float], tolerance: float) -> str:
    """Relative gaps in words: their range and how many lie within the tolerance."""
    if not gaps:
        return "not measured"
    a = [abs(g) for g in gaps]
    return (f"{100 * min(a):.0f}–{100 * max(a):.0f}% ({sum(x <= tolerance for x in a)} of {len(a)} within "
            f"{100 * tolerance:.0f}%)")


def calibration(choice: dict) -> dict:
    """What ``eaglelab predict --calibration`` reads: the engine predictor chosen, each one's γ and held-out error."""
    rows = {r["predictor"]: r for r in choice["summary"]}
    return {"chosen": choice["chosen"], "chosen_engine": choice["chosen_engine"],
            "predictors": {name: {"gamma": choice["gamma_all"][name], "worst_held_out": r["worst"],
                                  "worst_band": r.get("worst_band"), "engine": by_name(name).engine}
                           for name, r in rows.items()}}


def save_calibration(path: str | Path, choice: dict, source: str) -> Path:
    """Write the calibration JSON (atomically), saying which sweep it came from."""
    return write_json_atomic(Path(path), {"source": source, "numbers": calibration(choice)})
