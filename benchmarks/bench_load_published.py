"""The serving-cost model against published speedup-vs-concurrency sweeps, first as a user would drive it.

**The user's path** (issue #55, :mod:`eaglelab.jobs.sweeps_user`): each sweep (``data/fixtures/load_sweeps/*.json``,
every number with its source) is given to ``perf`` with only what its source states (``stated``: the GPU and count,
the context, the KV dtype, the weights' bits), its target config, k, and its first point as the one measurement
(tok/s per request where published, else the speedup). Everything else takes ``perf``'s default or range: τ, which
no source publishes per load, spans what published chains accept; the context its range where unstated. Prints per
sweep the share of held-out published points inside the answer's band, the band's centre's median error, and the
published crossover against the band's range, with the budget (>= 80% inside, centre <= 10%, crossover inside).

**The best case** (labelled so, :mod:`eaglelab.serving.sweeps`): the same model with each fixture's own chosen τ and
context (``assumed``), the median and worst held-out error and the crossover, against #40's budget.

    .venv/bin/python benchmarks/bench_load_published.py [--json]
"""

from __future__ import annotations

import json
import sys

from eaglelab.jobs.sweeps_user import MAX_CENTRE_ERROR, MIN_COVERAGE, user_path_all
from eaglelab.serving.sweeps import budget_met, check_all


def _range(pair) -> str:
    low, high = (str(p) if p is not None else "none" for p in pair)
    return low if low == high else f"{low}-{high}"


def main(argv: list[str]) -> int:
    users, checks = user_path_all(), check_all()
    if "--json" in argv:
        print(json.dumps({"user_path": [u.to_json() if not isinstance(u, tuple) else {"name": u[0].name, "refused": u[1]}
                                        for u in users],
                          "best_case": [c.to_json() for c in checks]}, indent=2))
        return 0
    print(f"The user's path: perf given what each source states (budget: >= {100 * MIN_COVERAGE:.0f}% of points inside "
          f"the band, centre <= {100 * MAX_CENTRE_ERROR:.0f}% median, crossover inside the band's)\n")
    print(f"{'sweep':56s} {'inside':>7s} {'centre':>7s} {'crossover pub / band':>22s}  budget")
    scored = []
    for u in users:
        if isinstance(u, tuple):
            print(f"{u[0].name:56s} refused: {u[1]}")
            continue
        mark = ("met" if u.budget_met() else "missed") if u.sweep.scored else f"not scored: {u.sweep.why_not_scored}"
        scored += [u] if u.sweep.scored else []
        print(f"{u.sweep.name:56s} {100 * u.coverage:6.0f}% {100 * u.centre_error:6.1f}% "
              f"{str(u.published_crossover):>9s} / {_range(u.crossover_range):<10s}  {mark}")
    print(f"\n{sum(u.budget_met() for u in scored)} of {len(scored)} scored sweeps within the user-path budget; "
          f"points inside the band: {sum(r.inside for u in scored for r in u.held_out)} of "
          f"{sum(len(u.held_out) for u in scored)}")
    print("\nThe best case, labelled: each fixture's chosen τ and context (#40's budget: median <= 10%, worst <= 25%, "
          "crossover within one step)\n")
    print(f"{'sweep':56s} {'median':>7s} {'worst':>7s} {'crossover pub/pred':>19s} {'worst τ±0.3':>12s}  budget")
    for c in checks:
        mark = ("met" if budget_met(c) else "missed") if c.sweep.scored else f"not scored: {c.sweep.why_not_scored}"
        print(f"{c.sweep.name:56s} {100 * c.median_error:6.1f}% {100 * c.worst_error:6.1f}% "
              f"{str(c.published_crossover):>9s}/{str(c.predicted_crossover):<9s} {100 * c.worst_over_tau:11.1f}%  {mark}")
    best = [c for c in checks if c.sweep.scored]
    print(f"\n{sum(budget_met(c) for c in best)} of {len(best)} scored sweeps within the best-case budget")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
