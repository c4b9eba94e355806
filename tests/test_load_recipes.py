"""The load recipe: run.sh under recorders that serve, the client against real HTTP servers, its rate, its refusals.

The engines' launchers (``python -m sglang.launch_server``, ``vllm serve``) and ``eaglelab`` are replaced on ``PATH``
by recorders that write down their argv and environment; the launchers' recorders then serve a small streaming
completions server on the port (as the engines stream: usage in each chunk, several tokens per chunk when
speculating), so the script's client runs for real and writes the cost table that eaglelab's reader reads back.
The client also runs against vLLM's own server (CPU build, ``.venv-vllm``) where it is installed.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglelab.engines import load_client
from eaglelab.engines.load_recipes import LoadRecipeSettings, build_load_recipe, write_load_recipe
from eaglelab.errors import OverwriteError, ParameterError
from eaglelab.serving.cost_table import read_cost_table

CLIENT = Path(load_client.__file__)

#: A streaming completions server like the engines' (stdlib): records each request, streams max_tokens tokens.
STUB_SERVER = textwrap.dedent("""\
    import json, os, sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    name, argv = sys.argv[1], sys.argv[2:]
    record = os.environ["LOAD_TEST_RECORD"]
    env = {k: v for k, v in os.environ.items() if k.startswith("SGLANG_")}
    with open(record + "/calls.jsonl", "a") as fh:
        fh.write(json.dumps({"name": name, "argv": argv, "env": env}) + "\\n")
    if name == "eaglelab":
        sys.exit(0)
    port = int(argv[argv.index("--port") + 1])
    speculating = "SGLANG_SIMULATE_ACC_LEN" in env or "--speculative-config" in argv
    failing = os.environ.get("LOAD_TEST_FAIL") == "1"

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def answer(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/health":
                self.answer(200, {})
            elif self.path == "/v1/models":
                self.answer(200, {"data": [{"id": "served-" + name}]})
            elif self.path == "/version":
                self.answer(200, {"version": "0.0-stub"})
            else:
                self.answer(404, {"error": "no such path"})

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with open(record + "/requests.jsonl", "a") as fh:
                fh.write(json.dumps({**req, "prompt": len(req["prompt"]), "ids": sorted(set(req["prompt"]))[:1]
                                     + sorted(set(req["prompt"]))[-1:], "speculating": speculating}) + "\\n")
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            per_chunk, done = (2 if speculating else 1), 0
            while done < req["max_tokens"]:
                time.sleep(0.002)
                if failing and done >= 2:
                    self.wfile.write(b'data: {"error": {"message": "out of memory\\\\nin the verify"}}\\n\\n')
                    break
                done = min(req["max_tokens"], done + (1 if done == 0 else per_chunk))
                chunk = {"choices": [{"index": 0, "text": ""}], "usage": {"completion_tokens": done}}
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\\n\\n")
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\\n\\n")
            self.close_connection = True

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def recorders(root: Path) -> dict[str, str]:
    """A PATH of recorders (python -m sglang.launch_server, vllm, eaglelab; every other python call is the real one)
    and the few system commands the script uses; the environment to run the script in."""
    bin_dir, record = root / "bin", root / "record"
    bin_dir.mkdir()
    record.mkdir()
    stub = root / "stub_server.py"
    stub.write_text(STUB_SERVER)
    py, q = sys.executable, lambda p: f"'{p}'"
    (bin_dir / "python").write_text(f'#!/bin/bash\nif [ "$1" = -m ] && [ "$2" = sglang.launch_server ]; then\n'
                                    f'  exec {q(py)} {q(stub)} sglang "$@"\nfi\nexec {q(py)} "$@"\n')
    (bin_dir / "vllm").write_text(f'#!/bin/bash\nexec {q(py)} {q(stub)} vllm "$@"\n')
    (bin_dir / "eaglelab").write_text(f'#!/bin/bash\nexec {q(py)} {q(stub)} eaglelab "$@"\n')
    for name in ("python", "vllm", "eaglelab"):
        (bin_dir / name).chmod(0o755)
    for name in ("mkdir", "dirname", "sleep"):
        os.symlink(shutil.which(name), bin_dir / name)
    return {"PATH": str(bin_dir), "HOME": str(root), "LOAD_TEST_RECORD": str(record)}


def calls(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "record" / "calls.jsonl").read_text().splitlines()]


HOSTILE_TARGET = "my target's \"v2\" $(touch pwned) `touch pwned2` dir"
HOSTILE_DRAFTER = "-drafter $HOME; rm"


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_the_script_runs_each_server_and_its_client_writes_the_cost_table(tmp_path, engine):
    port = free_port()
    s = LoadRecipeSettings(engine, HOSTILE_TARGET, HOSTILE_DRAFTER, gpus=2, concurrency=(1, 3), k=1,
                           prompt_tokens=12, output_tokens=20, repeats=2, port=port, workdir="out dir", server_timeout_s=60)
    recipe = write_load_recipe(s, tmp_path / "recipe")
    env = recorders(tmp_path)
    proc = subprocess.run(["/bin/bash", str(tmp_path / "recipe" / "run.sh")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not list(tmp_path.rglob("pwned*"))  # nothing in a name ran
    recorded = calls(tmp_path)
    servers = [c for c in recorded if c["name"] == engine]
    assert len(servers) == 3  # plain, then τ 1 and 2 (3 > k + 1 left out)
    plain, *spec = servers
    if engine == "sglang":
        assert plain["argv"] == ["-m", "sglang.launch_server", "--model-path", HOSTILE_TARGET, "--tp-size", "2",
                                 "--host", "127.0.0.1", "--port", str(port)] and plain["env"] == {}
        for call, tau in zip(spec, ("1.0", "2.0")):
            assert call["argv"][10:] == ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                                        "./" + HOSTILE_DRAFTER, "--speculative-num-steps", "1", "--speculative-eagle-topk",
                                        "1", "--speculative-num-draft-tokens", "2"]
            assert call["env"] == {"SGLANG_SIMULATE_ACC_LEN": tau, "SGLANG_SIMULATE_ACC_METHOD": "match-expected"}
    else:
        assert plain["argv"] == ["serve", HOSTILE_TARGET, "--tensor-parallel-size", "2", "--host", "127.0.0.1", "--port",
                                 str(port)]
        for call, tau in zip(spec, (1.0, 2.0)):
            assert call["argv"][:-2] == plain["argv"] and call["argv"][-2] == "--speculative-config"
            assert json.loads(call["argv"][-1]) == {"method": "eagle3", "model": "./" + HOSTILE_DRAFTER,
                                                    "num_speculative_tokens": 1, "rejection_sample_method": "synthetic",
                                                    "synthetic_acceptance_length": tau}
    fit = next(c for c in recorded if c["name"] == "eaglelab")
    assert fit["argv"] == ["perf", "--costs", "out dir/costs.csv", "--target-config", HOSTILE_TARGET, "--gpus", "2",
                           "--k", "1"]
    # what the client asked: token-id prompts of the given length, the same count from every request, greedy
    requests = [json.loads(line) for line in (tmp_path / "record" / "requests.jsonl").read_text().splitlines()]
    measured = [r for r in requests if r["max_tokens"] == 20]  # the warm-up round asks 16
    assert len(measured) == 3 * 2 * (1 + 3)  # servers x repeats x requests
    assert all(r["prompt"] == 12 and r["ignore_eos"] and r["temperature"] == 0 and r["stream"]
               and r["stream_options"]["continuous_usage_stats"] and r["model"] == f"served-{engine}" for r in measured)
    table = read_cost_table(tmp_path / "out dir" / "costs.csv")
    assert [(r.concurrency, r.k, r.accept_len) for r in table.rows] == \
        [(c, k, tau) for k, tau in ((0, 1.0), (1, 1.0), (1, 2.0)) for c in (1, 3) for _ in range(2)]
    assert all(r.context == 12 + 10 and r.output_tok_s > 0 and math.isfinite(r.step_s) for r in table.rows)
    assert all(r.draft_tokens == (1 if r.plain else 2) and r.topk == 1 for r in table.rows)
    prov = table.provenance()
    assert prov["engine"] == f"{engine} 0.0-stub" and prov["model"] == HOSTILE_TARGET and "date" in prov
    assert {"server-plain.log", "server-tau-1.log", "server-tau-2.log"} <= {p.name for p in (tmp_path / "out dir").iterdir()}
    assert json.loads((tmp_path / "recipe" / "recipe.json").read_text())["settings"]["new_target"] == HOSTILE_TARGET
    assert recipe.files["load_client.py"] == CLIENT.read_text()  # copied verbatim
    # a second run refuses to mix its rows into the first run's table
    again = subprocess.run(["/bin/bash", str(tmp_path / "recipe" / "run.sh")], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "exists" in again.stderr and len(calls(tmp_path)) == len(recorded)


def test_a_server_error_stops_the_script_in_one_line_and_the_server_is_stopped(tmp_path):
    port = free_port()
    s = LoadRecipeSettings("sglang", "t", "d", gpus=1, concurrency=(2,), output_tokens=8, repeats=1, port=port,
                           server_timeout_s=60)
    write_load_recipe(s, tmp_path / "recipe")
    env = {**recorders(tmp_path), "LOAD_TEST_FAIL": "1"}
    proc = subprocess.run(["/bin/bash", str(tmp_path / "recipe" / "run.sh")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "load_client.py measure: the server answered with an error: out of memory" \
        in proc.stderr
    assert not (tmp_path / "load" / "costs.csv").exists()
    with pytest.raises(OSError):  # the trap stopped the server
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


@pytest.mark.engine
def test_the_client_measures_vllm_itself(tmp_path):
    """The client against vLLM's OpenAI server (CPU build): token-id prompts, continuous usage, the table read back."""
    from eaglelab.engines.vllm import engine_python, engine_status

    ok, why = engine_status()
    if not ok:
        pytest.skip(why)
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)  # head_dim 64: vLLM's CPU attention has no kernel for the tiny world's 16
    LlamaForCausalLM(LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                 num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                                 bos_token_id=None, eos_token_id=None, pad_token_id=None)).save_pretrained(tmp_path / "m")
    port, python = free_port(), engine_python()
    lib = python.parent.parent / "lib" / "libiomp5.so"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "HF_HUB_OFFLINE": "1",
           "VLLM_NO_USAGE_STATS": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
           **({"LD_PRELOAD": str(lib)} if lib.exists() else {})}
    # `vllm serve` itself fails in the CPU build (its CLI asks for the distribution "vllm"; it is "vllm-cpu")
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen([str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(tmp_path / "m"),
                               "--skip-tokenizer-init", "--enforce-eager", "--dtype", "float32", "--max-model-len",
                               "256", "--host", "127.0.0.1", "--port", str(port)], env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    url, out = f"http://127.0.0.1:{port}", tmp_path / "costs.csv"
    try:
        waited = load_client.main(["wait", "--url", url, "--pid", str(server.pid), "--timeout", "150"])
        assert waited == 0, (tmp_path / "server.log").read_text()[-3000:]
        assert load_client.main(["port-free", "--url", url]) == 2  # a server answers there now
        # 64 tokens: long enough that the four requests decode together while make test's other worker runs
        assert load_client.main(["measure", "--url", url, "--out", str(out), "--engine", "vllm", "--concurrency", "1,4",
                                 "--prompt-tokens", "16", "--output-tokens", "64", "--repeats", "2", "--k", "0",
                                 "--note", "model: tiny", "--timeout", "120"]) == 0
    finally:
        server.terminate()
        server.wait(60)
        log.close()
    table = read_cost_table(out)
    assert [(r.concurrency, r.k) for r in table.rows] == [(1, 0), (1, 0), (4, 0), (4, 0)]
    assert all(r.output_tok_s > 0 and r.context == 16 + 64 // 2 for r in table.rows)
    assert table.provenance()["engine"].startswith("vllm 0.") and table.provenance()["model"] == "tiny"
    with open(out) as fh:
        extra = [line.split(",")[-1] for line in fh if line[0].isdigit()]
    assert all(0 < int(n) <= 4 * 63 for n in extra)  # decode-window tokens: never more than the decode phase's


@pytest.mark.engine
def test_vllms_own_parser_and_config_accept_the_serve_command(tmp_path):
    """The serve step parsed by vLLM 0.32's own CLI parser; its speculative config resolved by SpeculativeConfig."""
    from eaglelab.engines.vllm import engine_python, engine_status

    ok, why = engine_status()
    if not ok:
        pytest.skip(why)
    recipe = build_load_recipe(LoadRecipeSettings("vllm", "org/target", "org/drafter", k=3, accept_lens=(2.5,)))
    serve = [st for st in recipe.steps if st.argv[:2] == ["vllm", "serve"]][-1]
    check = textwrap.dedent("""\
        import json, sys
        from vllm.config.speculative import SpeculativeConfig
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.utils.argparse_utils import FlexibleArgumentParser
        argv = json.loads(sys.argv[1])
        parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
        args = parser.parse_args(["--model", argv[2], *argv[3:]])
        spec = args.speculative_config
        assert args.tensor_parallel_size == 8 and set(spec) <= set(SpeculativeConfig.__dataclass_fields__), spec
        rates = SpeculativeConfig._resolve_synthetic_acceptance_rates(
            spec["num_speculative_tokens"], None, spec["synthetic_acceptance_length"])
        print(json.dumps(rates))
    """)
    argv = [w for w in serve.words() if w not in ("--host", "127.0.0.1", "--port", "30000")]
    proc = subprocess.run([str(engine_python()), "-c", check, json.dumps(argv)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "VLLM_NO_USAGE_STATS": "1"})
    if proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr:
        pytest.skip(f"this vLLM lays its parser out otherwise: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [1.0, 0.5, 0.0]  # mean accepted drafts 1.5: τ 2.5


# --------------------------------------------------------------------------- the row's rate

def test_the_rate_counts_the_tokens_inside_the_common_decode_window():
    # request A: first token at 0, then one token every 0.1 s until 1.0; request B starts at 0.5, ends at 1.5
    a = [(0.1 * i, i + 1) for i in range(11)]
    b = [(0.5 + 0.1 * i, i + 1) for i in range(11)]
    rate, window, tokens = load_client.decode_rate([a, b])
    assert window == pytest.approx(0.5) and tokens == 5 + 5  # (0.5, 1.0]: 5 tokens each
    assert rate == pytest.approx(20.0)  # two requests at 10 tok/s each
    # one request: the inter-token rate after its first chunk
    assert load_client.decode_rate([a])[0] == pytest.approx(10 / 1.0)
    with pytest.raises(load_client.NoDecodeWindow, match="never decoded all together"):
        load_client.decode_rate([a, [(2.0, 1), (3.0, 5)]])


timeline = st.lists(st.tuples(st.one_of(st.floats(), st.floats(-1e3, 1e3), st.sampled_from([0.0, 1e-300, 5e-324, 1e300])),
                              st.integers(min_value=-2, max_value=10**6)), max_size=8)


@st.composite
def ordered_timeline(draw):
    """A timeline as a server sends it: times and counts going up (the case the rate is computed for)."""
    gaps = draw(st.lists(st.floats(0, 1e6), min_size=1, max_size=8))
    steps = draw(st.lists(st.integers(1, 4), min_size=len(gaps), max_size=len(gaps)))
    start = draw(st.floats(-1e6, 1e6))
    times = [start + sum(gaps[: i + 1]) for i in range(len(gaps))]
    return [(t, sum(steps[: i + 1])) for i, t in enumerate(times)]


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(st.lists(st.one_of(timeline, ordered_timeline()), max_size=6))
def test_any_timings_give_a_positive_finite_rate_or_a_clear_refusal(timelines):
    try:
        rate, window, tokens = load_client.decode_rate(timelines)
    except load_client.NoDecodeWindow as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert math.isfinite(rate) and rate > 0 and window > 0 and tokens >= 1
    # never more tokens than the requests received after their first chunk
    assert tokens <= sum(t[-1][1] - t[0][1] for t in timelines)


def test_the_client_refuses_a_table_it_did_not_start_and_keeps_the_file(tmp_path):
    table = tmp_path / "costs.csv"
    table.write_text("concurrency,k,draft_tokens,topk,accept_len,context,output_tok_s\n1,0,1,1,1,10,5\n")
    with pytest.raises(load_client.LoadError, match="header"):
        load_client.append_rows(str(table), ["2,0,1,1,1,10,6,1,6"], [])
    assert table.read_text().endswith("1,0,1,1,1,10,5\n")
    fresh = tmp_path / "new.csv"
    load_client.append_rows(str(fresh), [load_client.cost_row(2, 0, 1, 1, 1.0, 10, 6.5, 1.0, 6)], ["engine: x 1"])
    load_client.append_rows(str(fresh), [load_client.cost_row(2, 3, 4, 1, 2.5, 10, 7.5, 1.0, 7)], ["ignored"])
    read = read_cost_table(fresh)
    assert [r.output_tok_s for r in read.rows] == [6.5, 7.5] and read.comments == ("engine: x 1",)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".costs-")] == []  # no temporary left behind


def test_the_client_gives_up_on_a_server_that_never_serves_in_one_line(tmp_path, capsys):
    port = free_port()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert load_client.main(["wait", "--url", f"http://127.0.0.1:{port}", "--pid", str(dead.pid), "--timeout", "5"]) == 2
    assert "exited before it served" in capsys.readouterr().err
    started = time.monotonic()
    assert load_client.main(["wait", "--url", f"http://127.0.0.1:{port}", "--timeout", "1"]) == 2
    err = capsys.readouterr().err
    assert "deadline" in err and err.count("\n") == 1 and time.monotonic() - started < 10
    assert load_client.main(["measure", "--url", f"http://127.0.0.1:{port}", "--out", str(tmp_path / "c.csv"),
                             "--engine", "vllm", "--concurrency", "1", "--k", "0", "--timeout", "5"]) == 2
    assert "refused" in capsys.readouterr().err and not (tmp_path / "c.csv").exists()


# --------------------------------------------------------------------------- settings and the folder

@pytest.mark.parametrize("changes, flag", [
    ({"new_target": "a\nb"}, "--new-target"),
    ({"old_drafter": "d\x00"}, "--old-drafter"),
    ({"workdir": "w\rx"}, "--workdir"),
    ({"extra_flags": ("--x\n",)}, "--extra-flags"),
    ({"engine": "trtllm"}, "--engine"),
    ({"accept_lens": (5.0,)}, "--accept-lens"),
    ({"accept_lens": (float("nan"),)}, "--accept-lens"),
    ({"accept_lens": (0.5,)}, "--accept-lens"),
    ({"concurrency": ()}, "--concurrency"),
    ({"concurrency": (0, 2)}, "--concurrency"),
    ({"gpus": 0}, "--gpus"),
    ({"output_tokens": 1}, "--output-tokens"),
    ({"port": 70000}, "--port"),
    ({"draft_tokens": 6}, "--draft-tokens"),
    ({"engine": "vllm", "topk": 2, "draft_tokens": 6}, "--topk"),
])
def test_bad_settings_are_one_line_naming_the_setting(changes, flag):
    with pytest.raises(ParameterError) as err:
        build_load_recipe(LoadRecipeSettings(**{"engine": "sglang", "new_target": "t", "old_drafter": "d", **changes}))
    assert err.value.where == flag and "\n" not in str(err.value)


def test_defaults_and_a_tree_for_sglang():
    s = LoadRecipeSettings("sglang", "t", "d", k=1)
    assert s.forced == (1.0, 2.0) and s.verified == 2  # 3.0 is above k + 1
    tree = build_load_recipe(LoadRecipeSettings("sglang", "t", "d", k=3, topk=4, draft_tokens=8, accept_lens=(3.5,)))
    server = [st for st in tree.steps if st.argv[:3] == ["python", "-m", "sglang.launch_server"]][-1]
    words = server.words()
    assert words[words.index("--speculative-eagle-topk") + 1] == "4"
    assert words[words.index("--speculative-num-draft-tokens") + 1] == "8"
    assert server.env["SGLANG_SIMULATE_ACC_LEN"] == "3.5"
    assert tree.to_json()["steps"][-1]["argv"][:2] == ["eaglelab", "perf"]


def test_the_folder_is_never_one_eaglelab_did_not_write(tmp_path):
    s = LoadRecipeSettings("vllm", "t", "d")
    write_load_recipe(s, tmp_path / "r")
    with pytest.raises(OverwriteError):
        write_load_recipe(s, tmp_path / "r")
    write_load_recipe(s, tmp_path / "r", overwrite=True)  # its own files: replaced when asked
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("my notes")
    with pytest.raises(OverwriteError, match="did not write"):
        write_load_recipe(s, tmp_path / "mine", overwrite=True)
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]
    assert os.access(tmp_path / "r" / "run.sh", os.X_OK)
    assert subprocess.run(["bash", "-n", str(tmp_path / "r" / "run.sh")]).returncode == 0
