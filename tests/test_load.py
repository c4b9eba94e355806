"""Issue #29: does speculation pay at your load? The cost model's limits, its calibration, logs by concurrency.

The model's physics as property tests (a dense target at one request is memory-bound: a verify costs
what a decode step costs; at a large batch it is compute-bound: the verify costs k + 1 steps), the
seed's numbers unchanged at its own point, calibration recovering a known machine, logs of several
concurrencies (real SGLang and vLLM line formats) grouped and their speedup against a plain log, bad
values in one line; and, where vLLM's CPU build is installed, the engine batched at several
concurrencies beside the model calibrated on this machine.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from dataclasses import asdict, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglelab.cli import main
from eaglelab.errors import ParameterError
from eaglelab.serving import load as ld
from eaglelab.serving import load_fit as lf
from eaglelab.serving import target_shape as ts
from eaglelab.serving.logs import log_by_concurrency, parse_log, parse_log_text, parse_plain_log


def cli_json(*args: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(args)) == 0
    return json.loads(out.getvalue())


def dense(params: float, bandwidth: float, flops: float, kv: float = 0.0, **machine) -> ld.LoadModel:
    shape = ts.TargetShape(dense_bytes=2 * params, active_params=params, kv_bytes_per_token=kv)
    return ld.LoadModel(shape, ld.Machine("test", bandwidth, flops, **machine), context=1)


# --------------------------------------------------------------------------- the model's limits


@settings(max_examples=200, deadline=None, derandomize=True)
@given(params=st.floats(1e8, 1e12), k=st.integers(1, 8), bw=st.floats(1e11, 1e13), flops=st.floats(1e13, 1e16))
def test_every_verify_token_costs_time_from_the_first_request_on(params, k, bw, flops):
    """Measured engines add a step's compute to its reads (#40): a verify of k + 1 tokens costs more than a decode
    step even at one request, by exactly the extra tokens' compute."""
    model = dense(params, bw, flops)
    extra = float(model.verify_s(1, k) - model.decode_s(1))
    assert extra == pytest.approx(k * 2 * params / flops, rel=1e-9) and extra > 0


@settings(max_examples=200, deadline=None, derandomize=True)
@given(params=st.floats(1e8, 1e12), k=st.integers(1, 8), flops=st.floats(1e12, 1e16))
def test_a_large_batch_is_compute_bound_a_verify_costs_k_plus_one_steps(params, k, flops):
    model = dense(params, bandwidth=flops * 1e3, flops=flops)  # bytes nearly free: FLOPs decide
    ratio = float(model.verify_s(4096, k) / model.decode_s(4096))
    assert ratio == pytest.approx(k + 1, rel=1e-6)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(size=st.sampled_from([(2048, 16, 8192), (4096, 32, 14336), (5120, 40, 13824), (8192, 80, 28672)]),
       k=st.integers(1, 7), tau=st.floats(1.0, 8.0), context=st.integers(0, 1024),
       gpu=st.sampled_from(["h100-sxm", "h200", "a100-80g", "l40s", "rtx-pro-6000", "mi300x", "b200"]))
def test_a_dense_targets_speedup_never_rises_with_the_batch_at_a_fixed_tau(size, k, tau, context, gpu):
    """#40's property: once every verify token costs time, a dense target's speedup at fixed τ does not rise with the
    batch (over the concurrencies whose KV cache fits: beyond, nothing is served at that load), at contexts where the
    tokens' compute, not the KV cache, grows the step. At long contexts the KV read, alike in the plain step and the
    verify, dilutes the drafter's fixed cost and the speedup can rise with the batch (MagicDec's regime); 0.1% allowed."""
    hidden, layers, inter = size
    shape = ts.shape_from_config({"hidden_size": hidden, "num_hidden_layers": layers, "vocab_size": 128256,
                                  "num_attention_heads": hidden // 128, "num_key_value_heads": 8,
                                  "intermediate_size": inter, "torch_dtype": "bfloat16"})
    model = ld.LoadModel(shape, ld.machine(gpu, 8 if layers == 80 else 1), context=context)
    tau = min(tau, k + 1.0)
    grid = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if bool(model.kv_fits(b, k))]
    speedups = [float(model.speedup(b, k, tau)) for b in grid]
    assert all(b <= a * (1 + 1e-3) for a, b in zip(speedups, speedups[1:])), list(zip(grid, speedups))
    assert speedups[-1] <= speedups[0] * (1 + 1e-3)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(k=st.integers(1, 6), tau=st.floats(1.0, 4.0))
def test_the_verify_cost_in_steps_grows_with_concurrency_and_speedup_falls(k, tau):
    model = ld.kimi_k25_on_pcie(graphs=ld.STEP_KINDS)
    steps = [float(model.verify_s(b, k) / model.decode_s(b)) for b in (1, 4, 16, 64, 256, 1024)]
    assert all(1.0 <= s <= k + 1 + 1e-9 for s in steps)
    assert steps[-1] >= steps[0]
    assert float(model.break_even_tau(1, k)) == pytest.approx(float(model.cycle_s(1, k) / model.decode_s(1)))


def test_distinct_experts_grow_with_tokens_up_to_all_of_them():
    shape = ld.kimi_k25_on_pcie().target
    few, many = float(shape.weight_bytes(1)), float(shape.weight_bytes(10_000))
    assert few < many <= shape.dense_bytes + shape.moe_layers * shape.experts_total * shape.expert_bytes * (1 + 1e-9)


# --------------------------------------------------------------------------- calibration


def test_the_seeds_numbers_are_unchanged_at_its_own_point():
    out = cli_json("perf", "--baseline-tps", "82", "--cycle-ms", "30", "--accept-len", "2.0", "--concurrency", "1",
                   "8", "64", "128", "--json")
    first = out["by_concurrency"][0]
    assert first["concurrency"] == 1
    assert first["speedup"] == pytest.approx(out["speedup"], rel=1e-9) == pytest.approx(2.0 / 30 * 1e3 / 82)
    assert first["break_even_tau"] == pytest.approx(out["break_even_tau"]) == pytest.approx(2.46)
    assert [r["concurrency"] for r in out["by_concurrency"]] == [1, 8, 64, 128]
    assert {"concurrency", "break_even_tau", "speedup"} <= set(out["by_concurrency"][-1])


def test_calibration_recovers_a_known_machine_from_several_points():
    shape = ts.shape_from_config({"hidden_size": 2048, "num_hidden_layers": 24, "vocab_size": 32000,
                                  "num_attention_heads": 16, "intermediate_size": 5632, "torch_dtype": "bfloat16"})
    start = ld.LoadModel(shape, ld.machine("h100-sxm", 1), context=1024)
    truth = replace(start, scales=ld.Scales(overhead=3.0, memory=1.3, compute=2.0, draft=2.0, cycle=0.5))
    points = [lf.Point(b, decode_s=float(truth.decode_s(b)), cycle_s=float(truth.cycle_s(b, 3)), k=3)
              for b in (1, 8, 64, 512)]
    fitted = lf.calibrate(start, points)
    for b in (1, 4, 16, 128, 1024):  # held in and held out alike
        assert float(fitted.speedup(b, 3, 2.5)) == pytest.approx(float(truth.speedup(b, 3, 2.5)), rel=0.05), b


@settings(max_examples=60, deadline=None, derandomize=True)
@given(memory=st.floats(0.3, 3.0), compute=st.floats(0.3, 3.0), overhead=st.floats(0.1, 10.0), draft=st.floats(0.2, 5.0),
       cycle=st.floats(0.0, 5.0), high=st.sampled_from([4, 16, 64]))
def test_a_cpu_measured_at_two_concurrencies_is_reproduced_at_both(memory, compute, overhead, draft, cycle, high):
    shape = ts.shape_from_config({"hidden_size": 576, "num_hidden_layers": 30, "vocab_size": 49152,
                                  "num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536,
                                  "torch_dtype": "float32"})
    start = ld.LoadModel(shape, ld.CPU, context=64)
    truth = replace(start, scales=ld.Scales(overhead=overhead, memory=memory, compute=compute, draft=draft, cycle=cycle))
    points = [lf.Point(b, decode_s=float(truth.decode_s(b)), cycle_s=float(truth.cycle_s(b, 3)), k=3) for b in (1, high)]
    fitted = lf.calibrate(start, points)
    for p in points:
        assert float(fitted.decode_s(p.concurrency)) == pytest.approx(p.decode_s, rel=0.02)
        assert float(fitted.cycle_s(p.concurrency, 3)) == pytest.approx(p.cycle_s, rel=0.02)
    for b in (1, 2, 4, 8, 16, 32, 64):
        assert math.isfinite(float(fitted.speedup(b, 3, 2.0)))


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(1, 512), st.floats(1e-4, 10.0), st.floats(1e-4, 10.0)), min_size=2, max_size=6))
def test_any_measured_points_give_a_model_of_positive_finite_steps(measured):
    points = [lf.Point(b, decode_s=d, cycle_s=c, k=3) for b, d, c in measured]
    model = lf.calibrate(ld.LoadModel(ld.kimi_k25_on_pcie().target, ld.CPU), points)
    assert all(math.isfinite(v) and v >= 0 for v in asdict(model.scales).values())
    for b in (1, 64, 1024):
        assert float(model.decode_s(b)) > 0 and float(model.cycle_s(b, 3)) > 0


def test_one_point_is_reproduced_exactly():
    model = lf.calibrate(ld.kimi_k25_on_pcie(), [lf.Point(8, decode_s=0.02, cycle_s=0.05, k=3)])
    assert float(model.decode_s(8)) == pytest.approx(0.02) and float(model.cycle_s(8, 3)) == pytest.approx(0.05)


@pytest.mark.parametrize("point", [lf.Point(1, decode_s=-1.0), lf.Point(1, decode_s=math.nan), lf.Point(0, decode_s=1.0),
                                   lf.Point(1, cycle_s=0.03, k=3)])
def test_impossible_points_are_refused(point):
    with pytest.raises(ParameterError):
        lf.calibrate(ld.kimi_k25_on_pcie(), [point])


def test_the_decision_table_says_up_to_which_concurrency_each_option_pays():
    out = cli_json("plan", "--json")
    rows = out["rows"]
    assert all("pays_up_to" in r for r in rows)
    assert rows[0]["kind"] == "serve as now" and rows[0]["pays_up_to"] is None  # τ 2.0 does not pay at 82 / 30 ms
    assert any(r["pays_up_to"] for r in rows) and out["load"]["at_concurrency"] == 1


# --------------------------------------------------------------------------- logs by concurrency

SGLANG = ("[2026-01-01 10:00:{s:02d} TP0] Decode batch[ 40], #running-req: {b}, #token: 900, token usage: 0.02, "
          "accept len: {tau}, accept rate: 0.40, cuda graph: True, gen throughput (token/s): {tps}, #queue-req: 0,")
SGLANG_PLAIN = ("[2026-01-01 11:00:{s:02d} TP0] Decode batch[ 40], #running-req: {b}, #token: 900, token usage: 0.02, "
                "cuda graph: True, gen throughput (token/s): {tps}, #queue-req: 0,")
VLLM_SPEC = ("INFO 11-02 11:00:{s:02d} [metrics.py:96] SpecDecoding metrics: Mean acceptance length: {tau}, Accepted "
             "throughput: 30.91 tokens/s, Drafted throughput: 96.77 tokens/s, Accepted: 919 tokens, Drafted: 3000 tokens, "
             "Avg Draft acceptance rate: 30.6%")
VLLM_STATS = ("INFO 11-02 11:00:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: 52.1 tokens/s, Avg generation "
              "throughput: {tps} tokens/s, Running: {b} reqs, Waiting: 0 reqs, GPU KV cache usage: 0.2%")


def test_a_mixed_concurrency_sglang_log_is_grouped_and_set_beside_a_plain_log(tmp_path):
    spec = tmp_path / "spec.log"
    spec.write_text("\n".join(SGLANG.format(s=i, b=b, tau=tau, tps=tps) for i, (b, tau, tps) in enumerate(
        [(1, 2.2, 60.0), (1, 2.0, 62.0), (8, 2.1, 400.0), (8, 2.1, 420.0), (8, 1.9, 410.0), (64, 2.0, 1500.0)])) + "\n")
    plain = tmp_path / "plain.log"
    plain.write_text("\n".join(SGLANG_PLAIN.format(s=i, b=b, tps=tps) for i, (b, tps) in enumerate(
        [(1, 80.0), (1, 82.0), (8, 500.0), (64, 1200.0), (64, 1300.0)])) + "\n")
    rows = log_by_concurrency(parse_log(spec), parse_plain_log(plain))
    assert [(r["concurrency"], r["n"]) for r in rows] == [(1, 2), (8, 3), (64, 1)]
    one, eight, many = rows
    assert one["accept_len"] == pytest.approx(2.1) and one["throughput"] == pytest.approx(61.0)
    assert one["speedup"] == pytest.approx(61.0 / 81.0) and eight["speedup"] == pytest.approx(410.0 / 500.0)
    assert many["speedup"] == pytest.approx(1500.0 / 1250.0) and many["plain_n"] == 2
    out = cli_json("perf", "--log", str(spec), "--plain-log", str(plain), "--json")
    assert [r["concurrency"] for r in out["log_by_concurrency"]] == [1, 8, 64]
    assert out["calibrated_on"] and out["by_concurrency"]  # the logs fix the model, which answers per concurrency
    plain_json = cli_json("perf", "--log", str(spec), "--json")["by_concurrency"]
    assert [{k: r[k] for k in ("concurrency", "n", "accept_len", "throughput")} for r in plain_json] == [
        {k: r[k] for k in ("concurrency", "n", "accept_len", "throughput")} for r in rows]


def test_vllm_spec_lines_take_the_concurrency_of_their_stats_line(tmp_path):
    log = tmp_path / "vllm.log"
    lines = []
    for i, (b, tau, tps) in enumerate([(1, 2.0, 60.0), (1, 2.2, 62.0), (4, 1.9, 200.0)]):
        lines += [VLLM_SPEC.format(s=2 * i, tau=tau), VLLM_STATS.format(s=2 * i, tps=tps, b=b)]
    log.write_text("\n".join(lines) + "\n")
    parsed = parse_log(log)
    assert [r.concurrency for r in parsed.records] == [1, 1, 4] and parsed.plain == []
    assert [(r["concurrency"], r["n"], r["throughput"]) for r in log_by_concurrency(parsed)] == [(1, 2, 61.0), (4, 1, 200.0)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("spec"), st.sampled_from([1.5, 2.0, 2.5])),
                          st.tuples(st.just("stats"), st.integers(1, 64))), max_size=30))
def test_each_vllm_record_takes_the_stats_line_of_its_interval(events):
    """Any interleaving: a record takes the first stats line before the next record, else the last one before it."""
    lines = [VLLM_SPEC.format(s=0, tau=v) if kind == "spec" else VLLM_STATS.format(s=0, tps=10.0, b=v)
             for kind, v in events]
    parsed = parse_log_text("\n".join(lines) + "\n")
    spec_at = [i for i, (kind, _) in enumerate(events) if kind == "spec"]
    stats = [(i, v) for i, (kind, v) in enumerate(events) if kind == "stats"]
    want = []
    for n, i in enumerate(spec_at):
        limit = spec_at[n + 1] if n + 1 < len(spec_at) else len(events)
        after = [v for j, v in stats if i < j < limit]
        before = [v for j, v in stats if j < i]
        want.append(after[0] if after else (before[-1] if before else None))
    assert [r.concurrency for r in parsed.records] == want
    assert parsed.plain == [] if spec_at else len(parsed.plain) == len(stats)


def test_a_speculative_log_is_not_a_plain_baseline(tmp_path, capsys):
    spec = tmp_path / "spec.log"
    spec.write_text(SGLANG.format(s=0, b=1, tau=2.0, tps=60.0) + "\n")
    assert main(["perf", "--log", str(spec), "--plain-log", str(spec)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "without speculation" in err[0]


@pytest.mark.parametrize("value", ["0", "-1", "nan", "1.5", "inf", "1e309", ""])
def test_bad_concurrency_is_one_line(capsys, value):
    with pytest.raises(SystemExit) as stop:
        main(["perf", "--baseline-tps", "82", "--cycle-ms", "30", "--accept-len", "2", "--concurrency", value])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--concurrency" in err[0]


def test_perf_and_plan_still_import_no_torch():
    import subprocess
    import sys

    code = ("import sys; from eaglelab.cli import main; main(['perf', '--baseline-tps', '82', '--cycle-ms', '30', "
            "'--accept-len', '2', '--concurrency', '1', '64']); main(['plan']); "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# --------------------------------------------------------------------------- the engine at several concurrencies


def _group(c: int, runs, tau=2.0) -> dict:
    return {"concurrency": c, "tokens_per_s": 100.0, "tokens_per_s_runs": runs, "spec": {"tau": tau}}


@pytest.mark.parametrize("answer, problem", [
    ({"groups": "x"}, "one object per concurrency"),
    ({"groups": [_group(1, [100.0, 90.0, 95.0])]}, "one object per concurrency"),
    ({"groups": [_group(2, [1.0] * 3), _group(1, [1.0] * 3)]}, "not the concurrencies asked for"),
    ({"groups": [_group(1, [1.0, 2.0]), _group(2, [1.0] * 3)]}, "one rate per repeat"),
    ({"groups": [_group(1, [1.0, float("nan"), 1.0]), _group(2, [1.0] * 3)]}, "tokens_per_s_runs|run"),
    ({"groups": [_group(1, [1.0] * 3, tau=9.0), _group(2, [1.0] * 3)]}, "tau"),
    ({"groups": [{**_group(1, [1.0] * 3), "spec": None}, _group(2, [1.0] * 3)]}, "no spec counters"),
])
def test_a_worker_answer_for_several_concurrencies_is_checked_field_by_field(answer, problem):
    from eaglelab.engines.vllm_load import _groups_from_result
    from eaglelab.errors import EngineError

    with pytest.raises(EngineError, match=problem):
        _groups_from_result(answer, [1, 2], k=3, repeats=3)


@pytest.mark.notebook
@pytest.mark.engine
def test_vllm_batched_at_several_concurrencies_beside_the_model(smoke_run):
    """The load check as notebook 01's smoke run makes it (the tiny world's A and drafter, batches 1, 2, 4, k 3):
    read from its findings, not measured a second time."""
    from eaglelab.engines.vllm import engine_status

    ok, why = engine_status()
    if not ok:
        pytest.skip(f"vLLM environment not installed here: {why}")
    out, _ = smoke_run("01")
    check = json.loads((out / "figures" / "01_findings.json").read_text())["numbers"]["engine_load"]
    assert check["status"].startswith("vLLM 0.") and check["model"] is not None
    assert [r["concurrency"] for r in check["rows"]] == [1, 2, 4]
    assert [r["held_out"] for r in check["rows"]] == [False, True, False]
    for r in check["rows"]:
        assert 1 <= r["tau"] <= 4 and r["alone_tps"] > 0 and r["drafter_tps"] > 0
        assert r["measured"] == pytest.approx(r["drafter_tps"] / r["alone_tps"])
        assert math.isfinite(r["model"]) and r["model"] > 0
        # three runs per side: the median lies inside the range they allow
        assert r["measured_low"] <= r["measured"] <= r["measured_high"] and r["measured_low"] < r["measured_high"]
        assert r["within_noise"] == (r["measured_low"] <= r["model"] <= r["measured_high"])
    assert check["worst_held_out"] == max(abs(r["error"]) for r in check["rows"] if r["held_out"])


#: gpt-oss-120b's language model as its config.json writes it (the fields the cost model reads), with its shipped
#: quantization_config: MXFP4 experts, attention, router, embedding and head left in bf16.
GPT_OSS_120B = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
                "num_hidden_layers": 36, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
                "intermediate_size": 2880, "num_local_experts": 128, "num_experts_per_tok": 4, "vocab_size": 201088,
                "tie_word_embeddings": False, "torch_dtype": "bfloat16",
                "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
                    "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}}


@pytest.mark.parametrize("quantization, bits", [
    ({"quant_method": "mxfp4"}, 4.25),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}, 4.5),
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, 8.0),
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, 8.0),
])
def test_microscaled_weights_are_costed_at_their_own_bits(quantization, bits):
    """#55: gpt-oss's MXFP4 and ModelOpt's flat NVFP4 were costed as bf16 (233.6 GB of weights instead of about 69)."""
    from eaglelab.serving.load_checks import config_bits

    assert config_bits({"torch_dtype": "bfloat16", "quantization_config": quantization}, "config.json") == bits
    shape = ts.shape_from_config(GPT_OSS_120B, where="gpt-oss-120b")
    plain = ts.shape_from_config({k: v for k, v in GPT_OSS_120B.items() if k != "quantization_config"}, where="bf16")
    # the experts at 4.25 bits, the rest in bf16: 116.8 B parameters in about 65 GB, against 233.6 GB in bf16
    assert 60e9 < shape.total_bytes < 70e9 and 230e9 < plain.total_bytes < 236e9


def test_the_weights_bytes_hold_against_the_model_cards_checkpoint_size():
    """The gpt-oss model card (arXiv 2508.10925) gives gpt-oss-120b's checkpoint as 60.8 GiB: read from its shipped
    config (MXFP4 experts, its modules_to_not_convert in bf16) within 1%."""
    shape = ts.shape_from_config(GPT_OSS_120B, where="gpt-oss-120b")
    assert shape.total_bytes / 2**30 == pytest.approx(60.8, rel=0.01)


@pytest.mark.parametrize("quantization, bits, words", [
    ({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                         "lm_head"]},
     4.25, "4.25 bits a weight (quantization_config.quant_method mxfp4: 4.25 bits with its block scales; attention, "
           "lm head kept at 16)"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, 4.5,
     "4.5 bits a weight (quantization_config.bits 4, half a bit of scales added; lm head kept at 16)"),
    ({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, 4.5, "(quantization_config.quant_algo w4a8_awq: 4-bit "
                                                                  "integers, half a bit of scales added"),
    (None, 16.0, "16 bits a weight (torch_dtype bfloat16)"),
])
def test_the_output_says_the_bits_a_weight_and_where_they_were_read(tmp_path, quantization, bits, words):
    """#55 item 2: which bytes per weight the model used, and from where, in the line under the table; a router in an
    ignore list is not a dense MLP kept in bf16."""
    from eaglelab.jobs.load import LoadSettings, load_model_for

    cfg = {k: v for k, v in GPT_OSS_120B.items() if k != "quantization_config"}
    if quantization:
        cfg["quantization_config"] = quantization
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    model, source = load_model_for(LoadSettings(target_config=str(tmp_path), accept_len=2.0))
    assert words in source and f"GB at {bits:g} bits" in source
    stated, stated_source = load_model_for(LoadSettings(target_config=str(tmp_path), accept_len=2.0, weight_bits=4.25))
    assert "at 4.25 bits a weight (--weight-bits)" in stated_source
    assert stated.target.total_bytes <= model.target.total_bytes or bits < 4.25


def test_modelopts_hf_quant_config_beside_the_config_is_read(tmp_path):
    """ModelOpt's exports state their quantization in hf_quant_config.json, not config.json: read from there."""
    from eaglelab.jobs.load import LoadSettings, load_model_for

    cfg = {k: v for k, v in GPT_OSS_120B.items() if k != "quantization_config"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(
        {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "group_size": 16,
                                                            "exclude_modules": ["lm_head", "model.layers.*.self_attn*"]}}))
    model, source = load_model_for(LoadSettings(target_config=str(tmp_path / "config.json"), accept_len=2.0))
    assert "4.5 bits a weight (quantization_config.quant_algo nvfp4" in source and "attention, lm head kept at 16" in source
    (tmp_path / "hf_quant_config.json").write_text("{not json")
    from eaglelab.errors import ConfigError

    with pytest.raises(ConfigError, match="hf_quant_config.json"):
        load_model_for(LoadSettings(target_config=str(tmp_path), accept_len=2.0))


def test_the_weight_bits_flag_is_one_line_when_out_of_range(capsys):
    with pytest.raises(SystemExit) as done:
        main(["perf", "--concurrency", "1", "--accept-len", "2", "--weight-bits", "0.5"])
    err = capsys.readouterr().err.strip()
    assert done.value.code == 2 and "argument --weight-bits: must be a number in [1, 32], got 0.5" in err
    assert "\n" not in err


# --------------------------------------------------------------------------- attention per layer (#55 item 2)

QWEN35_397B = {"model_type": "qwen3_5_moe", "hidden_size": 4096, "num_hidden_layers": 60, "vocab_size": 248320,
               "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 256, "num_experts": 512,
               "num_experts_per_tok": 10, "moe_intermediate_size": 1024, "full_attention_interval": 4,
               "linear_num_key_heads": 16, "linear_num_value_heads": 64, "linear_key_head_dim": 128,
               "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "torch_dtype": "bfloat16"}


def test_each_layers_attention_is_costed_as_its_kind():
    """Every layer was costed as full attention: gpt-oss's alternate sliding-window layers (128 tokens) and
    Qwen3.5's three linear-attention layers in four (a recurrent state, no growing KV) got several times their KV."""
    alternating = {**GPT_OSS_120B, "sliding_window": 128,
                   "layer_types": ["sliding_attention", "full_attention"] * 18}
    plain = ts.shape_from_config(GPT_OSS_120B, where="all full")
    hybrid = ts.shape_from_config(alternating, where="gpt-oss")
    per_layer = plain.kv_bytes_per_token / 36
    assert hybrid.kv_bytes_per_token == pytest.approx(18 * per_layer) and hybrid.window_tokens == 128
    at_64k = float(hybrid.kv_read_bytes(65536))
    assert at_64k == pytest.approx(18 * per_layer * 65536 + 18 * per_layer * 128)
    assert float(hybrid.kv_read_bytes(100)) == pytest.approx(plain.kv_read_bytes(100))  # within the window: the same
    qwen = ts.shape_from_config(QWEN35_397B, where="Qwen3.5")
    # 15 full layers of 2 KV heads x 256 in bf16; 45 layers of 64 x 128 x 128 state plus the convolution's window
    assert qwen.kv_bytes_per_token == 15 * 2 * 2 * 256 * 2
    assert qwen.state_bytes == 45 * (64 * 128 * 128 + 3 * (2 * 16 * 128 + 64 * 128)) * 2
    assert float(qwen.kv_read_bytes(0)) == qwen.state_bytes  # a state is held at any context


@pytest.mark.parametrize("change, says", [
    ({"layer_types": ["full_attention", "cross_attention"] * 18}, "layer type 'cross_attention' is not one"),
    ({"layer_types": ["full_attention"] * 35}, "layer_types names 35 layers, the config has 36"),
    ({"layer_types": ["sliding_attention"] * 36}, "sliding-window layers need sliding_window"),
])
def test_an_attention_layout_the_model_cannot_cost_is_refused_by_name(change, says):
    with pytest.raises(ParameterError, match="^gpt-oss: ") as err:
        ts.shape_from_config({**GPT_OSS_120B, **change}, where="gpt-oss")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_hybrid_targets_cache_fits_where_full_attention_would_not():
    """At 64k context on 8 x H200 in bf16, Qwen3.5-397B's KV was costed for 60 full layers: it fits 4x the requests."""
    shape = ts.shape_from_config(QWEN35_397B, where="Qwen3.5")
    full = ts.shape_from_config({k: v for k, v in QWEN35_397B.items() if k != "full_attention_interval"}, where="full")
    hybrid = ld.LoadModel(shape, ld.machine("h200", 8), context=65536)
    as_full = ld.LoadModel(full, ld.machine("h200", 8), context=65536)
    fits = max(b for b in range(1, 4096) if bool(hybrid.kv_fits(b, 3)))
    fits_full = max(b for b in range(1, 4096) if bool(as_full.kv_fits(b, 3)))
    assert 3.5 < fits / fits_full < 4.1
    assert hybrid.decode_s(8) < as_full.decode_s(8)  # a quarter of the KV read a step


@given(context=st.integers(0, 2_000_000), more=st.integers(0, 100_000))
@settings(max_examples=50, deadline=None)
def test_what_a_request_holds_grows_with_its_context_and_is_linear_without_windows(context, more):
    alternating = ts.shape_from_config({**GPT_OSS_120B, "sliding_window": 128,
                                        "layer_types": ["sliding_attention", "full_attention"] * 18}, where="gpt-oss")
    plain = ts.shape_from_config(GPT_OSS_120B, where="all full")
    for shape in (alternating, plain, ts.shape_from_config(QWEN35_397B, where="Qwen3.5")):
        assert float(shape.kv_read_bytes(context + more)) >= float(shape.kv_read_bytes(context)) >= 0
    assert float(plain.kv_read_bytes(context)) == pytest.approx(context * plain.kv_bytes_per_token)


@pytest.mark.parametrize("argv, says", [
    (["--baseline-tps", "1500", "--at-concurrency", "8"], "1500 tok/s per request means a plain step of 0.667 ms at 8 in "
                                                          "flight, under the "),
    (["--baseline-tps", "2000"], "if it is several requests' tok/s together, give one request's"),
])
def test_aggregate_tok_s_given_per_request_is_refused_with_the_mix_up(capsys, argv, says):
    """#55 item 3: aggregate tok/s given as --baseline-tps made a step faster than reading the weights, and a break-even
    τ of 12 at k = 3, taken as plausible."""
    assert main(["perf", "--concurrency", "1", "8", "--cycle-ms", "9", "--accept-len", "2.5", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("eaglelab perf: error: --baseline-tps: the model cannot reproduce the point measured: ")
    assert says in err and "\n" not in err
    if "8" in argv:
        assert "give 187.5" in err  # the per-request figure it likely meant
    assert main(["perf", "--concurrency", "1", "8", "--cycle-ms", "30", "--accept-len", "2.5", "--baseline-tps", "82"]) == 0


def test_a_measured_speculative_tok_s_stands_for_the_cycle(capsys):
    """#55 item 3: no input for a measured speculative tok/s; the user had to derive --cycle-ms (τ / tok/s) by hand."""
    from eaglelab.jobs.load import LoadSettings, speculation_under_load

    assert main(["perf", "--baseline-tps", "82", "--spec-tps", "164", "--accept-len", "2.5"]) == 0
    assert "(2.00x baseline 82.0)" in capsys.readouterr().out
    same = LoadSettings(baseline_tps=82, spec_tps=164, accept_len=2.5, concurrency=(1, 8))
    assert same.cycle_ms == pytest.approx(1e3 * 2.5 / 164)
    assert speculation_under_load(same).rows == speculation_under_load(
        LoadSettings(baseline_tps=82, cycle_ms=1e3 * 2.5 / 164, accept_len=2.5, concurrency=(1, 8))).rows
    assert main(["perf", "--concurrency", "1", "--baseline-tps", "82", "--spec-tps", "164", "--cycle-ms", "30",
                 "--accept-len", "2.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("eaglelab perf: error: --spec-tps: ") and "not --cycle-ms and --spec-tps" in err


def test_tok_s_without_tau_answer_over_the_range_published_chains_accept(capsys):
    """#55 item 5: τ is what no published sweep states; tok/s (or a paper's speedup) without it was refused. The
    answer is now banded over τ at a per-draft acceptance of 0.55-0.85, the middle assumed, and says so."""
    from eaglelab.jobs.load import LoadSettings, speculation_under_load
    from eaglelab.serving.load_band import ALPHA_ASSUMED, unstated_taus
    from eaglelab.serving.perf import accept_len_constant_rate

    low, mid, high = unstated_taus(3)
    assert mid == pytest.approx(float(accept_len_constant_rate(ALPHA_ASSUMED, 3))) and low < mid < high < 4
    assert unstated_taus(3, floor=2.6)[0] == 2.6  # a cycle costs at least a plain step: τ >= the speedup measured
    point = dict(concurrency=(1, 4, 16, 64), baseline_tps=82, spec_tps=164, context=2048)
    loose = speculation_under_load(LoadSettings(**point))
    told = speculation_under_load(LoadSettings(**point, accept_len=mid))
    assert loose.tau == pytest.approx(mid) and [r.speedup for r in loose.rows] == pytest.approx(
        [r.speedup for r in told.rows])  # the centre is the answer at the assumed τ
    assert any(u.startswith(f"τ {low:.2f}-{high:.2f} (a per-draft acceptance") for u in loose.band.unstated)
    for b in (4, 16, 64):  # the band holds the answer at each end of τ's range, and is wider than τ given
        for tau in (low, high):
            at = speculation_under_load(LoadSettings(**point, accept_len=tau, accept_lens=(tau,) * 4)).rows
            s = next(r.speedup for r in at if r.concurrency == b)
            assert loose.band.low[b] - 1e-9 <= s <= loose.band.high[b] + 1e-9
        assert loose.band.high[b] - loose.band.low[b] > told.band.high[b] - told.band.low[b] - 1e-9
    assert main(["perf", "--concurrency", "1", "8", "--baseline-tps", "82", "--spec-tps", "164"]) == 0
    assert f"τ not given: the table is at τ {mid:.2f}" in capsys.readouterr().out


def test_a_papers_speedup_alone_is_a_measured_point(capsys):
    """#55 item 5: a paper's table gives only the ratio; --speedup calibrates the cycle against the datasheet's plain
    step, and a speedup above k + 1 (a tok/s, most likely) is refused by name."""
    from eaglelab.jobs.load import LoadSettings, speculation_under_load

    report = speculation_under_load(LoadSettings(speedup=1.8, accept_len=3.0, at_concurrency=2, concurrency=(2, 8, 32)))
    assert next(r.speedup for r in report.rows if r.concurrency == 2) == pytest.approx(1.8, rel=1e-3)
    assert report.calibration.calibrated
    for argv, says in ((["--speedup", "30"], "--speedup: a 30x speedup is more than the k + 1"),
                       (["--baseline-tps", "20", "--spec-tps", "100"], "--spec-tps: a 5x speedup is more than the k + 1"),
                       (["--speedup", "1.5", "--spec-tps", "90"], "not --spec-tps and --speedup"),
                       (["--baseline-tps", "80"], "a measured point needs --baseline-tps and its cycle")):
        assert main(["perf", "--concurrency", "1", "8", "--accept-len", "2", *argv]) == 2
        assert says in capsys.readouterr().err


# --------------------------------------------------------------------------- the answer's band (#55 item 1)

def test_the_answer_carries_the_band_of_what_was_not_given(capsys):
    """The context (2,048 assumed) and τ away from the measured load moved "pays up to" from 2 to 128 on the Kimi
    page with one number printed: the table now has a band column and the crossover a range, and one point says
    where it cannot decide."""
    from eaglelab.jobs.load import LoadSettings, speculation_under_load

    point = dict(concurrency=(1, 4, 16, 64), baseline_tps=82, cycle_ms=30, accept_len=2.5)
    loose = speculation_under_load(LoadSettings(**point))
    given = speculation_under_load(LoadSettings(**point, context=2048, accept_lens=(2.5, 2.5, 2.5, 2.5)))
    assert given.band is None and "band" not in "\n".join(given.lines()).split("\n")[0]
    band = loose.band
    assert [r.speedup for r in loose.rows] == [r.speedup for r in given.rows]  # the centre is the point's answer
    for r in loose.rows:
        b = r.concurrency
        assert band.low[b] <= r.speedup + 1e-9 and r.speedup <= band.high[b] + 1e-9
    assert band.high[1] - band.low[1] < 1e-6  # measured there: no band
    lo, hi = band.pays
    assert (lo or 0) <= loose.pays_up_to <= hi
    text = "\n".join(loose.lines())
    assert "band" in text.splitlines()[0] and f"pays up to {band.pays_words()} concurrent requests" in text
    assert "give --context" in text and "give --accept-lens or a log" in text
    if band.undecided():
        assert f"one point cannot decide at {band.undecided()[0]} (" in text and "eaglelab recipe --job load" in text
    only_context = speculation_under_load(LoadSettings(**point, accept_lens=(2.5, 2.5, 2.5, 2.5))).band
    assert only_context.unstated == (band.unstated[0],)  # τ given: the band spans the context alone, and is narrower
    assert all(only_context.high[b] - only_context.low[b] <= band.high[b] - band.low[b] + 1e-9 for b in band.low)


@settings(max_examples=25, deadline=None)
@given(tps=st.floats(20, 400), ratio=st.floats(1.2, 3.0), tau=st.floats(1.5, 3.5), at=st.sampled_from([1, 4, 16]))
def test_every_band_holds_its_centre_and_is_exact_where_measured(tps, ratio, tau, at):
    from eaglelab.errors import EaglelabError
    from eaglelab.jobs.load import LoadSettings, speculation_under_load

    try:
        report = speculation_under_load(LoadSettings(concurrency=(1, 4, 16, 64), baseline_tps=tps, cycle_ms=ratio * 1e3 / tps,
                                                     accept_len=tau, at_concurrency=at, k=3))
    except EaglelabError:
        return  # a point the model refuses: no table, no band
    for r in report.rows:
        b = r.concurrency
        fits = bool(report.model.kv_fits(b, 3))
        assert report.band.low[b] <= (r.speedup if fits else 0.0) + 1e-9 <= report.band.high[b] + 2e-9
    if at in report.band.low and report.band.high[at]:  # measured there: each corner's model holds the point
        from eaglelab.serving.load_checks import TOLERANCE

        assert report.band.high[at] - report.band.low[at] <= 2 * TOLERANCE * report.band.high[at]


GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@settings(max_examples=40, deadline=None)
@given(tps=st.floats(20, 300), ratio=st.floats(1.05, 4.0), tau=st.floats(1.2, 3.8), k=st.integers(1, 5),
       gpus=st.sampled_from([4, 8]))
def test_the_crossover_sentence_says_what_the_rows_show(tps, ratio, tau, k, gpus):
    """#55 item 4: "does not pay even at 1 request" above the table's own 1.01x at 64. On any table: every row up to
    the crossover pays, every row that pays beyond it is named, and no pay is claimed where no row pays."""
    from eaglelab.errors import EaglelabError
    from eaglelab.jobs.load import LoadSettings, speculation_under_load

    tau = min(tau, k + 1.0)
    try:
        report = speculation_under_load(LoadSettings(concurrency=GRID, baseline_tps=tps, cycle_ms=ratio * 1e3 / tps,
                                                     accept_len=tau, k=k, gpus=gpus, context=2048,
                                                     accept_lens=(tau,) * len(GRID)))
    except EaglelabError:
        return
    text, upto = report.crossover(), report.pays_up_to or 0
    for r in report.rows:
        if r.concurrency <= upto:
            assert r.pays, (r, text)
    beyond = [r for r in report.rows if r.pays and r.concurrency > upto]
    for r in beyond[:4]:
        assert f"{r.concurrency} ({r.speedup:.2f}x)" in text, text
    if report.pays_up_to is None and not beyond:
        assert "does not pay" in text and "nor at any concurrency of the table" in text
