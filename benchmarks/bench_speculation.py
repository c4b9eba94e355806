"""Speculative vs plain greedy decoding on an offline world, in the same process.

Prints tok/s of both, their ratio, τ, the per-cycle split (draft / verify / overhead share) and
the performance model's prediction τ / T_cycle next to the measurement; with the CPU's default
linear kernels and with the small-batch path (:mod:`eaglelab.model.cpu_kernels`), and the cost of one
verify forward of k + 1 tokens relative to one decode step under each.

    python benchmarks/bench_speculation.py [--world tiny|demo] [--world-dir DIR] [--prompts 16] [--tokens 64] [--k 1 2 4 6]
"""

from __future__ import annotations

import argparse
import statistics
import time


def verify_cost_ratio(target, k: int, repeats: int = 7) -> float:
    """Median time of one target forward over k + 1 new tokens / over 1 token (after a 64-token prefix)."""
    import torch
    from transformers import DynamicCache

    from eaglelab.model.targets import crop_cache

    ids = torch.randint(0, target.config.vocab_size, (1, 64 + k + 1), generator=torch.Generator().manual_seed(0))
    cache = DynamicCache()
    times: dict[int, list[float]] = {1: [], k + 1: []}
    target.forward(ids[:, :64], cache, use_cache=True)
    for _ in range(repeats):
        for q in times:  # alternate, so a drifting machine hits both alike
            t = time.perf_counter()
            target.forward(ids[:, 64: 64 + q], cache, use_cache=True)
            times[q].append(time.perf_counter() - t)
            crop_cache(cache, 64)
    return statistics.median(times[k + 1]) / statistics.median(times[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", choices=["tiny", "demo"], default="tiny")
    ap.add_argument("--world-dir", help="world folder (default: data/worlds/<world>, built if missing)")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--k", type=int, nargs="+", default=[1, 2, 4, 6])
    args = ap.parse_args()

    from eaglelab.data.sets import measure_prompts
    from eaglelab.model.cpu_kernels import small_batch_kernels
    from eaglelab.model.decoding import benchmark_speculation
    from eaglelab.model.drafter_files import load_drafter
    from eaglelab.model.targets import Target, load_target
    from eaglelab.worlds.build import build_world

    world = build_world(args.world, args.world_dir)
    for target_name, drafter_name in (("target_a", "drafter_a"), ("target_b", "drafter_a"), ("target_b", "drafter_b_small")):
        model, tok = load_target(getattr(world, target_name), device="cpu")
        drafter = load_drafter(getattr(world, drafter_name))
        target = Target.for_drafter(model, drafter.spec)
        prompts = measure_prompts(tok, args.prompts, world)
        print(f"\n{drafter_name} on {target_name} ({len(prompts)} prompts x {args.tokens} tokens, CPU)")
        for kernels in (False, True):
            with small_batch_kernels(model, enabled=kernels):
                ratios = {k: verify_cost_ratio(target, k) for k in args.k}
            print(f"  {'small-batch' if kernels else 'default'} kernels; verify(k+1) / decode(1): "
                  + ", ".join(f"k={k}: {r:.2f}" for k, r in ratios.items()))
        print(f"{'kernels':>11} {'k':>3} {'tau':>5} {'spec tok/s':>10} {'greedy':>8} {'ratio':>6} {'draft':>6} "
              f"{'verify':>6} {'overhd':>6} {'model':>8} {'err':>6} exact")
        for k in args.k:
            for kernels in (False, True):
                b = benchmark_speculation(target, drafter, prompts, args.tokens, k=k, cpu_kernels=kernels)
                c = b.cycle_s
                print(f"{'small-batch' if kernels else 'default':>11} {k:>3} {b.accept_len:5.2f} "
                      f"{b.tokens_per_s:10.1f} {b.greedy_tokens_per_s:8.1f} {b.speedup:6.2f} "
                      f"{b.draft_s / c:6.0%} {b.verify_s / c:6.0%} {b.overhead_s / c:6.0%} "
                      f"{b.predicted_tokens_per_s:8.1f} {b.prediction_error:+6.1%} {b.matches_greedy}")
        target.close()


if __name__ == "__main__":
    main()
