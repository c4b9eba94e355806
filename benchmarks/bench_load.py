"""The load model against vLLM: does speculation's speedup fall with concurrency as the model says?

The question: the roofline load model (:class:`eaglelab.serving.load.LoadModel`) calibrated on the
smallest and the largest concurrency measured, how far is its speedup from vLLM's at the
concurrencies between (held out)? The baseline is the same engine, the same prompts, target alone,
at every concurrency: each speedup is a ratio of two measurements of this run. Each concurrency is
timed ``--repeats`` times per side, interleaved, and the printed range (slowest / fastest pairing)
says how much of a gap is noise. Runs in vLLM's CPU build (``make engine``).

    python benchmarks/bench_load.py [--world tiny|demo] [--concurrency 1 4 16] [--tokens 32] [--k 3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    from transformers import AutoTokenizer

    from eaglelab.data.sets import measure_prompts
    from eaglelab.engines.vllm import engine_status
    from eaglelab.jobs.load_engine import engine_load_check
    from eaglelab.serving.load import CPU, LoadModel
    from eaglelab.serving.load_fit import calibrate
    from eaglelab.worlds.build import build_world

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", choices=["tiny", "demo"], default="tiny")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    ok, line = engine_status()
    print(line)
    if not ok:
        return 1
    world = build_world(args.world)
    tok = AutoTokenizer.from_pretrained(str(world.target_a))
    prompts = measure_prompts(tok, max(args.concurrency), world)
    config = json.loads((world.target_a / "config.json").read_text())
    t0 = time.perf_counter()
    check = engine_load_check(str(world.target_a), str(world.drafter_a), prompts, args.tokens, args.k,
                              args.concurrency, config, repeats=args.repeats)
    seconds = time.perf_counter() - t0
    print(f"{args.world} world, drafter-a on target A, k = {args.k}, {args.tokens} tokens per request, "
          f"{args.repeats} runs per concurrency and side; {check.status}; {seconds:.0f} s in all")
    print(check.view().text())
    if check.worst_held_out is not None:
        print(f"worst held-out error: {100 * check.worst_held_out:.1f}%")
        # The fairest rival on the same points: a step that costs the larger of memory and compute (a GPU's overlap).
        points = check.run.points()
        overlapped = calibrate(LoadModel(check.model.target, replace(CPU, overlap=True), context=check.model.context),
                               [points[0], points[-1]])
        errors = [float(overlapped.speedup(p.concurrency, args.k, t)) / r.measured - 1
                  for p, t, r in zip(points, check.run.tau, check.rows) if r.held_out]
        print("the same ends, a step of the larger of memory and compute: held-out errors "
              + ", ".join(f"{100 * e:+.1f}%" for e in errors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
