"""The engine layer: the JSON contract with vLLM's worker, and vLLM itself on the tiny world.

The contract tests read a result recorded from a real vLLM 0.32 (CPU build) run of the tiny world
(``data/fixtures/vllm/``) and run the real worker script in an environment without vLLM, for its
error path. The end-to-end test runs vLLM from ``.venv-vllm`` (``make engine``; CI creates it) and
holds its τ to the workbook's own decoder on the same prompt token ids within 2%; it skips, with the
reason, only where that environment could not be installed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from eaglelab.engines.vllm import (
    EngineMeasurement,
    compare_with_workbook,
    engine_status,
    measure_in_engine,
    run_from_result,
    run_worker,
    run_workers,
)
from eaglelab.errors import EngineError

RECORDED = Path(__file__).resolve().parent.parent / "data" / "fixtures" / "vllm"


def recorded(name: str) -> dict:
    return json.loads((RECORDED / name).read_text())


def test_the_recorded_result_reads_into_an_engine_run():
    with_drafter = run_from_result(recorded("with_drafter.json"), "one")
    alone = run_from_result(recorded("target_alone.json"), "one")
    spec = recorded("with_drafter.json")["spec"]
    assert with_drafter.version.startswith("0.") and with_drafter.k == spec["k"] if "k" in spec else True
    # τ is 1 + accepted / drafts, and both per-position rates come from the same counters
    assert with_drafter.tau == pytest.approx(1 + with_drafter.accepted / with_drafter.drafts)
    per_pos = spec["accepted_per_pos"]
    assert with_drafter.position_rate == pytest.approx([c / with_drafter.drafts for c in per_pos])
    assert with_drafter.position_rate_conditional[1:] == pytest.approx([b / a for a, b in zip(per_pos, per_pos[1:])])
    assert sum(with_drafter.position_rate) == pytest.approx(with_drafter.tau - 1)
    assert alone.tau is None and alone.k == 0
    m = EngineMeasurement(with_drafter, alone)
    assert m.matches_target and m.speedup == pytest.approx(with_drafter.tokens_per_s / alone.tokens_per_s)


def test_the_engine_log_lines_go_through_the_log_parser():
    run = run_from_result(recorded("with_drafter.json"), "one")
    assert run.log_records, "the recorded run logged SpecDecoding metrics lines"
    for record in run.log_records:
        assert record["source"] == "vllm" and record["accept_len"] >= 1
        assert all(0 <= r <= 1 for r in record["per_position"])


def test_comparison_with_the_workbook_names_both_rates():
    run = run_from_result(recorded("with_drafter.json"), "one")
    alone = run_from_result(recorded("target_alone.json"), "one")
    from eaglelab.serving.speculation import Speculation

    workbook = Speculation(3, 1, 1, 10, run.tau * 1.01, [[10, 5]], 100.0, 80.0, True, 0.001, 0.01, 0.0,
                           run.position_rate_conditional, True)
    row = compare_with_workbook(workbook, EngineMeasurement(run, alone))
    assert row["tau_difference"] == pytest.approx(1 / 1.01 - 1)
    assert row["position_unconditional_engine"] == run.position_rate
    assert row["position_conditional_engine"] == row["position_conditional_workbook"]


@pytest.mark.parametrize("broken", [{"outputs": "x"}, {"vllm_version": None, "outputs": [[1]]}, {}])
def test_a_result_outside_the_contract_is_one_line(broken):
    with pytest.raises(EngineError):
        run_from_result({**recorded("with_drafter.json"), **broken} if broken else {}, "one")


@pytest.mark.engine
def test_the_worker_reports_a_failure_as_json(tmp_path, monkeypatch):
    """The real worker, run by an interpreter without vLLM: a JSON error and exit 2, one line here."""
    monkeypatch.setenv("EAGLELAB_VLLM_PYTHON", sys.executable)
    import eaglelab.engines.vllm as ev

    monkeypatch.setattr(ev, "_VERSION", "print('test')")  # this interpreter stands in as the engine's
    (tmp_path / "target").mkdir()
    with pytest.raises(EngineError) as err:
        run_worker({"target": str(tmp_path / "target"), "drafter": None, "k": 0, "prompts": [[1, 2]],
                    "max_new_tokens": 4, "batch": "one", "dtype": "float32", "max_model_len": 64}, timeout_s=120)
    assert "vllm" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(EngineError, match="target must be an absolute path"):
        run_worker({"target": "relative", "drafter": None, "k": 0, "prompts": [[1]], "max_new_tokens": 1,
                    "max_model_len": 8}, timeout_s=120)


@pytest.mark.engine
def test_a_list_of_requests_is_checked_whole_before_any_engine_starts(tmp_path, monkeypatch):
    """The real worker, run by an interpreter without vLLM: a bad request anywhere in a list is named by its place
    before the first engine would be built, and a list is one process whatever its length (capped)."""
    monkeypatch.setenv("EAGLELAB_VLLM_PYTHON", sys.executable)
    import eaglelab.engines.vllm as ev

    monkeypatch.setattr(ev, "_VERSION", "print('test')")  # this interpreter stands in as the engine's
    (tmp_path / "target").mkdir()
    good = {"target": str(tmp_path / "target"), "drafter": None, "k": 0, "prompts": [[1, 2]], "max_new_tokens": 4,
            "max_model_len": 64}
    with pytest.raises(EngineError, match=r"request 3 of 3: max_new_tokens must be >= 1") as err:
        run_workers([good, good, {**good, "max_new_tokens": 0}], timeout_s=120)
    assert "\n" not in str(err.value)
    with pytest.raises(EngineError, match="share one log: give log_file in the first only"):
        run_workers([good, {**good, "log_file": str(tmp_path / "other.log")}], timeout_s=120)
    with pytest.raises(EngineError, match=f"1 to {ev.MAX_REQUESTS} requests"):
        run_workers([good] * (ev.MAX_REQUESTS + 1), timeout_s=120)
    with pytest.raises(EngineError, match="1 to"):
        run_workers([], timeout_s=120)


@pytest.mark.engine
def test_an_engine_eaglelab_does_not_drive_is_refused(tiny_world):
    with pytest.raises(EngineError, match="SGLang needs CUDA GPUs"):
        measure_in_engine(tiny_world.target_a, tiny_world.drafter_a, [[1, 2, 3]], 4, engine="sglang")


@pytest.mark.engine
def test_vllm_measures_what_the_workbook_measures(tiny_world):
    """vLLM on the tiny world: τ within 2% of the workbook's decoder, outputs equal the target alone and greedy."""
    ok, why = engine_status()
    if not ok:
        pytest.skip(f"vLLM environment not installed here: {why}")
    from eaglelab.data.sets import measure_prompts
    from eaglelab.model.drafter_files import load_drafter
    from eaglelab.model.targets import load_target
    from eaglelab.probe.plugin import measure_on_target

    model, tok = load_target(tiny_world.target_a, device="cpu")
    prompts = measure_prompts(tok, 5, tiny_world)
    eos = [tok.eos_token_id]
    engine = measure_in_engine(tiny_world.target_a, tiny_world.drafter_a, prompts, 48, k=3, stop_token_ids=eos)
    workbook = measure_on_target(model, load_drafter(tiny_world.drafter_a), prompts, 48, k=3)
    row = compare_with_workbook(workbook, engine)
    assert engine.matches_target and workbook.matches_greedy
    assert abs(row["tau_difference"]) <= 0.02, row
    assert engine.with_drafter.load_warnings == []  # the export loads with no key or shape warning


def test_an_export_vllm_cannot_serve_is_refused(tmp_path):
    """vLLM keeps sorted distinct aux layers: repeated or unsorted ids are refused at export, in one line."""
    from eaglelab.checkpoints.drafters.variants import to_speculators_config
    from eaglelab.errors import UnsupportedDrafterError

    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64, "intermediate_size": 128,
           "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 256, "draft_vocab_size": 64,
           "num_hidden_layers": 1, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 1, 0]}}
    with pytest.raises(UnsupportedDrafterError, match="not distinct and ascending"):
        to_speculators_config(cfg, {"num_hidden_layers": 4, "hidden_size": 64, "vocab_size": 256}, "target")
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [0, 1, 2]
    assert to_speculators_config(cfg, {"num_hidden_layers": 4}, "target")["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]


@pytest.mark.engine
def test_the_engine_command_prints_both_rates(tiny_world, capsys):
    """`eaglelab engine measure --compare` end to end, with positions no step reached printed as "-"."""
    ok, why = engine_status()
    if not ok:
        pytest.skip(f"vLLM environment not installed here: {why}")
    from eaglelab.cli import main

    assert main(["engine", "measure", "--target", str(tiny_world.target_b), "--drafter", str(tiny_world.drafter_a),
                 "--k", "5", "--prompts", "2", "--tokens", "16", "--compare"]) == 0
    out = capsys.readouterr().out
    assert "vLLM's (drafts 1..i all accepted)" in out and "conditional (draft i given 1..i-1)" in out
    assert "outputs equal to the target alone: True" in out
    assert "0.0% in vLLM)" in out  # the same τ as the workbook's decoder (printed +0.0% or -0.0%)


def test_the_findings_line_says_what_ran():
    from eaglelab.engines.vllm import engine_findings

    row = {"tau_engine": 1.5, "tau_workbook": 1.5, "tau_difference": 0.0, "engine_matches_target": True,
           "engine": "vllm 0.32.0"}
    assert engine_findings({"on A": row}, "") == ("on A: τ 1.500 in vLLM vs 1.500 in the workbook (+0.0%), outputs equal "
                                                  "to the target alone: True (vllm 0.32.0).")
    assert "τ - in vLLM" in engine_findings({"on B": {**row, "tau_engine": None, "tau_difference": None}}, "")
    assert engine_findings({}, "no vLLM environment") == "not run (no vLLM environment)."
