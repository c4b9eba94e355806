"""vLLM batched at several concurrencies: the load check's runs and the cost table with τ forced.

:func:`measure_load_in_engine` runs the target alone and with the drafter, batched per concurrency;
:func:`measure_costs_in_engine` measures a cost table (:mod:`eaglelab.serving.cost_table`): plain steps, and
speculative cycles with τ forced by vLLM's synthetic rejection sampling. Each measurement is one worker
process (:func:`eaglelab.engines.vllm.run_workers`), one engine after another.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from eaglelab.engines.vllm import attention_backends, engine_drafter, run_workers
from eaglelab.errors import EngineError, ParameterError, require_whole
from eaglelab.inputs import field_int, field_number, one_line
from eaglelab.serving.cost_table import CostTable, Measurement
from eaglelab.serving.load_fit import Point
from eaglelab.settings import DEFAULT_K


@dataclass
class LoadRun:
    """The target alone and with the drafter in the engine, batched at each concurrency (one engine per side).

    Attributes:
        concurrency: requests batched together, one run each.
        alone_tps, drafter_tps: generated tok/s over all requests, target alone / with the drafter (medians).
        tau: the drafter's τ at each concurrency (1 + accepted / drafting steps).
        k, version: drafts per cycle; the engine's version.
        alone_runs, drafter_runs: every timed run's tok/s per concurrency.
    """

    concurrency: list[int]
    alone_tps: list[float]
    drafter_tps: list[float]
    tau: list[float]
    k: int
    version: str
    alone_runs: list[list[float]] = field(default_factory=list)
    drafter_runs: list[list[float]] = field(default_factory=list)

    @property
    def speedup(self) -> list[float]:
        return [d / a for d, a in zip(self.drafter_tps, self.alone_tps)]

    @property
    def speedup_range(self) -> list[tuple[float, float]]:
        """Per concurrency, the lowest and highest speedup the runs allow (slowest drafter run / fastest alone...)."""
        return [(min(d) / max(a), max(d) / min(a)) for a, d in zip(self.alone_runs, self.drafter_runs)]

    def points(self):
        """The measured steps as :class:`eaglelab.serving.load.Point` (decode from alone, cycle from the drafter)."""
        return [Point(c, decode_s=c / a, cycle_s=t * c / d, k=self.k)
                for c, a, d, t in zip(self.concurrency, self.alone_tps, self.drafter_tps, self.tau)]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "speedup": self.speedup, "speedup_range": self.speedup_range}


def _groups_from_result(result: dict[str, Any], concurrency: list[int], k: int, repeats: int) -> list[dict]:
    """The worker's per-concurrency runs, every field checked (tok/s positive, τ in [1, k + 1])."""
    where, E = "vllm worker result", EngineError
    groups = result.get("groups")
    if not isinstance(groups, list) or len(groups) != len(concurrency) or not all(isinstance(g, dict) for g in groups):
        raise E(where, f"field 'groups' must hold one object per concurrency {concurrency}")
    out = []
    for g, c in zip(groups, concurrency):
        if field_int(g, "concurrency", where, E) != c:
            raise E(where, f"the groups are not the concurrencies asked for ({concurrency})")
        row = {"concurrency": c, "tokens_per_s": field_number(g, "tokens_per_s", where, E)}
        runs = g.get("tokens_per_s_runs")
        if not isinstance(runs, list) or len(runs) != repeats:
            raise E(where, f"field 'tokens_per_s_runs' must hold one rate per repeat ({repeats})")
        row["runs"] = [field_number({"run": r}, "run", where, E) for r in runs]
        spec = g.get("spec")
        if k:
            if not isinstance(spec, dict):
                raise E(where, "a run with the drafter has no spec counters")
            row["tau"] = field_number(spec, "tau", where, E, low=1.0, low_open=False, high=k + 1.0)
        out.append(row)
    return out


def measure_load_in_engine(target: str | Path, drafter: str | Path, prompts: list[list[int]], max_new_tokens: int,
                           k: int = DEFAULT_K, concurrency: list[int] = (1, 4, 16), dtype: str = "float32",
                           max_model_len: int = 1024, repeats: int = 3, timeout_s: float = 900.0) -> LoadRun:
    """The target alone and with the drafter in vLLM, batched at each concurrency: one engine start per side, both in
    one worker process.

    Args:
        prompts: token ids; concurrency ``c`` batches the first ``c`` of them (at least ``max(concurrency)``).
        repeats: timed runs per concurrency and side, the concurrencies interleaved (the median is used,
            the spread says how far to trust it).

    Raises:
        EngineError: no engine environment, too few prompts, or a failed run.
    """
    concurrency = [int(c) for c in concurrency]
    if not concurrency or min(concurrency) < 1 or max(concurrency) > len(prompts):
        raise EngineError("vllm", f"concurrencies {concurrency} need at least {max(concurrency or [1])} prompts, "
                                  f"got {len(prompts)}")
    base = {"target": str(Path(target).resolve()), "prompts": [list(map(int, p)) for p in prompts],
            "max_new_tokens": int(max_new_tokens), "batch": "all", "dtype": dtype, "max_model_len": int(max_model_len),
            "seed": 0, "groups": concurrency, "repeats": int(repeats), **attention_backends(target, drafter)}
    with tempfile.TemporaryDirectory(prefix="eaglelab-engine-") as tmp:
        folder = engine_drafter(drafter, target, Path(tmp), k)
        alone, spec = run_workers([{**base, "drafter": None, "k": 0}, {**base, "drafter": str(folder), "k": int(k)}],
                                  timeout_s)
    a = _groups_from_result(alone, concurrency, 0, int(repeats))
    d = _groups_from_result(spec, concurrency, k, int(repeats))
    version = spec.get("vllm_version")
    return LoadRun(concurrency, [r["tokens_per_s"] for r in a], [r["tokens_per_s"] for r in d], [r["tau"] for r in d],
                   int(k), version if isinstance(version, str) else "?", [r["runs"] for r in a], [r["runs"] for r in d])


def measure_costs_in_engine(target: str | Path, drafter: str | Path, prompts: list[list[int]], max_new_tokens: int,
                            k: int, concurrency: list[int], accept_lens: list[float], dtype: str = "float32",
                            max_model_len: int = 1024, repeats: int = 3, timeout_s: float = 900.0) -> CostTable:
    """A cost table measured in vLLM: plain decoding, then the speculative cycle at each forced τ, per concurrency.

    One engine start for plain decoding and one per forced τ, one after another in one worker process (vLLM
    builds the synthetic acceptance rates into its rejection sampler); in each, the first ``c`` prompts are
    batched per concurrency ``c``, ``repeats`` times, the concurrencies interleaved. One row per concurrency and
    repeat (the repeats' scatter is the fit's noise estimate). The drafter drafts and the target verifies for
    real; only the acceptance is forced. ``accept_len`` holds the τ MEASURED from vLLM's counters in that run:
    the forcing is a coin per step, so it scatters around the forced τ (the comments list forced beside
    measured). ``output_tok_s`` is generated tokens over the batched generate's wall time, prefill included (as
    :func:`measure_load_in_engine`): keep ``max_new_tokens`` large against the prompts for a decode-phase
    measurement. ``context`` is the batch's mean prompt tokens + ``max_new_tokens / 2``.

    Raises:
        ParameterError: a concurrency, ``k``, ``repeats``, ``max_new_tokens`` or forced τ out of range,
            before any engine starts.
        EngineError: no engine environment, a drafter it cannot run, or a failed run.
    """
    k, repeats = require_whole("k", k), require_whole("repeats", repeats)
    if require_whole("max_new_tokens", max_new_tokens) < 2:
        raise ParameterError("max_new_tokens", "must be >= 2: the first token comes from prefill, cycles after it")
    concurrency = [require_whole("concurrency", c) for c in concurrency]
    if not concurrency or max(concurrency) > len(prompts):
        raise ParameterError("concurrency", f"{concurrency} needs one prompt per request, got {len(prompts)} prompts")
    taus = list(accept_lens)
    bad = [t for t in taus if isinstance(t, bool) or not isinstance(t, (int, float)) or not 1 <= t <= k + 1]
    if not taus or bad:
        raise ParameterError("accept_lens", f"each forced τ must be a number in [1, k + 1] = [1, {k + 1}] (the bonus "
                                            f"token included), got {bad[0] if bad else 'none'!r:.40}")
    base = {"target": str(Path(target).resolve()), "prompts": [list(map(int, p)) for p in prompts],
            "max_new_tokens": int(max_new_tokens), "batch": "all", "dtype": dtype, "max_model_len": int(max_model_len),
            "seed": 0, "groups": concurrency, "repeats": repeats, **attention_backends(target, drafter)}
    context = {c: round(sum(map(len, prompts[:c])) / c + max_new_tokens / 2) for c in concurrency}
    with tempfile.TemporaryDirectory(prefix="eaglelab-engine-") as tmp:
        folder = str(engine_drafter(drafter, target, Path(tmp), k))
        results = run_workers([{**base, "drafter": None, "k": 0}] + [
            {**base, "drafter": folder, "k": k, "forced_accept_len": tau} for tau in map(float, taus)], timeout_s)
    plain = _groups_from_result(results[0], concurrency, 0, repeats)
    rows = [Measurement(g["concurrency"], 0, 1, 1, 1.0, context[g["concurrency"]], tps) for g in plain for tps in g["runs"]]
    forced, version, sampler = [], "?", "?"
    for tau, result in zip(map(float, taus), results[1:]):
        version, sampler = str(result.get("vllm_version"))[:40], str(result.get("synthetic_sampler"))[:40]
        for g, raw in zip(_groups_from_result(result, concurrency, k, repeats), result["groups"]):
            measured = _measured_taus(raw, k, repeats)
            rows += [Measurement(g["concurrency"], k, k + 1, 1, t, context[g["concurrency"]], tps)
                     for t, tps in zip(measured, g["runs"])]
            forced.append(f"{tau:g} -> {', '.join(f'{t:.3f}' for t in measured)} (c {g['concurrency']})")
    comments = [f"engine: vllm {version}", f"synthetic_sampler: {sampler} (vllm: its own kernel)",
                f"target: {Path(target).resolve()}", f"drafter: {Path(drafter).resolve()}", f"dtype: {dtype}",
                f"k: {k}", f"date: {datetime.now(UTC).isoformat(timespec='seconds')}",
                f"repeats: {repeats} (one row each); output_tok_s includes prefill ({max_new_tokens} new tokens a request)",
                "accept_len: the tau measured per run (forced -> measured): " + "; ".join(forced)]
    return CostTable(tuple(rows), tuple(one_line(c) for c in comments))


def _measured_taus(group: dict[str, Any], k: int, repeats: int) -> list[float]:
    """A forced group's per-run measured τ (``tau_runs``), each in [1, k + 1]; a run with no drafting step is an error."""
    runs = group.get("tau_runs")
    if not isinstance(runs, list) or len(runs) != repeats or not all(
            isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and 1 <= t <= k + 1 for t in runs):
        raise EngineError("vllm worker result", f"field 'tau_runs' must hold one τ in [1, {k + 1}] per repeat ({repeats}): "
                                                "every run needs drafting steps")
    return [float(t) for t in runs]
