"""One name for each checkpoint (issue #38): the same word in every notebook's parameters, on every command's flags
and in every settings class; the names used before them refused like any unknown name (issue #57: no release carried
them, so no shim keeps them); and parameters that two notebooks share of one type, so one ``eaglelab run -p`` line
reaches every notebook."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io

import pytest

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
from eaglelab.workbook.runner import CHECKPOINT_PARAMETERS, check_parameters, notebook_parameters

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
#: The notebook parameters' names before one name per checkpoint (and notebook 01's goal), gone since #57.
OLD_PARAMETERS = ("TARGET_A", "TARGET_B", "TARGET", "DRAFTER", "DRAFTER_A", "DRAFTER_B", "STATES_A", "STATES_B",
                  "PLAN_GOAL_TPS")


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
        old = params & set(OLD_PARAMETERS)
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
    ["probe", "--target-a", "A", "--new-target", "B", "--old-drafter", "D"],
    ["finetune", "--new-target", "B", "--init", "D", "--out", "o"],
    ["recipe", "--engine", "specforge", "--old-drafter", "D", "--new-target", "B", "--target-a", "A", "--out", "o"],
    ["compare-targets", "A", "B", "--drafter", "D"],
    ["compare", "D", "E", "--target", "B"],
    ["perf", "--baseline-tps", "82", "--cycle-ms", "30", "--accept-len", "2", "--target-tps", "150", "200"],
    ["probe", "--old-target", "A", "--new-target", "B", "--old-drafter", "D", "--steps", "3"],
])
def test_a_name_used_before_the_one_name_is_refused_in_one_line(old, capsys):
    with pytest.raises(SystemExit) as exited:
        main(old)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and "unrecognized arguments" in err, err


def test_a_required_checkpoint_missing_is_one_line():
    code, err = run_cli("probe", "--new-target", "B", "--old-drafter", "D")
    assert code == 2 and err.count("\n") == 1 and "--old-target is required" in err, err


@pytest.mark.parametrize("name", OLD_PARAMETERS)
def test_a_notebook_parameter_used_before_the_one_name_is_refused(name):
    with pytest.raises(ParameterError, match=f"^-p {name}: "):
        check_parameters(NOTEBOOKS, {name: "x"})


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
    (ProbeSettings, {"target_a": "A", "new_target": "B", "old_drafter": "D"}, ()),
    (CompareSettings, {"drafter_a": "D", "new_drafter": "E"}, ()),
    (TargetCompareSettings, {"target_a": "A", "new_target": "B"}, ()),
    (FinetuneSettings, {"target": "B"}, ()),
    (RecipeSettings, {"init": "D", "new_target": "B"}, ("specforge",)),
    (ProbeRecipeSettings, {"init": "D", "old_target": "A", "new_target": "B"}, ("specforge",)),
])
def test_settings_take_no_keyword_used_before_the_one_name(cls, old, args):
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        cls(*args, **old)
