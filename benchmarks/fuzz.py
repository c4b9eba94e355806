"""Hostile inputs at scale (issues #13, #31 and #53): what each category of input gets back.

Draws cases from the strategies of ``tests/fuzzing.py`` (the readers: safetensors headers, config.json fields,
shard indexes, server logs, command-line numbers, special files), ``tests/fuzzing_write.py`` (the write side
and what is read back: ``-p`` values, ``--out`` targets, names in generated recipes, findings and run files, the
vLLM worker's answers, a misbehaving hub, the pickers' folder trees) and ``tests/fuzzing_plans.py`` (game plans
rendered from hostile findings folders, ``recipe --job load`` values, cost tables), runs each in this process under a time cap,
and prints a table of categories x outcomes:

- ``ok``: exit 0, valid output (``--json``: strict JSON); ``error``: exit 2, one line ``eaglelab <cmd>: error: ...``;
- failures: ``traceback`` (an exception escaped), ``hang`` (over the time cap), ``bad-output`` (non-strict JSON,
  several stderr lines, another exit code), ``garbage`` (an invalid input accepted, or an exit-0 output that
  breaks an invariant), ``refused`` (a valid input, e.g. a header the safetensors library reads, refused).

Then the distinct failure signatures (exception type + innermost eaglelab frame, or the reason), counted, with
one example each, and the first few failing cases of each category. Exit code 1 when anything failed.

    python benchmarks/fuzz.py [--cases 5000] [--seed S] [--time-cap 2] [--examples 3] [--only header log]

Without ``--seed`` the draw is derandomized (the same cases every run); a category whose space is smaller than
its share (``special``) runs what it has and the rest is shared among the others (a second, seeded draw).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("EAGLELAB_PROGRESS", "0")

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests import fuzzing as fz  # noqa: E402
from tests import fuzzing_plans as fp  # noqa: E402
from tests import fuzzing_write as fw  # noqa: E402

#: Every category: the readers', the write side's, then issue #53's surfaces (game plans, load recipes, cost tables),
#: each with its own time cap where it needs one.
ALL_CATEGORIES = fz.CATEGORIES + fw.CATEGORIES + fp.CATEGORIES
#: Seconds per case where a category needs more than the default cap (``tests/fuzzing_write.py`` and
#: ``tests/fuzzing_plans.py`` say why).
CAPS = {**fw.TIME_CAPS, **fp.TIME_CAPS}
#: Each category's strategy.
STRATEGIES = {**fz.STRATEGIES, **fw.STRATEGIES, **fp.STRATEGIES}


class Tally:
    """Outcomes per category, failure signatures, and examples."""

    def __init__(self):
        self.counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.signatures: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.first: dict[str, tuple[fz.Case, fz.Outcome]] = {}
        self.examples: dict[str, list[tuple[fz.Case, fz.Outcome]]] = collections.defaultdict(list)
        self.seconds: collections.Counter = collections.Counter()

    def record(self, case: fz.Case, outcome: fz.Outcome, keep: int) -> None:
        cat = case.category
        self.counts[cat][outcome.kind] += 1
        self.seconds[cat] += outcome.seconds
        if outcome.kind in fz.FAILURES:
            sig = outcome.signature
            self.signatures[sig][cat] += 1
            self.first.setdefault(sig, (case, outcome))
            if len(self.examples[cat]) < keep:
                self.examples[cat].append((case, outcome))

    def total(self, cat: str) -> int:
        return sum(self.counts[cat].values())


def run_category(cat: str, n: int, seed: int | None, root: Path, cap: float, tally: Tally, keep: int) -> int:
    """Draw up to ``n`` cases of ``cat`` and record their outcomes; returns how many ran."""
    if n <= 0:
        return 0
    before = tally.total(cat)
    if cat == "hub":
        with fw.hub_for_fuzzing(root, deadline_s=1.0) as hub:
            return _run_strategy(cat, fw.hub_cases(root, hub), n, seed, CAPS[cat], tally, keep)
    strategy = STRATEGIES[cat](root)
    return _run_strategy(cat, strategy, n, seed, max(cap, CAPS.get(cat, 0.0)), tally, keep, before)


def _run_strategy(cat: str, strategy, n: int, seed: int | None, cap: float, tally: Tally, keep: int,
                  before: int | None = None) -> int:
    before = tally.total(cat) if before is None else before

    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate], derandomize=seed is None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def body(data):
        case = data.draw(strategy)
        try:
            outcome = fz.check(case, cap)
        finally:
            if case.folder is not None:
                shutil.rmtree(case.folder, ignore_errors=True)
        tally.record(case, outcome, keep)

    if seed is not None:
        body = hypothesis_seed(seed)(body)
    body()
    return tally.total(cat) - before


def one_line(text: str) -> str:
    return " ".join(text.split())


def table(tally: Tally, cats: list[str]) -> str:
    headers = ["category", "cases", *fz.OUTCOMES, "failed", "s/case"]
    rows = []
    for cat in cats:
        c = tally.counts[cat]
        n = tally.total(cat)
        failed = sum(c[k] for k in fz.FAILURES)
        rows.append([cat, n, *(c[k] for k in fz.OUTCOMES), failed, f"{tally.seconds[cat] / max(n, 1):.3f}"])
    totals = collections.Counter()
    for cat in cats:
        totals.update(tally.counts[cat])
    n = sum(totals.values())
    rows.append(["total", n, *(totals[k] for k in fz.OUTCOMES), sum(totals[k] for k in fz.FAILURES),
                 f"{sum(tally.seconds.values()) / max(n, 1):.3f}"])
    cells = [headers] + [[str(x) for x in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.insert(len(lines) - 1, lines[1])
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=5000, help="cases in all, spread over the categories (default 5000)")
    ap.add_argument("--seed", type=int, help="hypothesis seed (default: derandomized, the same cases every run)")
    ap.add_argument("--time-cap", type=float, default=2.0, help="seconds per case before it counts as a hang (default 2)")
    ap.add_argument("--examples", type=int, default=3, help="failing examples shown per category (default 3)")
    ap.add_argument("--only", nargs="+", choices=ALL_CATEGORIES, help="categories to run (default all)")
    args = ap.parse_args()

    cats = list(args.only or ALL_CATEGORIES)
    tally = Tally()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="eaglelab-fuzz-") as tmp:
        root = Path(tmp)
        share = {cat: args.cases // len(cats) + (1 if i < args.cases % len(cats) else 0) for i, cat in enumerate(cats)}
        ran = {cat: run_category(cat, share[cat], args.seed, root, args.time_cap, tally, args.examples) for cat in cats}
        left = args.cases - sum(ran.values())
        open_cats = [cat for cat in cats if ran[cat] >= share[cat]]  # the others ran out of distinct cases
        if left > 0 and open_cats:  # a second draw, seeded (so still the same every run), for the rest
            second = 1 if args.seed is None else args.seed + 1
            for i, cat in enumerate(open_cats):
                extra = left // len(open_cats) + (1 if i < left % len(open_cats) else 0)
                run_category(cat, extra, second, root, args.time_cap, tally, args.examples)
    elapsed = time.perf_counter() - t0

    import safetensors

    print(f"eaglelab under hostile inputs: {sum(tally.total(c) for c in cats)} cases in "
          f"{elapsed:.0f} s (time cap {args.time_cap:g} s per case, seed "
          f"{'derandomized' if args.seed is None else args.seed}, safetensors {safetensors.__version__})\n")
    print(table(tally, cats))
    failed = sum(sum(tally.counts[c][k] for k in fz.FAILURES) for c in cats)
    if not failed:
        print("\nno traceback, hang, bad output, garbage (an invalid input accepted, a user's file changed, a word "
              "changed on its way to an engine, code run) or refusal")
        return 0
    print(f"\nfailure signatures ({len(tally.signatures)} distinct; count by category; one example each):")
    ranked = sorted(tally.signatures.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    for sig, by_cat in ranked:
        case, outcome = tally.first[sig]
        where = ", ".join(f"{c} {n}" for c, n in by_cat.most_common())
        print(f"  {sum(by_cat.values()):5d}  {sig}  [{where}]")
        print(f"         e.g. {case.label[:110]!r}: eaglelab {' '.join(fz.shorten_argv(case.argv, 60))}")
        print(f"         {one_line(outcome.detail)[:220]}")
    print(f"\nfirst failing cases per category (up to {args.examples}):")
    for cat in cats:
        if not tally.examples[cat]:
            continue
        print(f"  {cat}:")
        for case, outcome in tally.examples[cat]:
            print(f"    - {outcome.signature}")
            print(f"      {case.label[:140]!r} (oracle {case.oracle}: {case.note[:100]})")
            print(f"      eaglelab {' '.join(fz.shorten_argv(case.argv, 80))}")
            print(f"      {one_line(outcome.detail)[:240]}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
