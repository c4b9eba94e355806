"""One name for each checkpoint (issue #38): the same word in every notebook's parameters, on every command's flags
and in every settings class; the old spellings still accepted, with a note, for one release; and parameters that two
notebooks share of one type, so one ``eaglelab run -p`` line reaches every notebook."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglelab.cli import build_parser, main
from eaglelab.cli.arguments import CHECKPOINT_FLAGS
from eaglelab.engines.probe_recipes import ProbeRecipeSettings
from eaglelab.engines.recipes import RecipeSettings
from eaglelab.errors import ParameterError
from eaglelab.jobs.compare import CompareSettings
from eaglelab.jobs.finetune import FinetuneSettings
from eaglelab.jobs.probe import ProbeSettings
from eaglelab.jobs.targets import TargetCompareSettings
from eaglelab.workbook.case import checkpoint_case
from eaglelab.workbook.runner import (
    CHECKPOINT_PARAMETERS,
    DEPRECATED_PARAMETERS,
    check_parameters,
    notebook_parameters,
    renamed_parameters,
)

from .conftest import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
#: Every settings class that takes the checkpoints of the old -> new question.
ROLE_SETTINGS = (ProbeSettings, CompareSettings, TargetCompareSettings, FinetuneSettings, RecipeSettings,
                 ProbeRecipeSettings)
#: Words that name a checkpoint without saying which (or which side): never an interface name for a role.
VAGUE = {"target", "drafter", "target_a", "target_b", "drafter_a", "drafter_b", "init", "states_a", "states_b", "a",
         "b", "old", "new"}
#: Commands that take *a* target or drafter, whichever it is (inspect, dump either target, run any pair, convert):
#: their ``--target`` / ``--drafter`` mean "any", and they are the only ones that keep those words.
GENERIC = {"inspect", "dump", "speculate", "drafter init", "drafter export", "engine measure"}


def subcommands() -> dict[str, argparse.ArgumentParser]:
    """Every leaf command's parser, by its words (``drafter init``)."""
    out: dict[str, argparse.ArgumentParser] = {}

    def walk(parser, words):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            out[" ".join(words)] = parser
        for action in subs:
            for name, child in action.choices.items():
                walk(child, [*words, name])

    walk(build_parser(), [])
    return out


def test_every_notebook_takes_its_checkpoints_by_the_one_name():
    checked = 0
    for nb in NOTEBOOKS:
        params = set(notebook_parameters(nb))
        old = params & set(DEPRECATED_PARAMETERS)
        assert not old, f"{nb.stem} still takes {old}"
        taken = params & set(CHECKPOINT_PARAMETERS)
        checked += len(taken)
        assert not {p for p in params if p.lower() in VAGUE}, nb.stem
    assert checked >= 14  # 01: 2, 02: 4, 03: 5, 04: 2, 05: 3


def test_every_settings_class_names_its_checkpoints_as_the_flags_and_parameters_do():
    names = {n.lower() for n in CHECKPOINT_PARAMETERS}
    assert names == {k.replace("-", "_") for k in CHECKPOINT_FLAGS}
    for cls in ROLE_SETTINGS:
        fields = {f.name for f in dataclasses.fields(cls)}
        assert not fields & VAGUE, (cls.__name__, fields & VAGUE)
        assert fields & names, cls.__name__


def test_every_command_takes_its_checkpoints_by_the_one_name():
    roles = {f"--{k}" for k in CHECKPOINT_FLAGS}
    generic_seen = set()
    for words, parser in subcommands().items():
        visible = [a for a in parser._actions if a.help != argparse.SUPPRESS]
        flags = {s for a in visible for s in a.option_strings}
        vague = {f for f in flags if f[2:].replace("-", "_") in VAGUE}
        if vague:
            assert words in GENERIC, (words, vague)
            generic_seen.add(words)
        role_dests = {a.dest for a in visible if a.dest in {n.lower() for n in CHECKPOINT_PARAMETERS}}
        for action in visible:  # a role's flag is spelled as its name, a role's positional shows its name
            if action.dest in role_dests:
                shown = action.option_strings or [action.metavar]
                assert f"--{action.dest.replace('_', '-')}" in shown or action.dest.upper() in shown, (words, shown)
        assert not {a.dest for a in visible} & (VAGUE - {"target", "drafter"}), words
        assert flags & roles or not role_dests, words
    assert generic_seen <= GENERIC and {"probe", "finetune", "recipe", "compare", "compare-targets"} <= set(subcommands())


def run_cli(*args: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(list(args))
    return code, err.getvalue()


@pytest.mark.parametrize("old", [
    ["probe", "--target-a", "A", "--target-b", "B", "--drafter", "D"],
    ["finetune", "--target", "B", "--init", "D", "--out", "o"],
    ["recipe", "--engine", "specforge", "--init", "D", "--target", "B", "--target-a", "A", "--out", "o"],
    ["compare-targets", "A", "B", "--drafter", "D"],
    ["compare", "D", "E", "--target", "B"],
])
def test_old_spellings_still_parse_into_the_one_name_with_a_note(old):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        args = build_parser().parse_args(old)
    got = {k: getattr(args, k) for k in ("old_target", "new_target", "old_drafter") if hasattr(args, k)}
    assert {v for v in got.values() if v is not None} == {"A", "B", "D"} & set(old), got
    if any(w in ("--target-a", "--target-b", "--drafter", "--init", "--target") for w in old):
        assert "is now --" in err.getvalue()


def test_a_required_checkpoint_missing_in_every_spelling_is_one_line():
    code, err = run_cli("probe", "--new-target", "B", "--old-drafter", "D")
    assert code == 2 and err.count("\n") == 1 and "--old-target is required" in err, err
    code, err = run_cli("probe", "--target-b", "B", "--drafter", "D")
    assert code == 2 and "--old-target is required" in err.splitlines()[-1]


def test_notebook_parameters_old_names_are_renamed_with_a_note():
    given_, notes = renamed_parameters({"TARGET_A": "a", "TARGET_B": "b", "DRAFTER": "d", "STATES_A": "x",
                                        "DRAFTER_B": "e", "PLAN_GOAL_TPS": 150.0, "K": 3})
    assert given_ == {"OLD_TARGET": "a", "NEW_TARGET": "b", "OLD_DRAFTER": "d", "OLD_STATES": "x", "NEW_DRAFTER": "e",
                      "GOAL_TPS": 150.0, "K": 3}
    assert len(notes) == 6 and all("is now -p" in n for n in notes)
    assert renamed_parameters({"GOAL_TPS": [100, 150]})[0] == {"CHART_GOALS_TPS": [100, 150]}  # notebook 01's old list
    with pytest.raises(ParameterError, match="old name of OLD_TARGET"):
        renamed_parameters({"TARGET_A": "a", "OLD_TARGET": "other"})
    assert renamed_parameters({"TARGET_A": "a", "OLD_TARGET": "a"})[0] == {"OLD_TARGET": "a"}


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from([*DEPRECATED_PARAMETERS, *CHECKPOINT_PARAMETERS, "K", "GOAL_TPS"]),
                       st.one_of(st.none(), st.text(max_size=8), st.integers(), st.lists(st.integers(), max_size=3)),
                       max_size=8))
def test_renaming_never_loses_or_invents_a_value(parameters):
    try:
        out, notes = renamed_parameters(parameters)
    except ParameterError as exc:  # an old and a new name with different values: refused, naming one of them
        assert str(exc).startswith("-p ")
        return
    assert not set(out) & set(DEPRECATED_PARAMETERS)
    for name, value in parameters.items():  # every value arrives under its current name, unchanged
        current = "CHART_GOALS_TPS" if name == "GOAL_TPS" and isinstance(value, list) else \
            DEPRECATED_PARAMETERS.get(name, name)
        assert out[current] == value
    assert all(any(v == w for w in parameters.values()) for v in out.values())
    assert len(notes) == sum(1 for n, v in parameters.items()
                             if n in DEPRECATED_PARAMETERS or n == "GOAL_TPS" and isinstance(v, list))


def test_parameters_two_notebooks_share_have_one_type():
    seen: dict[str, tuple[str, object]] = {}
    for nb in NOTEBOOKS:
        for name, value in notebook_parameters(nb).items():
            if value is None:
                continue
            kind = "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else type(value).__name__
            if name in seen:
                assert seen[name][1] == kind, f"{name}: {seen[name][0]} takes a {seen[name][1]}, {nb.stem} a {kind}"
            else:
                seen[name] = (nb.stem, kind)
    # the whole workbook takes one -p line: GOAL_TPS reaches 01 and 04 alike, None where a comment says what it means
    check_parameters(NOTEBOOKS, {"GOAL_TPS": 175.0, "SERVING_ENGINE": None, "PAIR_WORLD": None, "OLD_TARGET": "x"})
    with pytest.raises(ParameterError, match="GOAL_TPS"):
        check_parameters(NOTEBOOKS, {"GOAL_TPS": "fast"})


def test_a_case_is_the_users_whole_or_the_worlds_whole():
    assert checkpoint_case({"OLD_TARGET": None, "NEW_TARGET": ""}, required=("OLD_TARGET", "NEW_TARGET")) is True
    assert checkpoint_case({"OLD_TARGET": "a", "NEW_TARGET": "b", "NEW_DRAFTER": None},
                           required=("OLD_TARGET", "NEW_TARGET")) is False
    with pytest.raises(ParameterError, match="^NEW_TARGET: not given, while OLD_TARGET is yours"):
        checkpoint_case({"OLD_TARGET": "a", "NEW_TARGET": None}, required=("OLD_TARGET", "NEW_TARGET"))


@pytest.mark.parametrize("cls, old, args", [
    (ProbeSettings, {"target_a": "A", "target_b": "B", "drafter": "D"}, ()),
    (CompareSettings, {"drafter_a": "D", "drafter_b": "E", "target": "B"}, ()),
    (TargetCompareSettings, {"target_a": "A", "target_b": "B", "drafter": "D"}, ()),
    (FinetuneSettings, {"target": "B"}, ()),
    (RecipeSettings, {"init": "D", "target": "B"}, ("specforge",)),
    (ProbeRecipeSettings, {"init": "D", "target_a": "A", "target": "B"}, ("specforge",)),
])
def test_settings_take_their_old_keywords_for_one_release(cls, old, args):
    now = {"target_a": "old_target", "target_b": "new_target", "drafter_a": "old_drafter", "drafter_b": "new_drafter",
           "init": "old_drafter", "drafter": "old_drafter", "target": "new_target"}
    with pytest.warns(DeprecationWarning, match="the old name goes in the next release"):
        settings = cls(*args, **old)
    for name, value in old.items():
        assert getattr(settings, now[name]) == value
        with pytest.warns(DeprecationWarning):
            assert getattr(settings, name) == value  # read under the old name too, with the note
    name, value = next(iter(old.items()))
    with pytest.raises(TypeError, match="not both"):
        cls(*args, **old, **{now[name]: value})
