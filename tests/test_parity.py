"""One job, one set of defaults: the command line and the notebooks give the same numbers for the same question.

Each question's settings dataclass owns its defaults; the notebooks' parameters cells and the command
line's flags are tied to them here. Then notebook 03 and ``eaglelab probe``, notebook 04 and
``eaglelab finetune`` run on the tiny world with the smoke parameters; their results must agree (the
notebook runs in a Jupyter kernel, the CLI in this process: the same job, the same numbers).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import re

import pytest

from eaglelab.cli import build_parser, main
from eaglelab.cli.arguments import settings_from
from eaglelab.drift.sweep import SweepSettings
from eaglelab.jobs.compare import CompareSettings, InspectSettings
from eaglelab.jobs.drafters import DrafterInitSettings, ExportSettings
from eaglelab.jobs.engine import EngineMeasureSettings
from eaglelab.jobs.finetune import FinetuneSettings, ScalingSettings
from eaglelab.jobs.load_engine import HereSettings
from eaglelab.jobs.perf import PerfSettings
from eaglelab.jobs.plan import PlanSettings
from eaglelab.jobs.predict import PredictSettings
from eaglelab.jobs.probe import DumpSettings, ProbeSettings
from eaglelab.jobs.recipe import RecipeJobSettings
from eaglelab.jobs.speculate import SpeculateSettings
from eaglelab.jobs.targets import TargetCompareSettings
from eaglelab.jobs.train_run import TrainRunSettings
from eaglelab.planning.decision_table import FOUNDING_CASE
from eaglelab.settings import (
    DEFAULT_MEASURE_PROMPTS,
    DEFAULT_MEASURE_TOKENS,
    default_of,
    field_help,
    flag_name,
    settings_fields,
)
from eaglelab.train.training import read_metrics
from eaglelab.workbook.commands import ReportSettings, RunSettings
from eaglelab.workbook.runner import notebook_parameters
from eaglelab.workbook.showroom import ShowroomSettings
from eaglelab.worlds.build import WorldSettings

from .conftest import REPO

#: Each notebook's settings: its parameters are the fields' names in capitals.
NOTEBOOK_SETTINGS = {"03_plugin_probe": ProbeSettings, "04_small_finetune": FinetuneSettings,
                     "05_drift_sweep": SweepSettings}
#: Settings a notebook builds from its parameters beside its jobs' (``from_parameters``): the same names, the same defaults.
NOTEBOOK_SIZES = {"01_performance_diagnosis": HereSettings, "04_small_finetune": ScalingSettings}
#: Commands whose flags are generated from a settings dataclass (``add_settings``), and the fields each leaves off.
SETTINGS_COMMANDS = {"probe": (ProbeSettings, ()), "dump": (DumpSettings, ()), "compare": (CompareSettings, ()),
                     "compare-targets": (TargetCompareSettings, ()), "predict": (PredictSettings, ()),
                     "speculate": (SpeculateSettings, ()), "drafter init": (DrafterInitSettings, ()),
                     "drafter export": (ExportSettings, ()), "engine measure": (EngineMeasureSettings, ()),
                     "perf": (PerfSettings, ()), "plan": (PlanSettings, ()), "recipe": (RecipeJobSettings, ()),
                     "inspect": (InspectSettings, ()), "report": (ReportSettings, ()), "run": (RunSettings, ()),
                     "demo build": (WorldSettings, ()), "showroom": (ShowroomSettings, ()),
                     "finetune": (FinetuneSettings, ("measure_prompts", "measure_tokens"))}  # notebook 04's only
#: Commands with no settings: ``engine status`` takes no flag.
HAND_DECLARED = {"engine status"}


def test_every_notebook_parameter_default_is_its_settings_default():
    checked = 0
    for stem, cls in [*NOTEBOOK_SETTINGS.items(), *NOTEBOOK_SIZES.items()]:
        params = notebook_parameters(REPO / "notebooks" / f"{stem}.ipynb")
        for f in dataclasses.fields(cls):
            if f.name.upper() in params and f.default is not dataclasses.MISSING:
                given = params[f.name.upper()]
                given = tuple(given) if isinstance(given, list) else given  # a list parameter fills a tuple field
                assert given == f.default, (stem, f.name, given, f.default)
                checked += 1
    first = notebook_parameters(REPO / "notebooks" / "01_performance_diagnosis.ipynb")
    names: dict[str, str] = {}
    assert {"BASELINE_TPS", "CYCLE_MS", "ACCEPT_LEN", "GOAL_TPS", "SAMPLES", "K"} <= set(first)
    # the closed loop decodes as many prompts and tokens as the probe, the fine-tune and the sweep measure
    assert (first["MEASURE_PROMPTS"], first["MEASURE_TOKENS"]) == (DEFAULT_MEASURE_PROMPTS, DEFAULT_MEASURE_TOKENS)
    for field_name, value in FOUNDING_CASE.items():
        name = names.get(field_name, field_name.upper())
        if name not in first:  # an assumption the notebook does not expose
            continue
        got = first[name]
        assert (list(got) if isinstance(got, (list, tuple)) else got) == (list(value) if isinstance(value, tuple)
                                                                          else value), (name, got, value)
        checked += 1
    assert checked >= 40


def _children(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})


def subcommands() -> dict[str, argparse.ArgumentParser]:
    """Every command, a group's actions as ``group action`` (``drafter init``)."""
    out = {}
    for name, parser in _children(build_parser()).items():
        actions = {f"{name} {action}": p for action, p in _children(parser).items()}
        out |= actions if actions and any(p.get_default("settings_class") for p in actions.values()) else {name: parser}
    return out


def test_every_command_is_either_generated_from_its_settings_or_listed_as_hand_declared():
    subs = subcommands()
    assert set(subs) == set(SETTINGS_COMMANDS) | HAND_DECLARED
    for command, (cls, _) in SETTINGS_COMMANDS.items():
        assert subs[command].get_default("settings_class") is cls, command
    assert not any(subs[c].get_default("settings_class") for c in HAND_DECLARED)


def _required_values(cls) -> dict[str, str]:
    return {f.name: f.metadata["choices"][0] if f.metadata.get("choices") else f"/some/{f.name}"
            for f in settings_fields(cls) if default_of(f) is dataclasses.MISSING}


def _argv(cls, values: dict[str, str]) -> list[str]:
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    argv = [v for n, v in values.items() if by_name[n].metadata.get("positional")]
    for n, v in values.items():
        if not by_name[n].metadata.get("positional"):
            argv += [f"--{flag_name(by_name[n])}", v]
    return argv


@pytest.mark.parametrize("command", sorted(SETTINGS_COMMANDS))
def test_a_command_with_no_flags_is_its_settings_defaults(command):
    """Parsed with only the required values, the command's settings are the dataclass built with those values:
    every default, range and choice is the field's."""
    cls, skipped = SETTINGS_COMMANDS[command]
    parser = subcommands()[command]
    values = _required_values(cls)
    extra = ["--out", "/some/out"] if command == "finetune" else []
    args = parser.parse_args(_argv(cls, values) + extra)
    assert settings_from(args, cls) == cls(**values)
    dests = {a.dest: a for a in parser._actions if a.help != argparse.SUPPRESS}
    for f in settings_fields(cls):
        if f.name in skipped:
            assert f.name not in dests
            continue
        action = dests[f.name]
        assert action.help, (command, f.name)
        if f.metadata.get("choices"):
            assert list(action.choices) == list(f.metadata["choices"]), (command, f.name)


def test_every_flags_help_is_written_once_in_its_settings_docstring():
    """A field's help is its docstring entry (DESIGN E1): none is written again beside it as ``help=``."""
    classes = {cls for cls, _ in SETTINGS_COMMANDS.values()} | {TrainRunSettings}
    missing, twice = [], []
    for cls in classes:
        docs = field_help(cls)
        for f in settings_fields(cls):
            given = f.metadata.get("help")
            if given is not None and given != argparse.SUPPRESS:
                twice.append(f"{cls.__name__}.{f.name}")
            if given is None and not docs.get(f.name):
                missing.append(f"{cls.__name__}.{f.name}")
    assert missing == [] and twice == [], (missing, twice)


def test_every_default_a_help_names_by_its_constant_is_shown():
    """``{NAME}`` in a settings docstring reads the constant of the class's module: a constant the module does not
    hold stayed as written in ``perf --help`` ("banded over the contexts {CONTEXT_RANGE}")."""
    classes = {cls for cls, _ in SETTINGS_COMMANDS.values()} | {TrainRunSettings}
    left = {f"{cls.__name__}.{name}": text for cls in classes for name, text in field_help(cls).items()
            if re.search(r"\{[A-Z][A-Z0-9_]*\}", text)}
    assert left == {}


def test_finetunes_run_flags_are_its_run_settings():
    """``finetune`` takes two settings: what is trained (notebook 04's) and the run (its folder and cadence)."""
    parser = subcommands()["finetune"]
    assert parser.get_default("settings_classes") == (FinetuneSettings, TrainRunSettings)
    args = parser.parse_args(["--new-target", "/t", "--scratch", "--out", "/o"])
    assert settings_from(args, TrainRunSettings) == TrainRunSettings(out="/o", scratch=True)
    helps = {a.dest: a.help for a in parser._actions}
    assert all(helps[f.name] for f in settings_fields(TrainRunSettings)), helps


def cli_json(*args: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(args)) == 0
    return json.loads(out.getvalue())


def test_probe_cli_equals_notebook_03(tiny_world, smoke_run):
    out, _ = smoke_run("03")
    notebook = json.loads((out / "figures" / "03_findings.json").read_text())["numbers"]
    # the smoke parameters of notebook 03: 16 sequences of 64 tokens, k = 3, batches of 8
    cli = cli_json("probe", "--old-target", str(tiny_world.target_a), "--new-target", str(tiny_world.target_b),
                   "--old-drafter", str(tiny_world.drafter_a), "--sequences", "16", "--seq-len", "64", "--k", "3",
                   "--batch-size", "8", "--measure-prompts", "0", "--json")
    assert cli["data"] == notebook["data"] and cli["k"] == notebook["k"]
    assert cli["tokens"] == notebook["tokens"] and cli["labels"] == notebook["labels"]
    assert cli["argmax_agreement"] == pytest.approx(notebook["argmax_agreement"], rel=1e-6)
    for a, b in zip(cli["layers"], notebook["layers"], strict=True):
        assert a["layer"] == b["layer"]
        for key in ("cosine_mean", "rel_l2", "norm_ratio", "cka"):
            assert a[key] == pytest.approx(b[key], rel=1e-5), (a["layer"], key)
    for key in ("accept_len_on_a", "accept_len_on_b"):
        assert cli["plugin"][key] == pytest.approx(notebook["plugin"][key], rel=1e-5)
    assert cli["verdict"]["level"] == notebook["verdict"]["level"]


def test_finetune_cli_equals_notebook_04(tiny_world, smoke_run, tmp_path):
    out, _ = smoke_run("04")
    notebook = read_metrics(out / "scratch-04" / "warm")
    # the smoke parameters of notebook 04: 48 train / 16 held-out rows of 64 tokens, 20 steps, batch 8, TTT and k 5
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["finetune", "--new-target", str(tiny_world.target_b), "--old-drafter", str(tiny_world.drafter_a),
                     "--steps", "20", "--batch-size", "8", "--ttt-length", "5", "--k", "5", "--sequences", "48",
                     "--eval-sequences", "16", "--out", str(tmp_path / "warm")]) == 0
    cli = read_metrics(tmp_path / "warm")
    assert [r["step"] for r in cli] == [r["step"] for r in notebook] and len(cli) >= 6
    for a, b in zip(cli, notebook):
        for key in ("loss", "accept_len", "lr"):
            assert a[key] == pytest.approx(b[key], rel=1e-4), (a["step"], key)
        if "eval_accept_len" in b:
            assert a["eval_accept_len"] == pytest.approx(b["eval_accept_len"], rel=1e-4)
