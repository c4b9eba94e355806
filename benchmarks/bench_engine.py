"""vLLM on the demo world: what one engine measurement costs, and whether it agrees with the workbook.

The question: how long does ``measure_in_engine`` take for 8 held-out prompts x 64 tokens on the demo
world (SmolLM2-135M target A and drafter-a, k = 3), whole process included (each of its two vLLM runs,
the target alone and with the drafter, starts a fresh worker process: import, model load, KV cache),
and is its τ the workbook's own? The baseline, run in the same process on the same prompt token ids,
is the workbook's decoder (:func:`eaglelab.probe.plugin.measure_on_target`: speculative and plain
greedy decoding, one prompt at a time). Printed: seconds of each, their ratio, both τ, both
per-position rates, and whether each side's outputs equal its target alone.

    python benchmarks/bench_engine.py [--world demo|tiny] [--prompts 8] [--tokens 64] [--k 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    from eaglelab.data.sets import measure_prompts
    from eaglelab.engines.vllm import compare_with_workbook, engine_status, measure_in_engine
    from eaglelab.model.drafter_files import load_drafter
    from eaglelab.model.targets import load_target
    from eaglelab.probe.plugin import measure_on_target
    from eaglelab.worlds.build import build_world

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", choices=["demo", "tiny"], default="demo")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=3)
    args = ap.parse_args()
    ok, line = engine_status()
    print(line)
    if not ok:
        return 1
    world = build_world(args.world)
    model, tok = load_target(world.target_a, device="cpu")
    prompts = measure_prompts(tok, args.prompts, world)
    t0 = time.perf_counter()
    engine = measure_in_engine(world.target_a, world.drafter_a, prompts, args.tokens, k=args.k,
                               stop_token_ids=[tok.eos_token_id])
    t_engine = time.perf_counter() - t0
    t0 = time.perf_counter()
    workbook = measure_on_target(model, load_drafter(world.drafter_a), prompts, args.tokens, k=args.k)
    t_workbook = time.perf_counter() - t0
    row = compare_with_workbook(workbook, engine)
    print(f"{args.world} world, {args.prompts} prompts x {args.tokens} tokens, k = {args.k}")
    print(f"vLLM, both runs, whole worker processes: {t_engine:.1f} s (engine start {engine.with_drafter.engine_start_s:.1f}"
          f" + {engine.target_alone.engine_start_s:.1f} s); the workbook's decoder: {t_workbook:.1f} s "
          f"({t_engine / t_workbook:.2f}x)")
    print(f"τ: vLLM {row['tau_engine']:.4f}, workbook {row['tau_workbook']:.4f} ({100 * row['tau_difference']:+.2f}%)")
    print("per position, conditional: vLLM " + ", ".join(f"{x:.3f}" for x in row["position_conditional_engine"])
          + "; workbook " + ", ".join(f"{x:.3f}" for x in row["position_conditional_workbook"]))
    print("per position, vLLM's unconditional: " + ", ".join(f"{x:.3f}" for x in row["position_unconditional_engine"]))
    print(f"outputs equal to the target alone: vLLM {row['engine_matches_target']}, workbook {row['workbook_matches_greedy']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
