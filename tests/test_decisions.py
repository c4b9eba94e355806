"""The workbook's decisions as functions: plug-in verdict, best drafter, data saved, the recommendation."""

from __future__ import annotations

import pytest

from eaglelab.decisions import (
    PLUGIN_KEEP,
    TAU_TIE,
    WARM_START_MIN_TAU,
    gain_kept,
    plug_in_against_break_even,
    plugin_verdict,
)
from eaglelab.recommendation import recommend


def test_gain_kept_counts_the_gain_over_no_speculation():
    assert gain_kept(3.0, 2.0) == pytest.approx(0.5)
    assert gain_kept(1.0, 1.5) is None  # no gain on the old target: no share of it is defined


@pytest.mark.parametrize("tau_a, tau_b, action", [
    (2.0, 1.0 + PLUGIN_KEEP + 1e-6, "plug in"),        # just at the threshold kept
    (2.0, 1.95, "plug in"),
    (3.0, WARM_START_MIN_TAU + 0.2, "warm start"),      # most of the gain lost, still a useful start
    (3.0, WARM_START_MIN_TAU - 0.01, "from scratch"),
])
def test_plugin_verdict_branches(tau_a, tau_b, action):
    d = plugin_verdict(tau_a, tau_b)
    assert d.action == action and d.kept == pytest.approx(gain_kept(tau_a, tau_b))
    assert f"{tau_b:.2f}" in d.reasons[0] and d.to_json()["level"] == action


def test_reconcile_says_when_the_probe_and_the_fine_tune_agree_differ_or_the_probe_was_too_close():
    from eaglelab.decisions import reconcile

    plug = {"action": "plug in", "taus": {"plug in": 1.8, "warm start": 1.83}}
    assert "agree: **plug in**" in reconcile({"level": "plug in", "between": [], "kept": 0.93}, plug)
    close = reconcile({"level": "warm start", "between": ["plug in", "warm start"], "kept": 0.88}, plug)
    assert "could not tell plug in from warm start" in close and "settles it: **plug in**" in close
    differ = reconcile({"level": "warm start", "between": [], "kept": 0.7}, plug)
    assert "probe said warm start (70% of the gain kept" in differ and "says **plug in**, and decides" in differ

def test_recommend_takes_the_cheapest_option_within_the_tie():
    clear = recommend({"plug in": 1.5, "warm start": 1.8, "from scratch": 1.4})
    assert clear.action == "warm start" and "1.80" in clear.text and "plug in 1.50" in clear.text
    tie = recommend({"plug in": 1.8 - TAU_TIE / 2, "warm start": 1.8, "from scratch": 1.7})
    assert tie.action == "plug in"
    assert recommend({"plug in": 1.1, "warm start": 1.3, "from scratch": 1.6}).action == "from scratch"
    assert recommend({"warm start": 1.3}).to_json() == {"action": "warm start", "taus": {"warm start": 1.3},
                                                        "text": recommend({"warm start": 1.3}).text, "bands": {},
                                                        "gains": {}, "close": ()}
    with pytest.raises(ValueError):
        recommend({"fine-tune": 2.0})


@pytest.mark.parametrize(("low", "high", "said"), [(1.7, 2.0, "pays even at the band's low end"),
                                                   (1.6, 2.0, "pays even at the band's low end"),
                                                   (1.2, 1.59, "does not pay even at the band's high end"),
                                                   (1.5, 1.7, "straddles break-even")])
def test_plugging_in_pays_only_when_the_whole_band_clears_break_even(low, high, said):
    assert plug_in_against_break_even(low, high, 1.6).startswith(said)


def test_a_recommendation_shows_both_measures_where_they_disagree():
    """#54 item 3: held out 1.64 vs 1.66 (plug in) and measured 1.79 vs 1.66 (warm start), the second 'settling' it."""
    from eaglelab.recommendation import recommend

    measured = {"plug in": 1.66, "warm start": 1.79, "from scratch": 1.35}
    held = {"plug in": 1.66, "warm start": 1.64, "from scratch": 1.32}
    both = recommend(measured, held_out=held)
    assert both.action == "warm start" and both.taus == measured
    assert ("The held-out τ (teacher forced) picks plug in instead (plug in 1.66, warm start 1.64, from scratch "
            "1.32): the two measures disagree on this pair, so neither settles warm start against plug in alone") in both.text
    assert recommend(measured, held_out={**held, "warm start": 1.80}).text == recommend(measured).text  # they agree


def _counts(taus_per_prompt: list[float], cycles: int = 20) -> list[tuple[float, float]]:
    """One prompt's (tokens emitted, cycles) for each τ: ``cycles`` cycles emitting τ tokens each on average."""
    return [(t * cycles, cycles) for t in taus_per_prompt]


def test_measured_options_are_chosen_by_the_band_of_their_difference():
    """#56 item 1: the cheaper option unless the dearer one's gain is clear of zero; else "too close to call"."""
    from eaglelab.recommendation import measured_bands, recommend

    # warm start above plugging in on every prompt: a clear gain, whatever the prompts' own spread
    plug = [1.4, 1.9, 1.6, 2.1, 1.5, 1.8]
    clear = {"plug in": _counts(plug), "warm start": _counts([t + 0.2 for t in plug]),
             "from scratch": _counts([t - 0.3 for t in plug])}
    got = recommend({o: 0.0 for o in clear}, counts=clear)
    assert got.action == "warm start" and got.close == () and got.taus["warm start"] == pytest.approx(sum(plug) / 6 + 0.2)
    c, lo, hi = got.gains["warm start over plug in"]
    assert c == pytest.approx(0.2) and 0 < lo <= c <= hi and "over 6 prompts, 90% bands" in got.text
    assert got.gains["from scratch over warm start"][2] < 0  # clearly below: not close, not chosen
    # the same means, but the gain flips sign from prompt to prompt: too close to call, the cheaper kept
    noisy = {"plug in": _counts(plug), "warm start": _counts([t + d for t, d in zip(plug, [0.5, -0.4, 0.6, -0.3, 0.4, 0.2])])}
    got = recommend({o: 0.0 for o in noisy}, counts=noisy)
    assert got.action == "plug in" and got.close == ("warm start",)
    assert "Too close to call between plug in and warm start: warm start gains +0.17 τ" in got.text
    # the bands are the paired bootstrap's: an option's band holds its τ, and the same seed gives the same bands
    taus, bands, _ = measured_bands(noisy)
    assert all(lo <= taus[o] <= hi for o, (lo, hi) in bands.items()) and measured_bands(noisy)[1] == bands
    with pytest.raises(ValueError):
        recommend({"plug in": 1.0}, counts={"plug in": _counts([1.0]), "warm start": _counts([1.2])})
    with pytest.raises(ValueError):
        measured_bands({"plug in": _counts([1.0, 1.1]), "warm start": _counts([1.2])})


def _sequences(chains: list[list[float]], positions: int = 30) -> tuple[list[list[float]], list[list[float]]]:
    """Per held-out sequence, hits and counted positions for chain rates ``chains`` ([N][k])."""
    return [[c * positions for c in chain] for chain in chains], [[positions] * len(chains[0]) for _ in chains]


def test_held_out_options_are_chosen_by_the_band_of_their_difference():
    """#56 item 1: the held-out path (CLI finetune, the picker, the check against the measured τ) used the 0.05 tie
    rule; it is now the band of the difference over the held-out sequences, as the measured τ's over the prompts."""
    from eaglelab.recommendation import recommend, sequence_bands

    base = [[0.5, 0.3, 0.1], [0.7, 0.5, 0.3], [0.4, 0.2, 0.1], [0.6, 0.4, 0.2], [0.55, 0.35, 0.15]]
    plus = [[c + 0.08 for c in chain] for chain in base]
    seqs = {"plug in": _sequences(base), "warm start": _sequences(plus), "from scratch": _sequences([[0.2, 0.1, 0.0]] * 5)}
    taus, bands, _ = sequence_bands(seqs)
    assert taus["warm start"] == pytest.approx(taus["plug in"] + 0.24)
    got = recommend(taus, per_sequence=seqs)
    assert got.action == "warm start" and "held-out τ, teacher forced, over 5 sequences, 90% bands" in got.text
    # a gain of 0.04 τ (inside the old 0.05 tie) but on every sequence: clear, where the tie rule kept plugging in
    small = {"plug in": _sequences(base), "warm start": _sequences([[c + 0.02 for c in ch[:2]] + ch[2:] for ch in base])}
    taus_small = sequence_bands(small)[0]
    assert recommend(taus_small).action == "plug in"  # the tie rule, τ alone
    assert recommend(taus_small, per_sequence=small).action == "warm start"
    # the same mean gain, flipping sign across sequences: too close to call
    flip = [[c + d for c in ch] for ch, d in zip(base, [0.2, -0.15, 0.2, -0.15, 0.05])]
    noisy = {"plug in": _sequences(base), "warm start": _sequences(flip)}
    got = recommend(sequence_bands(noisy)[0], per_sequence=noisy)
    assert got.action == "plug in" and got.close == ("warm start",) and "over 5 sequences, a band across zero" in got.text
    # beside a measured τ: the held-out side is judged by its own band too
    measured = {"plug in": 1.7, "warm start": 1.9}
    counts = {"plug in": _counts([1.7] * 4), "warm start": _counts([1.9] * 4)}
    both = recommend(measured, held_out=sequence_bands(noisy)[0], counts=counts, per_sequence=noisy)
    assert both.action == "warm start" and "The held-out τ (teacher forced) picks plug in instead" in both.text
    with pytest.raises(ValueError):
        sequence_bands({"plug in": _sequences(base), "warm start": _sequences(base[:3])})


def test_a_close_fine_tune_defers_to_a_clear_probe_and_both_close_say_so():
    """#56 item 3: never "the measured τ settles it" when its own band could not separate the options."""
    from eaglelab.decisions import reconcile, verdict_problem

    close = {"action": "plug in", "close": ["warm start"], "taus": {}, "text": ""}
    clear = reconcile({"level": "warm start", "between": [], "kept": 0.7}, close)
    assert clear.startswith("Notebook 04's measured τ could not separate plug in from warm start")
    assert clear.endswith("notebook 03's probe is clear, and decides: **warm start**.") and "settles" not in clear
    both = reconcile({"level": "warm start", "between": ["plug in", "warm start"], "kept": 0.88}, close)
    assert both.startswith("Too close to call:") and "could not tell plug in from warm start either" in both
    assert "the cheaper, **plug in**, is kept" in both
    none = reconcile({"level": "no verdict", "between": [], "kept": None}, close)
    assert "notebook 03's probe gave no verdict" in none
    assert verdict_problem({"level": "plug in", "between": [], "kept": None}, close) is None
    for bad in (["plug in"], "warm start", ["fine-tune"]):
        assert "'close'" in verdict_problem({"level": "plug in", "between": [], "kept": None}, {**close, "close": bad})
