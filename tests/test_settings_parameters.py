"""#57 item 2: a notebook's settings are built from its parameters of the same names (``from_parameters``), smoke sizes
included, so no notebook restates a settings field, a default or a smoke size."""

from __future__ import annotations

import ast
import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglelab.errors import ParameterError
from eaglelab.jobs.finetune import FinetuneSettings, ScalingSettings
from eaglelab.jobs.load_engine import HereSettings
from eaglelab.jobs.probe import ProbeSettings
from eaglelab.planning.decision_table import FOUNDING_CASE, Scenario
from eaglelab.settings import from_parameters

from .conftest import REPO


def test_not_given_keeps_the_default_a_list_becomes_the_fields_tuple_and_smoke_shrinks():
    got = from_parameters(ScalingSettings, {"BUDGETS": [2, 4, 8], "SEEDS": None, "SWEEP_STEPS": ""})
    assert got == ScalingSettings(budgets=(2, 4, 8))
    assert from_parameters(ScalingSettings, {}, smoke=True) == ScalingSettings(**ScalingSettings.SMOKE_SIZES)
    probe = from_parameters(ProbeSettings, {"OLD_TARGET": None, "DATA": "", "K": 5})
    assert probe.old_target == "" and probe.data is None and probe.k == 5  # a required path not given stays ""


@settings(max_examples=40, deadline=None)
@given(steps=st.integers(-5, 500), lr=st.floats(-1.0, 2.0, allow_nan=False))
def test_each_value_passes_its_fields_declared_range_or_is_refused_in_one_line(steps, lr):
    parameters = {"NEW_TARGET": "t", "STEPS": steps, "LR": lr}
    fine = steps >= 1 and 0 < lr <= 1.0
    if fine:
        got = from_parameters(FinetuneSettings, parameters)
        assert (got.steps, got.lr) == (steps, lr)
    else:
        with pytest.raises(ParameterError, match="--steps|--lr"):
            from_parameters(FinetuneSettings, parameters)


def test_the_smoke_sizes_are_fields_within_their_ranges():
    for cls in (FinetuneSettings, ScalingSettings, HereSettings, ProbeSettings):
        names = {f.name for f in dataclasses.fields(cls)}
        assert set(cls.SMOKE_SIZES) <= names, cls
        smoke = from_parameters(cls, {"NEW_TARGET": "t"} if cls is FinetuneSettings else {}, smoke=True)
        assert all(getattr(smoke, n) == v for n, v in cls.SMOKE_SIZES.items())


def test_the_scenario_reads_its_fields_in_capitals_and_labels_what_was_entered():
    parameters = {name.upper(): value for name, value in FOUNDING_CASE.items()}
    parameters |= {"GOAL_TPS": FOUNDING_CASE["goal_tps"] + 50, "EXPONENTS": list(FOUNDING_CASE["exponents"]),
                   "CONCURRENCY": [1, 2]}  # no Scenario field: not read
    scenario = Scenario.from_parameters(parameters)
    assert scenario.goal_tps == FOUNDING_CASE["goal_tps"] + 50 and scenario.source("goal_tps") == "entered"
    assert scenario.exponents == tuple(FOUNDING_CASE["exponents"]) and scenario.source("exponents") != "entered"


def test_every_notebook_setup_cell_is_at_most_six_lines():
    """#57's budget: the set-up cell (the one that calls open_case) is its imports, then at most six lines of code
    (comments aside): the case, its values, its settings."""
    for path in sorted((REPO / "notebooks").glob("0*.py")):
        setup = next(c for c in path.read_text().split("\n# %%") if "open_case(" in c)
        code = [s for s in ast.parse(setup.split("\n", 1)[1]).body if not isinstance(s, (ast.Import, ast.ImportFrom))]
        lines = sum(s.end_lineno - s.lineno + 1 for s in code)
        assert lines <= 6, (path.name, lines)
