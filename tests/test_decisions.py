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
    recommend,
)


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
                                                        "text": recommend({"warm start": 1.3}).text}
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
    from eaglelab.decisions import recommend

    measured = {"plug in": 1.66, "warm start": 1.79, "from scratch": 1.35}
    held = {"plug in": 1.66, "warm start": 1.64, "from scratch": 1.32}
    both = recommend(measured, held_out=held)
    assert both.action == "warm start" and both.taus == measured
    assert ("The held-out τ (teacher forced) picks plug in instead (plug in 1.66, warm start 1.64, from scratch "
            "1.32): the two measures disagree on this pair, so neither settles warm start against plug in alone") in both.text
    assert recommend(measured, held_out={**held, "warm start": 1.80}).text == recommend(measured).text  # they agree
