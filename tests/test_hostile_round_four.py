"""Issue #53, hostile round four: the new surfaces never hang, never forge, never answer against their own numbers.

One named test per fault of the issue (each failed before its fix), then the properties the issue asks for: any
config count answers within a second or is refused; any findings folder renders a plan whose every line came from
an escaped value (the ``plan`` fuzz category of :mod:`tests.fuzzing_plans`, run in ``tests/test_fuzz.py``, draws
the hostile folders; here, the rule itself on any text).
"""

from __future__ import annotations

import json
import re
import shutil
import time
import unicodedata

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

from eaglelab.checkpoints.files.config_types import MAX_LAYERS, check_config_types
from eaglelab.checkpoints.targets.footprint import language_model_parameters, moe_layer_count
from eaglelab.decisions import reconcile
from eaglelab.engines import load_client
from eaglelab.engines.load_recipes import LoadRecipeSettings, build_load_recipe
from eaglelab.engines.scripts import script_value
from eaglelab.engines.template_names import SPECFORGE_NAMES, SPECFORGE_TEMPLATES, chat_template_for
from eaglelab.errors import ConfigError, CostTableError, ParameterError
from eaglelab.jobs.load import LoadSettings, speculation_under_load
from eaglelab.markdown import md_bullets, md_line
from eaglelab.serving import cost_table
from eaglelab.serving.load import kimi_k25_on_pcie
from eaglelab.workbook.case import notebook_case
from tests import fuzzing as fz
from tests.test_dumps import dump_probe, world_states  # noqa: F401 (a fixture)
from tests.test_hostile_load import refused, run


def copy_target(src, dst, **config):
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**cfg, **config}))
    return dst


# --------------------------------------------------------------------------- 1. a hang from 1 KB


def test_1_a_config_claiming_2_40_layers_is_refused_at_once(tiny_world, tmp_path):
    """Before: the parameter count looped once per claimed layer (no answer after 60 s from probe and run)."""
    a = copy_target(tiny_world.target_a, tmp_path / "a", num_hidden_layers=2 ** 40)
    b = copy_target(tiny_world.target_a, tmp_path / "b", num_hidden_layers=2 ** 40)
    for argv in (["probe", "--old-target", str(a), "--new-target", str(b), "--old-drafter", str(tiny_world.drafter_a)],
                 ["run", "--only", "04", "-p", f"NEW_TARGET={a}", "-p", f"OLD_DRAFTER={tiny_world.drafter_a}",
                  "--out", str(tmp_path / "run")]):
        start = time.monotonic()
        err = refused(*argv)
        assert time.monotonic() - start < 30 and "num_hidden_layers" in err and "100,000" in err, err


@settings(max_examples=300, deadline=None, derandomize=True)
@given(layers=st.integers(1, 2 ** 60), experts=st.integers(1, 2 ** 60), freq=st.integers(1, 2 ** 60),
       step=st.integers(1, 2 ** 60), dense=st.integers(0, 2 ** 60),
       only=st.lists(st.integers(0, 2 ** 60), max_size=5))
def test_any_config_count_answers_within_a_second_or_is_refused(layers, experts, freq, step, dense, only):
    cfg = {"hidden_size": 64, "num_hidden_layers": layers, "vocab_size": 128, "num_attention_heads": 4,
           "n_routed_experts": experts, "num_experts_per_tok": 1, "moe_intermediate_size": 32, "moe_layer_freq": freq,
           "decoder_sparse_step": step, "first_k_dense_replace": dense, "mlp_only_layers": only}
    start = time.monotonic()
    try:
        check_config_types(cfg, "config.json")
    except ConfigError:
        return
    assert language_model_parameters(cfg) > 0
    assert time.monotonic() - start < 1.0


@settings(max_examples=400, deadline=None, derandomize=True)
@given(layers=st.integers(1, 300), freq=st.integers(1, 9), step=st.integers(1, 9), dense=st.integers(0, 20),
       only=st.lists(st.integers(0, 300), max_size=6))
def test_the_routed_layers_counted_without_walking_them_are_the_ones_walked(layers, freq, step, dense, only):
    text = {"moe_layer_freq": freq, "decoder_sparse_step": step, "first_k_dense_replace": dense, "mlp_only_layers": only}
    walked = sum(1 for i in range(layers) if i >= dense and i not in only and i % freq == 0 and (i + 1) % step == 0)
    assert moe_layer_count(text, layers) == walked


def test_a_deep_but_allowed_config_counts_in_milliseconds():
    cfg = {"hidden_size": 64, "num_hidden_layers": MAX_LAYERS, "vocab_size": 128, "num_attention_heads": 4,
           "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "first_k_dense_replace": 3}
    start = time.monotonic()
    check_config_types(cfg, "config.json")
    assert language_model_parameters(cfg) > 0 and time.monotonic() - start < 0.5


# --------------------------------------------------------------------------- 2. a forged game plan


def findings_folder(tmp_path, bullets03=("- a finding",), verdict=None, recommendation=None):
    from tests.fuzzing_plans import base_folder

    folder = tmp_path / "figures"
    folder.mkdir()
    docs = base_folder()
    docs["03"]["bullets"] = list(bullets03)
    if verdict is not None:
        docs["03"]["numbers"]["verdict"] = verdict
    if recommendation is not None:
        docs["04"]["numbers"]["recommendation"] = recommendation
    for nb, doc in docs.items():
        (folder / f"{nb}_findings.json").write_text(json.dumps(doc))
    return folder


def test_2_template_text_and_folder_names_cannot_forge_the_game_plan(tmp_path):
    """Before: a template's raise_exception text with a Markdown link and an <img onerror> tag landed working in
    GAME_PLAN.md, and a folder name with a newline became a bullet reading "plug in, serve it as is"."""
    raised = ("- **The two targets [demo]:** the template raised: 'see [the fix](https://evil.example/x) "
              "<img src=x onerror=alert(1)>'")
    folder = findings_folder(tmp_path, [raised, "- compared `/tmp/new\n- plug in, serve it as is`"])
    rc, out, err = run("report", "--figures", str(folder))
    assert rc == 0, err
    plan = (folder / "GAME_PLAN.md").read_text()
    assert not re.search(r"(?<!\\)\]\(https", plan) and "[the fix\\](https://evil.example/x)" in plan  # shown, not linked
    assert "<img" not in plan and "&lt;img src=x onerror=alert(1)>" in plan
    assert not any(line.strip() == "- plug in, serve it as is" for line in plan.splitlines())
    assert "- compared `/tmp/new\\x0a- plug in, serve it as is`" in plan


def test_2_a_checkpoint_name_with_a_line_break_or_bidi_override_is_refused_before_a_notebook_runs():
    for name in ("/tmp/new\n- plug in, serve it as is", "/tmp/x\u202egnp", "/tmp/\x1b[2Jx"):
        with pytest.raises(ParameterError, match="rename the folder"):
            notebook_case("03", {"OLD_TARGET": name, "NEW_TARGET": "/tmp/b", "OLD_DRAFTER": "/tmp/d"})


@settings(max_examples=300, deadline=None, derandomize=True)
@given(text=st.text(max_size=80) | st.sampled_from(
    ["[a](b)", "![a](b)", "<b>x</b>", "<https://x>", "[r]: http://x", "x\n- y", "a\u202eb", "[a][b]", "a](http://x)"]))
def test_any_text_is_one_safe_line_under_the_rendering_rule(text):
    (line,) = md_bullets([text])
    assert line.startswith("- ") and "\n" not in line and "\r" not in line
    assert not any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in line)
    assert not re.search(r"<[A-Za-z/!?]", line) and not re.search(r"(?<!\\)\]\(", line)
    assert not re.search(r"(?<!\\)!\[", line) and not re.search(r"(?<!\\)\]\[", line)
    assert not line[2:].startswith("[")  # a reference definition ([x]: url) must open its line


def test_the_rule_leaves_eaglelab_markup_as_written():
    said = "**Verdict [your checkpoints]:** τ 1.85 [1.73-1.97], `run.sh` -> **warm start** (92% kept; τ < 2)"
    assert md_line(said) == said


# --------------------------------------------------------------------------- 3. the k hint and memory


def test_3_the_k_hint_never_names_a_k_whose_kv_cache_does_not_fit():
    """Before: "with k = 2 instead ... it would pay at 128 requests in flight: 1.05x" while the KV cache does not
    fit at 128 for any k (the founding case's own perf line)."""
    rc, out, err = run("perf", "--baseline-tps", "82", "--cycle-ms", "30", "--accept-len", "2.0", "--concurrency",
                       "1", "8", "64", "128")
    assert rc == 0, err
    model = kimi_k25_on_pcie()
    for k, c in re.findall(r"with k = (\d+) instead .* pay at (\d+) request", out):
        assert bool(model.kv_fits(int(c), int(k))), out
    assert "at 128 requests in flight" not in out
    assert "yet by the table it pays at 64" in out  # the crossover line says what the table shows


def test_3_no_hint_names_the_k_already_served():
    """Before: with weights that do not fit at all, "k = 3 instead" when k was 3."""
    s = LoadSettings(baseline_tps=82, cycle_ms=30, accept_len=2.0, concurrency=(1, 8, 64), gpu="l4", gpus=1, k=3)
    report = speculation_under_load(s)
    assert not any(line.startswith("with k = 3 instead") for line in report.lines())
    assert all(not r.kv_fits for r in report.rows) and report.k_hint() == []


# --------------------------------------------------------------------------- 4. the recipes' chat template

SMOLLM2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
           "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
           "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
           "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
LLAMA3 = ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>"
          "\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
ALPACA = "{% for m in messages %}### {{ m['role'] }}:\n{{ m['content'] }}\n{% endfor %}### Response:\n"


def templated(tiny_world, tmp_path, template):
    target = copy_target(tiny_world.target_b, tmp_path / "target")
    tok = json.loads((target / "tokenizer_config.json").read_text())
    (target / "tokenizer_config.json").write_text(json.dumps({**tok, "chat_template": template}))
    return target, json.loads((target / "config.json").read_text())


def test_4_a_chatml_llama_target_gets_specforges_chatml_template_not_llama3(tiny_world, tmp_path):
    """Before: every model_type llama target got llama3, a ChatML one (SmolLM2, the demo world's family) too."""
    target, cfg = templated(tiny_world, tmp_path, SMOLLM2)
    assert cfg["model_type"] == "llama"
    name, source = chat_template_for(None, str(target), cfg)
    assert name == "qwen" and "<|im_start|>assistant" in source


def test_4_a_llama3_template_gets_llama3_and_an_unknown_one_is_refused_by_name(tiny_world, tmp_path):
    target, cfg = templated(tiny_world, tmp_path / "l3", LLAMA3)
    assert chat_template_for(None, str(target), cfg)[0] == "llama3"
    target, cfg = templated(tiny_world, tmp_path / "alpaca", ALPACA)
    with pytest.raises(ParameterError, match="--chat-template.*no SpecForge template"):
        chat_template_for(None, str(target), cfg)
    assert chat_template_for("my-template", str(target), cfg) == ("my-template", "given")


def test_4_the_table_of_specforge_templates_is_specforges_own_registry():
    from specforge.data.template import TEMPLATE_REGISTRY

    assert set(SPECFORGE_NAMES) == set(TEMPLATE_REGISTRY.get_all_template_names())
    for t in SPECFORGE_TEMPLATES:
        theirs = TEMPLATE_REGISTRY.get(t.name)
        assert (t.user, t.assistant, t.end, t.thinking) == (theirs.user_header, theirs.assistant_header,
                                                           theirs.end_of_turn_token, theirs.enable_thinking), t.name


# --------------------------------------------------------------------------- 5. cost-table rows at context 0


def test_5_rows_measured_at_context_0_are_fitted_at_context_0(tmp_path):
    """Before: a row's context 0 was read as "not given" and fitted at --context (6.0 ms instead of 19.1 ms per
    plain step at 8 requests for the same measurements)."""
    truth = kimi_k25_on_pcie(context=0)
    rows = []
    for c in (1, 8, 64):
        rows.append(cost_table.Measurement(c, 0, 1, 1, 1.0, 0, c / float(truth.decode_s(c))))
        rows.append(cost_table.Measurement(c, 3, 4, 1, 2.0, 0, 2.0 * c / float(truth.cycle_s(c, 3))))
    path = cost_table.write_cost_table(tmp_path / "costs.csv", rows)
    report = speculation_under_load(LoadSettings(costs=(str(path),), accept_len=2.0, context=8192))
    assert all(r["context"] == 0 for r in report.residuals)
    assert max(abs(r["error"]) for r in report.residuals) < 0.05, report.residuals


# --------------------------------------------------------------------------- 6. impossible trees


def test_6_a_tree_that_verifies_fewer_than_k_plus_1_tokens_is_refused_everywhere(tmp_path):
    """Before: perf answered "pays up to 64" for --k 3 --topk 4 --draft-tokens 2, which recipe --job load refused."""
    err = refused("perf", "--k", "3", "--topk", "4", "--draft-tokens", "2", "--accept-len", "4", "--baseline-tps", "82",
                  "--cycle-ms", "30", "--concurrency", "1", "8", "64")
    assert "--draft-tokens" in err and "from k + 1 = 4 to topk * k + 1 = 13" in err
    with pytest.raises(ParameterError, match="from k \\+ 1 = 4"):
        build_load_recipe(LoadRecipeSettings("sglang", "t", "d", k=3, topk=4, draft_tokens=2))
    table = tmp_path / "costs.csv"
    table.write_text(",".join(cost_table.COLUMNS) + "\n1,0,,,,1024,80\n1,3,2,4,2,1024,100\n")
    with pytest.raises(CostTableError, match="from k \\+ 1 = 4"):
        cost_table.read_cost_table(table)


# --------------------------------------------------------------------------- 7. a verdict from a blank head


@pytest.mark.parametrize("head", ["ones", "stray"])
def test_7_a_placeholder_head_gives_no_verdict(world_states, tmp_path, head):  # noqa: F811
    """Before: only an all-zero lm_head was caught; ones, or zeros with one element 1e-3, gave "from scratch"."""
    w = world_states
    world = w["world"]
    blank = copy_target(world.target_b, tmp_path / "blank-b")
    tensors = load_file(str(blank / "model.safetensors"))
    lm = tensors["lm_head.weight"]
    if head == "ones":
        tensors["lm_head.weight"] = torch.ones_like(lm)
    else:
        tensors["lm_head.weight"] = torch.zeros_like(lm)
        tensors["lm_head.weight"][5, 3] = 1e-3
    save_file(tensors, str(blank / "model.safetensors"))
    from eaglelab.jobs.probe import ProbeSettings, probe_checkpoints

    s = ProbeSettings(str(world.target_a), str(blank), str(world.drafter_a), old_states=str(w["root"] / "sf-a"),
                      new_states=str(w["root"] / "sf-b"), batch_size=3, sequences=1000)
    decision = probe_checkpoints(s, progress=False).result.decision
    assert decision.action == "no verdict" and "placeholder head" in decision.reasons[0], decision.reasons[0]
    assert ("same greedy token" if head == "ones" else "spreads its probability evenly") in decision.reasons[0]


def test_7_the_real_heads_keep_their_verdict(world_states):  # noqa: F811
    w = world_states
    report = dump_probe(w, w["root"] / "sf-a", w["root"] / "sf-b")
    assert report.result.decision.action != "no verdict"


# --------------------------------------------------------------------------- 8. report and a one-element band


def test_8_a_verdict_band_of_one_option_is_one_line_not_a_traceback(tmp_path):
    """Before: an IndexError in decisions.reconcile."""
    folder = findings_folder(tmp_path, verdict={"level": "plug in", "reasons": [], "kept": 0.9, "between": ["plug in"]})
    err = refused("report", "--figures", str(folder))
    assert "03_findings.json" in err and "'between'" in err
    assert "agree" in reconcile({"level": "plug in", "between": ["plug in"]}, {"action": "plug in"})


@pytest.mark.parametrize("verdict, recommendation", [
    ({"level": ["plug in"], "between": []}, {"action": "plug in"}),
    ({"level": "plug in", "between": [["x"], "y"]}, {"action": "plug in"}),
    ({"level": "plug in", "between": []}, {"action": {"a": 1}}),
    ({"level": "plug in", "between": [], "kept": "0.9"}, {"action": "plug in"}),
])
def test_8_every_value_reconcile_reads_is_checked_where_it_is_read(tmp_path, verdict, recommendation):
    folder = findings_folder(tmp_path, verdict={"reasons": [], **verdict}, recommendation={"taus": {}, "text": "t",
                                                                                            **recommendation})
    assert "03_findings.json" in refused("report", "--figures", str(folder))


# --------------------------------------------------------------------------- 9. invisible characters in run.sh


@pytest.mark.parametrize("char", ["\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u200e", "\u200b", "\x1b", "\u2028"])
def test_9_format_and_control_characters_never_reach_a_script(tiny_world, tmp_path, char):
    """Before: bidi overrides in a target path were written raw into run.sh 22 times."""
    target = f"/models/x{char}y"
    with pytest.raises(ParameterError, match="refused in a generated script"):
        script_value("--new-target", target)
    err = refused("recipe", "--job", "load", "--engine", "vllm", "--new-target", target, "--old-drafter", "org/d",
                  "--out", str(tmp_path / "load"))
    assert char not in err and "position 9" in err
    local = copy_target(tiny_world.target_b, tmp_path / f"x{char}y")  # a folder that exists: the warm start reads it
    err = refused("recipe", "--engine", "specforge", "--new-target", str(local), "--old-drafter", str(tiny_world.drafter_a),
                  "--out", str(tmp_path / "warm"))
    assert char not in err and "refused in a generated script" in err


def test_9_the_wrote_line_shows_a_typed_out_escaped(tiny_world, tmp_path):
    out = tmp_path / "out\x1b[2J\rx"
    rc, stdout, err = run("recipe", "--job", "load", "--engine", "vllm", "--new-target", "org/model", "--old-drafter",
                          "org/drafter", "--out", str(out))
    assert rc == 0, err
    assert "\x1b" not in stdout and "\r" not in stdout and "\\x1b[2J\\x0dx" in stdout
    assert (out / "run.sh").is_file()


# --------------------------------------------------------------------------- 10. unbounded concurrency


def test_10_a_concurrency_the_cost_table_would_refuse_is_never_written(tmp_path):
    """Before: --concurrency 1 100000000000 was written; the client built a connection per request (MemoryError)."""
    err = refused("recipe", "--job", "load", "--engine", "vllm", "--new-target", "t", "--old-drafter", "d",
                  "--concurrency", "1", "100000000000", "--out", str(tmp_path / "out"))
    assert "--concurrency" in err and "65536" in err
    with pytest.raises(ParameterError, match="65,536"):
        build_load_recipe(LoadRecipeSettings("vllm", "t", "d", concurrency=(1, 10 ** 11)))
    assert load_client.MAX_CONCURRENCY == cost_table.MAX_CONCURRENCY and load_client.MAX_WHOLE == cost_table.MAX_WHOLE
    with pytest.raises(SystemExit):
        load_client.parse_args(["measure", "--url", "http://x", "--out", "c.csv", "--engine", "vllm", "--concurrency",
                                "1,100000000000", "--k", "0", "--accept-len", "1"])
    with pytest.raises(ParameterError, match="--concurrency"):
        LoadSettings(concurrency=(1, 10 ** 11))


# --------------------------------------------------------------------------- 11. old spellings


def test_11_old_spellings_are_gone_and_the_one_name_takes_its_full_arity(tmp_path):
    """Before: -p GOAL_TPS=[60, 100] -p PLAN_GOAL_TPS=100 was refused as a conflict; perf --target-tps 150 ended in a
    TypeError traceback and --target-tps 150 200 was refused. No release carried the old names (#57): they are
    refused like any unknown name, and the one name takes its whole arity."""
    rc, out, err = run("run", "--only", "01", "--prepare-only", "--out", str(tmp_path / "run"), "-p", "PLAN_GOAL_TPS=100")
    assert rc == 2 and "PLAN_GOAL_TPS" in err and len(err.strip().splitlines()) == 1, err
    rc, out, err = run("run", "--only", "01", "--prepare-only", "--out", str(tmp_path / "run"), "-p", "GOAL_TPS=100")
    assert rc == 0, err
    for goals in (["150"], ["150", "200"]):
        rc, out, err = run("perf", "--baseline-tps", "82", "--cycle-ms", "30", "--accept-len", "2", "--goal-tps", *goals,
                           "--json")
        assert rc == 0 and sorted(json.loads(out)["required_accept_len"]) == goals, err


# --------------------------------------------------------------------------- 12. absurd rates


@pytest.mark.parametrize("argv, flag", [
    (["--link-gbps", "1e-300", "--concurrency", "1", "8"], "--link-gbps"),
    (["--link-gbps", "1e300", "--concurrency", "1", "8"], "--link-gbps"),
    (["--baseline-tps", "1e308", "--cycle-ms", "30", "--accept-len", "2"], "--baseline-tps"),
    (["--baseline-tps", "1e-300", "--cycle-ms", "30", "--accept-len", "2"], "--baseline-tps"),
    (["--baseline-tps", "82", "--cycle-ms", "1e-9", "--accept-len", "2"], "--cycle-ms"),
    (["--baseline-tps", "82", "--cycle-ms", "30", "--accept-len", "2", "--goal-tps", "1e300"], "--goal-tps"),
])
def test_12_a_rate_no_machine_has_is_refused_with_the_likely_mixup(argv, flag):
    """Before: --link-gbps 1e-300 printed a 303-digit step time."""
    err = refused("perf", *argv)
    assert flag in err and "(" in err.split(flag)[-1]


def test_12_the_same_bounds_hold_for_notebooks_and_the_api():
    with pytest.raises(ParameterError, match="--link-gbps.*nccl"):
        LoadSettings(link_gbps=1e-300)
    with pytest.raises(ParameterError, match="--baseline-tps.*per request"):
        LoadSettings(baseline_tps=1e308, cycle_ms=30, accept_len=2)


def test_12_a_cost_table_at_1e308_tok_s_is_refused_naming_its_line(tmp_path):
    """Before: "calibrated", with a 305-digit break-even τ."""
    table = tmp_path / "costs.csv"
    table.write_text(",".join(cost_table.COLUMNS) + "\n1,0,,,,1024,1e308\n1,3,,,2,1024,100\n")
    with pytest.raises(CostTableError, match=r"costs.csv:2: output_tok_s 1e\+308 .* per second summed"):
        cost_table.read_cost_table(table)


def test_12_a_log_line_reporting_a_rate_no_server_has_is_malformed_not_averaged(tmp_path):
    """Before: a gen throughput of 1e300 was a 300-digit tok/s cell and a median of 5e+299."""
    log = tmp_path / "server.log"
    log.write_text("\n".join(fz.SGLANG_OLD.format(req=r, accept="2.1", tps=t) for r, t in [(1, "1e300"), (8, "500")] * 3))
    rc, out, err = run("perf", "--log", str(log))
    assert rc == 0, err
    assert "3 malformed" in out and "median throughput 500.0" in out and "e+299" not in out


# --------------------------------------------------------------------------- the fuzz harness holds these too


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_cost_tables_answered_are_physically_sized(tmp_path_factory, data):
    from tests.fuzzing_plans import cost_cases

    case = data.draw(cost_cases(tmp_path_factory.mktemp("costs")))
    outcome = fz.check(case)
    assert outcome.acceptable, fz.describe(case, outcome)
