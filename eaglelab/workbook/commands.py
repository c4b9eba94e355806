"""The workbook's own commands as jobs: ``eaglelab run`` (the notebooks) and ``eaglelab report`` (the game plan).

Each takes one settings dataclass (the command's flags are generated from it) and returns what it wrote, as
a report that prints itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglelab.settings import option
from eaglelab.workbook.report import write_game_plan
from eaglelab.workbook.runner import (
    NotebookRun,
    absolutise_paths,
    ends_with_game_plan,
    parse_parameter,
    run_figures_dir,
    run_workbook,
)


@dataclass(frozen=True)
class RunSettings:
    """Which notebooks ``eaglelab run`` executes, with which parameters, into which folder.

    Attributes:
        smoke: the tiny world, SMOKE=True, figures in OUT/figures.
        only: notebook numbers or name parts, e.g. 01 03 (None: all, in order).
        out: folder for the executed copies (None: runs/workbook, or runs/smoke).
        param: a notebook parameter for every notebook, NAME=VALUE (repeatable): a Python literal of JSON's types
            (numbers, strings, True / False / None, lists, dicts), else the text itself; a relative path is made
            absolute from the current folder.
        prepare_only: write the notebooks with their parameters filled in, without running them.
    """

    smoke: bool = False
    only: tuple[str, ...] | None = None
    out: str | None = None
    param: tuple[str, ...] = option((), short="p", repeat=True)
    prepare_only: bool = False

    def parameters(self) -> dict[str, Any]:
        """The ``param`` values by name, read as data (:func:`~eaglelab.workbook.runner.parse_parameter`).

        Raises:
            ParameterError: a value that is not NAME=VALUE of JSON's types; one line.
        """
        return {name: absolutise_paths(value) for name, value in map(parse_parameter, self.param)}


@dataclass
class WorkbookRun:
    """The notebooks run (or prepared): each one's executed copy and seconds, or why it did not run here."""

    settings: RunSettings
    runs: list[NotebookRun]
    game_plan: Path | None = None  # the game plan the run wrote at its end (None: it wrote none)

    def to_json(self) -> dict[str, Any]:
        return {"runs": [{"notebook": r.notebook.name, "output": None if r.output is None else str(r.output),
                          "seconds": r.seconds, "not_run": r.not_run} for r in self.runs],
                "game_plan": None if self.game_plan is None else str(self.game_plan)}

    def lines(self) -> list[str]:
        prepared = self.settings.prepare_only
        return [f"{r.notebook.name}: prepared -> {r.output}" if prepared else
                f"{r.notebook.name}: not run here ({r.not_run}); its findings say what to run instead" if r.not_run else
                f"{r.notebook.name}: {r.seconds:.1f} s -> {r.output}" for r in self.runs] + \
            ([f"game plan: {self.game_plan}"] if self.game_plan is not None else [])


def run_notebooks(settings: RunSettings) -> WorkbookRun:
    """Execute (or only prepare) the numbered notebooks in order, with the settings' parameters.

    Raises:
        OutputError: ``out`` is not a folder eaglelab may write (an empty path is refused, never read as ``.``).
    """
    s = settings
    out = s.out if s.out is not None else ("runs/smoke" if s.smoke else "runs/workbook")
    only = list(s.only) if s.only else None
    parameters = s.parameters()
    runs = run_workbook(out, smoke=s.smoke, only=only, parameters=parameters, prepare_only=s.prepare_only,
                        progress=not s.prepare_only)
    plan = None
    if not s.prepare_only and ends_with_game_plan(runs):
        plan = run_figures_dir(out, s.smoke, parameters) / "GAME_PLAN.md"
    return WorkbookRun(s, runs, plan)


@dataclass(frozen=True)
class ReportSettings:
    """Where ``eaglelab report`` reads the notebooks' findings and figures, and where it writes the game plan.

    Attributes:
        figures: folder with the exported figures and findings.
        out: the game plan's file (None: FIGURES/GAME_PLAN.md).
    """

    figures: str = "figures"
    out: str | None = None


@dataclass
class GamePlanWritten:
    """The game plan's file."""

    path: Path

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path)}

    def lines(self) -> list[str]:
        return [str(self.path)]


def write_report(settings: ReportSettings) -> GamePlanWritten:
    """Assemble GAME_PLAN.md from the notebooks' findings and figures (:func:`~eaglelab.workbook.report.write_game_plan`)."""
    return GamePlanWritten(write_game_plan(settings.figures, settings.out))
