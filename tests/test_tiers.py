"""The tiers of the suite (tests/tiers.py): set where the expensive thing starts, deselected by `make check`.

The rules are checked from pytest runs of their own, on a small project in ``tmp_path`` that loads the same
plugin: which tests a fixture marks, which a direct call fails, what ``make check`` selects, which
hypothesis profile each make target runs with.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.tiers import CHECK_SELECTION, ENTRY_POINTS, FIXTURE_TIERS, TIER_GROUPS, TIERS, dev_examples

REPO = Path(__file__).resolve().parent.parent

INNER_CONFTEST = '''
import pytest

pytest_plugins = ["tests.tiers"]


@pytest.fixture(scope="session")
def tiny_world():
    return "a world stand-in: the name is what marks its users"


@pytest.fixture
def derived(tiny_world):
    return tiny_world + "!"
'''

INNER_TESTS = '''
import pytest
from hypothesis import given, settings, strategies as st

DRAWN = []


def test_plain():
    pass


def test_uses_the_world(tiny_world):
    pass


def test_uses_it_through_another_fixture(derived):
    pass


@pytest.mark.slow
def test_marked_slow():
    pass


def test_builds_a_world_unmarked(tmp_path):
    from eaglelab.worlds.tiny import build_tiny_world
    build_tiny_world(tmp_path / "w")


def test_starts_a_kernel_unmarked():
    from jupyter_client.manager import KernelManager
    KernelManager().start_kernel()


def test_starts_the_engine_unmarked():
    from eaglelab.engines.vllm import run_worker
    run_worker({"nothing": "runs"})


@settings(max_examples=50)
@given(st.integers())
def test_draws(x):
    DRAWN.append(x)


def test_drawn_count():
    print(f"DRAWN={len(DRAWN)}")
    assert DRAWN
'''


def _inner_run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """``pytest ARGS`` on the small project; returns the process and each test's outcome (its JUnit report is
    ``tmp_path / "junit-N.xml"``)."""
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / "conftest.py").write_text(INNER_CONFTEST)
    (project / "test_inner.py").write_text(INNER_TESTS)
    junit = tmp_path / f"junit-{len(list(tmp_path.glob('junit-*')))}.xml"
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s", "-rf",
                           f"--junitxml={junit}", "--rootdir", str(project), str(project), *args],
                          capture_output=True, text=True, cwd=project, env=env, timeout=600)
    outcomes = {}
    for case in ET.parse(junit).iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes[case.get("name")] = kinds[0] if kinds else "passed"
    return proc, outcomes


@pytest.fixture(scope="module")
def check_run(tmp_path_factory):
    return _inner_run(tmp_path_factory.mktemp("check"), "-m", CHECK_SELECTION, "--hypothesis-profile=dev")


def test_the_check_selection_holds_no_test_of_a_tier(check_run):
    proc, outcomes = check_run
    assert set(outcomes) == {"test_plain", "test_builds_a_world_unmarked", "test_starts_a_kernel_unmarked",
                             "test_starts_the_engine_unmarked", "test_draws", "test_drawn_count"}, proc.stdout
    assert "3 deselected" in proc.stdout  # two users of the world fixture, one slow test


def test_a_direct_call_without_the_tier_marker_fails_naming_the_marker(check_run):
    proc, outcomes = check_run
    for name, tier in (("test_builds_a_world_unmarked", "world"), ("test_starts_a_kernel_unmarked", "notebook"),
                       ("test_starts_the_engine_unmarked", "engine")):
        assert outcomes[name] == "failure", proc.stdout
        assert re.search(rf"TierError: \S+::{name} .* without @pytest.mark.{tier}", proc.stdout), proc.stdout
    assert outcomes["test_plain"] == "passed"


def test_the_dev_profile_draws_a_tenth_and_says_so(check_run):
    proc, outcomes = check_run
    assert "hypothesis profile: dev" in proc.stdout
    assert f"DRAWN={dev_examples(50)}" in proc.stdout, proc.stdout
    assert dev_examples(50) == 5 and dev_examples(10) == 3 and dev_examples(2) == 2


def test_the_whole_suite_runs_every_tier_with_the_ci_profile(tmp_path):
    proc, outcomes = _inner_run(tmp_path, "-m", "world or slow")
    assert "hypothesis profile: ci" in proc.stdout
    # the report carries each test's tier, which the suite's benchmark sums
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from bench_suite import read_report
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    cases, wall = read_report(tmp_path / "junit-0.xml")
    assert {c.nodeid.split("::")[1]: c.tier for c in cases} == {
        "test_uses_the_world": "world", "test_uses_it_through_another_fixture": "world", "test_marked_slow": "slow"}
    assert wall > 0 and all(c.file.endswith("test_inner.py") for c in cases)
    assert outcomes == {"test_uses_the_world": "passed",
                                                   "test_uses_it_through_another_fixture": "passed",
                                                   "test_marked_slow": "passed"}, proc.stdout


GROUPED_TESTS = '''
import os

import pytest


def _worker(name):
    with open(os.environ["WORKERS_FILE"], "a") as fh:
        fh.write(f"{name} {os.environ['PYTEST_XDIST_WORKER']} {os.environ.get('OMP_NUM_THREADS')}\\n")


@pytest.mark.parametrize("i", range(6))
@pytest.mark.notebook
def test_kernel(i):
    _worker(f"kernel-{i}")


@pytest.mark.browser
def test_browser():
    _worker("browser")


@pytest.mark.slow
def test_slow():
    _worker("slow")


@pytest.mark.parametrize("i", range(3))
@pytest.mark.engine
def test_engine(i):
    _worker(f"engine-{i}")


@pytest.mark.parametrize("i", range(12))
def test_plain(i):
    _worker(f"plain-{i}")
'''


def test_under_two_workers_the_heavy_tests_share_one_worker_and_vllms_another(tmp_path):
    """make test's ``-n 2 --dist loadgroup``: every notebook, browser and slow test on one worker (one kernel launched
    at a time, the largest memory peaks apart), every engine test on one worker; each worker's torch on one thread."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "conftest.py").write_text('pytest_plugins = ["tests.tiers"]\n')
    (project / "test_grouped.py").write_text(GROUPED_TESTS)
    record = tmp_path / "workers.txt"
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "WORKERS_FILE": str(record)}
    env.pop("OMP_NUM_THREADS", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
                           "--rootdir", str(project), str(project)], capture_output=True, text=True, cwd=project,
                          env=env, timeout=600)
    assert "23 passed" in proc.stdout, proc.stdout + proc.stderr
    where = dict(line.split(" ", 1) for line in record.read_text().splitlines())
    heavy = {where[n] for n in where if n.startswith(("kernel", "browser", "slow"))}
    engines = {where[n] for n in where if n.startswith("engine")}
    assert len(heavy) == 1 and len(engines) == 1, where
    assert {w.split()[1] for w in where.values()} == {"1"}  # OMP_NUM_THREADS set by tests/tiers.py under xdist
    assert set(TIER_GROUPS) == {"notebook", "browser", "slow", "engine"}


def test_each_make_target_runs_its_tiers_and_its_profile():
    def recipe(target: str) -> str:
        return subprocess.run(["make", "-n", target], capture_output=True, text=True, cwd=REPO, check=True).stdout

    check, whole = recipe("check"), recipe("test")
    assert f'-m "{CHECK_SELECTION}" --hypothesis-profile=dev' in check
    assert "ruff check" in check
    pytest_args = next(line for line in whole.splitlines() if "-m pytest" in line).split("-m pytest", 1)[1]
    assert " -m " not in pytest_args and "hypothesis-profile" not in pytest_args  # every tier, the ci profile
    assert "-n 2 --dist loadgroup" in pytest_args  # two workers, the groups of tests/tiers.py kept together


def test_every_tier_is_registered_with_pytest_and_every_rule_names_one():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    registered = {m.split(":")[0] for m in config["tool"]["pytest"]["ini_options"]["markers"]}
    assert set(TIERS) <= registered
    assert set(FIXTURE_TIERS.values()) <= set(TIERS)
    assert {e.tier for e in ENTRY_POINTS} == set(TIERS) - {"slow"}

