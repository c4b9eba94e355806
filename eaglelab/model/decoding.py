"""Greedy decoding and EAGLE-3 speculative decoding with KV caches on both sides.

One speculative cycle (chain of k drafts, batch 1):

1. *draft*: the drafter extends its cache with the positions whose target states are new
   (the accepted tokens of the last cycle), which yields draft 1; k - 1 more steps each feed
   the drafter's own output back and yield one more draft.
2. *verify*: one target forward over [last token, d_1..d_k]; the target's argmax at each
   position says how many drafts match; the first mismatch position gives the bonus token.
3. *overhead*: cropping both caches to the accepted prefix and bookkeeping.

The emitted text equals plain greedy decoding token for token: every emitted token is the
target's own argmax given the accepted prefix.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from eaglelab.model.drafter import DrafterKV, Eagle3Drafter
from eaglelab.model.targets import Target, crop_cache


@dataclass
class CycleStats:
    """One speculative cycle.

    Attributes:
        accepted: drafts accepted (0..k).
        emitted: tokens emitted = accepted + 1 (the bonus token), SGLang's accept length.
        draft_s, verify_s, overhead_s: wall time of the three parts.
    """

    accepted: int
    emitted: int
    draft_s: float
    verify_s: float
    overhead_s: float


@dataclass
class DecodeResult:
    """Generated tokens and timings.

    Attributes:
        tokens: generated ids (prompt excluded).
        seconds: wall time after the prefill (which yields the first token).
        prefill_s: time of the prompt's forward(s).
        cycles: per-cycle stats (speculative decoding only).
        k: draft length (0 for plain greedy).
    """

    tokens: list[int]
    seconds: float
    prefill_s: float
    cycles: list[CycleStats] = field(default_factory=list)
    k: int = 0

    @property
    def tokens_per_s(self) -> float:
        """Decode throughput: tokens after the first (which the prefill yields) per second."""
        return (len(self.tokens) - 1) / self.seconds if self.seconds > 0 else float("nan")

    @property
    def accept_len(self) -> float:
        """Mean tokens emitted per cycle, bonus included (1.0 means no gain)."""
        return sum(c.emitted for c in self.cycles) / len(self.cycles) if self.cycles else float("nan")

    def time_split(self) -> dict[str, float]:
        """Mean seconds per cycle in draft / verify / overhead."""
        n = max(len(self.cycles), 1)
        return {"draft_s": sum(c.draft_s for c in self.cycles) / n,
                "verify_s": sum(c.verify_s for c in self.cycles) / n,
                "overhead_s": sum(c.overhead_s for c in self.cycles) / n}

    def position_acceptance(self) -> list[float]:
        """Per-position conditional acceptance rates measured from the cycles: P(d_i ok | d_<i ok)."""
        rates = []
        for i in range(1, self.k + 1):
            reached = sum(1 for c in self.cycles if c.accepted >= i - 1)
            ok = sum(1 for c in self.cycles if c.accepted >= i)
            rates.append(ok / reached if reached else float("nan"))
        return rates


def _stop(tokens: list[int], max_new: int, eos: set[int]) -> bool:
    return len(tokens) >= max_new or (bool(tokens) and tokens[-1] in eos)


def _eos_ids(target: Target, eos_token_id) -> set[int]:
    if eos_token_id is None:
        eos_token_id = getattr(target.config, "eos_token_id", None)
    if eos_token_id is None:
        return set()
    return set(eos_token_id) if isinstance(eos_token_id, list | tuple) else {int(eos_token_id)}


@torch.no_grad()
def greedy_decode(target: Target, prompt_ids: list[int], max_new_tokens: int,
                  eos_token_id=None) -> DecodeResult:
    """Plain greedy decoding with the target's KV cache, one token per forward."""
    from transformers import DynamicCache

    eos = _eos_ids(target, eos_token_id)
    dev = target.device
    t0 = time.perf_counter()
    cache = DynamicCache()
    out = target.forward(torch.tensor([prompt_ids], device=dev), cache, use_cache=True)
    nxt = int(out.logits[0, -1].argmax())
    prefill = time.perf_counter() - t0
    tokens = [nxt]
    t1 = time.perf_counter()
    while not _stop(tokens, max_new_tokens, eos):
        out = target.forward(torch.tensor([[nxt]], device=dev), cache, use_cache=True)
        nxt = int(out.logits[0, -1].argmax())
        tokens.append(nxt)
    return DecodeResult(tokens, time.perf_counter() - t1, prefill)


@torch.no_grad()
def speculative_decode(target: Target, drafter: Eagle3Drafter, prompt_ids: list[int], max_new_tokens: int,
                       k: int = 4, eos_token_id=None) -> DecodeResult:
    """Greedy EAGLE-3 speculative decoding (chain of k drafts), batch 1.

    Args:
        target: the verifier, capturing the drafter's aux layers.
        drafter: the EAGLE-3 drafter (embedding set from the target if it was not saved).
        prompt_ids: prompt token ids.
        max_new_tokens: stop after this many tokens (the last cycle may be cut).
        k: drafts per cycle.
        eos_token_id: stop token(s); default from the target's config.

    Returns:
        DecodeResult whose ``tokens`` equal :func:`greedy_decode`'s.
    """
    from transformers import DynamicCache

    if k < 1:
        raise ValueError("k must be >= 1")
    if not drafter.has_embedding:
        drafter.set_embedding(target.input_embedding().to(drafter.embed_tokens.weight.dtype))
    eos = _eos_ids(target, eos_token_id)
    dev = target.device
    dtype = drafter.fc.weight.dtype

    t0 = time.perf_counter()
    tcache = DynamicCache()
    out = target.forward(torch.tensor([prompt_ids], device=dev), tcache, use_cache=True)
    bonus = int(out.logits[0, -1].argmax())
    n = len(prompt_ids)
    # positions [0, n) have target states; their "next token" is prompt[1:] + [bonus]
    new_states = out.aux
    new_next = prompt_ids[1:] + [bonus]
    dcache = DrafterKV()
    prefill = time.perf_counter() - t0

    tokens = [bonus]
    cycles: list[CycleStats] = []
    t1 = time.perf_counter()
    while not _stop(tokens, max_new_tokens, eos):
        # ---- draft
        ta = time.perf_counter()
        start = dcache.length
        m = new_states.shape[1]
        pos = torch.arange(start, start + m, device=dev)[None]
        h = drafter.step(torch.tensor([new_next], device=dev), drafter.project(new_states.to(dtype)), pos, dcache)
        h = h[:, -1:]
        drafts = [int(drafter.to_target_ids(drafter.logits(h)[0, -1].argmax()))]
        base_len = dcache.length  # drafter cache holds true states up to here
        for j in range(1, k):
            pos = torch.tensor([[base_len - 1 + j]], device=dev)
            h = drafter.step(torch.tensor([[drafts[-1]]], device=dev), drafter.feed_back(h), pos, dcache)
            drafts.append(int(drafter.to_target_ids(drafter.logits(h)[0, -1].argmax())))
        tb = time.perf_counter()
        # ---- verify: [bonus, d_1..d_k] at positions n..n+k
        out = target.forward(torch.tensor([[tokens[-1]] + drafts], device=dev), tcache, use_cache=True)
        pred = out.logits[0].argmax(-1).tolist()  # pred[i] = target's token after position n + i
        tc = time.perf_counter()
        # ---- accept
        acc = 0
        while acc < k and drafts[acc] == pred[acc]:
            acc += 1
        new_tokens = drafts[:acc] + [pred[acc]]
        room = max_new_tokens - len(tokens)
        cut = new_tokens[:room]
        for i, tok in enumerate(cut):
            if tok in eos:
                cut = cut[: i + 1]
                break
        tokens.extend(cut)
        # keep target cache for [.., bonus, d_1..d_acc] = n + acc + 1 positions
        crop_cache(tcache, n + acc + 1)
        dcache.crop(base_len)
        new_states = out.aux[:, : acc + 1]
        new_next = new_tokens
        n += acc + 1
        td = time.perf_counter()
        cycles.append(CycleStats(acc, acc + 1, tb - ta, tc - tb, td - tc))
    return DecodeResult(tokens, time.perf_counter() - t1, prefill, cycles, k)


def benchmark_speculation(target: Target, drafter: Eagle3Drafter, prompts: list[list[int]], max_new_tokens: int,
                          k: int = 4, warmup: bool = True, cpu_kernels: bool | None = None,
                          keep_outputs: bool = False) -> dict:
    """Speculative vs plain greedy decoding over prompts, in the same process, with the model's prediction.

    Plain and speculative decoding of each prompt alternate, so drifts of a shared machine hit
    both alike.

    Args:
        cpu_kernels: route the target's linear layers through the small-batch CPU path for the
            run (:mod:`eaglelab.model.cpu_kernels`; plain decoding's one-row forwards are unchanged by
            it). Default: on when the target is on the CPU.

    Returns:
        dict with ``accept_len`` (emitted per cycle over all cycles), ``tokens_per_s`` and
        ``greedy_tokens_per_s`` (decode tokens over decode seconds, all prompts),
        ``speedup``, ``matches_greedy`` (all prompts), the mean cycle split
        ``draft_s`` / ``verify_s`` / ``overhead_s``, ``position_acceptance``, and
        ``predicted_tokens_per_s`` = τ / mean cycle (the performance model) with its
        relative error against the measurement, ``cpu_kernels``, and with ``keep_outputs`` the generated
        ids per prompt (``outputs``).
    """
    from eaglelab.model.cpu_kernels import small_batch_kernels

    if cpu_kernels is None:
        cpu_kernels = target.device.type == "cpu"
    with small_batch_kernels(target.model, enabled=cpu_kernels):
        if warmup and prompts:
            speculative_decode(target, drafter, prompts[0], 8, k)
            greedy_decode(target, prompts[0], 8)
        spec_runs, greedy_runs = [], []
        for ids in prompts:
            greedy_runs.append(greedy_decode(target, ids, max_new_tokens))
            spec_runs.append(speculative_decode(target, drafter, ids, max_new_tokens, k))
    cycles = [c for r in spec_runs for c in r.cycles]
    n_cycles = max(len(cycles), 1)
    tau = sum(c.emitted for c in cycles) / n_cycles
    split = {name: sum(getattr(c, name) for c in cycles) / n_cycles for name in ("draft_s", "verify_s", "overhead_s")}
    spec_tps = sum(len(r.tokens) - 1 for r in spec_runs) / sum(r.seconds for r in spec_runs)
    greedy_tps = sum(len(r.tokens) - 1 for r in greedy_runs) / sum(r.seconds for r in greedy_runs)
    cycle_s = sum(split.values())
    predicted = tau / cycle_s
    merged = DecodeResult([], 0.0, 0.0, cycles, k)
    return {
        "k": k, "prompts": len(prompts), "cycles": len(cycles), "accept_len": tau,
        "tokens_per_s": spec_tps, "greedy_tokens_per_s": greedy_tps, "speedup": spec_tps / greedy_tps,
        "matches_greedy": all(s.tokens == g.tokens for s, g in zip(spec_runs, greedy_runs)),
        **split, "cycle_s": cycle_s, "greedy_step_s": 1.0 / greedy_tps,
        "position_acceptance": merged.position_acceptance(),
        "predicted_tokens_per_s": predicted, "prediction_error": predicted / spec_tps - 1.0,
        "cpu_kernels": cpu_kernels, **({"outputs": [r.tokens for r in greedy_runs]} if keep_outputs else {}),
    }
