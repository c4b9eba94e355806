"""Where notebook 04's data-scaling sweep should spend its time: more seeds, more budgets, or more steps (issue #56).

Runs the sweep of notebook 04 (`eaglelab.jobs.finetune.data_scaling`) on the demo world under several allocations
of about the same order of cost and reports, for each, the sweep's seconds and how wide the answers it exists for
come out: the band of the data each start needs at the highest τ scratch reached (high over low, the
decision-maker's number) and of their ratio, and the band of the samples from which the warm start passes the old
drafter as is. The allocation that narrows them most per second is the one the notebook should use.

    .venv/bin/python benchmarks/bench_scaling_budget.py [--world data/worlds/demo] [--only NAME ...] [--json]

Needs the demo world (`make world`, 10-15 min once); each allocation takes 4-9 min on two cores.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

#: name -> (budgets, seeds, least steps a run, epochs): notebook 04's allocation first, then the alternatives.
ALLOCATIONS = {
    "notebook 04 (5 budgets x 1 seed, 40 steps)": ([4, 8, 16, 32, 64], [0], 40, 6),
    "2 seeds (5 budgets x 2 seeds, 40 steps)": ([4, 8, 16, 32, 64], [0, 1], 40, 6),
    "3 budgets x 2 seeds (40 steps)": ([8, 24, 64], [0, 1], 40, 6),
    "longer runs (5 budgets x 1 seed, 80 steps)": ([4, 8, 16, 32, 64], [0], 80, 12),
}


def _span(band) -> float:
    """High over low of a (central, low, high) band; inf where either end is unbounded or zero."""
    _, lo, hi = band
    return hi / lo if math.isfinite(hi) and lo > 0 else math.inf


def measure(world: str, names: list[str]) -> list[dict]:
    from eaglelab.jobs.finetune import FinetuneSettings, ScalingSettings, data_scaling, load_inputs
    from eaglelab.worlds.build import world_for

    w = world_for("demo", world)
    settings = FinetuneSettings(str(w.target_b), old_drafter=str(w.drafter_a), seq_len=64, train_sequences=128,
                                eval_sequences=32, steps=60, batch_size=4, lr=2e-3, ttt_length=3, k=3)
    inputs = load_inputs(settings)
    rows = []
    for name in names:
        budgets, seeds, steps, epochs = ALLOCATIONS[name]
        start = time.perf_counter()
        fit = data_scaling(settings, inputs, ScalingSettings(tuple(budgets), tuple(seeds), steps, epochs)).fit
        seconds = time.perf_counter() - start
        levels = sorted({round(float(fit.scratch.central.tau(n)), 2) for n in budgets[1:]})
        top = fit.equal_tau([levels[-1]])[0]
        rows.append({"allocation": name, "seconds": seconds, "tau": top["tau"],
                     "warm_needs": top["warm start"], "scratch_needs": top["scratch"], "ratio": top["ratio"],
                     "warm_span": _span(top["warm start"]), "scratch_span": _span(top["scratch"]),
                     "ratio_span": _span(top["ratio"]), "beats_plugin": fit.beats_plugin(),
                     "beats_plugin_span": _span(fit.beats_plugin()) if fit.beats_plugin() else math.inf,
                     "ratio_text": fit.ratio_text(top["tau"])})
        print(f"{name}: {seconds:.0f} s", file=sys.stderr, flush=True)
    return rows


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", default="data/worlds/demo")
    p.add_argument("--only", nargs="*", default=None, help="allocations by the start of their name")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    names = [n for n in ALLOCATIONS if a.only is None or any(n.startswith(o) for o in a.only)]
    rows = measure(a.world, names)
    if a.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    print(f"{'allocation':46s} {'s':>5s} {'τ':>5s} {'warm needs (span)':>22s} {'scratch needs (span)':>24s} "
          f"{'ratio span':>10s} {'passes plug-in (span)':>22s}")
    for r in rows:
        bp = r["beats_plugin"]
        print(f"{r['allocation']:46s} {r['seconds']:5.0f} {r['tau']:5.2f} "
              f"{r['warm_needs'][0]:10.1f} ({r['warm_span']:7.1f}x) {r['scratch_needs'][0]:12.1f} ({r['scratch_span']:7.1f}x) "
              f"{r['ratio_span']:9.1f}x {bp[0] if bp else float('nan'):10.0f} ({r['beats_plugin_span']:7.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
