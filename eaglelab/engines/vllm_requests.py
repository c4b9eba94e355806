"""The vLLM worker's request contract, checked before any engine starts (the fields: :mod:`eaglelab.engines.vllm_worker`).

Standard library only: loaded by path by the worker inside vLLM's environment, where eaglelab is not installed.
"""

from __future__ import annotations

import json
import os
import sys

#: Requests one list may hold (each builds an engine: a list is a batch of measurements, not a queue).
MAX_REQUESTS = 64


class RequestError(ValueError):
    pass


def read_request(argv: list[str]) -> dict | list:
    src = argv[1] if len(argv) > 1 and argv[1] != "-" else None
    text = open(src, encoding="utf-8").read() if src else sys.stdin.read()
    try:
        req = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestError(f"request is not JSON: {exc}") from None
    if isinstance(req, list):
        if not 1 <= len(req) <= MAX_REQUESTS or not all(isinstance(r, dict) for r in req):
            raise RequestError(f"a list of requests must hold 1 to {MAX_REQUESTS} JSON objects")
        return req
    if not isinstance(req, dict):
        raise RequestError("request must be a JSON object or a list of them")
    return req


def place(i: int, n: int) -> str:
    """Which request of a list an error is about ("" for a request alone)."""
    return f"request {i + 1} of {n}: " if n > 1 else ""


def validate_all(raw: dict | list) -> list[dict]:
    """Every request of the list checked before the first engine starts; one log for them all."""
    many = raw if isinstance(raw, list) else [raw]
    reqs = []
    for i, r in enumerate(many):
        try:
            reqs.append(validate(r))
        except RequestError as exc:
            raise RequestError(f"{place(i, len(many))}{exc}") from None
    if any(r["log_file"] not in (None, reqs[0]["log_file"]) for r in reqs[1:]):
        raise RequestError("the requests of a list share one log: give log_file in the first only")
    return reqs


def validate(req: dict) -> dict:
    def need(key, kind):
        if key not in req:
            raise RequestError(f"missing field {key!r}")
        if not isinstance(req[key], kind) or isinstance(req[key], bool):
            raise RequestError(f"field {key!r} must be {getattr(kind, '__name__', kind)}")
        return req[key]

    target = need("target", str)
    if not os.path.isabs(target) or not os.path.isdir(target):
        raise RequestError(f"target must be an absolute path of a folder: {target!r}")
    drafter = req.get("drafter")
    if drafter is not None:
        if not isinstance(drafter, str) or not os.path.isabs(drafter) or not os.path.isdir(drafter):
            raise RequestError(f"drafter must be null or an absolute path of a folder: {drafter!r}")
    k = need("k", int) if drafter is not None else int(req.get("k") or 0)
    if drafter is not None and k < 1:
        raise RequestError("k must be >= 1 with a drafter")
    prompts = need("prompts", list)
    if not prompts or not all(isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool)
                                                                 for t in p) for p in prompts):
        raise RequestError("prompts must be a non-empty list of non-empty lists of token ids")
    max_new = need("max_new_tokens", int)
    if max_new < 1:
        raise RequestError("max_new_tokens must be >= 1")
    batch = req.get("batch", "all")
    if batch not in ("one", "all"):
        raise RequestError("batch must be 'one' or 'all'")
    dtype = req.get("dtype", "float32")
    if dtype not in ("float32", "bfloat16"):
        raise RequestError("dtype must be 'float32' or 'bfloat16'")
    max_len = need("max_model_len", int)
    longest = max(len(p) for p in prompts) + max_new + k
    if longest > max_len:
        raise RequestError(f"max_model_len {max_len} < longest prompt + max_new_tokens + k = {longest}")
    seed = req.get("seed", 0)
    stops = req.get("stop_token_ids") or []
    if not isinstance(stops, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in stops):
        raise RequestError("stop_token_ids must be a list of token ids")
    extra = req.get("llm_kwargs") or {}
    if not isinstance(extra, dict):
        raise RequestError("llm_kwargs must be an object")
    groups = req.get("groups")
    if groups is not None and (not isinstance(groups, list) or not groups or not all(
            isinstance(g, int) and not isinstance(g, bool) and 1 <= g <= len(prompts) for g in groups)):
        raise RequestError("groups must be a non-empty list of concurrencies, each at most the number of prompts")
    repeats = req.get("repeats", 1)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= 100:
        raise RequestError("repeats must be a whole number in [1, 100]")
    forced = forced_accept_len(req.get("forced_accept_len"), drafter, k)
    backends = {key: req.get(key) for key in ("attention_backend", "draft_attention_backend")}
    for key, value in backends.items():
        if value is not None and (not isinstance(value, str) or not value.replace("_", "").isalnum()):
            raise RequestError(f"{key} must be null or a backend name such as CPU_MLA")
    return {"target": target, "drafter": drafter, "k": k if drafter is not None else 0, "prompts": prompts,
            "max_new_tokens": max_new, "batch": batch, "dtype": dtype, "max_model_len": max_len,
            "seed": int(seed), "kv_cache_gib": req.get("kv_cache_gib", 1),
            "threads_bind": req.get("threads_bind", "nobind"), "log_file": req.get("log_file"),
            "llm_kwargs": extra, "stop_token_ids": stops, "groups": groups,
            "repeats": repeats, "forced_accept_len": forced, **backends}


def forced_accept_len(value, drafter, k: int) -> float | None:
    """The request's forced τ, checked: a finite number in [1, k + 1], and only with a drafter."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise RequestError(f"forced_accept_len must be null or a number in [1, k + 1], got {value!r:.40}")
    if drafter is None:
        raise RequestError("forced_accept_len needs a drafter (it forces the speculative cycle's acceptance)")
    if not 1.0 <= value <= k + 1:
        raise RequestError(f"forced_accept_len {value!r:.40} is not in [1, k + 1] = [1, {k + 1}] "
                           "(τ counts the bonus token)")
    return float(value)
