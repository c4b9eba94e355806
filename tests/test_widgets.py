"""The live pickers, the explorer and the timing check, driven from Python (the browser test drives them in Chromium).

ipywidgets run without a front end here: setting a widget's value fires the same observers a
browser does, and a button's ``click()`` runs its handlers.
"""

from __future__ import annotations

import math
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglelab.model.decoding import timing_trust
from eaglelab.workbook import choices as ch
from eaglelab.workbook.widgets import ChoicePanel, explorer_numbers, find_checkpoints, find_targets, perf_explorer
from tests.conftest import make_tiny_llama


@pytest.fixture(autouse=True)
def _no_picks():
    ch.forget_picks()
    yield
    ch.forget_picks()


def _slots_03(world, new_target=None):
    return [ch.Slot("OLD_TARGET", "old target (A)", "target", None, str(world.target_a)),
            ch.Slot("NEW_TARGET", "new target (B)", "target", new_target, str(world.target_b)),
            ch.Slot("OLD_DRAFTER", "old drafter (on A)", "drafter", None, str(world.drafter_a), fits="OLD_TARGET"),
            ch.Slot("DATA", "data (optional)", "data", None, "", fits="OLD_TARGET")]


def test_finders_list_the_worlds_drafters_and_targets(tiny_world):
    assert find_checkpoints(tiny_world.root) == sorted([str(tiny_world.drafter_a), str(tiny_world.drafter_b_small)])
    assert find_targets(tiny_world.root) == sorted([str(tiny_world.target_a), str(tiny_world.target_b)])


def test_a_pick_survives_run_all_until_the_parameter_is_edited(tiny_world):
    first = ch.Choices("03", _slots_03(tiny_world), root=str(tiny_world.root))
    assert first.value("NEW_TARGET") == str(tiny_world.target_b)  # no pick, no parameter: the world's default
    first.pick("NEW_TARGET", str(tiny_world.target_a))
    # Run All re-runs the parameters cell (NEW_TARGET = None again) and builds the choices anew
    again = ch.Choices("03", _slots_03(tiny_world), root=str(tiny_world.root))
    assert again.value("NEW_TARGET") == str(tiny_world.target_a)
    assert again.same() == [("old target (A)", "new target (B)")]
    # the user edits the parameters cell: their new value wins over the older pick
    edited = ch.Choices("03", _slots_03(tiny_world, new_target="/elsewhere/b"), root=str(tiny_world.root))
    assert edited.value("NEW_TARGET") == "/elsewhere/b"
    # other notebooks keep their own picks
    assert ch.Choices("04", _slots_03(tiny_world), root="").value("NEW_TARGET") == str(tiny_world.target_b)
    # picking the default again forgets the pick
    again.pick("NEW_TARGET", str(tiny_world.target_b))
    assert ch.Choices("03", _slots_03(tiny_world), root="").picked == {}


def test_checks_are_one_line_each_and_name_the_problem(tiny_world, tmp_path):
    wide = tmp_path / "wide-target"
    make_tiny_llama(layers=8, hidden=96).save_pretrained(wide)
    choices = ch.Choices("03", _slots_03(tiny_world), root=str(tiny_world.root))
    checks = choices.check({"OLD_TARGET": str(wide), "NEW_TARGET": str(tiny_world.target_b),
                            "OLD_DRAFTER": str(tiny_world.drafter_a), "DATA": str(tmp_path / "missing.jsonl")})
    assert checks["OLD_TARGET"].ok and "hidden 96" in checks["OLD_TARGET"].line
    assert not checks["OLD_DRAFTER"].ok and "does not fit the target" in checks["OLD_DRAFTER"].line
    assert not checks["DATA"].ok and "missing.jsonl: no such file" in checks["DATA"].line
    for line in ("", "/no/such/folder", "bad\nname", "x" * 5000):
        c = ch.check_source("drafter", line)
        assert not c.ok and "\n" not in c.line and "Traceback" not in c.line
    same = choices.check({"OLD_TARGET": str(tiny_world.target_a), "NEW_TARGET": str(tiny_world.target_a) + "/",
                          "OLD_DRAFTER": str(tiny_world.drafter_a), "DATA": ""})
    assert same["NEW_TARGET"].ok and same["NEW_TARGET"].warn and "compares it with itself" in same["NEW_TARGET"].line


def test_the_panel_answers_in_place_and_the_set_up_takes_the_choice(tiny_world):
    from eaglelab.workbook.answers import comparison_answer

    slots = [ch.Slot("OLD_DRAFTER", "drafter A (old)", "drafter", None, str(tiny_world.drafter_a)),
             ch.Slot("NEW_DRAFTER", "drafter B (new)", "drafter", None, str(tiny_world.drafter_b_small)),
             ch.Slot("NEW_TARGET", "the new target", "target", None, str(tiny_world.target_b))]
    answers = []
    panel = ChoicePanel(ch.Choices("02-panel", slots, root=str(tiny_world.root)),
                        lambda v: answers.append(comparison_answer(v, str(tiny_world.root))) or answers[-1],
                        button="Compare")
    assert not panel.button.disabled and all("✓" in line.value for line in panel.lines.values())

    panel.pickers["NEW_DRAFTER"].value = "/no/such/drafter"
    assert panel.button.disabled and "✗" in panel.lines["NEW_DRAFTER"].value
    assert "no such file or folder" in panel.lines["NEW_DRAFTER"].value

    panel.pickers["NEW_DRAFTER"].value = str(tiny_world.drafter_a)  # the same drafter twice: said plainly
    assert "⚠" in panel.lines["NEW_DRAFTER"].value and "compares it with itself" in panel.lines["NEW_DRAFTER"].value
    panel.button.click()
    assert answers and "INTERCHANGEABLE [demo]: " in answers[-1][0].data  # the headline names what it compared
    assert str(tiny_world.drafter_a) in answers[-1][0].data
    # the set-up's variables do not hold the pick yet: the cells below are refused, and the status says so
    assert "answered in" in panel.status.value and "refused until the set-up cell runs again" in panel.status.value
    assert ch.stale_picks() == [f"drafter B (new) {tiny_world.drafter_b_small} -> {tiny_world.drafter_a}"]
    with pytest.raises(ch.StalePickError, match=r"^picks: drafter B \(new\) .* since the set-up cell ran") as err:
        ch.refuse_stale()
    assert "\n" not in str(err.value) and err.value._render_traceback_() == [f"StalePickError: {err.value}"]
    # the set-up cell again (alone, or in Run All): the notebook's choices come back with the pick, nothing is refused
    assert ch.Choices("02-panel", slots).value("NEW_DRAFTER") == str(tiny_world.drafter_a)
    assert ch.stale_picks() == [] and ch.refuse_stale() is None
    panel.pickers["NEW_DRAFTER"].value = str(tiny_world.drafter_b_small)  # back to the default, pressed again
    assert panel.run() and ch.stale_picks() == [f"drafter B (new) {tiny_world.drafter_a} -> {tiny_world.drafter_b_small}"]
    ch.Choices("02-panel", slots)
    assert ch.stale_picks() == []


def test_while_a_pick_is_stale_only_the_parameters_and_set_up_cells_run():
    """The kernel's input transformer: every other cell becomes the one-line refusal; nothing stale, nothing changes."""
    slot = ch.Slot("DATA", "data", "data", None, "")
    choices = ch.Choices("guard", [slot])
    cell = ["x = OLD_TARGET\n", "print(x)\n"]
    assert ch._guard(cell) == cell
    choices.pick("DATA", __file__)  # a pick the set-up has not taken
    assert ch._guard(cell) == ["from eaglelab.workbook.choices import refuse_stale\n", "refuse_stale()\n"]
    for runs in (["SMOKE = False  # parameters\n", "K = 3\n"], ["choices = Choices('guard', [])\n"],
                 ["ChoicePanel(choices, answer)\n"], ["case = open_case('03', globals(), ProbeSettings)\n"],
                 ["case.panel(answer, button='Probe')\n"]):
        assert ch._guard(runs) == runs
    ch.Choices("guard", [slot])  # the set-up cell ran again with the pick
    assert ch._guard(cell) == cell


def test_a_failing_answer_is_one_line_in_the_panel(tiny_world):
    from eaglelab.errors import CheckpointMismatchError

    def broken(values):
        raise CheckpointMismatchError(values["OLD_DRAFTER"], "line one\nline two")

    slot = ch.Slot("OLD_DRAFTER", "drafter", "drafter", None, str(tiny_world.drafter_a))
    panel = ChoicePanel(ch.Choices("x", [slot]), broken)
    assert panel.run() is False
    assert "line one\\x0aline two" in panel.status.value and "Traceback" not in panel.status.value
    assert not panel.button.disabled  # the user can try again
    panel.pickers["OLD_DRAFTER"].value = str(tiny_world.drafter_b_small)  # another pick: the failure is not its answer
    assert "line one" not in panel.status.value and "out of date: the answer was for drafter " in panel.stale.value


def test_the_explorer_prints_its_numbers_and_resets():
    box = perf_explorer(82.0, 30.0, 2.0, [100, 150], k=3)
    tau, (reset, numbers) = box.children[0].children[2], box.children[1].children
    first = numbers.value
    expected = explorer_numbers(82.0, 30.0, 2.0, [100, 150])
    assert f"{expected.effective_tps:.1f} tok/s" in first and f"{expected.speedup:.2f}×" in first
    assert f"break-even τ {expected.break_even_tau:.2f}" in first
    assert "100 tok/s → τ 3.00," in first and "150 tok/s → τ 4.50 (beyond k + 1 = 4)" in first
    tau.value = 3.0
    assert "100.0 tok/s · 1.22×" in numbers.value
    reset.click()
    assert numbers.value == first and tau.value == 2.0


def test_timing_check_flags_noise_and_impossible_speedups():
    # prompts of different lengths: plain decoding's step differs, the verify's cost in steps does not
    quiet = timing_trust([0.010, 0.013, 0.009], [1.20, 1.22, 1.19], [1.2, 1.3, 1.25], 2.5, 1.25, 0.010, 0.012, 0.018)
    assert quiet["ok"] and quiet["note"] == "ok" and quiet["greedy_step_ms"][1] == pytest.approx(10.0)
    noisy = timing_trust([0.010, 0.030, 0.012], [1.2, 0.5, 1.9], [1.2, 0.5, 1.25], 2.5, 1.0, 0.017, 0.012, 0.018)
    assert not noisy["ok"] and "too noisy" in noisy["note"] and "a verify cost 0.50-1.90 plain steps" in noisy["note"]
    assert "10.00-30.00 ms per token" in noisy["note"]
    # a jittery ratio alone (a model of a few ms per token) is not called noise while plain decoding is steady
    jitter = timing_trust([0.010, 0.0105, 0.0098], [1.2, 2.7, 1.8], [1.0, 0.7, 0.8], 2.0, 0.8, 0.010, 0.018, 0.024)
    assert jitter["ok"]
    # the smoke run of the issue: 4.64x at τ 3.23 with a verify costing 1.4 plain steps
    impossible = timing_trust([0.010, 0.010], [1.4, 1.4], [4.6, 4.7], 3.23, 4.64, 0.010, 0.014, 0.016)
    assert not impossible["ok"] and "more than τ 3.23" in impossible["note"]
    assert impossible["speedup_bound"] == pytest.approx(3.23 / 1.4)


@given(steps=st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=12), ratios=st.lists(st.floats(0.1, 20.0), min_size=1,
       max_size=12), tau=st.floats(1.0, 9.0), speedup=st.floats(0.01, 50.0), verify=st.floats(1e-6, 1.0))
def test_timing_check_is_total_and_says_why(steps, ratios, tau, speedup, verify):
    t = timing_trust(steps, ratios, [speedup], tau, speedup, sorted(steps)[len(steps) // 2], verify, verify * 1.2)
    assert t["ok"] == (t["note"] == "ok") and "\n" not in t["note"]
    assert t["ok"] or ("noisy" in t["note"] or "more than" in t["note"] or "too few runs" in t["note"])
    assert math.isfinite(t["noise"]) and t["noise"] >= 0


def test_drafters_share_one_interleaved_baseline(tiny_world):
    from eaglelab.data.sets import measure_prompts
    from eaglelab.model.decoding import benchmark_drafters
    from eaglelab.model.drafter_files import load_drafter
    from eaglelab.model.targets import Target, load_target

    model, tok = load_target(tiny_world.target_a, device="cpu")
    a, b = load_drafter(tiny_world.drafter_a), load_drafter(tiny_world.drafter_b_small)
    target = Target.for_drafter(model, a.spec)
    prompts = measure_prompts(tok, 2, tiny_world)
    out = benchmark_drafters(target, {"a": a, "b": b}, prompts, 16, k=3, repeats=2, progress=False)
    assert out["a"].greedy_tokens_per_s == out["b"].greedy_tokens_per_s  # one baseline for every row
    for m in out.values():
        assert m.runs == 4 and m.matches_greedy and m.timing_ok == (m.timing_note == "ok")
        assert len(m.timing["greedy_step_ms"]) == 3 and len(m.timing["verify_steps"]) == 3
        assert m.timing["speedup_bound"] > 0
    frame = out.table()
    assert list(frame.index) == ["a", "b"] and frame.loc["a", "τ"] == out["a"].accept_len
    assert out.to_json()["a"]["speedup"] == out["a"].speedup


def test_loading_a_target_shows_no_transformers_bar(tiny_world, capfd, monkeypatch):
    from transformers.utils import logging as hf_logging

    from eaglelab.model.targets import load_target

    monkeypatch.setenv("EAGLELAB_PROGRESS", "1")
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)  # the suite's own silence, lifted here
    with warnings.catch_warnings():  # huggingface_hub read that variable at import and says so; transformers' bar is on
        warnings.simplefilter("ignore")
        hf_logging.enable_progress_bar()
    try:
        assert hf_logging.is_progress_bar_enabled()
        load_target(tiny_world.target_a, device="cpu")
        assert "Loading weights" not in capfd.readouterr().err
        assert hf_logging.is_progress_bar_enabled()  # the user's own setting is left as it was
    finally:
        hf_logging.disable_progress_bar()


def _speculation(note: str = "ok", tau: float = 2.0, tps: float = 100.0):
    from eaglelab.serving.speculation import Speculation

    return Speculation(3, 2, 2, 20, tau, [[20, 10], [20, 10]], tps, 80.0, True, 0.002, 0.012, 0.001, [0.8, 0.5, 0.2],
                       True, {"ok": note == "ok", "note": note, "noise": 0.04})


def test_a_shared_baselines_noise_is_said_once():
    from eaglelab.serving.speculation import Speculations

    noisy = "machine too noisy to measure: plain decoding took 1-3 ms per token"
    bound = "speedup 4.64x is more than τ 3.23 allows"
    measured = Speculations({"plugged in": _speculation(f"{noisy}; {bound}"), "warm start": _speculation(noisy),
                             "scratch": _speculation()})
    assert Speculations({"x": _speculation()}).timing_warning() == ""
    text = measured.timing_warning()
    assert text.count("machine too noisy") == 1 and f"plugged in: {bound}" in text
    both = Speculations({n: _speculation(noisy) for n in ("a", "b")})
    assert both.timing_warning() == f"; **these timings are not to be trusted**: {noisy}"
    assert text in measured.findings("[demo]")["measured"]


@settings(max_examples=30, deadline=None)
@given(tau=st.floats(1.0, 4.0), tps=st.floats(10, 500))
def test_a_measurements_findings_are_its_numbers(tau, tps):
    from eaglelab.serving.speculation import Speculations

    m = _speculation(tau=tau, tps=tps)
    said = m.findings(0.10)
    assert f"measured τ = {tau:.2f}, {tps:.1f} tok/s vs 80.0 greedy ({m.speedup:.2f}×" in said["measured"]
    assert f"predicts {m.predicted_tokens_per_s:.0f} tok/s" in said["model"]
    assert ("within 10%" in said["model"]) == (abs(m.prediction_error) <= 0.10)
    assert said["timing"] == "Timing: plain decoding varied 4% across 2 interleaved runs."
    whole = m.findings(0.10, "[demo]", "CPU")["closed_loop"]
    assert whole.startswith("**Closed loop [demo]** (CPU): ") and said["model"] in whole
    pair = Speculations({"A": m, "B": _speculation(tau=1.5)})
    assert f"τ {tau:.2f} (A), 1.50 (B); {m.speedup:.2f}× / " in pair.findings()["measured"]
    assert m.to_json()["prediction_error"] == m.prediction_error and "outputs" not in m.to_json()
