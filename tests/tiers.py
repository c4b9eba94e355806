"""The suite's tiers and hypothesis profiles: what ``make check`` runs, and how many examples it draws.

A test is in a tier when it builds a world, executes a notebook on a Jupyter kernel, starts vLLM's
engine or drives JupyterLab in Chromium. Nobody has to remember a decorator for it:

- a test that uses a fixture which starts one of them (``tiny_world``, ``smoke_run``, ...) gets the
  fixture's marker at collection time (:data:`FIXTURE_TIERS`, through every fixture it depends on);
- a test that calls the expensive entry point itself (:data:`ENTRY_POINTS`: the world builders, the
  kernel launcher, the engine's worker, JupyterLab and the browser) fails at that call unless it
  carries the tier's marker, naming the marker to add.

``make check`` deselects every tier (:data:`CHECK_SELECTION`) and draws with the hypothesis profile
``dev``: a tenth of the examples each property asks for (at least 3), at random. ``make test`` runs every
tier with the profile ``ci`` (the default): the counts the tests ask for, derandomized, so every run meets
the same cases. The header of each run names the profile in force.

The plugin is loaded by ``tests/conftest.py``; ``tests/test_tiers.py`` checks it from pytest runs of its own.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings

try:  # pytest 9 keeps a node's id in ``item._id``; pytest 8 has no NodeId and xdist's own group suffix works there
    from _pytest.nodeid import NodeId
except ImportError:
    NodeId = None

if os.environ.get("PYTEST_XDIST_WORKER"):  # make test's two workers share the two cores: torch on one thread in each
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # (and in the kernels and engines they start), before it is imported

#: marker -> what a test in that tier starts (registered in pyproject.toml with the same words)
TIERS: dict[str, str] = {
    "world": "builds a world (the tiny or the demo world: models trained, replies generated)",
    "notebook": "executes a notebook on a Jupyter kernel",
    "engine": "starts vLLM's CPU engine or its environment's interpreter",
    "browser": "drives JupyterLab in Chromium",
    "slow": "takes long without starting any of those (measured: docs/MEASURED.md)",
}

#: the ``-m`` expression of ``make check``: no tier at all
CHECK_SELECTION = "not (" + " or ".join(TIERS) + ")"

#: fixtures that start an expensive thing -> the tier of every test that uses them (directly or not)
FIXTURE_TIERS: dict[str, str] = {
    "tiny_world": "world",
    "smoke_run": "notebook",
}


#: tiers whose tests share one xdist group, so that ``make test`` (``-n 2 --dist loadgroup``) runs them on one worker,
#: one after the other. The notebooks and the browser start Jupyter kernels, whose launcher picks free ports before the
#: kernel binds them (two launched at once on one machine can take the same one; seen as a kernel idle while papermill
#: waited), and the smoke runs are built once, on that worker; the slow tier's Kimi-width probes (12-13 GB) must not
#: meet the Kimi case in one line (a notebook test, 11.6 GB) on a 24 GB machine; vLLM's measurements run one at a time
#: (each its concurrency's timing). The largest group is scheduled first.
TIER_GROUPS: dict[str, str] = {"notebook": "heavy", "browser": "heavy", "slow": "heavy", "engine": "vllm"}


@dataclass(frozen=True)
class EntryPoint:
    """A function that starts an expensive thing: ``module.qualname`` (``Class.method`` for a method)."""

    module: str
    qualname: str
    tier: str

    @property
    def name(self) -> str:
        return f"{self.module}.{self.qualname}"


ENTRY_POINTS: tuple[EntryPoint, ...] = (
    EntryPoint("eaglelab.worlds.tiny", "build_tiny_world", "world"),
    EntryPoint("eaglelab.worlds.demo", "build_demo_world", "world"),
    EntryPoint("jupyter_client.manager", "KernelManager._async_launch_kernel", "notebook"),
    EntryPoint("eaglelab.engines.vllm", "engine_status", "engine"),
    EntryPoint("eaglelab.engines.vllm", "run_worker", "engine"),
    EntryPoint("tests.browser", "jupyter_lab", "browser"),
    EntryPoint("tests.browser", "browser_page", "browser"),
)


#: the share of a property's own ``max_examples`` that the ``dev`` profile draws
DEV_SHARE = 0.1
DEV_MIN_EXAMPLES = 3

settings.register_profile("ci", derandomize=True, database=None, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci")  # before any test module is imported; ``--hypothesis-profile`` replaces it


class TierError(Exception):
    """A test started an expensive thing without its tier's marker."""


_current: list[pytest.Item] = []


def fixture_tiers(fixturenames: Iterable[str]) -> set[str]:
    """The tiers a test is in through the fixtures it uses (``item.fixturenames`` is their closure)."""
    return {FIXTURE_TIERS[name] for name in fixturenames if name in FIXTURE_TIERS}


def missing_marker(item: pytest.Item | None, entry: EntryPoint) -> str | None:
    """Why ``item`` may not call ``entry`` (None when it may, or when no test is running)."""
    if item is None or item.get_closest_marker(entry.tier) is not None:
        return None
    return (f"{item.nodeid} {TIERS[entry.tier]} ({entry.name}) without @pytest.mark.{entry.tier}: "
            f"add the marker, or use a fixture that starts it ({', '.join(sorted(FIXTURE_TIERS)) or 'none yet'})")


def dev_examples(asked: int) -> int:
    """What the ``dev`` profile draws for a property that asks for ``asked`` examples."""
    return min(asked, max(DEV_MIN_EXAMPLES, round(asked * DEV_SHARE)))


def examples(asked: int) -> int:
    """What a property built inside a test (``@settings`` in its body) draws under the profile in force."""
    return dev_examples(asked) if settings.get_current_profile_name() == "dev" else asked


def _scale_examples(test) -> None:
    own = getattr(test, "_hypothesis_internal_use_settings", None)
    if own is None or getattr(test, "_dev_scaled", False):
        return
    test._hypothesis_internal_use_settings = settings(own, max_examples=dev_examples(own.max_examples),
                                                      derandomize=False, database=None)
    test._dev_scaled = True


def _guarded(entry: EntryPoint, original: Callable) -> Callable:
    def check() -> None:
        problem = missing_marker(_current[-1] if _current else None, entry)
        if problem:
            raise TierError(problem)

    if inspect.iscoroutinefunction(original):
        async def guard(*args, **kwargs):
            check()
            return await original(*args, **kwargs)
    else:
        def guard(*args, **kwargs):
            check()
            return original(*args, **kwargs)
    functools.update_wrapper(guard, original)
    guard._tier_entry = entry  # type: ignore[attr-defined]
    return guard


def install_guards() -> None:
    """Replace every entry point by its guard, and every module global bound to it by ``from ... import``
    (an entry point whose module does not import here cannot start its thing either)."""
    for entry in ENTRY_POINTS:
        try:
            module = importlib.import_module(entry.module)
        except ImportError:
            continue
        owner_name, _, attr = entry.qualname.rpartition(".")
        owner = getattr(module, owner_name) if owner_name else module
        original = getattr(owner, attr)
        if hasattr(original, "_tier_entry"):
            continue
        guard = _guarded(entry, original)
        setattr(owner, attr, guard)
        if owner_name:
            continue
        for other in list(sys.modules.values()):
            namespace = getattr(other, "__dict__", None)
            if not namespace:
                continue
            for key, value in list(namespace.items()):
                if value is original:
                    setattr(other, key, guard)


# --- the hooks (tests/conftest.py loads this module as a plugin) -------------------------------------


def pytest_report_header(config):
    return (f"hypothesis profile: {settings.get_current_profile_name()}; "
            f"tiers: {', '.join(TIERS)} (make check runs -m '{CHECK_SELECTION}')")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark every test with the tiers of the fixtures it uses, before ``-m`` deselects anything; under the
    ``dev`` profile, scale each property's own example count."""
    dev = settings.get_current_profile_name() == "dev"
    for item in items:
        if dev:
            _scale_examples(getattr(item, "obj", None))
        for tier in sorted(fixture_tiers(getattr(item, "fixturenames", ()))):
            if item.get_closest_marker(tier) is None:
                item.add_marker(tier)
        group = next((TIER_GROUPS[t] for t in TIER_GROUPS if item.get_closest_marker(t)), None)
        if group and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
        if getattr(config.option, "loadgroup", False) and (mark := item.get_closest_marker("xdist_group")):
            _schedule_in_group(item, mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        # in a --junitxml report, each test's tiers (benchmarks/bench_suite.py sums them)
        item.user_properties.append(("tiers", " ".join(t for t in TIERS if item.get_closest_marker(t)) or "check"))


def _schedule_in_group(item: pytest.Item, group: str) -> None:
    """Give ``item`` the ``@group`` suffix by which ``--dist loadgroup`` schedules a group on one worker.

    pytest-xdist 3.8 writes the suffix to ``item._nodeid``; pytest 9 reads a node's id from ``item._id`` (a ``NodeId``),
    so xdist's own suffix never reaches its scheduler and every group is spread over both workers
    (``tests/test_tiers.py`` checks that the groups hold). Nothing to do under pytest 8, where xdist's suffix lands."""
    if NodeId is not None and not item.nodeid.endswith(f"@{group}"):
        item._id = NodeId.parse(f"{item.nodeid}@{group}")


def pytest_collection_finish(session):
    install_guards()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current.append(item)
    try:
        return (yield)
    finally:
        _current.pop()
