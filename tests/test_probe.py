"""The probe on the tiny world: identity checks, A vs B evidence, CLI JSON (from dumps: tests/test_dumps.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from eaglelab.data.tokens import builtin_sequences
from eaglelab.decisions import PLUGIN_KEEP, plugin_verdict
from eaglelab.model.drafter_files import load_drafter
from eaglelab.model.targets import load_target
from eaglelab.probe.plugin import run_probe


@pytest.fixture(scope="module")
def models(tiny_world):
    a, tok = load_target(tiny_world.target_a, device="cpu")
    b, _ = load_target(tiny_world.target_b, device="cpu")
    return a, b, tok, load_drafter(tiny_world.drafter_a)


def test_a_against_itself_is_identical(models):
    a, _, tok, drafter = models
    res = run_probe(a, a, drafter, builtin_sequences(tok, 32, "held_out", 8), k=3)
    for layer in res.layers:
        assert layer.cosine_mean == pytest.approx(1.0, abs=1e-5) and layer.cka == pytest.approx(1.0, abs=1e-5)
    assert res.argmax_agreement == 1.0
    assert res.eval_a["accept_len"] == pytest.approx(res.eval_b["accept_len"])
    assert res.decision.action == "plug in" and res.decision.kept == pytest.approx(1.0)


def test_b_moved_and_the_old_drafter_loses_acceptance(models):
    a, b, tok, drafter = models
    res = run_probe(a, b, drafter, builtin_sequences(tok, 64, "held_out", 16), k=4)
    assert all(0.3 < layer.cosine_mean < 0.999 for layer in res.layers)
    assert res.eval_a["accept_len"] > res.eval_b["accept_len"] > 1.0
    plain = plugin_verdict(res.eval_a["accept_len"], res.eval_b["accept_len"])
    assert res.decision.action == plain.action and res.decision.kept == plain.kept
    band = res.decision.bands["kept"]  # the bootstrap band over the 16 sequences holds the point estimate
    assert band.low <= res.decision.kept <= band.high and band.high - band.low < 0.5
    assert res.decision.action != "plug in" and res.decision.kept < PLUGIN_KEEP


def test_cli_probe_json(tiny_world):
    proc = subprocess.run([sys.executable, "-m", "eaglelab", "probe", "--old-target", str(tiny_world.target_a),
                           "--new-target", str(tiny_world.target_b), "--old-drafter", str(tiny_world.drafter_a),
                           "--sequences", "8", "--seq-len", "32", "--k", "3", "--measure-prompts", "0", "--json"],
                          capture_output=True, text=True, check=True)
    d = json.loads(proc.stdout)
    assert d["k"] == 3 and d["checkpoints"]["old_drafter"] == str(tiny_world.drafter_a)
    assert len(d["layers"]) == 4 and {"layer", "cosine_mean", "rel_l2", "cka"} <= set(d["layers"][0])
    assert 0 <= d["argmax_agreement"] <= 1
    assert d["plugin"]["accept_len_on_a"] >= 1 and d["plugin"]["accept_len_on_b"] >= 1
