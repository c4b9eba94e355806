"""The serving-cost model against published speedup-vs-concurrency sweeps: calibrate at one point, predict the rest.

Each sweep (``data/fixtures/load_sweeps/*.json``, every number with its source) is given to the model as a user
would: its target config, GPU and count, k, the τ it assumes (none of the sources publishes τ per concurrency)
and the first point (plain and speculative tok/s where published, else the speedup over the datasheet's plain
step). The other points are predicted and compared. Prints per sweep the median and worst held-out error, the
published vs predicted crossover (the largest concurrency up to which every point pays), the worst error over
τ ± 0.3, and whether #40's budget holds (median <= 10%, worst <= 25%, crossover within one step).

    .venv/bin/python benchmarks/bench_load_published.py [--json]
"""

from __future__ import annotations

import json
import sys

from eaglelab.serving.sweeps import budget_met, check_all


def main(argv: list[str]) -> int:
    checks = check_all()
    if "--json" in argv:
        print(json.dumps([c.to_json() for c in checks], indent=2))
        return 0
    print(f"{'sweep':58s} {'median':>7s} {'worst':>7s} {'crossover pub/pred':>19s} {'worst τ±0.3':>12s}  budget")
    for c in checks:
        mark = ("met" if budget_met(c) else "missed") if c.sweep.scored else f"not scored: {c.sweep.why_not_scored}"
        print(f"{c.sweep.name:58s} {100 * c.median_error:6.1f}% {100 * c.worst_error:6.1f}% "
              f"{str(c.published_crossover):>9s}/{str(c.predicted_crossover):<9s} {100 * c.worst_over_tau:11.1f}%  {mark}")
    scored = [c for c in checks if c.sweep.scored]
    print(f"\n{sum(budget_met(c) for c in scored)} of {len(scored)} scored sweeps within the budget")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
