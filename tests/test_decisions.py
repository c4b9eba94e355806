"""The workbook's decisions as functions: plug-in verdict, best drafter, data saved, the recommendation."""

from __future__ import annotations

import pytest

from eaglelab.decisions import (
    PLUGIN_KEEP,
    TAU_TIE,
    WARM_START_MIN_TAU,
    best_drafter,
    gain_kept,
    plugin_verdict,
    recommend,
)


def test_gain_kept_counts_the_gain_over_no_speculation():
    assert gain_kept(3.0, 2.0) == pytest.approx(0.5)
    assert gain_kept(1.0, 1.5) == 0.0  # no gain on the old target: nothing to keep


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


def test_best_drafter_is_the_highest_measured_tau_first_on_ties():
    measured = {"warm": {"accept_len": 1.7}, "scratch": {"accept_len": 1.4}, "other": {"accept_len": 1.7}}
    assert best_drafter(measured) == "warm"
    assert best_drafter({"a": {"accept_len": 1.2, "speedup": 2.0}, "b": {"accept_len": 1.3, "speedup": 1.0}},
                        key="speedup") == "a"
    with pytest.raises(ValueError):
        best_drafter({})


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
