"""Read (and write) the per-token logprobs serving engines return for teacher-forced text, as JSONL.

One line per request, the engine's response as it comes back, in any of three layouts (detected per line):

- **vLLM, OpenAI server** (``/v1/completions`` with ``"prompt_logprobs": k``, ``"max_tokens": 1`` and
  ``"return_token_ids": true``, vLLM >= 0.11): ``{"choices": [{"prompt_token_ids": [...], "prompt_logprobs":
  [null, {"<id>": {"logprob": x, "rank": r, "decoded_token": s}, ...}, ...]}]}`` (the chat endpoint
  puts ``prompt_logprobs`` at the top level; both are read);
- **vLLM, offline** (``LLM.generate`` with ``SamplingParams(prompt_logprobs=k)``, the ``RequestOutput``
  written as JSON): ``{"prompt_token_ids": [...], "prompt_logprobs": [null, {"<id>": {"logprob": x,
  ...}} | {"<id>": x}, ...]}``;
- **SGLang** (``/generate`` with ``"return_logprob": true, "logprob_start_len": 0, "top_logprobs_num": k``):
  ``{"meta_info": {"input_token_logprobs": [[null, id, null], [x, id, null], ...],
  "input_top_logprobs": [null, [[x, id, null], ...], ...]}}``; a batch request's JSON list of
  such objects on one line is read as that many responses.

Entry i of either list is the distribution over token i given tokens < i (entry 0 has none). An
optional top-level ``"count_from": n`` says where the counted text starts (for instance the first
token of the model's reply, since acceptance is measured on generated text); default 1.

Every line is hostile until checked: lines are capped in size, numbers must be finite logprobs
(``-Infinity`` allowed), token ids non-negative integers; a problem names the file and the line.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from eaglelab.atomic import write_text_atomic
from eaglelab.errors import EaglelabError
from eaglelab.inputs import is_ascii_digits, open_regular

MAX_LINE_BYTES = 256 << 20


class EngineFileError(EaglelabError):
    """An engine logprob file cannot be read, or two files do not cover the same text."""


@dataclass
class LogprobSequence:
    """One teacher-forced request as the engine scored it.

    Attributes:
        token_ids: the text's token ids.
        dists: per position, None or {token id: logprob} (the top k, and the text's token when given).
        count_from: first position counted.
    """

    token_ids: list[int]
    dists: list[dict[int, float] | None]
    count_from: int = 1

    def top1(self, i: int) -> int:
        """The most likely token at position i (ties: the smaller id, as argmax)."""
        d = self.dists[i]
        best = max(d.values())
        return min(t for t, lp in d.items() if lp == best)


def _logprob(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: logprob {value!r} is not a number")
    x = float(value)
    if math.isnan(x) or x > 1e-4:
        raise ValueError(f"{where}: logprob {x} is not a log-probability (<= 0)")
    return x


def _token(value, where: str) -> int:
    if is_ascii_digits(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: token id {value!r} is not a non-negative integer")
    return value


#: How far the probabilities of one position's returned tokens may sum past 1 (the engines' float rounding).
MASS_SLACK = 1e-3


def _distribution(dist: dict[int, float], where: str) -> dict[int, float]:
    """A position's returned tokens, checked to be part of one distribution: their probabilities sum to at most 1."""
    mass = sum(math.exp(lp) for lp in dist.values())
    if mass > 1 + MASS_SLACK:
        raise ValueError(f"{where}: the returned tokens' probabilities sum to {mass:.3f}, more than 1: not the "
                         "log-probabilities of one distribution")
    return dist


def _vllm_dist(entry, where: str) -> dict[int, float] | None:
    if entry is None:
        return None
    if not isinstance(entry, dict) or not entry:
        raise ValueError(f"{where}: expected an object of token id -> logprob")
    out = {}
    for key, v in entry.items():
        lp = v.get("logprob") if isinstance(v, dict) else v
        out[_token(key, where)] = _logprob(lp, where)
    return _distribution(out, where)


def _sglang_pair(item, where: str) -> tuple[float | None, int]:
    if not isinstance(item, list) or len(item) < 2:
        raise ValueError(f"{where}: expected [logprob, token id, text]")
    lp = None if item[0] is None else _logprob(item[0], where)
    return lp, _token(item[1], where)


def parse_response(obj) -> LogprobSequence:
    """One response object (any of the three layouts) as a :class:`LogprobSequence`; ValueError when malformed."""
    if not isinstance(obj, dict):
        raise ValueError("a line must be a JSON object")
    count_from = obj.get("count_from", 1)
    if isinstance(count_from, bool) or not isinstance(count_from, int) or count_from < 1:
        raise ValueError(f"count_from {count_from!r} must be an integer >= 1")
    body = obj
    if isinstance(obj.get("choices"), list):
        if len(obj["choices"]) != 1:
            raise ValueError("one choice per line expected (send n = 1)")
        body = obj["choices"][0]
        if not isinstance(body, dict):
            raise ValueError("choices[0] is not an object")
    if "prompt_logprobs" in body or "prompt_logprobs" in obj:  # the chat endpoint keeps them at the top level
        logprobs = body.get("prompt_logprobs", obj.get("prompt_logprobs"))
        ids = body.get("prompt_token_ids", obj.get("prompt_token_ids"))
        if not isinstance(ids, list):
            raise ValueError("prompt_token_ids missing (send \"return_token_ids\": true, vLLM >= 0.11)")
        if not isinstance(logprobs, list) or len(logprobs) != len(ids):
            raise ValueError(f"prompt_logprobs must be a list as long as prompt_token_ids ({len(ids)})")
        tokens = [_token(t, f"prompt_token_ids[{i}]") for i, t in enumerate(ids)]
        dists = [_vllm_dist(e, f"prompt_logprobs[{i}]") for i, e in enumerate(logprobs)]
        for i, d in enumerate(dists):
            if d is not None and i == 0:
                raise ValueError("prompt_logprobs[0] must be null (no distribution before the first token)")
        return LogprobSequence(tokens, dists, count_from)
    meta = obj.get("meta_info")
    if isinstance(meta, dict) and "input_token_logprobs" in meta:
        toks, tops = meta["input_token_logprobs"], meta.get("input_top_logprobs")
        if not isinstance(toks, list) or not isinstance(tops, list) or len(tops) != len(toks):
            raise ValueError("input_token_logprobs and input_top_logprobs must be lists of the same length "
                             "(send top_logprobs_num > 0)")
        tokens, dists = [], []
        for i, (pair, top) in enumerate(zip(toks, tops)):
            lp, tok = _sglang_pair(pair, f"input_token_logprobs[{i}]")
            tokens.append(tok)
            if lp is None or top is None:
                dists.append(None)
                continue
            if not isinstance(top, list) or not top:
                raise ValueError(f"input_top_logprobs[{i}] must be a list of [logprob, token id, text]")
            d = dict(_sglang_pair(t, f"input_top_logprobs[{i}]")[::-1] for t in top)
            if any(v is None for v in d.values()):
                raise ValueError(f"input_top_logprobs[{i}] holds a null logprob")
            d.setdefault(tok, lp)
            dists.append(_distribution(d, f"input_top_logprobs[{i}]"))
        return LogprobSequence(tokens, dists, count_from)
    raise ValueError("neither a vLLM (prompt_logprobs) nor an SGLang (meta_info.input_token_logprobs) response")


def _reject_constant(name: str):
    if name == "-Infinity":
        return -math.inf
    raise ValueError(f"{name} is not a valid number")


def _lines(fh, where: Path):
    """Lines of at most MAX_LINE_BYTES + 1 bytes; a read error (a failing disk, /proc) becomes one line."""
    while True:
        try:
            raw = fh.readline(MAX_LINE_BYTES + 1)
        except OSError as exc:
            raise EngineFileError(where, f"cannot read ({exc.strerror or type(exc).__name__})") from None
        if not raw:
            return
        yield raw


def read_logprob_file(path: str | Path) -> list[LogprobSequence]:
    """Every line of a JSONL file of engine responses (blank lines skipped).

    Raises:
        EngineFileError: not a regular file, an over-long line, bad JSON or an unknown / malformed layout,
            naming the file and line; or no response at all.
    """
    p = Path(path)
    out = []
    with open_regular(p, EngineFileError) as fh:
        for n, raw in enumerate(_lines(fh, p), start=1):
            if len(raw) > MAX_LINE_BYTES:
                raise EngineFileError(f"{p}:{n}", f"line longer than {MAX_LINE_BYTES >> 20} MiB")
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
                out.extend(parse_response(o) for o in (obj if isinstance(obj, list) else [obj]))
            except (UnicodeDecodeError, json.JSONDecodeError, ValueError, RecursionError) as exc:
                raise EngineFileError(f"{p}:{n}", str(exc).splitlines()[0][:300]) from None
    if not out:
        raise EngineFileError(p, "no responses in the file")
    return out


@dataclass
class TargetComparison:
    """Old vs new target on the same teacher-forced text, per sequence (what the predictors read).

    Attributes:
        agree: [n_seq] top-1 agreements counted per sequence.
        tv: [n_seq] summed total variation per sequence, through the top k both engines returned (a lower
            bound of the true TV; :func:`eaglelab.drift.measures.tv_top_k` is the same on live logits).
        positions: [n_seq] positions counted.
    """

    agree: np.ndarray
    tv: np.ndarray
    positions: np.ndarray

    @property
    def agreement(self) -> float:
        return float(self.agree.sum() / max(self.positions.sum(), 1))

    @property
    def tv_mean(self) -> float:
        return float(self.tv.sum() / max(self.positions.sum(), 1))

    def measures(self, idx: np.ndarray | None = None) -> dict[str, float]:
        """``agreement`` and ``tv_topk`` over all sequences, or over the sequences ``idx`` (a bootstrap draw)."""
        if idx is None:
            return {"agreement": self.agreement, "tv_topk": self.tv_mean}
        n = max(self.positions[idx].sum(), 1)
        return {"agreement": float(self.agree[idx].sum() / n), "tv_topk": float(self.tv[idx].sum() / n)}


def _tv_common(p: dict[int, float], q: dict[int, float]) -> float:
    """Total variation of p and q coarsened to their common tokens plus "the rest": a lower bound of the true TV."""
    common = p.keys() & q.keys()
    a = {t: math.exp(p[t]) for t in common}
    b = {t: math.exp(q[t]) for t in common}
    rest = abs((1 - sum(a.values())) - (1 - sum(b.values())))
    return 0.5 * (sum(abs(a[t] - b[t]) for t in common) + rest)


def compare_logprobs(old: list[LogprobSequence], new: list[LogprobSequence], where: str = "files") -> TargetComparison:
    """Pair the two targets' responses line by line (same text) and count agreement and TV per sequence."""
    if len(old) != len(new):
        raise EngineFileError(where, f"the old target's file has {len(old)} responses, the new one's {len(new)}")
    agree, tv, pos = [], [], []
    for n, (a, b) in enumerate(zip(old, new), start=1):
        if a.token_ids != b.token_ids:
            raise EngineFileError(where, f"response {n}: the two targets scored different texts")
        start = max(a.count_from, b.count_from)
        idx = [i for i in range(start, len(a.token_ids)) if a.dists[i] is not None and b.dists[i] is not None]
        agree.append(sum(a.top1(i) == b.top1(i) for i in idx))
        tv.append(sum(_tv_common(a.dists[i], b.dists[i]) for i in idx))
        pos.append(len(idx))
    if not sum(pos):
        raise EngineFileError(where, "no position has a distribution from both targets")
    return TargetComparison(np.array(agree, float), np.array(tv, float), np.array(pos, float))


def vllm_response(seq: dict) -> dict:
    """A sequence of :func:`eaglelab.drift.measures.top_logprobs` in vLLM's OpenAI-server layout (one choice)."""
    entries = [None]
    for top in seq["top"][1:]:
        ranked = sorted(top.items(), key=lambda kv: -kv[1])
        rank = {t: r for r, (t, _) in enumerate(ranked, start=1)}
        entries.append({str(t): {"logprob": lp, "rank": rank[t], "decoded_token": None} for t, lp in top.items()})
    choice = {"index": 0, "text": "", "prompt_token_ids": seq["token_ids"], "prompt_logprobs": entries}
    return {"object": "text_completion", "choices": [choice], "count_from": seq["count_from"]}


def sglang_response(seq: dict) -> dict:
    """The same sequence in SGLang's ``/generate`` layout with ``return_logprob``."""
    toks, tops = [], []
    for i, t in enumerate(seq["token_ids"]):
        top = seq["top"][i]
        toks.append([None if top is None else top[t], t, None])
        tops.append(None if top is None else [[lp, tid, None] for tid, lp in sorted(top.items(), key=lambda kv: -kv[1])])
    return {"text": "", "meta_info": {"input_token_logprobs": toks, "input_top_logprobs": tops},
            "count_from": seq["count_from"]}


def write_jsonl(path: str | Path, responses: list[dict]) -> Path:
    """Write responses one per line, atomically."""
    return write_text_atomic(Path(path), "".join(json.dumps(r) + "\n" for r in responses))
