"""The dump probe at Kimi width: reading the engines' dumps, similarity, the two heads, the drafter, flat memory.

Synthetic SpecForge-layout dumps (``rows_0-2000/data_{i}.ckpt``, ``torch.save`` of ``input_ids`` [S],
``loss_mask`` [S], ``hidden_state`` [1, S, H], ``aux_hidden_state`` [1, S, 3H], bf16, random states)
are written for two targets to a temporary folder and read back with :mod:`eaglelab.data.dumps`;
the passes are :mod:`eaglelab.probe.dumps`' (``stack_batch``, ``head_pass``), the similarity
accumulator and :func:`eaglelab.train.ttt.evaluate_batch` with a Kimi-K2-sized EAGLE-3 drafter.
Each part runs in its own subprocess (peak memory of one part does not add to another's). Budgets
are ratios measured in the same run (the matmul peak is measured in the part's own process, as in
``bench_training.py``), never wall-clock limits:

- ``sim``: read time / (read + similarity time) >= 0.5, page cache warm, each the better of two passes;
- ``heads``: the head pass (two [V, H] products per position) >= 50% of the matmul peak;
- ``drafter``: the teacher-forced drafter pass (forward FLOPs of ``ttt_flops_per_token``) >= 50%;
- ``memory``: peak RSS of read + similarity the same (within 10%) at 4k and 64k tokens.

A last line estimates what a GPU would take for 1M tokens at Kimi width (assumptions printed).

    python benchmarks/bench_dumps.py [--quick] [--part sim|heads|drafter|memory|all]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

#: Kimi-K2's target config, the fields :func:`eaglelab.checkpoints.drafters.implied_config.drafter_config_for_target`
#: reads. Kimi-K2 is DeepSeek-V3-shaped (MLA, no ``head_dim`` key): its EAGLE-3 drafter
#: (:data:`eaglelab.worlds.synthetic_checkpoints.KIMI_K2_DRAFTER_CONFIG`) has head_dim 128 (q / k / v 8192 wide),
#: so it is given here; without it the derivation gives 7168 / 64 = 112.
KIMI_TARGET = {"hidden_size": 7168, "intermediate_size": 18432, "num_attention_heads": 64, "num_key_value_heads": 64,
               "head_dim": 128, "hidden_act": "silu", "num_hidden_layers": 61, "vocab_size": 163840,
               "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 50000.0}
KIMI_AUX = [1, 29, 57]
QUICK_TARGET = {**KIMI_TARGET, "hidden_size": 1024, "intermediate_size": 2816, "num_attention_heads": 8,
                "num_key_value_heads": 8, "vocab_size": 16384}
#: The budgets of the module docstring.
SIM_BUDGET, PEAK_BUDGET, MEMORY_TOLERANCE = 0.5, 0.5, 0.10
#: Child processes are killed above this resident size (the machine has 24 GiB).
MAX_RSS_GB = 20.0


@dataclass(frozen=True)
class Sizes:
    """One run's shapes (``--quick``: small ones for a smoke run)."""

    hidden: int = 7168
    vocab: int = 163840
    draft_vocab: int = 32000
    sample_len: int = 1024
    sim_samples: int = 8
    head_positions: int = 1024
    drafter_seq: int = 1024
    memory_tokens: tuple[int, int] = (4096, 65536)
    batch_size: int = 4
    k: int = 3
    target: dict = field(default_factory=lambda: dict(KIMI_TARGET))
    aux: tuple[int, int, int] = tuple(KIMI_AUX)


FULL = Sizes()
QUICK = Sizes(hidden=1024, vocab=16384, draft_vocab=4096, sample_len=128, sim_samples=4, head_positions=256,
              drafter_seq=128, memory_tokens=(512, 2048), target=dict(QUICK_TARGET))


def log(msg: str) -> None:
    print(msg, flush=True)


def vm_status(key: str) -> float:
    """A ``/proc/self/status`` size (``VmHWM``: peak RSS, ``VmRSS``: now) in MB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def matmul_peak(dtype_name: str = "float32") -> float:
    """Best FLOP/s of a 2048^3 matmul in ``dtype_name`` in this process (the training benchmark's measure)."""
    from bench_training import matmul_peak_flops  # a sibling script: benchmarks/ is on sys.path when run

    return matmul_peak_flops(dtype=dtype_name)


def ops_breakdown(prof, top: int = 6) -> list[tuple[str, float]]:
    """(op, seconds of self time) of the ``top`` costliest aten ops a torch.profiler run saw."""
    rows = [(e.key, e.self_cpu_time_total / 1e6) for e in prof.key_averages() if e.key.startswith("aten::")]
    return sorted(rows, key=lambda r: -r[1])[:top]


def load_note() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min) / {five:.1f} (5 min) on {os.cpu_count()} CPUs"


def timed(fn, totals: dict, key: str):
    """``fn`` that adds its seconds to ``totals[key]`` (the pieces of eaglelab's passes timed from outside)."""
    def run(*a, **kw):
        start = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            totals[key] += time.perf_counter() - start

    return run


def verdict(ok: bool) -> str:
    return "budget met" if ok else "BUDGET MISSED"


# --------------------------------------------------------------------------- the synthetic dumps


def write_dumps(root: Path, samples: int, sizes: Sizes, seed: int) -> tuple[Path, Path]:
    """Two SpecForge folders (targets A and B, B = A + noise) of ``samples`` samples, bf16 states."""
    import torch

    S, H, V = sizes.sample_len, sizes.hidden, sizes.vocab
    g = torch.Generator().manual_seed(seed)
    dirs = (root / "A", root / "B")
    for d in dirs:
        (d / "rows_0-2000").mkdir(parents=True)
    start = time.perf_counter()
    for i in range(samples):
        ids = torch.randint(0, V, (S,), generator=g)
        mask = torch.ones(S, dtype=torch.long)
        mask[: S // 16] = 0  # a prompt, then the response tokens SpecForge's mask marks
        last = torch.randn(1, S, H, generator=g, dtype=torch.bfloat16)
        aux = torch.randn(1, S, 3 * H, generator=g, dtype=torch.bfloat16)
        for d, noise in zip(dirs, (0.0, 0.3)):
            if noise:
                last = last + noise * torch.randn(last.shape, generator=g, dtype=torch.bfloat16)
                aux = aux + noise * torch.randn(aux.shape, generator=g, dtype=torch.bfloat16)
            torch.save({"input_ids": ids, "loss_mask": mask, "hidden_state": last, "aux_hidden_state": aux},
                       d / "rows_0-2000" / f"data_{i}.ckpt")
        if (i + 1) % max(1, samples // 4) == 0 or i + 1 == samples:
            log(f"    wrote {i + 1}/{samples} sample pairs ({time.perf_counter() - start:.0f} s)")
    return dirs


def open_pairs(dirs, sizes: Sizes):
    from eaglelab.data.dumps import open_dumps, pair_dumps

    a = open_dumps(dirs[0], sizes.hidden, sizes.vocab)
    b = open_dumps(dirs[1], sizes.hidden, sizes.vocab)
    return pair_dumps(a, b)


def similarity_pass(pairs, sizes: Sizes, timers: dict | None = None, progress: str | None = None) -> dict:
    """Read every pair, stack each batch (float32), feed the similarity accumulator as :func:`run_dump_probe` does
    (:func:`eaglelab.probe.plugin.update_similarity`); random argmaxes and TV.

    ``timers``: filled with the seconds of reading, stacking, slicing out the counted rows, the per-token
    statistics (row norms, the rest of ``update``) and the streaming CKA (centring, Gram products, HSIC, the rest).
    """
    import torch

    import eaglelab.probe.similarity as similarity
    from eaglelab.model.heads import TargetHeads
    from eaglelab.probe.dumps import StackBuffers, stack_batch
    from eaglelab.probe.plugin import layer_labels, update_similarity

    H, V = sizes.hidden, sizes.vocab
    tiny = torch.zeros(1, H)  # SpecForge's last state is normed: stack_batch never reads the head
    heads = TargetHeads("synthetic", torch.ones(H), 1e-6, tiny, tiny, {})
    acc = similarity.SimilarityAccumulator(layer_labels(sizes.aux))
    g = torch.Generator().manual_seed(1)
    t = dict.fromkeys(("read", "stack", "update_similarity", "acc.update", "per_token", "row_norms", "flush", "scale",
                       "centre", "gram", "hsic", "result"), 0.0)
    saved = {}
    stacks = (StackBuffers(), StackBuffers())  # as run_dump_probe: each batch is stacked over the last one's storage
    if timers is not None:  # time the accumulator's pieces from outside (eaglelab's code unchanged)
        acc.update = timed(acc.update, t, "acc.update")
        acc._flush = timed(acc._flush, t, "flush")
        acc._per_token = timed(acc._per_token, t, "per_token")
        for name, key in (("_row_norms", "row_norms"), ("_binary_scale", "scale"), ("_centred_scaled", "centre"),
                          ("_gram", "gram"), ("_hsic_all", "hsic")):
            saved[name] = getattr(similarity, name)
            setattr(similarity, name, timed(saved[name], t, key))
    try:
        n = len(pairs.indices)
        batches = -(-n // sizes.batch_size)
        start = time.perf_counter()
        for b, lo in enumerate(range(0, n, sizes.batch_size)):
            s = time.perf_counter()
            read = [pairs.read(i) for i in pairs.indices[lo: lo + sizes.batch_size]]
            t["read"] += time.perf_counter() - s
            s = time.perf_counter()
            sa = stack_batch([p[0] for p in read], heads, torch.device("cpu"), torch.float32, stacks[0])
            sb = stack_batch([p[1] for p in read], heads, torch.device("cpu"), torch.float32, stacks[1])
            t["stack"] += time.perf_counter() - s
            shape = sa.input_ids.shape
            s = time.perf_counter()
            update_similarity(acc, sa, sb, argmax_a=torch.randint(0, V, shape, generator=g),
                                      argmax_b=torch.randint(0, V, shape, generator=g), tv=torch.rand(shape, generator=g))
            t["update_similarity"] += time.perf_counter() - s
            del read, sa, sb
            if progress and ((b + 1) % max(1, batches // 8) == 0 or b + 1 == batches):
                log(f"    {progress}: batch {b + 1}/{batches} ({time.perf_counter() - start:.0f} s, peak RSS so far "
                    f"{vm_status('VmHWM'):.0f} MB)")
        in_update = t["flush"]
        s = time.perf_counter()
        res = acc.result()
        t["result"] += time.perf_counter() - s
        t["flush_in_update"] = in_update
    finally:
        for name, fn in saved.items():
            setattr(similarity, name, fn)
    t["tokens"] = res["tokens"]
    return t


def read_pass(pairs) -> float:
    start = time.perf_counter()
    for i in pairs.indices:
        pairs.read(i)
    return time.perf_counter() - start


# --------------------------------------------------------------------------- the parts (each in a child process)


def child_sim(args: dict, sizes: Sizes) -> dict:
    pairs = open_pairs(args["dirs"], sizes)
    nbytes = pairs.a.bytes + pairs.b.bytes
    log(f"    warming the page cache: reading the {len(pairs.indices)} pairs once ({nbytes / 1e9:.2f} GB)")
    warm = read_pass(pairs)
    log(f"    warm read {warm:.1f} s; timing read only, then read + similarity")
    read = min(read_pass(pairs), read_pass(pairs))
    # the better of two passes, as the read's: the first pays this process's first touch of its stacks and buffers
    # (hundreds of MB; on the project's VMs a first-touched page costs ~15 us), which a long run pays once
    passes = [similarity_pass(pairs, sizes, timers={}, progress=f"read + similarity, pass {i}") for i in (1, 2)]
    totals = [sum(t[k] for k in ("read", "stack", "update_similarity", "result")) for t in passes]
    best = min(range(2), key=totals.__getitem__)
    return {"read_s": read, "total_s": totals[best], "totals_s": totals, "bytes": nbytes, "timers": passes[best]}


def child_heads(args: dict, sizes: Sizes) -> dict:
    import torch

    from eaglelab.probe.dumps import HEAD_CHUNK, head_pass

    dtype = getattr(torch, args["dtype"])
    V, H, P = sizes.vocab, sizes.hidden, sizes.head_positions
    peak32 = matmul_peak("float32")
    before = peak32 if dtype == torch.float32 else matmul_peak(args["dtype"])
    log(f"    {args['dtype']}: making two [{V}, {H}] heads ({2 * V * H * dtype.itemsize / 1e9:.1f} GB)")
    g = torch.Generator().manual_seed(2)
    head_a = torch.randn(V, H, generator=g, dtype=dtype).mul_(0.02)
    head_b = torch.randn(V, H, generator=g, dtype=dtype).mul_(0.02)
    # the normed last states as stack_batch gives them: in the heads' dtype, [B, S, H]
    last_a = torch.randn(1, P, H, generator=g).to(dtype)
    last_b = torch.randn(1, P, H, generator=g).to(dtype)
    draft_ids = torch.randperm(V, generator=g)[: sizes.draft_vocab].sort().values
    chunk = min(HEAD_CHUNK, P)
    head_pass(last_a[:, :64], last_b[:, :64], head_a, head_b, draft_ids, chunk)  # warm-up
    log(f"    {args['dtype']}: head_pass over {P} positions (chunk {chunk}, profiled)")
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        out = head_pass(last_a, last_b, head_a, head_b, draft_ids, chunk)
        wall = time.perf_counter() - start
    assert out.tv.shape == (1, P)
    after = matmul_peak(args["dtype"])
    peak = max(before, after)  # the better of the peaks measured before and after the pass
    ops = ops_breakdown(prof)
    mm = sum(s for name, s in ops_breakdown(prof, 100) if name in ("aten::mm", "aten::matmul", "aten::addmm"))
    return {"dtype": args["dtype"], "positions": P, "wall_s": wall, "matmul_s": mm, "flops": 2 * 2 * V * H * P,
            "peak": peak, "peaks": [before, after], "peak32": max(peak32, after if dtype == torch.float32 else 0),
            "ops": ops, "chunk": chunk}


def child_drafter(args: dict, sizes: Sizes) -> dict:
    import torch

    from eaglelab.data.states import HiddenStates
    from eaglelab.model.drafter import Eagle3Drafter
    from eaglelab.train.training import ttt_flops_per_token
    from eaglelab.train.ttt import AcceptanceTally, TargetTokens, evaluate_batch
    from eaglelab.worlds.synthetic_checkpoints import KIMI_K2_DRAFTER_CONFIG

    peaks = {"float32": [matmul_peak("float32")], "bfloat16": [matmul_peak("bfloat16")]}
    log(f"    making the drafter (from_target_config, draft vocabulary {sizes.draft_vocab}, float32)")
    drafter = Eagle3Drafter.from_target_config(sizes.target, draft_vocab_size=sizes.draft_vocab,
                                               aux_layer_ids=list(sizes.aux))
    spec = drafter.spec
    shape_keys = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                  "vocab_size", "draft_vocab_size")
    kimi_match = None
    if sizes.hidden == 7168:
        kimi_match = all(drafter.config[k] == KIMI_K2_DRAFTER_CONFIG[k] for k in shape_keys)
    V, Ht, Vd, S, k = spec.vocab_size, spec.target_hidden_size, spec.draft_vocab_size, sizes.drafter_seq, sizes.k
    g = torch.Generator().manual_seed(3)
    # the target's embedding, lent as run_dump_probe lends it (cast to the drafter's dtype)
    embed = torch.randn(V, spec.hidden_size, generator=g).mul_(0.02)
    ids = torch.randint(0, V, (1, S), generator=g)
    mask = torch.ones(1, S, dtype=torch.bool)
    batch = HiddenStates(ids, mask, torch.randn(1, S, 3 * Ht, generator=g), torch.randn(1, S, Ht, generator=g))
    target = TargetTokens(torch.randint(0, V, (1, S), generator=g), torch.randn(1, S, Vd, generator=g))
    # ttt_flops_per_token counts training: 3 x forward (fwd + bwd) + the target head over target_rows rows;
    # the probe's pass is forward only and its target tokens come from the head pass: target_rows 0, then / 3
    fwd_per_token = ttt_flops_per_token(spec, S, k, 0) / 3
    params = sum(p.numel() for n, p in drafter.named_parameters() if n != "embed_tokens.weight")
    res = {"params": params, "seq": S, "k": k, "fwd_flops_per_token": fwd_per_token, "peaks": peaks,
           "kimi_match": kimi_match, "head_dim": spec.head_dim, "q_dim": spec.num_attention_heads * spec.head_dim,
           "runs": []}
    from torch.profiler import ProfilerActivity, profile

    for dtype_name in ("float32", "bfloat16"):
        dtype = getattr(torch, dtype_name)
        if dtype != torch.float32:
            drafter.to(dtype)
            embed = embed.to(dtype)
        small = HiddenStates(ids[:, :64], mask[:, :64], batch.aux[:, :64], batch.last_hidden[:, :64])
        with drafter.serving_embedding(embed):
            evaluate_batch(drafter, small, None, k, AcceptanceTally(k),
                           target=TargetTokens(target.greedy[:, :64], target.draft_logits[:, :64]))  # warm-up
            log(f"    {dtype_name}: evaluate_batch, {S} positions, k = {k} (profiled)")
            inner = {"s": 0.0}
            drafter.ttt_logits = timed(drafter.ttt_logits, inner, "s")
            try:
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    start = time.perf_counter()
                    evaluate_batch(drafter, batch, None, k, AcceptanceTally(k), target=target)
                    wall = time.perf_counter() - start
            finally:
                del drafter.ttt_logits
        peaks[dtype_name].append(matmul_peak(dtype_name))
        res["runs"].append({"dtype": dtype_name, "wall_s": wall, "ttt_logits_s": inner["s"], "ops": ops_breakdown(prof),
                            "flops": fwd_per_token * S})
    return res


def child_memory(args: dict, sizes: Sizes) -> dict:
    import eaglelab.probe.dumps  # noqa: F401  (torch and the probe imported: the baseline below)
    import eaglelab.probe.plugin  # noqa: F401

    before = vm_status("VmRSS")
    pairs = open_pairs(args["dirs"], sizes)
    start = time.perf_counter()
    t = similarity_pass(pairs, sizes, timers={}, progress=f"{args['tokens']} tokens")
    return {"tokens": t["tokens"], "stored_tokens": args["tokens"], "wall_s": time.perf_counter() - start,
            "read_s": t["read"], "rss_before_mb": before, "bytes": pairs.a.bytes + pairs.b.bytes}


CHILDREN = {"sim": child_sim, "heads": child_heads, "drafter": child_drafter, "memory": child_memory}


def run_child(kind: str, args: dict, quick: bool) -> dict:
    """Run one part in a fresh process; its peak RSS (VmHWM) comes back with its result.

    The child is killed if its resident size passes :data:`MAX_RSS_GB`.
    """
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        result = Path(fh.name)
    cmd = [sys.executable, __file__, "--child", json.dumps({"kind": kind, "result": str(result), **args})]
    cmd += ["--quick"] if quick else []
    proc = subprocess.Popen(cmd)
    killed = False
    try:
        while proc.poll() is None:
            try:
                with open(f"/proc/{proc.pid}/status") as st:
                    rss = next((int(line.split()[1]) for line in st if line.startswith("VmRSS:")), 0) / 1024**2
            except OSError:
                rss = 0
            if rss > MAX_RSS_GB:
                proc.kill()
                killed = True
            time.sleep(0.2)
        if killed:
            raise SystemExit(f"{kind}: the child passed {MAX_RSS_GB} GiB resident and was killed")
        if proc.returncode:
            raise SystemExit(f"{kind}: the child failed (exit {proc.returncode})")
        return json.loads(result.read_text())
    finally:
        if proc.poll() is None:
            proc.kill()
        result.unlink(missing_ok=True)


def child_main(spec: str, sizes: Sizes) -> None:
    args = json.loads(spec)
    out = CHILDREN[args["kind"]](args, sizes)
    out["peak_rss_mb"] = vm_status("VmHWM")
    Path(args["result"]).write_text(json.dumps(out))


# --------------------------------------------------------------------------- the parent: folders, tables, verdicts


def part_sim(sizes: Sizes, tmp: Path) -> dict:
    n = sizes.sim_samples
    log(f"[sim] {n} sample pairs of {sizes.sample_len} tokens, H {sizes.hidden}, bf16, SpecForge layout")
    dirs = write_dumps(tmp / "sim", n, sizes, seed=0)
    r = run_child("sim", {"dirs": [str(d) for d in dirs]}, sizes is QUICK)
    t = r["timers"]
    ratio = r["read_s"] / r["total_s"]
    tok = t["tokens"]
    log(f"  page cache warm (every file read once before timing); batches of {sizes.batch_size} pairs, float32 stacks")
    log(f"  read only (pairs.read x {n}: load, checks, trim): {r['read_s']:7.2f} s  "
        f"{r['bytes'] / r['read_s'] / 1e9:5.2f} GB/s  {tok / r['read_s']:8.0f} tokens/s")
    log(f"  read + similarity (better of 2 passes):         {r['total_s']:7.2f} s  {tok / r['total_s']:8.0f} tokens/s  "
        f"(passes: {' / '.join(f'{x:.2f}' for x in r['totals_s'])} s)")
    rows_out = t["update_similarity"] - t["acc.update"]
    buffering = t["acc.update"] - t["flush_in_update"]
    # result()'s final flush included
    cka_rest = t["flush"] - t["per_token"] - t["scale"] - t["centre"] - t["gram"] - t["hsic"]
    rows = [("read (pairs.read)", t["read"]), ("stack_batch (to float32, pad)", t["stack"]),
            ("counted rows (slices, per sample)", rows_out), ("update(): buffering, argmax, TV", buffering),
            ("per-token row norms (float32)", t["row_norms"]),
            ("per-token sums, cosine samples", t["per_token"] - t["row_norms"]),
            ("CKA layer scales (first batch)", t["scale"]),
            ("CKA centring (float32)", t["centre"]), ("CKA Gram products (float32 X X^T)", t["gram"]),
            ("CKA HSIC terms (float64)", t["hsic"]), ("minibatch split, remainders, checks", cka_rest),
            ("result() less its final CKA flush", t["result"] - (t["flush"] - t["flush_in_update"]))]
    log(f"  {'where the read + similarity time goes':<44} {'s':>7} {'share':>6}")
    for name, s in rows:
        log(f"  {name:<44} {s:7.2f} {s / r['total_s']:6.0%}")
    log(f"  read / (read + similarity) = {ratio:.2f} (budget >= {SIM_BUDGET}): {verdict(ratio >= SIM_BUDGET)}")
    log(f"  peak RSS of the child: {r['peak_rss_mb']:.0f} MB")
    return {"ratio": ratio, "read_bytes_per_s": r["bytes"] / r["read_s"], "sim_tokens_per_s": tok / r["total_s"]}


def part_heads(sizes: Sizes) -> dict:
    log(f"[heads] head_pass: {sizes.head_positions} positions x two [{sizes.vocab}, {sizes.hidden}] heads, "
        f"draft vocabulary {sizes.draft_vocab}")
    out = {}
    for dtype in ("float32", "bfloat16"):
        r = run_child("heads", {"dtype": dtype}, sizes is QUICK)
        gf = r["flops"] / r["wall_s"]
        share, mm_share = gf / r["peak"], r["flops"] / max(r["matmul_s"], 1e-9) / r["peak"]
        per_position = r["flops"] / r["positions"] / 1e9
        log(f"  {dtype}: {r['wall_s']:.2f} s, {gf / 1e9:.1f} GFLOP/s (2 products x 2VH = {per_position:.2f} "
            f"GFLOP per position); matmul peak ({dtype}, 2048^3, this process, before / after) "
            f"{r['peaks'][0] / 1e9:.0f} / {r['peaks'][1] / 1e9:.0f} GFLOP/s")
        extra = "" if dtype == "float32" else f"; {gf / r['peak32']:.0%} of the float32 peak"
        log(f"    whole pass {share:.0%} of the {dtype} peak (budget >= {PEAK_BUDGET:.0%}: "
            f"{verdict(share >= PEAK_BUDGET)}){extra}; the matmuls alone ({r['matmul_s']:.2f} s) {mm_share:.0%}")
        log(f"    {'op (self time, torch.profiler)':<32} {'s':>7} {'share':>6}")
        for name, s in r["ops"]:
            log(f"    {name:<32} {s:7.2f} {s / r['wall_s']:6.0%}")
        log(f"    peak RSS of the child: {r['peak_rss_mb'] / 1024:.1f} GB")
        out[dtype] = {"flops_per_s": gf, "share": share}
    return out


def part_drafter(sizes: Sizes) -> dict:
    log(f"[drafter] evaluate_batch: one sample of {sizes.drafter_seq} positions, k = {sizes.k}, drafter from "
        f"from_target_config(hidden {sizes.target['hidden_size']}, head_dim {sizes.target['head_dim']}, "
        f"vocab {sizes.target['vocab_size']}, draft vocab {sizes.draft_vocab})")
    r = run_child("drafter", {}, sizes is QUICK)
    if r["kimi_match"] is not None:
        log(f"  shapes equal to KIMI_K2_DRAFTER_CONFIG's: {r['kimi_match']} (q dim {r['q_dim']}, "
            f"head_dim {r['head_dim']}, {r['params'] / 1e9:.2f} B parameters without the embedding)")
    log(f"  FLOPs: ttt_flops_per_token(spec, S={r['seq']}, k={r['k']}, target_rows=0) / 3 = "
        f"{r['fwd_flops_per_token'] / 1e9:.2f} GFLOP per position (it counts forward + backward as 3 x forward; "
        "the probe's target tokens come from the head pass)")
    out = {}
    for run in r["runs"]:
        dt = run["dtype"]
        gf = run["flops"] / run["wall_s"]
        peak = max(r["peaks"][dt])  # the better of the peaks measured before and after the pass
        share = gf / peak
        inner = run["flops"] / run["ttt_logits_s"] / peak
        peaks = " / ".join(f"{p / 1e9:.0f}" for p in r["peaks"][dt])
        log(f"  {dt}: {run['wall_s']:.2f} s, {gf / 1e9:.1f} GFLOP/s, {share:.0%} of the {dt} matmul peak "
            f"(before / after: {peaks} GFLOP/s) (budget >= {PEAK_BUDGET:.0%}: {verdict(share >= PEAK_BUDGET)}); "
            f"ttt_logits alone {run['ttt_logits_s']:.2f} s = {inner:.0%}")
        log(f"    {'op (self time, torch.profiler)':<32} {'s':>7} {'share':>6}")
        for name, s in run["ops"]:
            log(f"    {name:<32} {s:7.2f} {s / run['wall_s']:6.0%}")
        out[dt] = {"flops_per_s": gf, "share": share}
    log(f"  peak RSS of the child (float32 drafter + its own and a lent float32 embedding): "
        f"{r['peak_rss_mb'] / 1024:.1f} GB")
    return out


def part_memory(sizes: Sizes, tmp: Path) -> dict:
    rows = []
    log(f"[memory] read + similarity (no heads: random argmaxes) over {' and '.join(map(str, sizes.memory_tokens))} "
        f"tokens, samples of {sizes.sample_len}, batches of {sizes.batch_size}, a fresh process each")
    for tokens in sizes.memory_tokens:
        n = tokens // sizes.sample_len
        log(f"  writing {n} sample pairs ({tokens} tokens per target)")
        dirs = write_dumps(tmp / f"mem{tokens}", n, sizes, seed=tokens)
        r = run_child("memory", {"dirs": [str(d) for d in dirs], "tokens": tokens}, sizes is QUICK)
        rows.append(r)
        shutil.rmtree(dirs[0].parent)  # free the disk before the next folder
    log(f"  {'tokens':>8} {'on disk GB':>10} {'counted':>8} {'s':>7} {'of it read':>10} {'RSS after imports MB':>20} "
        f"{'peak RSS MB':>12}")
    for r in rows:
        log(f"  {r['stored_tokens']:>8} {r['bytes'] / 1e9:10.2f} {r['tokens']:>8} {r['wall_s']:7.1f} "
            f"{r['read_s']:10.1f} {r['rss_before_mb']:20.0f} {r['peak_rss_mb']:12.0f}")
    grow = rows[1]["peak_rss_mb"] / rows[0]["peak_rss_mb"] - 1
    ok = abs(grow) <= MEMORY_TOLERANCE
    log(f"  peak at {rows[1]['stored_tokens']} tokens vs {rows[0]['stored_tokens']}: {grow:+.1%} "
        f"(budget: within {MEMORY_TOLERANCE:.0%}): {verdict(ok)}")
    return {"growth": grow}


def estimate(measured: dict, quick: bool) -> None:
    """What a GPU would take for 1M tokens at Kimi width, from FLOPs and bytes per token (assumptions printed)."""
    from eaglelab.checkpoints.drafters.implied_config import drafter_config_for_target
    from eaglelab.checkpoints.drafters.spec import drafter_spec_from_config
    from eaglelab.train.training import ttt_flops_per_token

    H, V, n, S, k = FULL.hidden, FULL.vocab, 1_000_000, FULL.sample_len, FULL.k
    spec = drafter_spec_from_config(drafter_config_for_target(KIMI_TARGET, FULL.draft_vocab, KIMI_AUX))
    heads = 2 * 2 * V * H  # two [V, H] products per position
    drafter = 2 * ttt_flops_per_token(spec, S, k, 0) / 3  # teacher-forced on A and on B, forward only
    cka = 8 * 2 * 256 * H  # the similarity: 8 Gram matrices X X^T per 256-token CKA batch, float64
    rate, rate64, nvme = 700e12, 60e12, 5e9
    stored = 2 * 4 * H * 2  # bytes per token: two targets, 4 layers, bf16
    t_flops = n * (heads + drafter) / rate + n * cka / rate64
    t_read = n * stored / nvme
    log(f"[estimate] 1M tokens at Kimi width (H {H}, V {V}, S {S}, k {k}) on one H100/H200: heads {heads / 1e9:.1f} + "
        f"drafter on A and B {drafter / 1e9:.1f} GFLOP/token at 700 TFLOP/s bf16 (70% of 989 dense) "
        f"= {n * (heads + drafter) / rate:.0f} s, similarity {cka / 1e6:.0f} MFLOP/token float64 at 60 TFLOP/s "
        f"= {n * cka / rate64:.1f} s; reading {stored / 1e3:.0f} kB/token ({n * stored / 1e9:.0f} GB) at 5 GB/s NVMe "
        f"= {t_read:.0f} s; total {max(t_flops, t_read):.0f} s overlapped, {t_flops + t_read:.0f} s serial "
        "(assumed: heads and drafter in bf16, dumps decoded as fast as NVMe reads them)")
    if "read_bytes_per_s" in measured:
        rd, sim = measured["read_bytes_per_s"], measured["sim_tokens_per_s"]
        log(f"  [measured here{', quick sizes' if quick else ''}] this CPU decodes + checks {rd / 1e9:.2f} GB/s "
            f"from the page cache: reading 1M tokens with it would take {n * stored / rd:.0f} s; its read + "
            f"similarity pass ({sim:.0f} tokens/s) would take {n / sim / 3600:.1f} h")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (H 1024, V 16384, a few samples): a smoke run")
    ap.add_argument("--part", choices=["sim", "heads", "drafter", "memory", "all"], default="all")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    sizes = QUICK if args.quick else FULL
    if args.child:
        child_main(args.child, sizes)
        return
    import torch

    log(f"bench_dumps, {'quick' if args.quick else 'full'} sizes: H {sizes.hidden}, V {sizes.vocab}, draft vocabulary "
        f"{sizes.draft_vocab}, samples of {sizes.sample_len} tokens; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {os.cpu_count()} CPUs")
    if args.quick:
        log("  (quick sizes: the budgets are checked, but only the full sizes say anything about Kimi width)")
    measured: dict = {}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_dumps_", dir="/tmp") as tmp:
        parts = (("sim", lambda: measured.update(part_sim(sizes, Path(tmp)))), ("heads", lambda: part_heads(sizes)),
                 ("drafter", lambda: part_drafter(sizes)), ("memory", lambda: part_memory(sizes, Path(tmp))))
        for part, fn in parts:
            if args.part in (part, "all"):
                log(f"  ({load_note()}: other processes on these CPUs make every number noisier)")
                fn()
    if args.part == "all" or measured:
        estimate(measured, args.quick)
    log(f"done in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
