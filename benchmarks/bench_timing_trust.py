"""Does the timing check tell a quiet machine from a loaded one? The same measurement, twice, in one process.

Measures speculative vs plain decoding on an offline world (drafter-a on target A) first on the
machine as it is, then while ``--hogs`` other processes spin on the CPU (what a shared CI runner
or a notebook next to a training job looks like), and prints for each: the speedup, plain
decoding's per-token time and the verify's cost in plain steps (min / median / max over the
interleaved runs; the check reads the second), the bound τ and the verify cost allow, and the
check's verdict (:func:`eaglelab.model.decoding.timing_trust`); then the loaded speedup over the
quiet one.

    python benchmarks/bench_timing_trust.py [--world tiny|demo] [--prompts 8] [--tokens 48] [--hogs 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time


def _spin(stop) -> None:
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


def _measure(target, drafter, prompts, tokens: int, k: int):
    from eaglelab.model.decoding import benchmark_speculation

    return benchmark_speculation(target, drafter, prompts, tokens, k=k, progress=False)


def _line(label: str, m) -> str:
    t = m.timing
    step, ratio = t["greedy_step_ms"], t["verify_steps"]
    return (f"{label:<8} τ {m.accept_len:.2f}  speedup {m.speedup:.2f}x (per-run {t['speedup_range'][0]:.2f}-"
            f"{t['speedup_range'][2]:.2f})  plain step {step[0]:.2f}/{step[1]:.2f}/{step[2]:.2f} ms  verify in plain "
            f"steps {ratio[0]:.2f}/{ratio[1]:.2f}/{ratio[2]:.2f} (noise {t['noise']:.0%})  bound {t['speedup_bound']:.2f}x"
            f"  -> {'trusted' if t['ok'] else 'NOT trusted: ' + t['note']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", choices=["tiny", "demo"], default="tiny")
    ap.add_argument("--world-dir", help="world folder (default: data/worlds/<world>, built if missing)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--hogs", type=int, default=3, help="CPU-spinning processes during the loaded run")
    args = ap.parse_args()

    from eaglelab.data.sets import measure_prompts
    from eaglelab.model.drafter_files import load_drafter
    from eaglelab.model.targets import Target, load_target
    from eaglelab.worlds.build import build_world

    world = build_world(args.world, args.world_dir)
    model, tok = load_target(world.target_a, device="cpu")
    drafter = load_drafter(world.drafter_a)
    target = Target.for_drafter(model, drafter.spec)
    prompts = measure_prompts(tok, args.prompts, world)
    print(f"drafter-a on target A, {args.world} world, {len(prompts)} prompts x {args.tokens} tokens, k = {args.k}")

    quiet = _measure(target, drafter, prompts, args.tokens, args.k)
    print(_line("quiet", quiet))
    stop = mp.Event()
    hogs = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(args.hogs)]
    for h in hogs:
        h.start()
    time.sleep(0.5)
    try:
        loaded = _measure(target, drafter, prompts, args.tokens, args.k)
    finally:
        stop.set()
        for h in hogs:
            h.join()
    print(_line(f"{args.hogs} hogs", loaded))
    print(f"loaded / quiet: speedup {loaded['speedup'] / quiet['speedup']:.2f}x, plain tok/s "
          f"{loaded['greedy_tokens_per_s'] / quiet['greedy_tokens_per_s']:.2f}x")


if __name__ == "__main__":
    main()
