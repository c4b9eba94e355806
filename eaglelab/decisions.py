"""The workbook's decisions, as tested functions: plug in, warm start or from scratch, and what data saves.

Notebooks, the command line and the game plan render these results; none of them decides in a
cell. Pure arithmetic over numbers the probe and the fine-tune measured; no torch.

τ is the acceptance length with the bonus token (1.0 = no gain); the gain of speculation is τ - 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


class TextProbed(Protocol):
    """What the probe ran on, as a verdict needs it (:class:`eaglelab.data.probe_data.DataChoice` is one)."""

    line: str  # the text, in words
    decides: bool  # whether a verdict can be read from it


class Option(StrEnum):
    """What a team can do with the old drafter for the new target: the one spelling of each option.

    A ``str`` (``Option.PLUG_IN == "plug in"``), so JSON, tables and findings carry the words.
    """

    SERVE_AS_NOW = "serve as now"  # keep the drafter served today (the decision table's first row)
    PLUG_IN = "plug in"  # the old drafter as is on the new target
    WARM_START = "warm start"  # fine-tune the old drafter on the new target's data
    FROM_SCRATCH = "from scratch"  # train a new drafter from random weights


#: Fraction of its gain (τ - 1) on the old target the old drafter must keep on the new one to be
#: plugged in as is.
PLUGIN_KEEP = 0.9
#: Below this τ on the new target (bonus included) the old drafter is no better a start than random
#: weights: train from scratch.
WARM_START_MIN_TAU = 1.3
#: The options for the old drafter, cheapest first: plugging in costs nothing, a warm start a short
#: fine-tune, scratch a full training run.
OPTIONS = (Option.PLUG_IN, Option.WARM_START, Option.FROM_SCRATCH)
#: Measured τ within this of the best counts as a tie (run-to-run spread of τ over a few prompts);
#: the cheaper option wins a tie.
TAU_TIE = 0.05
#: Bootstrap resamples of the sequences behind a verdict's band, and the band's coverage.
BOOTSTRAP_REPS = 2000
BAND_LEVEL = 0.9
#: A gain (τ - 1) within :data:`TAU_TIE` of none is within the run-to-run spread of no gain at all: the share
#: (τB - 1) / (τA - 1) of such a gain is a ratio of noise, and left undefined.
RATIO_MIN_GAIN = TAU_TIE
#: The least gain (τ - 1) the old drafter must show on its own target A, at the low end of τ on A's band,
#: for a verdict. A verdict reads how much of a real gain survives the move to B; on text unlike what the
#: drafter serves it barely gains on A, and the share it keeps on B is then a fact about the text, not the
#: targets. Measured: the demo world's drafter-a gains 0.98 on its own conversations (τ 1.98 on A -> 1.91
#: on B, 2.02 -> 1.90 in a second run) and 0.21 on built-in standard-library text (τ 1.21 on A and on B),
#: where the 90% rule read PLUG IN. 0.3 is the gain of :data:`WARM_START_MIN_TAU`: below it the drafter is
#: no better than random weights, here on its own target, so the text decides the number. The worlds the
#: workbook ships clear it with room: the tiny world's drafter-a reads τ 1.83-1.96 on A (its band's low
#: end 1.72-1.90, 8-24 rows of its built-in text, k 3-4), the demo world's 1.98.
MIN_GAIN_ON_A = round(WARM_START_MIN_TAU - 1.0, 6)
#: Fewest sequences with a counted position a verdict is drawn from. Its band resamples whole sequences,
#: and a share n^(1 - n) of the resamples of n sequences repeats one sequence n times: at 2 and 3 sequences
#: (50%, 11%) those fill the band's 10% of tails and the band is the spread of single sequences, not of
#: their mean; from 4 (1.6%) it is not.
MIN_SEQUENCES = next(n for n in range(2, 64) if n ** (1 - n) < 1 - BAND_LEVEL)
#: The probe's outcome when no option can be read from it: the old drafter gains nothing on A, or the
#: text is not the drafter's kind (the built-in fallback, :class:`~eaglelab.data.probe_data.DataChoice`).
NO_VERDICT = "no verdict"
#: Why there is no verdict, in the words a headline puts in brackets.
GAINS_NOTHING = "the old drafter gains nothing on target A"


@dataclass(frozen=True)
class Band:
    """A bootstrap percentile band of one number: ``low`` .. ``high`` at coverage ``level``."""

    low: float
    high: float
    level: float = BAND_LEVEL

    def straddles(self, threshold: float) -> bool:
        """Whether the band holds values on both sides of ``threshold``."""
        return self.low < threshold <= self.high

    def text(self, percent: bool = False) -> str:
        """``"90% band 1.82–1.95"`` (``percent``: ``"90% band 49%–60%"``)."""
        f = (lambda v: f"{100 * v:.0f}%") if percent else (lambda v: f"{v:.2f}")
        return f"{100 * self.level:.0f}% band {f(self.low)}–{f(self.high)}"

    def to_json(self) -> dict:
        return {"low": self.low, "high": self.high, "level": self.level}


@dataclass(frozen=True)
class Decision:
    """A verdict with the reasons that led to it (numbers formatted in).

    Attributes:
        action: an :class:`Option`: plug in, warm start or from scratch (the point estimate's), or
            :data:`NO_VERDICT` when the old drafter gains nothing on the old target, or the probe's text
            is not the drafter's kind.
        reasons: one line per step of the argument.
        kept: fraction of the gain (τ - 1) on the old target kept on the new one; None (undefined)
            with no verdict.
        between: the two options whose threshold the bootstrap band straddles (empty when the
            band is clear of it, or there is no band): too close to call on these sequences.
        bands: ``kept``, ``tau_a``, ``tau_b`` as :class:`Band` (None without per-sequence data; no
            ``kept`` with no verdict).
        cause: with no verdict, why, in a few words (a headline's brackets); empty with a verdict.
    """

    action: str
    reasons: list[str]
    kept: float | None
    between: tuple[str, ...] = ()
    bands: dict | None = None
    cause: str = ""

    @property
    def close(self) -> bool:
        return bool(self.between)

    @property
    def decided(self) -> bool:
        """Whether the probe named an option (False: no verdict, :attr:`cause` says why)."""
        return self.action != NO_VERDICT

    def kept_text(self) -> str:
        """``"95% (90% band 90%–99%)"``, or why the share of the gain kept is undefined."""
        if self.kept is None:
            return f"undefined ({self.cause or GAINS_NOTHING})"
        band = (self.bands or {}).get("kept")
        return f"{100 * self.kept:.0f}%" + (f" ({band.text(percent=True)})" if band is not None else "")

    @property
    def label(self) -> str:
        """The verdict in words: one option, or the two a band straddles."""
        if self.between:
            return f"{self.between[0]} or {self.between[1]} (too close to call)"
        return str(self.action)

    def to_json(self) -> dict:
        out = {"level": self.action, "reasons": list(self.reasons), "kept": self.kept,
               "between": [str(o) for o in self.between]}
        if self.cause:
            out["cause"] = self.cause
        if self.bands:
            out["bands"] = {k: b.to_json() for k, b in self.bands.items()}
        return out


def gain_kept(tau_old: float, tau_new: float) -> float | None:
    """Fraction of the gain (τ - 1) on the old target kept on the new one.

    None (undefined) when the old target's gain is not above :data:`RATIO_MIN_GAIN`: a share of no gain
    is a ratio of noise. (A verdict asks more of the gain on A: :data:`MIN_GAIN_ON_A`.)
    """
    return (tau_new - 1.0) / (tau_old - 1.0) if tau_old > 1.0 + RATIO_MIN_GAIN else None


def missing_evidence(sequences: int, seq_counted, k: int, unit: str = "sequences",
                     counted: str = "positions counted") -> str | None:
    """What a verdict lacks on these sequences, in words, or None when there is enough to decide.

    Args:
        sequences: sequences probed.
        seq_counted: per sequence, the positions counted at each of the k draft steps ([N, k]).
        k: drafts per cycle.
        unit: what a sequence is called where it came from (``"paired samples"`` for dumps).
        counted: what a counted position is called there.
    """
    rows = [list(r) for r in seq_counted]
    positions = sum(int(r[0]) for r in rows if r)
    if positions == 0:
        return f"0 {counted} in {sequences} {unit}: nothing to measure"
    with_positions = sum(1 for r in rows if r and r[0] > 0)
    if with_positions < MIN_SEQUENCES:
        return (f"{counted} in only {with_positions} of {sequences} {unit} ({positions} positions): a verdict's "
                f"band resamples {unit}, and needs at least {MIN_SEQUENCES} that count a position")
    if sum(int(r[k - 1]) for r in rows if len(r) >= k) == 0:
        return (f"no position counts draft {k} of k = {k} in {sequences} {unit} (they end too soon after their "
                f"counted positions): τ over {k} drafts cannot be measured; lower k, or probe longer {unit}")
    return None


def _ratio(hits, counted):
    import numpy as np

    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(counted > 0, hits / np.maximum(counted, 1), np.nan)


def bootstrap_weights(n: int, reps: int = BOOTSTRAP_REPS, seed: int = 0):
    """[reps, n] counts: how often each of ``n`` units (sequences, prompts) is drawn in each resample. A paired
    bootstrap multiplies every side's per-unit numbers by the same weights."""
    import numpy as np

    return np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=reps)


def tau_bands(hits_a, counted_a, hits_b, counted_b, reps: int = BOOTSTRAP_REPS, level: float = BAND_LEVEL,
              seed: int = 0) -> dict:
    """Bootstrap bands over sequences of τ on A and B, the gain kept, and the per-position acceptance.

    The two targets saw the same sequences, so each resample draws sequences once for both (a paired
    bootstrap): the band of the gain kept is that of a ratio whose two sides move together.

    Args:
        hits_a, hits_b: [N, k] per sequence and draft position, the positions where drafts 1..i were
            all right (teacher forced) on A and on B.
        counted_a, counted_b: [N, k] the positions counted.
        reps: resamples; level: coverage of each percentile band; seed: the resampling's seed.

    Returns:
        ``{"kept", "tau_a", "tau_b": Band, "chain_a", "chain_b": [Band] per position, "sequences": N}``.
    """
    import numpy as np

    arrays = [np.asarray(x, dtype=np.float64) for x in (hits_a, counted_a, hits_b, counted_b)]
    n = arrays[0].shape[0]
    if n == 0 or any(a.shape != arrays[0].shape or a.ndim != 2 for a in arrays):
        raise ValueError("per-sequence hits and counts must be [N, k] arrays of one shape, N >= 1")
    weights = bootstrap_weights(n, reps, seed)
    ha, ca, hb, cb = (weights @ a for a in arrays)  # [reps, k]
    chain_a, chain_b = _ratio(ha, ca), _ratio(hb, cb)
    tau_a, tau_b = 1 + np.nansum(chain_a, 1), 1 + np.nansum(chain_b, 1)
    with np.errstate(divide="ignore", invalid="ignore"):  # a resample with no gain on A keeps no share of it
        kept = np.where(tau_a > 1 + RATIO_MIN_GAIN, (tau_b - 1) / (tau_a - 1), np.nan)
    q = (100 * (1 - level) / 2, 100 * (1 + level) / 2)

    def band(x) -> Band:
        lo, hi = np.nanpercentile(x, q) if np.isfinite(x).any() else (float("nan"), float("nan"))
        return Band(float(lo), float(hi), level)

    return {"kept": band(kept), "tau_a": band(tau_a), "tau_b": band(tau_b),
            "chain_a": [band(chain_a[:, i]) for i in range(chain_a.shape[1])],
            "chain_b": [band(chain_b[:, i]) for i in range(chain_b.shape[1])], "sequences": n}


def plugin_verdict(accept_on_a: float, accept_on_b: float, bands: dict | None = None,
                   data: TextProbed | None = None) -> Decision:
    """Plug in as is, warm start, or train from scratch, from the old drafter's τ on the old target A and the new B.

    A verdict needs text of the drafter's kind and a drafter that works on A on it: on the built-in
    fallback text (``data.decides`` False), or when τ on A (the low end of its band, where there is
    one) is not above 1 + :data:`MIN_GAIN_ON_A`, the result is :data:`NO_VERDICT`, its reasons name
    the text or the τ, and the share of the gain kept is undefined.

    Args:
        accept_on_a, accept_on_b: τ (teacher forced) on A and on B.
        bands: :func:`tau_bands` of those numbers; when the band of the gain kept straddles
            :data:`PLUGIN_KEEP` (or that of τ on B straddles :data:`WARM_START_MIN_TAU`), the verdict
            names both options (``between``) instead of one.
        data: the text the numbers were measured on (:func:`eaglelab.data.probe_data.probe_data_choice`);
            None: the caller's own sequences, taken as the drafter's kind.

    Raises:
        ValueError: a τ that is not a finite number of at least 1 (no verdict is read from NaN).
    """
    for name, tau in (("τ on A", accept_on_a), ("τ on B", accept_on_b)):
        if not (isinstance(tau, (int, float)) and math.isfinite(tau) and tau >= 1.0):
            raise ValueError(f"{name} must be a finite number of at least 1, got {tau!r}")
    if data is not None and not data.decides:
        return _no_verdict_on_text(accept_on_a, accept_on_b, bands, data)
    tau_a_band = (bands or {}).get("tau_a")
    if not _gains_on_a(accept_on_a, tau_a_band):
        return _no_verdict(accept_on_a, accept_on_b, bands)
    kept = gain_kept(accept_on_a, accept_on_b)
    reasons = [f"τ {accept_on_a:.2f} on A vs {accept_on_b:.2f} on B: the drafter keeps "
               f"{100 * kept:.0f}% of its gain (τ - 1) on the new target"]
    kept_band, tau_b_band = (bands or {}).get("kept"), (bands or {}).get("tau_b")
    if kept_band is not None:
        reasons[0] += f"; {kept_band.text(percent=True)} over {bands['sequences']} sequences"
    if kept >= PLUGIN_KEEP:
        action, why = Option.PLUG_IN, f"at least {100 * PLUGIN_KEEP:.0f}% kept: serve it as is, fine-tune later"
    elif accept_on_b >= WARM_START_MIN_TAU:
        action, why = Option.WARM_START, (f"τ on B {accept_on_b:.2f} ≥ {WARM_START_MIN_TAU}: the old drafter is a "
                                          "better start than random weights; fine-tune it on the new target's data")
    else:
        action, why = Option.FROM_SCRATCH, (f"τ on B {accept_on_b:.2f} < {WARM_START_MIN_TAU}: little of the old "
                                            "drafter transfers; train from scratch (or check aux layers and "
                                            "tokenizer first)")
    between: tuple[str, ...] = ()
    if kept_band is not None and kept_band.straddles(PLUGIN_KEEP):
        other = Option.WARM_START if accept_on_b >= WARM_START_MIN_TAU else Option.FROM_SCRATCH
        between = (Option.PLUG_IN, other)
        why = (f"the gain kept ({kept_band.text(percent=True)}) straddles {100 * PLUGIN_KEEP:.0f}%: "
               f"{between[0]} or {between[1]} cannot be told apart on these sequences; probe more sequences, or "
               "let the fine-tune's measured τ decide (notebook 04)")
    elif action != Option.PLUG_IN and tau_b_band is not None and tau_b_band.straddles(WARM_START_MIN_TAU):
        between = (Option.WARM_START, Option.FROM_SCRATCH)
        why = (f"τ on B ({tau_b_band.text()}) straddles {WARM_START_MIN_TAU}: warm start or from "
               "scratch cannot be told apart on these sequences; let the fine-tune's measured τ decide")
    return Decision(action, reasons + [why], kept, between,
                    {k: bands[k] for k in ("kept", "tau_a", "tau_b")} if bands else None)


def _gains_on_a(tau_a: float, band: Band | None) -> bool:
    """Whether the old drafter gains on its own target: τ on A (its band's low end) above 1 + MIN_GAIN_ON_A."""
    low = min(tau_a, band.low) if band is not None else tau_a
    return math.isfinite(low) and low > 1.0 + MIN_GAIN_ON_A


def _measured(tau_a: float, tau_b: float, bands: dict | None) -> str:
    """``"τ 1.21 on A (90% band 1.15–1.27), 1.21 on B"``."""
    band = (bands or {}).get("tau_a")
    return f"τ {tau_a:.2f} on A" + (f" ({band.text()})" if band is not None else "") + f", {tau_b:.2f} on B"


def _tau_bands_only(bands: dict | None) -> dict | None:
    """The bands of τ on A and B, without that of a share that is undefined with no verdict."""
    return {k: bands[k] for k in ("tau_a", "tau_b") if k in bands} if bands else None


def _no_verdict(tau_a: float, tau_b: float, bands: dict | None) -> Decision:
    """The outcome when the old drafter gains nothing on A: no option, the share kept undefined, and why."""
    measured = _measured(tau_a, tau_b, bands)
    at = " at its band's low end" if (bands or {}).get("tau_a") is not None else ""
    reasons = [f"{measured}: the old drafter gains nothing on its own target A on this text (a verdict needs τ on A "
               f"above {1 + MIN_GAIN_ON_A:.2f}{at}), so the share of its gain kept on B is undefined",
               "the probe cannot decide: the text may be unlike the drafter's training data, or the drafter or its "
               "aux layers do not fit target A; probe on text like its training data, check the drafter against A "
               "(`eaglelab compare`), or let notebook 04's measured τ decide"]
    return Decision(NO_VERDICT, reasons, None, (), _tau_bands_only(bands), GAINS_NOTHING)


def _no_verdict_on_text(tau_a: float, tau_b: float, bands: dict | None, data: TextProbed) -> Decision:
    """The outcome on text that is not the drafter's kind (the built-in fallback): no option, and the text named."""
    reasons = [f"the probe ran on {data.line}",
               f"{_measured(tau_a, tau_b, bands)}: how the old drafter does on this text, not whether it transfers to "
               "the new target; the probe cannot decide on it (on text unlike what it serves, a drafter gains little on "
               "either target, and the share of that little it keeps says nothing of its real gain)"]
    return Decision(NO_VERDICT, reasons, None, (), _tau_bands_only(bands),
                    f"{data.kind} text, not the drafter's kind: give your conversations for a verdict")


def reconcile(verdict: Mapping, recommendation: Mapping) -> str:
    """One answer from the probe's verdict (notebook 03) and the fine-tune's recommendation (notebook 04).

    The probe predicts from the old drafter teacher-forced on the new target's states; the fine-tune
    trains each option and measures it by real decoding, so where they differ the fine-tune decides,
    and the sentence says why they could differ.

    Args:
        verdict: :meth:`Decision.to_json` (``level``, ``between``, ``kept``).
        recommendation: :meth:`Recommendation.to_json` (``action``, ``taus``).

    Returns:
        the sentence the game plan prints.
    """
    between = verdict.get("between") if isinstance(verdict.get("between"), list) else []
    level, between = str(verdict.get("level")), [str(o) for o in between]
    between = between if len(between) == 2 else []  # a band names the two options it straddles, or none
    action = str(recommendation.get("action"))
    close = [str(o) for o in recommendation.get("close") or []]
    if close:  # 04's measured gain could not separate the options either: said, never "settles it"
        return _both_close(verdict, action, close)
    kept = verdict.get("kept")
    number = isinstance(kept, (int, float)) and not isinstance(kept, bool) and math.isfinite(kept)
    kept_text = f"{100 * kept:.0f}% of the gain kept" if number else "its gain kept"
    if level == NO_VERDICT:
        cause = verdict.get("cause") if isinstance(verdict.get("cause"), str) and verdict.get("cause") else \
            "the old drafter gains nothing on its own target A on the probe's text"
        return (f"Notebook 03's probe gave no verdict: {cause}, so the share of its gain kept on the new target is "
                f"undefined; notebook 04, which trains each option and measures it by real decoding, decides: "
                f"**{action}**.")
    if not between and level == action:
        return f"Notebook 03's probe and notebook 04's fine-tune agree: **{action}**."
    if between and action in between:
        return (f"Notebook 03's probe could not tell {between[0]} from {between[1]} ({kept_text}, its band straddling "
                f"the threshold); notebook 04's measured τ settles it: **{action}**.")
    said = " or ".join(between) if between else level
    return (f"Notebook 03's probe said {said} ({kept_text}, teacher forced on the new target's states); notebook 04, "
            f"which trains each option and measures it by real decoding (ties within {TAU_TIE} go to the cheaper), "
            f"says **{action}**, and decides: the probe's {100 * PLUGIN_KEEP:.0f}% rule and the measured τ disagree "
            "on this pair, so read the measured τ of each option above.")


def _both_close(verdict: Mapping, action: str, close: list[str]) -> str:
    """:func:`reconcile` where notebook 04 could not separate its choice from ``close``: a close 04 defers to a clear
    verdict of 03; where 03 is close too (or gave none), both say so and the cheaper option is kept."""
    level = str(verdict.get("level"))
    between = [str(o) for o in verdict.get("between") or []]
    four = (f"notebook 04's measured τ could not separate {action} from {' or '.join(close)} (the band of the gain "
            "straddles zero over its prompts)")
    if level in OPTIONS and not between:
        return f"{four[0].upper()}{four[1:]}; notebook 03's probe is clear, and decides: **{level}**."
    said = f"could not tell {' from '.join(between)} either" if between else "gave no verdict"
    return (f"Too close to call: {four}, and notebook 03's probe {said}; the cheaper, **{action}**, is kept until more "
            "prompts (or your own data) separate them.")


def verdict_problem(verdict: object, recommendation: object) -> str | None:
    """Why a findings file's verdict (notebook 03) and recommendation (notebook 04) are not what the notebooks write,
    in words, or None: what :func:`reconcile` reads, checked once where it is read from outside.

    A verdict's ``level`` is an option or :data:`NO_VERDICT`, its ``between`` none or two different options, its
    ``kept`` a finite number or null; a recommendation's ``action`` is an option.
    """
    options = {str(o) for o in OPTIONS}
    if not isinstance(verdict, dict) or not isinstance(recommendation, dict):
        return "its verdict and recommendation must be objects"
    level, between, kept = verdict.get("level"), verdict.get("between", []), verdict.get("kept")
    if not isinstance(level, str) or level not in options | {NO_VERDICT}:
        return f"verdict level must be one of {', '.join(sorted(options | {NO_VERDICT}))}"
    if not isinstance(between, list) or len(between) not in (0, 2) \
            or not all(isinstance(o, str) and o in options for o in between) or len(set(between)) != len(between):
        return "verdict 'between' must name no option or two different options"
    if kept is not None and not (isinstance(kept, (int, float)) and not isinstance(kept, bool) and math.isfinite(kept)):
        return "verdict 'kept' must be a finite number or null"
    action = recommendation.get("action")
    if not isinstance(action, str) or action not in options:
        return f"recommendation action must be one of {', '.join(sorted(options))}"
    close = recommendation.get("close", [])
    if not isinstance(close, list) or not all(isinstance(o, str) and o in options and o != action for o in close):
        return "recommendation 'close' must list options other than its action"
    return None


def plug_in_against_break_even(low: float, high: float, break_even: float) -> str:
    """Whether plugging the old drafter in pays, from its predicted τ band against the break-even τ."""
    if low >= break_even:
        return "pays even at the band's low end"
    if high < break_even:
        return "does not pay even at the band's high end"
    return "straddles break-even: measure it (notebook 03) before deciding"
