"""Issue #37, items 9, 10, 11 and 19: the serving surface, where a table must reproduce what it says it is
calibrated on, a target config must not contradict itself, τ must be one k drafts can give, and a log is
read in memory that does not grow with its lines.

Each fault has a named test that failed before its fix: the command line for what a user sees (one line,
exit 2), the functions for the properties (a calibrated table reproduces its point; every byte and FLOP
term is non-negative and a verify costs at least a decode; the streamed log summaries and ``--json`` are
the ones the old list-of-records reader gave; a log's parse holds a small fraction of its size).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
import statistics
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eaglelab.cli import main
from eaglelab.errors import ConfigError, EaglelabError, ParameterError
from eaglelab.jobs.load import LoadSettings, speculation_under_load
from eaglelab.outputs import strict_json_text
from eaglelab.serving import load as ld
from eaglelab.serving import target_shape as ts
from eaglelab.serving.load_checks import TOLERANCE
from eaglelab.serving.log_tally import MAX_DISTINCT, Values, median
from eaglelab.serving.logs import log_by_concurrency, parse_log, parse_log_text, parse_plain_log
from tests import fuzzing as fz


def run(*argv: str) -> tuple[int, str, str]:
    """``eaglelab ARGV`` in this process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as stop:
            rc = stop.code
    return rc, out.getvalue(), err.getvalue()


def refused(*argv: str) -> str:
    """The one stderr line of a refusal (exit 2), and nothing on stdout."""
    rc, out, err = run(*argv)
    assert rc == 2 and out == "" and err.count("\n") == 1, (rc, out, err)
    return err


def write_config(tmp_path, **changes) -> str:
    cfg = {k: v for k, v in {**fz.LOAD_TARGET, **changes}.items() if v is not None}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


POINT = ("--baseline-tps", "82", "--cycle-ms", "30", "--accept-len", "2")

# --------------------------------------------------------------------------- item 9: calibrated means reproduced


@pytest.mark.parametrize("extra", [(), ("--json",), ("--at-concurrency", "8")])
def test_a_cycle_shorter_than_a_step_is_refused_under_load_as_by_plain_perf(extra):
    """#37 item 9: `perf --concurrency` with a 5 ms cycle against a 12.2 ms step printed a "calibrated" table."""
    err = refused("perf", "--baseline-tps", "82", "--cycle-ms", "5", "--accept-len", "2", "--concurrency", "1", "8", *extra)
    assert "--cycle-ms" in err and "shorter than one plain decoding step" in err
    assert refused("perf", "--baseline-tps", "82", "--cycle-ms", "5", "--accept-len", "2") == err


def test_a_point_the_roofline_cannot_reproduce_is_refused_not_called_calibrated(tmp_path):
    """#37 item 9: a config far from what was measured gave a table whose decode step was not the measured one."""
    cfg = write_config(tmp_path, hidden_size=65536, num_hidden_layers=1000, intermediate_size=10**6,
                       moe_intermediate_size=10**5, num_attention_heads=64)
    err = refused("perf", "--baseline-tps", "82", "--cycle-ms", "12.5", "--accept-len", "2", "--concurrency", "1", "8",
                  "--target-config", cfg)
    assert "cannot reproduce the point measured" in err and "ms measured" in err and "datasheet" in err
    assert "cannot reproduce the point measured" in refused("plan", "--cycle-ms", "12.5", "--target-config", cfg)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(tps=st.floats(1.0, 1e4), ratio=st.floats(1.0, 20.0), k=st.integers(1, 6), at=st.sampled_from([1, 4, 64]),
       config=st.sampled_from([None, "lite", "tiny"]))
def test_a_table_called_calibrated_reproduces_its_point(tmp_path_factory, tps, ratio, k, at, config):
    """#37 item 9: whatever the point, the model either reproduces it (plain step and cycle within the tolerance)
    or is refused; never a table that misses its own point."""
    path = None
    if config is not None:
        folder = tmp_path_factory.mktemp("cfg")
        changes = {} if config == "lite" else {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                                               "intermediate_size": 128, "moe_intermediate_size": 32}
        path = write_config(folder, **changes)
    cycle_ms = ratio * 1e3 / tps
    try:
        report = speculation_under_load(LoadSettings(concurrency=(at,), baseline_tps=tps, cycle_ms=cycle_ms,
                                                     accept_len=1.5, at_concurrency=at, k=k, target_config=path))
    except ParameterError as exc:
        assert "cannot reproduce" in exc.problem or "shorter than one plain" in exc.problem
        return
    assert report.calibration.calibrated
    row = report.rows[0]
    assert row.decode_ms == pytest.approx(1e3 / tps, rel=TOLERANCE)
    assert row.cycle_ms == pytest.approx(cycle_ms, rel=TOLERANCE)


SGLANG = ("[2026-01-01 10:00:00 TP0] Decode batch[ 40], #running-req: {b}, #token: 900, token usage: 0.02, "
          "accept len: {tau}, accept rate: 0.40, cuda graph: True, gen throughput (token/s): {tps}, #queue-req: 0,")
SGLANG_PLAIN = ("[2026-01-01 11:00:00 TP0] Decode batch[ 40], #running-req: {b}, #token: 900, token usage: 0.02, "
                "cuda graph: True, gen throughput (token/s): {tps}, #queue-req: 0,")


def write_logs(tmp_path, spec, plain) -> tuple[str, str]:
    a, b = tmp_path / "spec.log", tmp_path / "plain.log"
    a.write_text("\n".join(SGLANG.format(b=c, tau=tau, tps=tps) for c, tau, tps in spec) + "\n")
    b.write_text("\n".join(SGLANG_PLAIN.format(b=c, tps=tps) for c, tps in plain) + "\n")
    return str(a), str(b)


def test_a_fit_of_several_points_that_misses_says_so_and_not_calibrated(tmp_path):
    """#37 item 9: logs at 1, 8 and 64 the model cannot fit within the tolerance (a plain step that shrinks as the
    batch grows: no sum of non-negative costs does that): the table says which point it misses and by how much,
    never "calibrated on"."""
    spec, plain = write_logs(tmp_path, [(1, 2.2, 60.0), (1, 2.0, 62.0), (8, 2.1, 410.0), (64, 2.0, 9000.0)],
                             [(1, 80.0), (1, 82.0), (8, 500.0), (64, 8000.0)])
    rc, out, _ = run("perf", "--log", spec, "--plain-log", plain)
    assert rc == 0 and ", calibrated on the point" not in out
    assert "not calibrated on them: the cycle at concurrency 8" in out and "% off" in out
    assert "per a model fitted to, not calibrated on" in out
    js = json.loads(run("perf", "--log", spec, "--plain-log", plain, "--json")[1])
    assert js["calibration"]["calibrated"] is False and js["calibration"]["misses"][0]["concurrency"] == 8


def test_a_log_group_faster_than_its_tau_allows_is_left_out_of_the_calibration(tmp_path):
    """#37 item 9: a speedup above τ at one concurrency (a cycle shorter than a plain step) is not fitted to."""
    spec, plain = write_logs(tmp_path, [(1, 2.0, 60.0), (8, 2.0, 400.0)], [(1, 80.0), (8, 150.0)])
    report = speculation_under_load(LoadSettings(log=spec, plain_log=plain, concurrency=(1, 8)))
    assert [p["concurrency"] for p in report.calibrated_on] == [1]
    assert any("concurrency 8 left out of the calibration" in n for n in report.notes)
    assert report.calibration.calibrated


# --------------------------------------------------------------------------- item 10: configs that contradict themselves


@pytest.mark.parametrize("label", sorted(fz.IMPOSSIBLE_LOAD_TARGETS))
@pytest.mark.parametrize("cmd", ["perf", "plan"])
def test_a_load_config_that_contradicts_itself_is_refused_in_one_line(tmp_path, label, cmd):
    """#37 item 10: first_k_dense_replace above the layers or experts per token above the experts gave negative
    expert bytes and a verify cheaper than a decode."""
    cfg = write_config(tmp_path, **fz.IMPOSSIBLE_LOAD_TARGETS[label])
    argv = [cmd, "--target-config", cfg] + (list(POINT) + ["--concurrency", "1", "64"] if cmd == "perf" else [])
    err = refused(*argv)
    assert cfg in err
    changed = [k for k in fz.IMPOSSIBLE_LOAD_TARGETS[label] if fz.IMPOSSIBLE_LOAD_TARGETS[label][k] is not None]
    assert any(k in err for k in changed + ["moe_intermediate_size", "bits"]), err


def test_the_consistent_config_is_answered(tmp_path):
    rc, out, _ = run("perf", "--target-config", write_config(tmp_path), *POINT, "--concurrency", "1", "8", "64")
    assert rc == 0 and "calibrated on the point measured at concurrency 1" in out


def test_a_negative_byte_or_flop_term_cannot_make_a_shape():
    """#37 item 10: the model itself refuses a term below zero or more experts per token than experts."""
    with pytest.raises(ParameterError, match="moe_layers -2"):
        ts.TargetShape(dense_bytes=1e9, active_params=1e9, moe_layers=-2, experts_total=8, experts_per_token=2,
                       expert_bytes=1e6)
    with pytest.raises(ParameterError, match="experts_per_token 9 of experts_total 8"):
        ts.TargetShape(dense_bytes=1e9, active_params=1e9, moe_layers=4, experts_total=8, experts_per_token=9,
                       expert_bytes=1e6)
    with pytest.raises(ConfigError, match="first_k_dense_replace 40"):
        ts.shape_from_config({**fz.LOAD_TARGET, "first_k_dense_replace": 40}, where="x.json")


@settings(max_examples=150, deadline=None, derandomize=True)
@given(layers=st.integers(1, 64), dense=st.integers(0, 64), experts=st.integers(1, 512), top=st.integers(1, 512),
       heads=st.sampled_from([1, 8, 16, 128]), kv=st.sampled_from([None, 1, 8, 16, 256]), hidden=st.sampled_from([64, 4096]),
       mla=st.booleans())
def test_every_accepted_config_counts_non_negative_bytes_and_a_verify_at_least_a_decode(layers, dense, experts, top,
                                                                                          heads, kv, hidden, mla):
    """#37 item 10, as a property: a config is refused, or every term is >= 0 and a verify costs no less than a
    decode step at every concurrency."""
    cfg = {**fz.LOAD_TARGET, "num_hidden_layers": layers, "first_k_dense_replace": dense, "n_routed_experts": experts,
           "num_experts_per_tok": top, "num_attention_heads": heads, "hidden_size": hidden}
    if not mla:
        cfg.pop("kv_lora_rank")
        if kv is not None:
            cfg["num_key_value_heads"] = kv
    try:
        shape = ts.shape_from_config(cfg, where="config.json")
    except ConfigError as exc:
        assert "config.json" == exc.where
        return
    assert dense <= layers and top <= experts
    model = ld.LoadModel(shape, ld.machine("h100-sxm", 8))
    for b in (1, 8, 64, 1024):
        for k in (1, 3, 7):
            assert float(model.verify_s(b, k)) >= float(model.decode_s(b)) > 0


# --------------------------------------------------------------------------- item 11: τ against k, one check


@pytest.mark.parametrize("argv", [
    ["perf", *POINT[:4], "--accept-len", "100", "--k", "3"],
    ["perf", *POINT[:4], "--accept-len", "4.0001"],
    ["perf", *POINT[:4], "--accept-len", "5", "--k", "3", "--concurrency", "1", "8"],
    ["perf", *POINT[:4], "--accept-len", "5", "--k", "3", "--json"],
    ["plan", "--accept-len", "5", "--k", "3"],
])
def test_plain_perf_refuses_a_tau_above_k_plus_one_as_every_path_does(argv):
    """#37 item 11: `perf --accept-len 100 --k 3` answered "40.65x, speculation pays"."""
    assert "is not reachable with k = 3 drafts per cycle" in refused(*argv)


def test_predict_refuses_it_through_the_same_check(tmp_path):
    old, new = fz.write_engine_files(tmp_path)
    err = refused("predict", "--old-logprobs", str(old), "--new-logprobs", str(new), "--accept-len", "5", "--k", "3")
    assert "is not reachable with k = 3 drafts per cycle" in err


def test_tau_of_k_plus_one_is_reachable():
    rc, out, _ = run("perf", *POINT[:4], "--accept-len", "4", "--k", "3")
    assert rc == 0 and "speculation pays" in out


# --------------------------------------------------------------------------- item 19: a log in bounded memory


def generated_log(path, megabytes: float, seed: int = 0) -> int:
    """A SGLang log of about ``megabytes`` MB: eight concurrencies, τ and tok/s at two decimals, some noise."""
    rnd, size = random.Random(seed), 0
    with open(path, "w") as f:
        while size < megabytes * 1e6:
            line = SGLANG.format(b=rnd.choice([1, 2, 4, 8, 16, 32, 64, 128]), tau=f"{rnd.uniform(1.5, 3.5):.2f}",
                                 tps=f"{rnd.uniform(50, 2000):.2f}") + "\n"
            if rnd.random() < 0.05:
                line += 'INFO: 127.0.0.1 - "POST /generate HTTP/1.1" 200 OK\n'
            f.write(line)
            size += len(line)
    return size


@pytest.mark.slow
def test_a_log_is_parsed_in_memory_a_small_fraction_of_its_size(tmp_path):
    """#37 item 19: `perf --log` kept one record per metrics line, about 2.5x the log's size (a 170 MB log:
    382 MB); now the summaries hold under a tenth of it and the streamed --json (a second tally beside the first)
    under a fifth, with every tok/s distinct (a ratio, not a time)."""
    path = tmp_path / "server.log"
    size = generated_log(path, 12)
    tracemalloc.start()
    try:
        parsed = parse_log(path)
        rows, summary = log_by_concurrency(parsed), parsed.summary()
        _, parse_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for _ in parsed.json_chunks():
            pass
        _, json_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [r["concurrency"] for r in rows] == [1, 2, 4, 8, 16, 32, 64, 128] and summary["n"] == sum(r["n"] for r in rows)
    assert parse_peak < 0.1 * size, f"parse: {parse_peak / 1e6:.1f} MB for a {size / 1e6:.0f} MB log"
    assert json_peak < 0.2 * size, f"--json: {json_peak / 1e6:.1f} MB for a {size / 1e6:.0f} MB log"


LINES = st.lists(fz.log_line().map(lambda t: t[0]) | st.sampled_from([
    "INFO Engine 000: Avg prompt throughput: 5.0 tokens/s, Avg generation throughput: 40.0 tokens/s, Running: 3 reqs",
    "INFO Engine 000: Avg generation throughput: 1e308 tokens/s, Running: 2 reqs",
    "[x] Decode batch. #running-req: 4, #token: 1, cuda graph: True, gen throughput (token/s): 99.5, #queue-req: 0,",
    "[x] Decode batch. #running-req: 4, accept len: 2.5, gen throughput (token/s): 1.5e308, #queue-req: 0,"]),
    max_size=30)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(lines=LINES)
def test_the_streamed_json_is_the_json_of_every_record(tmp_path_factory, lines):
    """#37 item 19: `perf --log --json` streams record by record, the very text of the whole document."""
    path = tmp_path_factory.mktemp("log") / "server.log"
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8", errors="surrogateescape"))
    try:
        parsed = parse_log(path)
    except EaglelabError:
        return
    assert "".join(parsed.json_chunks()) == strict_json_text(parsed.to_json())
    assert parsed.n_records == len(parsed.records) and parsed.n_malformed == len(parsed.malformed)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(st.lists(st.one_of(st.sampled_from([1.0, 2.5, 2.19, 0.0, 258.07]), st.floats(0, 1e6)), max_size=3000),
                min_size=1, max_size=4))
def test_a_groups_median_is_the_median_of_its_values(parts):
    """#37 item 19: the running medians (counted, then packed past many distinct values) are statistics.median's."""
    values = []
    for part in parts:
        v = Values()
        for x in part:
            v.add(x)
        values.append(v)
    flat = [x for part in parts for x in part]
    assert median(values) == (statistics.median(flat) if flat else None)
    assert sum(len(v) for v in values) == len(flat)


def test_a_vllm_log_pairs_each_record_with_its_stats_line_when_streamed():
    """#37 item 19: the second reader finds the stats line after a record, across SGLang and noise lines."""
    spec = ("INFO SpecDecoding metrics: Mean acceptance length: {tau}, Accepted throughput: 30.0 tokens/s, "
            "Avg Draft acceptance rate: 30.0%")
    stats = "INFO Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: {tps} tokens/s, Running: {b} reqs"
    text = "\n".join([stats.format(tps=10.0, b=1), spec.format(tau=2.0), "noise", SGLANG.format(b=2, tau=2.1, tps=9.0),
                      stats.format(tps=20.0, b=4), spec.format(tau=2.2), spec.format(tau=2.4), "noise"])
    parsed = parse_log_text(text)
    assert [(r.source, r.concurrency, r.gen_throughput) for r in parsed.records] == [
        ("vllm", 4, 20.0), ("sglang", 2, 9.0), ("vllm", 4, 20.0), ("vllm", 4, 20.0)]
    assert parsed.plain == []
    assert math.isclose(log_by_concurrency(parsed)[-1]["accept_len"], 2.2)


def test_a_plain_log_is_read_by_the_same_stream(tmp_path):
    plain = tmp_path / "plain.log"
    plain.write_text("\n".join(SGLANG_PLAIN.format(b=b, tps=t) for b, t in [(1, 80.0), (1, 82.0), (8, 500.0)]) + "\n")
    parsed = parse_plain_log(plain)
    assert [(p.concurrency, p.gen_throughput) for p in parsed.plain] == [(1, 80.0), (1, 82.0), (8, 500.0)]


def test_a_group_of_many_distinct_values_packs_them_and_keeps_the_median():
    """#37 item 19: past the distinct values a group counts, its values are packed, and the median stays exact."""
    rnd = random.Random(1)
    data = [round(rnd.uniform(50, 2000), 2) for _ in range(10 * MAX_DISTINCT)] + [258.07] * 500
    a, b = Values(), Values()
    for i, x in enumerate(data):
        (a if i % 3 else b).add(x)
    assert a.packed is not None and not a.counts
    assert median([a, b]) == statistics.median(data) and median([b]) == statistics.median(data[::3])
