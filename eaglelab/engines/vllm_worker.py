"""Measure greedy (speculative) decoding in the real vLLM engine: JSON in, JSON out.

Runs INSIDE the engine venv (``scripts/setup-engine.sh`` makes ``.venv-vllm``): it imports only
vLLM, what vLLM brings and the standard library, never eaglelab (not installed there).

    .venv-vllm/bin/python eaglelab/engines/vllm_worker.py request.json result.json
    .venv-vllm/bin/python eaglelab/engines/vllm_worker.py < request.json > result.json

A request is one JSON object, or a list of them (at most ``vllm_requests.MAX_REQUESTS``) run one engine after another
in this process (vLLM imported once), answered by the list of results; it stops at its first failure (its
error last) and its runs share one log, the first request's ``log_file``.

Request (JSON object)::

    target          absolute path of the target model folder (transformers layout)
    drafter         absolute path of a speculators-format EAGLE-3 folder
                    (``eaglelab drafter export --to speculators``), or null for the target alone
    k               num_speculative_tokens (ignored without a drafter)
    prompts         [[token id, ...], ...]  (token ids: no tokenizer is loaded)
    max_new_tokens  tokens generated per prompt (EOS ignored: exactly this many unless
                    stop_token_ids is given)
    batch           "one": one prompt at a time (batch 1, like eaglelab's speculative_decode);
                    "all": all prompts in one generate call (vLLM batches them)
    dtype           "float32" | "bfloat16"
    max_model_len   engine context length (prompt + max_new_tokens + k must fit)
    seed            engine seed (greedy decoding does not depend on it)
  optional:
    kv_cache_gib    VLLM_CPU_KVCACHE_SPACE when that variable is not set (default 1)
    threads_bind    VLLM_CPU_OMP_THREADS_BIND when not set (default "nobind")
    stop_token_ids  stop a prompt at these ids (default []: always max_new_tokens tokens; give the
                    target's EOS to match eaglelab's decoders, which stop there by default)
    log_file        keep the engine's whole log (stdout + stderr, all processes) here
    llm_kwargs      extra keyword arguments for vllm.LLM (e.g. {"max_num_batched_tokens": 2048})
    attention_backend        the target's attention backend (vllm.LLM attention_config), e.g.
                    "CPU_MLA" for an MLA target: the CPU build otherwise picks its AMX MLA backend
                    wherever the CPU has AMX, which runs bf16 only
    draft_attention_backend  the drafter's (speculative_config attention_backend: the draft
                    model is built with its own attention config, not the target's)
    groups          [concurrency, ...]: instead of one run over the prompts, one batched run of the
                    first c prompts for each c, in the same engine (max_num_seqs = the largest),
                    after an untimed warm-up; the result's "groups" holds one entry per c
    repeats         with groups: time each group this many times, the concurrencies interleaved
                    (a drifting machine then shifts all of them alike); default 1
    forced_accept_len  with a drafter: force the mean acceptance length τ (bonus included), a number
                    in [1, k + 1], with vLLM's synthetic rejection sampling (speculative_config
                    rejection_sample_method "synthetic", synthetic_acceptance_length). The drafter
                    still drafts k tokens per step and the target still verifies them (the cycle
                    costs what it costs), but draft i is accepted by a coin with vLLM's
                    minimum-variance schedule (unconditional rates [1]*floor(τ-1) + [frac(τ-1)] +
                    [0]*...), whatever the tokens: the outputs are not the target's greedy ones, and
                    the measured τ scatters around the forced one (frac(τ-1) is a Bernoulli draw per
                    step; padded drafts are rejected). Default null: standard rejection sampling.
                    vLLM's CPU build has no synthetic kernel (its C++ rejection kernels assert
                    SYNTHETIC_MODE off): there the worker supplies a port of the Triton greedy
                    kernel's synthetic branch (vllm_synthetic.py; greedy requests only)

Result (JSON object)::

    vllm_version, target, drafter, k (0 without a drafter), batch, dtype, max_new_tokens,
    outputs                 [[generated token ids], ...] in prompt order
    engine_start_s          seconds to build vllm.LLM (model load, KV cache, warm-up)
    wall_s                  seconds of the generate call(s)
    generated_tokens        sum of len(outputs[i])
    tokens_per_s            generated_tokens / wall_s
    spec                    null without a drafter, else (counters are deltas over the
                            generate calls, from llm.get_metrics()):
      num_drafts            vllm:spec_decode_num_drafts (verify steps that carried drafts)
      num_draft_tokens      vllm:spec_decode_num_draft_tokens
      num_accepted_tokens   vllm:spec_decode_num_accepted_tokens
      accepted_per_pos      vllm:spec_decode_num_accepted_tokens_per_pos ([k] counts: drafts
                            whose position i was accepted, i.e. >= i+1 accepted)
      tau                   1 + num_accepted_tokens / num_drafts (mean acceptance length,
                            bonus included: vLLM's "Mean acceptance length", eaglelab's τ)
      draft_acceptance_rate num_accepted_tokens / num_draft_tokens
      position_rate_unconditional  accepted_per_pos[i] / num_drafts (vLLM's "Per-position
                            acceptance rate": P(first i+1 drafts accepted))
      position_rate_conditional    accepted_per_pos[i] / accepted_per_pos[i-1] (i=0: /
                            num_drafts): P(d_i ok | d_<i ok), eaglelab's position_acceptance()
      per_prompt            [{"tau", "histogram", "num_draft_tokens"}, ...] from vLLM's
                            per-request metrics (histogram[j] = verify steps with j accepted),
                            or null if this vLLM does not provide them
                            Ratios are null (not NaN) where their denominator is 0.
    spec_log_lines          engine log lines containing "SpecDecoding metrics" (one per
                            VLLM_LOG_STATS_INTERVAL window plus a final flush)
    warnings                distinct engine log lines at WARNING / ERROR level (at most 60)
    env                     the VLLM_* / OMP / LD_PRELOAD settings the engine ran with
    log_file                only when the request gave one
    forced_accept_len       the request's forced τ (null when not forced); spec.tau beside it is
                            the τ measured from the counters
    synthetic_sampler       with forced_accept_len: "vllm" (its own kernel) or "eaglelab-cpu-port"
    groups                  with a groups request: [{"concurrency", "wall_s", "generated_tokens",
                            "tokens_per_s", "tokens_per_s_runs", "spec"}, ...]: tokens_per_s the
                            median over the repeats, tokens_per_s_runs each one, spec as above with
                            its counters summed over that group's runs; with a drafter also
                            "tau_runs": the measured τ of each run (null where no step drafted)

Errors: ``{"error": "...", "log_tail": [...]}`` and exit code 2 (in a list: the last entry).

Engine settings (each only when the variable is not already set): the venv's Intel OpenMP is
preloaded (the script re-executes itself once with LD_PRELOAD; without it vLLM's CPU
speculative decoding is ~30x slower), VLLM_ENABLE_V1_MULTIPROCESSING=0 (engine in this process:
start 4 s instead of 25-50 s), HF_HUB_OFFLINE=1, usage stats off, enforce_eager,
skip_tokenizer_init (token-id prompts), max_num_seqs 1 for "one" / len(prompts) for "all".
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import sys
import tempfile
import time
import traceback

# Run as a script, Python puts this file's folder first on sys.path, and that folder holds
# eaglelab/engines/vllm.py (the driver in the main environment): `import vllm` would find it
# instead of the engine. Drop the folder before anything imports vllm.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]


@functools.cache  # loaded once per process: a list's forced runs share the port
def _sibling(name: str):
    """A module beside this file, loaded by path (this folder is off ``sys.path``; eaglelab is not installed here)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"eaglelab_{name}", os.path.join(_HERE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_requests = _sibling("vllm_requests")  # the request contract's checks: standard library only
RequestError, _read_request, _validate_all, _place = (_requests.RequestError, _requests.read_request,
                                                       _requests.validate_all, _requests.place)

SPEC_METRICS = {
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
}
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
ENV_KEYS = ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_ENABLE_V1_MULTIPROCESSING",
            "OMP_NUM_THREADS", "LD_PRELOAD")


def _spec_counters(metrics) -> dict:
    """Sum the spec-decode counters of a get_metrics() snapshot over engines."""
    out = {v: 0 for v in SPEC_METRICS.values()}
    per_pos: list[int] = []
    for m in metrics:
        if m.name in SPEC_METRICS:
            out[SPEC_METRICS[m.name]] += int(m.value)
        elif m.name == PER_POS:
            vals = list(m.values)
            per_pos = [a + b for a, b in zip(per_pos, vals)] + vals[len(per_pos):] if per_pos else vals
    out["accepted_per_pos"] = per_pos
    return out


def _spec_summary(before: dict, after: dict, k: int) -> dict:
    d = {key: after[key] - before.get(key, 0) for key in SPEC_METRICS.values()}
    pb = before.get("accepted_per_pos") or [0] * k
    pa = after.get("accepted_per_pos") or [0] * k
    per_pos = [a - (pb[i] if i < len(pb) else 0) for i, a in enumerate(pa)]
    drafts = d["num_drafts"]
    nan = None  # JSON has no NaN: null when undefined
    tau = 1 + d["num_accepted_tokens"] / drafts if drafts else nan
    uncond = [c / drafts if drafts else nan for c in per_pos]
    cond = []
    prev = drafts
    for c in per_pos:
        cond.append(c / prev if prev else nan)
        prev = c
    return {**d, "accepted_per_pos": per_pos, "tau": tau,
            "draft_acceptance_rate": d["num_accepted_tokens"] / d["num_draft_tokens"] if d["num_draft_tokens"] else nan,
            "position_rate_unconditional": uncond, "position_rate_conditional": cond}


def _per_request(outputs) -> list | None:
    rows = []
    for o in outputs:
        m = getattr(o.outputs[0], "spec_decode_metrics", None)
        if m is None:
            return None
        hist = list(m.histogram)
        steps = sum(hist)
        acc = sum(j * c for j, c in enumerate(hist))
        rows.append({"tau": 1 + acc / steps if steps else None, "histogram": hist,
                     "num_draft_tokens": int(m.num_draft_tokens)})
    return rows


def _synthetic_sampler() -> str:
    """Which synthetic rejection sampler the engine will run (``vllm_synthetic.py`` beside this file)."""
    return _sibling("vllm_synthetic").synthetic_sampler()


def run(req: dict, log_path: str) -> dict:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(req["kv_cache_gib"]))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", str(req["threads_bind"]))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # one process instead of three (front end, engine core, worker): engine start 4 s instead of
    # 25-50 s on two cores; the counters and the spec-decoding log lines are the same
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

    import vllm
    from vllm import LLM, SamplingParams

    k = req["k"]
    kwargs = dict(model=req["target"], skip_tokenizer_init=True, dtype=req["dtype"],
                  max_model_len=req["max_model_len"], enforce_eager=True, seed=req["seed"],
                  disable_log_stats=False, max_num_seqs=max(req["groups"]) if req["groups"] else
                  1 if req["batch"] == "one" else len(req["prompts"]))
    if req["attention_backend"]:
        kwargs["attention_config"] = {"backend": req["attention_backend"]}
    if req["drafter"] is not None:
        kwargs["speculative_config"] = {"method": "eagle3", "model": req["drafter"], "num_speculative_tokens": k}
        if req["draft_attention_backend"]:
            kwargs["speculative_config"]["attention_backend"] = req["draft_attention_backend"]
        if req["forced_accept_len"] is not None:  # synthetic rates are built into the engine's rejection sampler
            kwargs["speculative_config"].update(rejection_sample_method="synthetic",
                                                synthetic_acceptance_length=req["forced_accept_len"])
            req["synthetic_sampler"] = _synthetic_sampler()
        kwargs["per_request_spec_decode_metrics"] = "summary"
    kwargs.update(req["llm_kwargs"])

    t0 = time.perf_counter()
    try:
        llm = LLM(**kwargs)
    except TypeError as exc:  # an older vLLM without per-request spec metrics
        if "per_request_spec_decode_metrics" not in str(exc):
            raise
        kwargs.pop("per_request_spec_decode_metrics")
        llm = LLM(**kwargs)
    engine_start = time.perf_counter() - t0

    # ignore_eos: the model's EOS (config / generation_config) never stops a prompt; only the
    # request's stop_token_ids do (eaglelab's decoders stop at the target's EOS by default: pass
    # it here to compare with them; the stop token is kept in the output, as eaglelab keeps it)
    sp = SamplingParams(temperature=0.0, max_tokens=req["max_new_tokens"], ignore_eos=True, detokenize=False,
                        seed=req["seed"], stop_token_ids=req["stop_token_ids"] or None)
    prompts = [{"prompt_token_ids": list(p)} for p in req["prompts"]]
    if req["groups"]:
        return _run_groups(llm, req, sp, prompts, engine_start, vllm.__version__)
    before = _spec_counters(llm.get_metrics())
    t1 = time.perf_counter()
    if req["batch"] == "one":
        outs = [llm.generate([p], sp, use_tqdm=False)[0] for p in prompts]
    else:
        outs = llm.generate(prompts, sp, use_tqdm=False)
    wall = time.perf_counter() - t1
    after = _spec_counters(llm.get_metrics())
    try:  # flush the interval logger so the last "SpecDecoding metrics" window is logged
        llm.llm_engine.do_log_stats()
    except Exception:  # noqa: BLE001 - logging only
        pass

    outputs = [list(o.outputs[0].token_ids) for o in outs]
    n_tok = sum(len(o) for o in outputs)
    spec = None
    if req["drafter"] is not None:
        spec = _spec_summary(before, after, k)
        spec["per_prompt"] = _per_request(outs)
    result = {"vllm_version": vllm.__version__, "target": req["target"], "drafter": req["drafter"], "k": k,
              "batch": req["batch"], "dtype": req["dtype"], "max_new_tokens": req["max_new_tokens"],
              "outputs": outputs, "engine_start_s": engine_start, "wall_s": wall, "generated_tokens": n_tok,
              "tokens_per_s": n_tok / wall if wall > 0 else None, "spec": spec,
              "forced_accept_len": req["forced_accept_len"], "synthetic_sampler": req.get("synthetic_sampler"),
              "env": {key: os.environ.get(key) for key in ENV_KEYS}}
    del llm
    return result


def _run_groups(llm, req: dict, sp, prompts: list, engine_start: float, version: str) -> dict:
    """Batched generates of the first c prompts per concurrency c, timed apart, repeated, after a warm-up."""
    from vllm import SamplingParams

    warm = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True, detokenize=False, seed=req["seed"])
    llm.generate(prompts[:1], warm, use_tqdm=False)  # first-call allocations out of the timings
    timed = {c: [] for c in req["groups"]}  # (tokens, seconds) per run
    taus = {c: [] for c in req["groups"]}  # measured τ per run
    counted = {c: {} for c in req["groups"]}  # spec counters summed over the group's runs
    for _ in range(req["repeats"]):
        for c in req["groups"]:
            before = _spec_counters(llm.get_metrics())
            t0 = time.perf_counter()
            outs = llm.generate(prompts[:c], sp, use_tqdm=False)
            wall = time.perf_counter() - t0
            after = _spec_counters(llm.get_metrics())
            timed[c].append((sum(len(o.outputs[0].token_ids) for o in outs), wall))
            delta = _spec_summary(before, after, req["k"])
            taus[c].append(delta["tau"])
            acc = counted[c]
            for key in SPEC_METRICS.values():
                acc[key] = acc.get(key, 0) + delta[key]
            acc["accepted_per_pos"] = [a + b for a, b in zip(acc.get("accepted_per_pos") or [0] * len(
                delta["accepted_per_pos"]), delta["accepted_per_pos"])]
    groups = []
    for c in req["groups"]:
        runs = [n / w if w > 0 else None for n, w in timed[c]]
        rates = [r for r in runs if r is not None]
        groups.append({"concurrency": c, "wall_s": sum(w for _, w in timed[c]), "generated_tokens": timed[c][-1][0],
                       "tokens_per_s": statistics.median(rates) if rates else None, "tokens_per_s_runs": runs,
                       "spec": _spec_summary({}, counted[c], req["k"]) if req["drafter"] is not None else None})
        if req["drafter"] is not None:
            groups[-1]["tau_runs"] = taus[c]
    result = {"vllm_version": version, "target": req["target"], "drafter": req["drafter"], "k": req["k"],
              "batch": "all", "dtype": req["dtype"], "max_new_tokens": req["max_new_tokens"], "outputs": [],
              "engine_start_s": engine_start, "groups": groups, "forced_accept_len": req["forced_accept_len"],
              "synthetic_sampler": req.get("synthetic_sampler"),
              "env": {key: os.environ.get(key) for key in ENV_KEYS}}
    del llm
    return result


def _preload_iomp(argv: list[str]) -> None:
    """Re-run this script with the venv's Intel OpenMP in LD_PRELOAD (once).

    vLLM's CPU build expects libiomp5 preloaded; without it speculative decoding runs ~30x
    slower (measured: 28 s vs 0.8 s for 8 x 64 tokens on the tiny test model). vllm-cpu
    installs it (intel-openmp) into <venv>/lib. EAGLELAB_VLLM_NO_PRELOAD=1 skips this.
    """
    if os.environ.get("EAGLELAB_VLLM_NO_PRELOAD") == "1" or os.environ.get("_EAGLELAB_VLLM_REEXEC") == "1":
        return
    lib = os.path.join(sys.prefix, "lib", "libiomp5.so")
    pre = os.environ.get("LD_PRELOAD", "")
    if not os.path.exists(lib) or "libiomp5" in pre:
        return
    env = dict(os.environ, LD_PRELOAD=f"{lib}:{pre}" if pre else lib, _EAGLELAB_VLLM_REEXEC="1")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *argv[1:]], env)


def _log_slice(path: str, start: int) -> list[str]:
    """The log's lines written from byte ``start`` on (one run's part of a list's shared log)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            f.seek(start)
            return [ln.rstrip("\n") for ln in f]
    except OSError:
        return []


def _run_all(reqs: list[dict], log_path: str) -> tuple[list[dict], int]:
    """Each request's engine in turn, its results annotated from its own part of the log; stops at a failure."""
    import gc

    results = []
    for i, req in enumerate(reqs):
        start = os.path.getsize(log_path)
        try:
            result, code = run(req, log_path), 0
        except BaseException as exc:  # noqa: BLE001 - every failure becomes the JSON error
            traceback.print_exc()
            result, code = {"error": f"{_place(i, len(reqs))}{type(exc).__name__}: {exc}"}, 2
        sys.stdout.flush()
        sys.stderr.flush()
        lines = _log_slice(log_path, start)
        if code == 0:
            result["spec_log_lines"] = [ln for ln in lines if "SpecDecoding metrics" in ln]
            warn = [ln for ln in lines if ln.startswith(("WARNING", "ERROR"))
                    or " WARNING " in ln[:60] or " ERROR " in ln[:60]]
            result["warnings"] = list(dict.fromkeys(warn))[:60]
        else:
            result["log_tail"] = lines[-40:]
        if reqs[0]["log_file"]:
            result["log_file"] = log_path
        results.append(result)
        gc.collect()  # the engine just run, before the next one is built
        if code:
            return results, code
    return results, 0


def main(argv: list[str]) -> int:
    _preload_iomp(argv)
    out_path = argv[2] if len(argv) > 2 and argv[2] != "-" else None
    # The engine (and its child processes) print to fds 1 and 2: send both to a log file, so
    # stdout carries only the result JSON; the log is parsed for the spec-decoding lines.
    real_stdout = os.dup(1)
    many = False
    try:
        raw = _read_request(argv)
        many = isinstance(raw, list)
        reqs = _validate_all(raw)
        log_path = reqs[0]["log_file"] or tempfile.mkstemp(prefix="vllm-worker-", suffix=".log")[1]
    except (RequestError, OSError) as exc:
        reqs, results, code = None, [{"error": str(exc), "log_tail": []}], 2
    if reqs is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        real_stderr = os.dup(2)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        try:
            results, code = _run_all(reqs, log_path)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(real_stderr, 2)
            os.close(log_fd)
        if not reqs[0]["log_file"]:
            os.unlink(log_path)
    text = json.dumps(results if many else results[-1])
    if out_path:
        with open(out_path, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        os.write(real_stdout, (text + "\n").encode())
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
