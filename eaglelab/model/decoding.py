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

import statistics
import time
from dataclasses import dataclass, field

import torch

from eaglelab.model.attention import DrafterKV
from eaglelab.model.cpu_kernels import small_batch_kernels
from eaglelab.model.drafter import Eagle3Drafter
from eaglelab.model.targets import Target, crop_cache
from eaglelab.progress import progress as bar
from eaglelab.serving.speculation import Speculation, Speculations
from eaglelab.settings import DEFAULT_K


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
                       k: int = DEFAULT_K, eos_token_id=None) -> DecodeResult:
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
    if not drafter.has_embedding or not drafter.has_head:
        drafter.set_embedding(target.input_embedding().to(drafter.embed_tokens.weight.dtype),
                              target.model.get_output_embeddings().weight.detach())
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


NOISE_LIMIT = 0.30  # how much (relative range) step time and verify cost may vary across runs and still be trusted
BOUND_SLACK = 0.10  # a measured speedup may exceed what τ and the verify cost allow by this much (timer noise)
MIN_PAIRS = 3  # interleaved (plain, speculative) pairs needed before their spread can say whether the machine was quiet


def benchmark_speculation(target: Target, drafter: Eagle3Drafter, prompts: list[list[int]], max_new_tokens: int,
                          k: int = DEFAULT_K, warmup: bool = True, cpu_kernels: bool | None = None,
                          keep_outputs: bool = False, repeats: int = 1, progress: bool = True) -> Speculation:
    """Speculative vs plain greedy decoding over prompts, in the same process, with the model's prediction.

    One drafter's entry of :func:`benchmark_drafters` (see there for the arguments).
    """
    return benchmark_drafters(target, {"drafter": drafter}, prompts, max_new_tokens, k, warmup, cpu_kernels,
                              keep_outputs, repeats, progress)["drafter"]


def benchmark_drafters(target: Target, drafters: dict[str, Eagle3Drafter], prompts: list[list[int]],
                       max_new_tokens: int, k: int = DEFAULT_K, warmup: bool = True, cpu_kernels: bool | None = None,
                       keep_outputs: bool = False, repeats: int = 1, progress: bool = True) -> Speculations:
    """Each drafter's speculative decoding against one shared plain-greedy baseline, interleaved.

    For every repeat and prompt, plain decoding runs first and then each drafter in turn, so drifts
    of a shared machine hit all alike and every drafter's speedup is against the same baseline.
    Each (repeat, prompt) pair is one timing sample: how much they vary says whether the machine
    was quiet enough to measure (:func:`timing_trust`).

    Args:
        drafters: ``{name: drafter}``; the result has the same keys.
        cpu_kernels: route the target's linear layers through the small-batch CPU path for the
            run (:mod:`eaglelab.model.cpu_kernels`; plain decoding's one-row forwards are unchanged by
            it). Default: on when the target is on the CPU.
        repeats: passes over the prompts (more samples for the spread).
        progress: a bar over the runs.

    Returns:
        one :class:`~eaglelab.serving.speculation.Speculation` per name: ``accept_len`` (emitted per cycle over all
        cycles), ``tokens_per_s`` and ``greedy_tokens_per_s`` (decode tokens over decode seconds, all runs),
        ``prompt_counts`` (per prompt, tokens emitted and cycles: the unit a band of τ resamples,
        :func:`eaglelab.recommendation.recommend`), ``matches_greedy`` (all runs), the mean cycle split,
        ``position_acceptance``, the timing check (``timing``: medians and ranges, ``ok`` and ``note``), and with
        ``keep_outputs`` the generated ids per prompt (``outputs``); the model's prediction (τ / mean cycle) is its
        ``predicted_tokens_per_s``.
    """
    if cpu_kernels is None:
        cpu_kernels = target.device.type == "cpu"
    greedy_runs: list[DecodeResult] = []
    spec_runs: dict[str, list[DecodeResult]] = {name: [] for name in drafters}
    with small_batch_kernels(target.model, enabled=cpu_kernels):
        if warmup and prompts:
            for d in drafters.values():
                speculative_decode(target, d, prompts[0], 8, k)
            greedy_decode(target, prompts[0], 8)
        runs = [ids for _ in range(max(1, repeats)) for ids in prompts]
        for ids in bar(runs, desc=f"plain vs {len(drafters)} drafter(s)", disable=not progress):
            greedy_runs.append(greedy_decode(target, ids, max_new_tokens))
            for name, d in drafters.items():
                spec_runs[name].append(speculative_decode(target, d, ids, max_new_tokens, k))
    return Speculations({name: _summary(greedy_runs, runs_, k, cpu_kernels, keep_outputs, len(prompts))
                         for name, runs_ in spec_runs.items()})


def measure_acceptance(target: Target, drafter: Eagle3Drafter, prompts: list[list[int]], max_new_tokens: int,
                       k: int = DEFAULT_K, cpu_kernels: bool | None = None, progress: bool = False) -> dict:
    """τ of real speculative decoding alone: no plain-decoding baseline, no warm-up, no timing.

    For a measurement that wants the acceptance and not the speed (a drift sweep's measured points): the
    same cycles, and so the same ``accept_len`` and ``position_acceptance``, as :func:`benchmark_speculation`
    on the same prompts, in about half its time.

    Returns:
        ``k``, ``prompts``, ``cycles``, ``accept_len``, ``position_acceptance`` and ``outputs`` (the generated
        ids per prompt, plain greedy decoding's text: :func:`speculative_decode`).
    """
    if cpu_kernels is None:
        cpu_kernels = target.device.type == "cpu"
    with small_batch_kernels(target.model, enabled=cpu_kernels):  # the verify as the benchmark runs it
        runs = [speculative_decode(target, drafter, ids, max_new_tokens, k)
                for ids in bar(prompts, desc="speculative decoding", disable=not progress)]
    merged = DecodeResult([], 0.0, 0.0, [c for r in runs for c in r.cycles], k)
    return {"k": k, "prompts": len(prompts), "cycles": len(merged.cycles), "accept_len": merged.accept_len,
            "position_acceptance": merged.position_acceptance(), "outputs": [r.tokens for r in runs]}


def _tps(runs: list[DecodeResult]) -> float:
    return sum(len(r.tokens) - 1 for r in runs) / max(sum(r.seconds for r in runs), 1e-12)


def _summary(greedy_runs: list[DecodeResult], spec_runs: list[DecodeResult], k: int, cpu_kernels: bool,
             keep_outputs: bool, n_prompts: int) -> Speculation:
    cycles = [c for r in spec_runs for c in r.cycles]
    n_cycles = max(len(cycles), 1)
    tau = sum(c.emitted for c in cycles) / n_cycles
    split = {name: sum(getattr(c, name) for c in cycles) / n_cycles for name in ("draft_s", "verify_s", "overhead_s")}
    merged = DecodeResult([], 0.0, 0.0, cycles, k)
    prompt_counts = [[0, 0] for _ in range(max(n_prompts, 1))]  # per prompt: tokens emitted, cycles (repeats summed)
    for i, r in enumerate(spec_runs):
        prompt_counts[i % len(prompt_counts)][0] += sum(c.emitted for c in r.cycles)
        prompt_counts[i % len(prompt_counts)][1] += len(r.cycles)
    return Speculation(k, n_prompts, len(spec_runs), len(cycles), tau, prompt_counts, _tps(spec_runs), _tps(greedy_runs),
                       all(s.tokens == g.tokens for s, g in zip(spec_runs, greedy_runs)), **split,
                       position_acceptance=merged.position_acceptance(), cpu_kernels=cpu_kernels,
                       timing=timing_of(greedy_runs, spec_runs),
                       outputs=[r.tokens for r in greedy_runs[:n_prompts]] if keep_outputs else None)


def timing_of(greedy_runs: list[DecodeResult], spec_runs: list[DecodeResult]) -> dict:
    """:func:`timing_trust` of interleaved runs: ``greedy_runs[i]`` and ``spec_runs[i]`` decoded the same prompt."""
    pairs = [(g, s) for g, s in zip(greedy_runs, spec_runs) if len(g.tokens) > 1 and s.cycles]
    cycles = [c for r in spec_runs for c in r.cycles]
    merged = DecodeResult([], 0.0, 0.0, cycles)
    split, tau = merged.time_split(), merged.accept_len
    spec_tps, greedy_tps = _tps(spec_runs), _tps(greedy_runs)
    return timing_trust([1.0 / _tps([g]) for g, _ in pairs], [s.time_split()["verify_s"] * _tps([g]) for g, s in pairs],
                        [_tps([s]) / _tps([g]) for g, s in pairs], tau, spec_tps / greedy_tps, 1.0 / greedy_tps,
                        split["verify_s"], sum(split.values()))


def timing_trust(step_s: list[float], verify_steps: list[float], pair_speedups: list[float], accept_len: float,
                 speedup: float, greedy_step_s: float, verify_s: float, cycle_s: float,
                 noise_limit: float = NOISE_LIMIT, slack: float = BOUND_SLACK, min_pairs: int = MIN_PAIRS) -> dict:
    """Whether a measured speedup deserves trust: a quiet machine, and within what τ and the verify cost allow.

    *Quiet*: a machine whose load changes from run to run moves two things that a quiet one keeps
    nearly fixed: plain decoding's time per token, and the verify's cost in plain decoding steps
    read off each interleaved pair of runs (plain, then speculative, on one prompt). The first also
    moves with the prompt's length, the second does not (both forwards see the same context) but is
    the ratio of two timings, so it jitters more on a model of a few milliseconds per token. The
    machine is called too noisy when both vary by more than ``noise_limit`` (relative range).
    *Possible*: a speculative cycle lasts at least its verify, so the speedup over plain decoding
    cannot exceed ``τ × step / verify``. *Enough*: below ``min_pairs`` pairs there is no spread to
    read, so the verdict is "too few runs to judge", never "ok".

    Args:
        step_s: plain decoding's seconds per token, one per run.
        verify_steps: mean verify time over plain decoding's step time, one per interleaved pair.
        pair_speedups: speculative over plain tok/s, one per interleaved pair.
        accept_len, speedup: the measured τ and the overall speedup.
        greedy_step_s, verify_s, cycle_s: plain decoding's mean step, the mean verify and cycle.

    Returns:
        ``ok``, ``note`` ("ok" or what was seen, one line), ``greedy_step_ms``, ``verify_steps`` and
        ``speedup_range`` ([min, median, max]), ``noise`` (the smaller relative range of the two),
        ``speedup_bound``, ``predicted_speedup`` (τ × step / cycle).
    """
    def spread(xs: list[float], scale: float = 1.0) -> list[float]:
        return [min(xs) * scale, statistics.median(xs) * scale, max(xs) * scale] if xs else [float("nan")] * 3

    def rel_range(xs: list[float]) -> float:
        lo, mid, hi = spread(xs)
        return (hi - lo) / mid if len(xs) > 1 and mid > 0 else 0.0

    steps_ms, ratios = spread(step_s, 1e3), spread(verify_steps)
    noise = min(rel_range(step_s), rel_range(verify_steps))  # both views must agree
    bound = accept_len * greedy_step_s / verify_s if verify_s > 0 else float("inf")
    problems = []
    if len(verify_steps) < min_pairs:  # one sample cannot show noise: a cold first run once read 3.69x at τ 1.00
        problems.append(f"too few runs to judge the timing ({len(verify_steps)} interleaved pair(s) of plain and "
                        f"speculative decoding; {min_pairs} or more show whether the machine was quiet)")
    if noise > noise_limit:
        problems.append(f"machine too noisy to measure: across {len(verify_steps)} interleaved runs plain decoding took "
                        f"{steps_ms[0]:.2f}-{steps_ms[2]:.2f} ms per token and a verify cost {ratios[0]:.2f}-{ratios[2]:.2f} "
                        "plain steps (a quiet machine keeps both nearly fixed)")
    if speedup > bound * (1 + slack):
        problems.append(f"speedup {speedup:.2f}x is more than τ {accept_len:.2f} and the measured verify cost "
                        f"({verify_s / greedy_step_s:.2f} plain steps) allow ({bound:.2f}x): the timing was disturbed")
    return {"ok": not problems, "note": "; ".join(problems) or "ok", "greedy_step_ms": steps_ms,
            "verify_steps": ratios, "speedup_range": spread(pair_speedups), "noise": noise, "speedup_bound": bound,
            "predicted_speedup": accept_len * greedy_step_s / cycle_s if cycle_s > 0 else float("nan")}
