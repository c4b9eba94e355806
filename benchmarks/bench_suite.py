"""The suite's budget: each tier's time and test count, and the slowest files, from a pytest JUnit report.

The question: where do ``make test``'s minutes go, and does ``make check`` stay the inner loop? Each test's
tiers are recorded in the report by ``tests/tiers.py`` (a ``tiers`` property: ``check`` for a test in no
tier); a test in several tiers counts in the first of :data:`ORDER` it has (a browser test that builds a
world is a browser test). The run's wall time is the report's own; the tiers' sums are the tests' own times
(set-up, call and tear-down), which is where the wall time goes on one worker.

    python benchmarks/bench_suite.py REPORT.xml [REPORT.xml ...] [--slowest 15]
    python benchmarks/bench_suite.py --run check|test [--slowest 15]   # runs the make target's pytest here

``--run`` times the make target's selection (``make check``: ``-m 'not (tiers)' --hypothesis-profile=dev``)
with a report in a temporary folder, and prints the wall time beside the table.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

#: the tier a test counts in when it has several: what it starts that costs most
ORDER = ("browser", "engine", "notebook", "world", "slow", "check")


@dataclass(frozen=True)
class Case:
    """One test of a report: its id, file, seconds and tier (one of :data:`ORDER`)."""

    nodeid: str
    file: str
    seconds: float
    tier: str
    outcome: str


def read_report(path: Path) -> tuple[list[Case], float]:
    """The tests of one JUnit report, and its wall time in seconds."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    wall = sum(float(s.get("time", 0.0)) for s in suites)
    cases = []
    for case in root.iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        tiers = (props.get("tiers") or "check").split()
        tier = next(t for t in ORDER if t in tiers or t == "check")
        parts = case.get("classname", "").split(".")  # tests.test_x or tests.test_x.TestClass
        module = next((i for i, p in enumerate(parts) if p.startswith("test_")), len(parts) - 1)
        file = "/".join(parts[:module + 1]) + ".py"
        outcome = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
        cases.append(Case(f"{file}::{case.get('name')}", file, float(case.get("time", 0.0)), tier, outcome))
    return cases, wall


def table(cases: list[Case], wall: float, slowest: int) -> str:
    by_tier: dict[str, list[Case]] = collections.defaultdict(list)
    for c in cases:
        by_tier[c.tier].append(c)
    total = sum(c.seconds for c in cases)
    lines = [f"{len(cases)} tests, wall {wall / 60:.1f} min, tests' own time {total / 60:.1f} min",
             "", f"{'tier':<9} {'tests':>6} {'minutes':>8} {'share':>6}  {'skipped':>7}"]
    for tier in ORDER:
        group = by_tier.get(tier, [])
        if group:
            seconds = sum(c.seconds for c in group)
            skipped = sum(c.outcome == "skipped" for c in group)
            lines.append(f"{tier:<9} {len(group):>6} {seconds / 60:>8.1f} {seconds / max(total, 1e-9):>6.0%}  {skipped:>7}")
    files: dict[str, float] = collections.Counter()
    for c in cases:
        files[c.file] += c.seconds
    lines += ["", f"slowest {slowest} files (tests' own time):"]
    lines += [f"  {s:7.1f} s  {f}" for f, s in sorted(files.items(), key=lambda x: -x[1])[:slowest]]
    lines += ["", f"slowest {slowest} tests:"]
    lines += [f"  {c.seconds:7.1f} s  [{c.tier}] {c.nodeid}" for c in sorted(cases, key=lambda c: -c.seconds)[:slowest]]
    failed = [c.nodeid for c in cases if c.outcome in ("failure", "error")]
    if failed:
        lines += ["", f"{len(failed)} failed:"] + [f"  {n}" for n in failed]
    return "\n".join(lines)


def run_target(target: str, report: Path) -> float:
    """Run ``make TARGET``'s pytest selection here with a JUnit report; returns its wall seconds."""
    from tests.tiers import CHECK_SELECTION

    args = ["-m", CHECK_SELECTION, "--hypothesis-profile=dev"] if target == "check" else []
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", *args],
                   cwd=REPO, check=False)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reports", nargs="*", type=Path, help="pytest --junitxml reports")
    ap.add_argument("--run", choices=["check", "test"], help="run the make target's pytest selection first")
    ap.add_argument("--slowest", type=int, default=15)
    args = ap.parse_args(argv)
    if not args.reports and not args.run:
        ap.error("give a report, or --run check|test")
    reports, measured = list(args.reports), None
    with tempfile.TemporaryDirectory() as tmp:
        if args.run:
            reports.append(Path(tmp) / "report.xml")
            measured = run_target(args.run, reports[-1])
        cases, wall = [], 0.0
        for path in reports:
            got, seconds = read_report(path)
            cases += got
            wall += seconds
    if not cases:
        print("no test in the report", file=sys.stderr)
        return 1
    print(table(cases, wall, args.slowest))
    if measured is not None:
        print(f"\nmake {args.run}'s pytest, measured here: {measured / 60:.1f} min wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
