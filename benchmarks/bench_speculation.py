"""Speculative vs plain greedy decoding on the offline world, in the same process.

Prints tok/s of both, their ratio, τ, the per-cycle split (draft / verify / overhead share) and
the performance model's prediction τ / T_cycle next to the measurement.

    python benchmarks/bench_speculation.py [--world DIR] [--prompts 16] [--tokens 64] [--k 1 2 4 6]
"""

from __future__ import annotations

import argparse


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", help="world folder (default: data/worlds/tiny, built if missing)")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--k", type=int, nargs="+", default=[1, 2, 4, 6])
    args = ap.parse_args()

    from eaglelab.decoding import benchmark_speculation
    from eaglelab.drafter import load_drafter
    from eaglelab.targets import Target, load_target
    from eaglelab.worlds import build_tiny_world

    world = build_tiny_world(args.world)
    for target_name, drafter_name in (("target_a", "drafter_a"), ("target_b", "drafter_a"), ("target_b", "drafter_b_small")):
        model, tok = load_target(getattr(world, target_name), device="cpu")
        drafter = load_drafter(getattr(world, drafter_name))
        target = Target.for_drafter(model, drafter.spec)
        prompts = [tok(p)["input_ids"] for p in world.held_out_prompts()[: args.prompts]]
        print(f"\n{drafter_name} on {target_name} ({args.prompts} prompts x {args.tokens} tokens, CPU)")
        print(f"{'k':>3} {'tau':>5} {'spec tok/s':>10} {'greedy':>8} {'ratio':>6} {'draft':>6} {'verify':>6} "
              f"{'overhd':>6} {'model':>8} {'err':>6} exact")
        for k in args.k:
            b = benchmark_speculation(target, drafter, prompts, args.tokens, k=k)
            c = b["cycle_s"]
            print(f"{k:>3} {b['accept_len']:5.2f} {b['tokens_per_s']:10.1f} {b['greedy_tokens_per_s']:8.1f} "
                  f"{b['speedup']:6.2f} {b['draft_s'] / c:6.0%} {b['verify_s'] / c:6.0%} {b['overhead_s'] / c:6.0%} "
                  f"{b['predicted_tokens_per_s']:8.1f} {b['prediction_error']:+6.1%} {b['matches_greedy']}")
        target.close()


if __name__ == "__main__":
    main()
