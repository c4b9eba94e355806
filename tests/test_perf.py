"""The performance model reproduces the seed's hand calculation; closed forms agree."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from eaglelab.errors import ParameterError
from eaglelab.serving import perf
from eaglelab.serving.load import kimi_k25_on_pcie
from eaglelab.serving.target_shape import distinct_experts_touched


def test_seed_figures():
    d = perf.diagnose(82, 30, 2.0, [150, 200])
    assert round(d.effective_tps, 1) == 66.7
    assert round(d.break_even_tau, 2) == 2.46
    assert "break_even_accept_len" not in d.to_json()  # one name for one thing: no old spelling beside it (#57)
    assert d.required_accept_len == {"150": pytest.approx(4.5), "200": pytest.approx(6.0)}
    assert d.speedup < 1 and "loses" in d.verdict


def test_chain_sum_equals_closed_form():
    for a in (0.0, 0.3, 0.64, 0.9, 1.0):
        for k in (1, 3, 7):
            assert perf.accept_len_from_position_rates([a] * k) == pytest.approx(float(perf.accept_len_constant_rate(a, k)))
    assert perf.accept_len_from_position_rates([0.8, 0.5]) == pytest.approx(1 + 0.8 + 0.4)


def test_rate_inversion_and_reachability():
    a = perf.rate_for_accept_len(3.0, 7)
    assert float(perf.accept_len_constant_rate(a, 7)) == pytest.approx(3.0, abs=1e-9)
    with pytest.raises(ParameterError):
        perf.rate_for_accept_len(9.0, 7)
    rows = perf.requirement_table([100, 300], 0.030, k=7)
    assert rows[0]["reachable"] and not rows[1]["reachable"] and rows[1]["required_rate"] is None


def test_tree_bound_is_above_the_chain():
    for a in (0.3, 0.6):
        assert perf.accept_len_tree(a, 3, 1) == pytest.approx(float(perf.accept_len_constant_rate(a, 3)))
        assert perf.accept_len_tree(a, 3, 4) > perf.accept_len_tree(a, 3, 1)


def test_the_moe_verify_wakes_experts_and_costs_its_launches():
    assert float(distinct_experts_touched(1, 384, 8)) == pytest.approx(8.0)
    assert float(distinct_experts_touched(10_000, 384, 8)) == pytest.approx(384, rel=1e-6)
    m = kimi_k25_on_pcie()
    t = np.array([1, 4, 8])
    assert np.all(np.diff(m.forward_s(t, 1, "verify")) > 0)
    graphs = replace(m, machine=replace(m.machine, graphs=("decode", "verify", "draft")))
    assert graphs.verify_s(1, 3) < m.verify_s(1, 3)
    c = perf.Cycle(verify_s=0.02, draft_step_s=0.002, k=3, overhead_s=0.004)
    assert c.cycle_s == pytest.approx(0.030) and sum(c.shares().values()) == pytest.approx(1.0)


def test_invalid_parameters():
    with pytest.raises(ParameterError):
        perf.effective_tps(2.0, 0)
    with pytest.raises(ParameterError):
        perf.accept_len_from_position_rates([1.2])


def test_cli_perf_json():
    out = subprocess.run([sys.executable, "-m", "eaglelab", "perf", "--baseline-tps", "82", "--cycle-ms", "30",
                          "--accept-len", "2.0", "--goal-tps", "150", "200", "--json"],
                         capture_output=True, text=True, check=True).stdout
    d = json.loads(out)
    assert round(d["effective_tps"], 1) == 66.7 and round(d["break_even_tau"], 2) == 2.46
    assert d["required_accept_len"] == {"150": pytest.approx(4.5), "200": pytest.approx(6.0)}
