"""From a sweep's records to what notebook 05 shows: the table, the fitted laws, the held-out choice, the calibration.

Pure Python and numpy: everything here reads the records of :func:`eaglelab.drift.sweep.run_sweep`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from eaglelab.atomic import write_json_atomic
from eaglelab.drift.predictors import (
    ERROR_BAND_REPS,
    PREDICTORS,
    HeldOut,
    by_name,
    choose,
    fit_gamma,
    held_out_bands,
    leave_one_family_out,
    rank_predictors,
    selection_shares,
    worst_draws,
)
from eaglelab.drift.records import SweepRecord

#: the measures notebook 05 plots τ against: key -> axis label
MEASURE_PANELS = {"agreement": "top-1 agreement of A and B'", "tv": "total variation of next-token distributions",
                  "kl": "KL(A || B')", "cos_last": "cosine at the last layer"}
#: the predictor whose fitted law each panel draws
PANEL_LAWS = {"agreement": "agreement^γ", "tv": "(1 - TV)^γ", "kl": "exp(-γ KL)", "cos_last": "cos(last)^γ"}
#: A predictor chosen in at least this share of resamples is the sweep's choice; below it, the runner-up is named.
STABLE_SHARE = 0.8
FAMILY_TITLES = {"path": "A + α (B - A)", "quant": "quantized A", "train": "A trained on docstrings"}


def table_rows(records: Sequence[SweepRecord]) -> list[dict]:
    """One flat row per point (a table's, and the findings'): family, point, weight distance, measures, τ (teacher
    forced, walked, measured)."""
    rows = []
    for r in records:
        m = r.measured
        rows.append({"family": r.family, "point": r.label, "weight_dist": r.weight_distance, **r.measures,
                     "tau_on_a": r.on_a.accept_len, "tau_tf": r.on_b.accept_len, "tau_tf_walk": r.on_b.walk_accept_len,
                     "tau_measured": m and m.accept_len, "tau_walk_own_text": m and m.walk_own_text})
    return rows


def laws(records: Sequence[SweepRecord], points: int = 60) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each panel's law fitted on all records: measure key -> (x grid, τ).

    The drafter's chain on A is the sweep's (every record of one world shares it).
    """
    chain = records[0].on_a.chain
    out = {}
    for key, name in PANEL_LAWS.items():
        p = by_name(name)
        g = fit_gamma(p, records)
        xs = np.array([r.measures[key] for r in records])
        grid = np.linspace(xs.min(), xs.max(), points)
        out[key] = (grid, np.array([p.predict(chain, {key: x}, g) for x in grid]))
    return out


def law_errors(records: Sequence[SweepRecord]) -> dict[str, float]:
    """How well one law per measure fits every family at once: measure key -> worst |relative error| of τ."""
    out = {}
    for key, name in PANEL_LAWS.items():
        p = by_name(name)
        g = fit_gamma(p, records)
        out[key] = max(abs(p.predict(r.on_a.chain, r.measures, g) / r.on_b.accept_len - 1) for r in records)
    return out


@dataclass(frozen=True)
class FamilyRange:
    """A family's mildest and strongest point (by weight distance)."""

    mild: SweepRecord
    far: SweepRecord

    def words(self, family: str) -> str:
        """``A + α (B - A): τ 1.97 at α = 0.25 to 1.21 at α = 3 (agreement 0.31)``."""
        return (f"{FAMILY_TITLES[family]}: τ {self.mild.on_b.accept_len:.2f} at {self.mild.label} to "
                f"{self.far.on_b.accept_len:.2f} at {self.far.label} (agreement {self.far.measures['agreement']:.2f})")


def family_ranges(records: Sequence[SweepRecord]) -> dict[str, FamilyRange]:
    """Per family, its mildest and strongest point (by weight distance)."""
    out = {}
    for fam in FAMILY_TITLES:
        rs = sorted((r for r in records if r.family == fam), key=lambda r: r.weight_distance)
        if rs:
            out[fam] = FamilyRange(rs[0], rs[-1])
    return out


@dataclass(frozen=True)
class PredictorChoice:
    """The predictors held out, ranked, and the two chosen, each fitted on the whole sweep.

    Attributes:
        held_out: every predictor's errors on each family left out (:class:`HeldOut`).
        ranked: one row per predictor, best first (:func:`~eaglelab.drift.predictors.rank_predictors`).
        chosen, chosen_engine: the best predictor, and the best computable from engine logprobs alone.
        gamma_all: each predictor's γ fitted on all records.
        shares: ``{"any": ..., "engine": ...}``: how often each predictor is chosen over resamples of the sequences
            and the families (:func:`~eaglelab.drift.predictors.selection_shares`), among all and among the
            engine-computable ones.
    """

    held_out: list[HeldOut]
    ranked: list[dict]
    chosen: str
    chosen_engine: str
    gamma_all: dict[str, float]
    shares: dict[str, dict[str, float]] = field(default_factory=dict)

    def row(self, name: str) -> dict:
        """A predictor's ranked row (``worst``, ``mean_abs``, ``worst_band``, ``per_family``...)."""
        return next(r for r in self.ranked if r["predictor"] == name)

    def error_words(self, name: str) -> str:
        """A predictor's worst held-out error with its band, in words."""
        r = self.row(name)
        band = r["worst_band"]
        return f"{100 * r['worst']:.1f}%" + (f", 90% band {100 * band[0]:.1f}–{100 * band[1]:.1f}%" if band else "")

    def stability(self, engine_only: bool = False) -> str:
        """How firmly the sweep supports its choice, in words: the share of resamples it is chosen in, and the
        runner-up's when the choice is not made in :data:`STABLE_SHARE` of them."""
        shares = self.shares.get("engine" if engine_only else "any") or {}
        chosen = self.chosen_engine if engine_only else self.chosen
        if chosen not in shares:
            return "its stability not measured (no per-sequence data)"
        runner = max((n for n in shares if n != chosen), key=lambda n: shares[n], default=None)
        said = f"chosen in {100 * shares[chosen]:.0f}% of resamples of the sequences and the families"
        if shares[chosen] >= STABLE_SHARE or runner is None:
            return said
        return f"{said}, {runner} in {100 * shares[runner]:.0f}%: the sweep does not settle between them"

    def failing(self, tolerance: float) -> list[str]:
        """The predictors whose worst held-out error is over ``tolerance``, in rank order."""
        return [r["predictor"] for r in self.ranked if r["worst"] > tolerance]

    def calibration(self) -> dict:
        """What ``eaglelab predict --calibration`` reads: the predictors chosen, each one's γ and held-out error."""
        return {"chosen": self.chosen, "chosen_engine": self.chosen_engine, "selection_shares": self.shares,
                "predictors": {r["predictor"]: {"gamma": self.gamma_all[r["predictor"]], "worst_held_out": r["worst"],
                                                "worst_band": r.get("worst_band"),
                                                "engine": by_name(r["predictor"]).engine} for r in self.ranked}}


def held_out_choice(records: Sequence[SweepRecord], pair: Sequence[SweepRecord] = ()) -> PredictorChoice:
    """Leave one family out for every predictor, rank them, choose, and fit every predictor on everything."""
    held = leave_one_family_out(records, extra=pair)
    draws = worst_draws(held, records, pair, ERROR_BAND_REPS, 0)
    rows = rank_predictors(held, held_out_bands(held, records, pair, draws=draws))
    shares = {"any": selection_shares(held, records, pair, draws=draws),
              "engine": selection_shares(held, records, pair, engine_only=True, draws=draws)}
    return PredictorChoice(held, rows, choose(rows)["predictor"], choose(rows, engine_only=True)["predictor"],
                           {p.name: fit_gamma(p, records) for p in PREDICTORS}, shares)


@dataclass(frozen=True)
class DriftAnalysis:
    """A sweep read as notebook 05 reads it: the fitted laws, each family's range, the predictors held out and chosen,
    and the teacher-forced τ against real decoding at the measured points.

    Attributes:
        records, pair: the sweep's points and the other pair's (:class:`~eaglelab.drift.sweep.SweepResult`).
        choice: the held-out ranking and the predictors chosen (:func:`held_out_choice`).
        rows: the chosen predictor's held-out predictions beside the teacher-forced and measured τ
            (:func:`prediction_rows`).
        tolerance: the relative error a predictor should stay within.
    """

    records: list[SweepRecord]
    pair: list[SweepRecord]
    choice: PredictorChoice
    rows: list[dict]
    tolerance: float

    @property
    def gaps(self) -> dict[str, list[float]]:
        """At the measured points, each τ that stands in for decoding against the decoding's: relative gaps."""
        measured = [r for r in self.rows if r["measured"]]
        return {name: [r[name] / r["measured"] - 1 for r in measured] for name in ("teacher_forced", "walk", "walk_own_text")}

    def to_json(self) -> dict:
        """What notebook 05's findings keep: every point's row, the calibration, the held-out errors, the gaps."""
        return {"points": table_rows(self.records + self.pair), **self.choice.calibration(),
                "held_out": [h.to_json() for h in self.choice.held_out], "gaps_vs_measured": self.gaps}

    def table(self):
        """One row per point (the other pair's too): the measures and the drafter's τ on A and B'."""
        import pandas as pd

        return pd.DataFrame(table_rows(self.records + self.pair)).set_index(["family", "point"])

    def predictors_table(self):
        """One row per predictor, best first: the worst held-out error, its band, and each family's error."""
        import pandas as pd

        return pd.DataFrame([{**{k: v for k, v in r.items() if k != "per_family"}, **r["per_family"]}
                             for r in self.choice.ranked]).set_index("predictor")

    def findings(self, tag: str = "") -> dict[str, str]:
        """Named sentences: ``law`` (the chain on A, the law, how well one law per measure fits, γ read), ``families``,
        ``predictors`` (the held-out ranking and who misses the tolerance) and ``decoding`` (teacher forced and its
        replays against real decoding)."""
        t = f" {tag}" if tag else ""
        c = self.choice
        chain, tau_a = self.records[0].on_a.chain, self.records[0].on_a.accept_len
        gamma = c.gamma_all[c.chosen_engine]
        reading = ("the drafter loses less than the targets' disagreement alone implies: it reads the new target's "
                   "states and follows part of the move" if gamma < 1 else
                   "the drafter loses more than the targets' disagreement alone implies")
        fits = ", ".join(f"{MEASURE_PANELS[k]} {100 * e:.0f}%" for k, e in law_errors(self.records).items())
        failing = c.failing(self.tolerance)
        missed = ", ".join(f"{n} ({100 * c.row(n)['worst']:.0f}%)" for n in failing) or "none"
        gaps, measured = self.gaps, sum(1 for r in self.rows if r["measured"])
        return {
            "law": f"**The law{t}:** the drafter's chain rates on A are {', '.join(f'{x:.2f}' for x in chain)} "
                   f"(τ {tau_a:.2f}); on a moved target τ' = 1 + Σ c_i · s^(i+1), with s the per-token survival. Fitted "
                   f"on all {len(self.records)} points, one law per measure fits every family within: {fits}. The "
                   f"engine-computable choice, {c.chosen_engine}, has γ = {gamma:.2f}: {reading}.",
            "families": f"**Families{t}:** {'; '.join(v.words(f) for f, v in family_ranges(self.records).items())}.",
            "predictors": f"**Predictors, held out{t}** (ranked by the upper end of the band of their worst error): best "
                          f"**{c.chosen}** (worst error {c.error_words(c.chosen)}; mean "
                          f"{100 * c.row(c.chosen)['mean_abs']:.1f}%; {c.stability()}); best from engine logprobs alone "
                          f"**{c.chosen_engine}** (worst {c.error_words(c.chosen_engine)}; "
                          f"{c.stability(engine_only=True)}). {len(failing)} of {len(c.ranked)} miss the "
                          f"{100 * self.tolerance:.0f}% goal: {missed}.",
            "decoding": f"**Teacher forced vs decoding{t}:** at the {measured} measured points, the teacher-forced τ on "
                        f"that set differs from real speculative decoding (on B′'s own greedy text) by "
                        f"{gap_text(gaps['teacher_forced'], self.tolerance)}; replayed cycle by cycle (decoding skips the "
                        f"positions its accepted drafts cover), by {gap_text(gaps['walk'], self.tolerance)}; replayed on "
                        f"the very text decoding produced, by {gap_text(gaps['walk_own_text'], self.tolerance)}. What "
                        "remains after the replay is the text B′ writes, which A's replies do not show.",
        }


    def files_findings(self, prediction, b: SweepRecord, tag: str, calibration: str) -> dict[str, str]:
        """``files``: the prediction from engine files of A and B (:class:`~eaglelab.drift.file_prediction.FilePrediction`)
        beside the sweep's own B point ``b`` (``SweepResult.at("path", 1.0)``; in sample: γ was fitted on it), and how
        to run it on a new pair."""
        c = self.choice
        stability = c.stability(engine_only=True)
        unsettled = ("" if "does not settle" not in stability else
                     ": the band is the chosen predictor's alone, and the runner-up would move its centre")
        p = prediction
        return {"files": f"**From engine files{' ' + tag if tag else ''}:** the vLLM- and SGLang-layout files give "
                         f"agreement {p.measures['agreement']:.3f} (the sweep's own {b.measures['agreement']:.3f}) and a "
                         f"predicted plug-in τ on B of **{p.tau:.2f}** [{p.low:.2f}–{p.high:.2f}] by {c.chosen_engine} "
                         f"({stability}{unsettled}) against {b.on_b.accept_len:.2f} teacher forced (in sample: B is one "
                         "of the points γ was fitted on; the held-out error above is what to trust for a new pair): run "
                         f"`eaglelab predict` on your targets' logprobs with `--calibration {calibration}` before any "
                         "drafter runs there."}


def analyse(records: Sequence[SweepRecord], pair: Sequence[SweepRecord], tolerance: float) -> DriftAnalysis:
    """Hold every predictor out family by family, choose, and set the chosen one's predictions beside the measured τ."""
    choice = held_out_choice(records, pair)
    return DriftAnalysis(list(records), list(pair), choice,
                         prediction_rows(records, pair, choice.held_out, choice.chosen), tolerance)


def prediction_rows(records: Sequence[SweepRecord], pair: Sequence[SweepRecord], held: Sequence[HeldOut],
                    predictor: str) -> list[dict]:
    """The held-out predictions of one predictor next to the teacher-forced and measured τ, per point.

    ``walk``: the teacher-forced hits on A's replies replayed cycle by cycle; ``walk_own_text``: the same
    on the very text measured decoding produced.
    """
    truth = {r.key: r for r in [*records, *pair]}
    rows = []
    for h in held:
        if h.predictor != predictor:
            continue
        for label, pred in zip(h.labels, h.predicted):
            r = truth[(h.family, label)]
            m = r.measured
            rows.append({"family": h.family, "point": label, "predicted": pred, "teacher_forced": r.on_b.accept_len,
                         "walk": r.on_b.walk_accept_len, "measured": m and m.accept_len,
                         "walk_own_text": m and m.walk_own_text})
    return rows


def magnitude_series(records: Sequence[SweepRecord]) -> dict[str, dict]:
    """Per family: the drift's size (relative weight distance from A; A at 0) and the drafter's per-draft accuracy on B'."""
    zero = next(r for r in records if r.family == "none")
    out = {}
    for fam, title in FAMILY_TITLES.items():
        rs = sorted((r for r in records if r.family == fam), key=lambda r: r.weight_distance)
        if rs:
            out[title] = {"magnitudes": [0.0, *[r.weight_distance for r in rs]],
                          "acc": [zero.on_b.acc, *[r.on_b.acc for r in rs]],
                          "labels": ["A", *[r.label for r in rs]],
                          "xlabel": "relative weight distance from A"}
    return out


def gap_text(gaps: Sequence[float], tolerance: float) -> str:
    """Relative gaps in words: their range and how many lie within the tolerance."""
    if not gaps:
        return "not measured"
    a = [abs(g) for g in gaps]
    return (f"{100 * min(a):.0f}–{100 * max(a):.0f}% ({sum(x <= tolerance for x in a)} of {len(a)} within "
            f"{100 * tolerance:.0f}%)")


def save_calibration(path: str | Path, choice: PredictorChoice, source: str) -> Path:
    """Write the calibration JSON (atomically), saying which sweep it came from."""
    return write_json_atomic(Path(path), {"source": source, "numbers": choice.calibration()})
