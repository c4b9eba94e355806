"""Notebook 04's recommendation: plug in, warm start or from scratch, from each option's τ on the new target.

Measured by real decoding, per prompt, the choice is by the band of each difference (a paired bootstrap over
the prompts): the cheapest option unless a dearer one's gain is clear of zero, and "too close to call" where
its band straddles zero. Held-out τ (teacher forced) the same way over the held-out sequences; τ alone, with
nothing to resample (an old findings file), the tie rule (:data:`eaglelab.decisions.TAU_TIE`). Arithmetic; no
torch (numpy when a band is drawn).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from eaglelab.decisions import BAND_LEVEL, BOOTSTRAP_REPS, OPTIONS, TAU_TIE, Option, bootstrap_weights


@dataclass(frozen=True)
class Recommendation:
    """What to do for the new target, from the measured τ of each option on it.

    Attributes:
        action: one of :data:`OPTIONS`.
        taus: measured τ on the new target of each option considered.
        text: the recommendation in one or two sentences, numbers formatted in.
    """

    action: str
    taus: dict[str, float]
    text: str
    bands: dict[str, list[float]] = field(default_factory=dict)  # option -> [low, high] of its measured τ
    gains: dict[str, list[float]] = field(default_factory=dict)  # "B over A" -> [central, low, high] of τB - τA
    close: tuple[str, ...] = ()  # the options it could not separate from the one chosen

    def to_json(self) -> dict:
        return asdict(self)


def measured_bands(counts: Mapping[str, Sequence[Sequence[float]]], reps: int = BOOTSTRAP_REPS,
                   level: float = BAND_LEVEL, seed: int = 0) -> tuple[dict[str, float], dict[str, list[float]], dict]:
    """Each option's measured τ with its band, from per-prompt counts, by a paired bootstrap over the prompts
    (:func:`eaglelab.decisions.bootstrap_weights`, as the probe's bands).

    Args:
        counts: option -> one ``(tokens emitted, cycles)`` pair per prompt, the same prompts in the same order for
            every option (real decoding of one prompt set: the pairing is what makes a difference's band narrow).

    Returns:
        ``(taus, bands, draws)``: τ = Σ emitted / Σ cycles per option, its ``[low, high]`` band, and each
        resample's τ per option (an array each, for the bands of differences).
    """
    import numpy as np

    rows = {o: np.asarray(c, dtype=np.float64).reshape(-1, 2) for o, c in counts.items()}
    n = len(next(iter(rows.values())))
    if n == 0 or any(len(r) != n for r in rows.values()):
        raise ValueError("every option needs counts for the same prompts")
    weights = bootstrap_weights(n, reps, seed)

    def tau(emitted, cycles):
        return np.where(cycles > 0, emitted / np.maximum(cycles, 1e-12), 1.0)

    taus = {o: float(tau(r[:, 0].sum(), r[:, 1].sum())) for o, r in rows.items()}
    draws = {o: tau(weights @ r[:, 0], weights @ r[:, 1]) for o, r in rows.items()}
    bands = {o: percentile_band(d, level) for o, d in draws.items()}
    return taus, bands, draws


def sequence_bands(per_sequence: Mapping[str, tuple[Sequence[Sequence[float]], Sequence[Sequence[float]]]],
                   reps: int = BOOTSTRAP_REPS, level: float = BAND_LEVEL,
                   seed: int = 0) -> tuple[dict[str, float], dict[str, list[float]], dict]:
    """Each option's held-out τ (teacher forced) with its band, by a paired bootstrap over the held-out sequences.

    Args:
        per_sequence: option -> ``(hits, counted)``, each ``[N][k]``: per sequence and draft position, the positions
            where drafts 1..i were all right, and those counted (:func:`eaglelab.train.ttt.evaluate_drafter`'s
            ``seq_hits`` / ``seq_counted``), the same sequences in the same order for every option.

    Returns:
        ``(taus, bands, draws)`` as :func:`measured_bands`: τ = 1 + Σ_i Σ hits_i / Σ counted_i.
    """
    import numpy as np

    rows = {o: (np.asarray(h, dtype=np.float64), np.asarray(c, dtype=np.float64)) for o, (h, c) in per_sequence.items()}
    shapes = {h.shape for h, c in rows.values()} | {c.shape for h, c in rows.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2 or next(iter(shapes))[0] == 0:
        raise ValueError("every option needs [N, k] hits and counts for the same held-out sequences, N >= 1")
    weights = bootstrap_weights(next(iter(shapes))[0], reps, seed)

    def tau(hits, counted):
        return 1.0 + (hits / np.maximum(counted, 1e-12)).sum(-1)

    taus = {o: float(tau(h.sum(0), c.sum(0))) for o, (h, c) in rows.items()}
    draws = {o: tau(weights @ h, weights @ c) for o, (h, c) in rows.items()}
    return taus, {o: percentile_band(d, level) for o, d in draws.items()}, draws


def percentile_band(values, level: float = BAND_LEVEL) -> list[float]:
    """The central ``level`` of ``values``: ``[low, high]`` percentiles."""
    import numpy as np

    return [float(x) for x in np.percentile(values, (100 * (1 - level) / 2, 100 * (1 + level) / 2))]


def _recommend_by_band(taus: Mapping[str, float], bands: Mapping[str, list[float]], draws: Mapping,
                       lead: Mapping[str, str], measure: str, n: int, unit: str) -> Recommendation:
    """The cheapest option unless a dearer one's gain over it is clear of zero (its band's low end above 0); the
    options whose gain's band straddles zero are named as too close to call. ``measure``: which τ, in words
    (``measured τ``), resampled over ``n`` ``unit`` (``prompts``)."""
    order = [o for o in OPTIONS if o in taus]
    chosen, gains, close = order[0], {}, []
    for o in order[1:]:
        central, (lo, hi) = taus[o] - taus[chosen], percentile_band(draws[o] - draws[chosen])
        gains[f"{o} over {chosen}"] = [central, lo, hi]
        if lo > 0:
            chosen, close = o, []
        elif hi > 0:
            close.append(o)
    shown = ", ".join(f"{o} {taus[o]:.2f} ({bands[o][0]:.2f}-{bands[o][1]:.2f})" for o in order)
    text = f"{lead[chosen]} ({measure} over {n} {unit}, 90% bands: {shown})."
    for o in close:
        c, lo, hi = gains[f"{o} over {chosen}"]
        text += (f" Too close to call between {chosen} and {o}: {o} gains {c:+.2f} τ ({lo:+.2f} to {hi:+.2f}) over "
                 f"{n} {unit}, a band across zero; the cheaper is kept, and more {unit} would separate them.")
    return Recommendation(chosen, {o: float(taus[o]) for o in order}, text, {o: bands[o] for o in order}, gains,
                          tuple(close))


#: What each recommendation says first.
LEADS = {
    Option.PLUG_IN: "Plug the old drafter in as is: fine-tuning does not buy a clear gain on the new target",
    Option.WARM_START: "Initialise the new drafter from the old one and fine-tune it on the new target's data",
    Option.FROM_SCRATCH: "Train a new drafter from scratch: the old drafter's weights do not help on the new target",
}


def recommend(taus: Mapping[str, float], held_out: Mapping[str, float] | None = None,
              counts: Mapping[str, Sequence[Sequence[float]]] | None = None,
              per_sequence: Mapping[str, tuple] | None = None) -> Recommendation:
    """What to do with the old drafter on the new target, from each option's τ there.

    With ``counts`` (real decoding: per prompt, tokens emitted and cycles, the same prompts for every option), or
    ``per_sequence`` (held-out τ, teacher forced: per sequence, the chain hits and positions counted), the choice
    is by the band of each difference: the cheapest option unless a dearer one's gain is clear of zero, and "too
    close to call" where a band straddles it. With neither (τ alone, as an old findings file holds them): the
    cheapest option within :data:`TAU_TIE` of the best.

    Args:
        taus: τ per option, keys from :data:`OPTIONS` (at least one).
        held_out: the same options' held-out τ (teacher forced), when measured too: where it picks another option
            by its rule, the text says so and shows both, instead of letting one measure settle it unsaid.
        counts: per option, one ``(emitted, cycles)`` pair per prompt (the measured ``taus`` are recomputed from them).
        per_sequence: per option of ``held_out`` (or of ``taus`` when they are the held-out ones), ``(hits,
            counted)`` per held-out sequence (:func:`sequence_bands`).
    """
    unknown = set(taus) - set(OPTIONS)
    if unknown or not taus or (counts is not None and set(counts) != set(taus)):
        raise ValueError(f"options must be among {OPTIONS}, the same with their counts, got {sorted(taus)}")
    held_seq = per_sequence if held_out else None
    if counts is not None:
        out = _recommend_by_band(*measured_bands(counts), LEADS, "measured τ", len(next(iter(counts.values()))),
                                 "prompts")
        action, text = out.action, out.text
    elif per_sequence is not None and not held_out:
        out = _recommend_by_band(*sequence_bands(per_sequence), LEADS, "held-out τ, teacher forced,",
                                 len(next(iter(per_sequence.values()))[0]), "sequences")
        action, text = out.action, out.text
    else:
        best = max(taus.values())
        action = next(o for o in OPTIONS if o in taus and taus[o] >= best - TAU_TIE)
        others = ", ".join(f"{o} {taus[o]:.2f}" for o in OPTIONS if o in taus and o != action)
        text = f"{LEADS[action]} (τ {taus[action]:.2f}" + (f" vs {others}" if others else "") + ")."
        out = Recommendation(action, {o: float(taus[o]) for o in OPTIONS if o in taus}, text)
    if held_out:
        other = recommend(held_out, per_sequence=held_seq)
        if other.action != action:
            shown = ", ".join(f"{o} {held_out[o]:.2f}" for o in OPTIONS if o in held_out)
            text += (f" The held-out τ (teacher forced) picks {other.action} instead ({shown}): the two measures "
                     f"disagree on this pair, so neither settles {action} against {other.action} alone; the measured "
                     "τ is the one a server sees, and more prompts (or your own data) would separate them.")
    return Recommendation(action, out.taus, text, out.bands, out.gains, out.close)
