"""A notebook's set-up as one call: :func:`open_case` checks the parameters, decides whose checkpoints it runs on,
builds (or only locates) the offline world, and returns the :class:`Case` the sections read.

The order is the one every notebook needs: the settings of its jobs, built from its parameters of the same names (a
value out of range is one line before anything runs), the local paths (a mistyped dump folder is one line before any
world is built), then whose case it is (:func:`~eaglelab.workbook.case.notebook_case`: all the user's, or all the
world's), then whether its targets load here (:func:`~eaglelab.workbook.feasibility.require_loadable`), then the
world (built only for the world's case), then the pickers (notebooks 02-04: a pick made below survives Run All).
At the end the case records what the notebook ran on and saves its findings with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from eaglelab.data.world import World
from eaglelab.planning import provenance as pv
from eaglelab.settings import from_parameters
from eaglelab.workbook import plots
from eaglelab.workbook.case import CHECKPOINTS, given, notebook_case, world_default
from eaglelab.workbook.choices import LOCAL_PATHS, Choices, Slot, check_local_paths, locate
from eaglelab.workbook.feasibility import require_loadable
from eaglelab.workbook.inputs_record import CHECKPOINT_NAMES, record_inputs
from eaglelab.workbook.report import save_findings
from eaglelab.workbook.widgets import ChoicePanel
from eaglelab.worlds.build import world_for

#: Each picker of a notebook: (name, label, kind, the world's checkpoint it defaults to, the slot it must fit).
SLOTS: dict[str, tuple[tuple[str, str, str, str | None, str | None], ...]] = {
    "02": (("OLD_DRAFTER", "old drafter (A)", "drafter", "drafter_a", None),
           ("NEW_DRAFTER", "new drafter (B)", "drafter", "drafter_b_small", None),
           ("NEW_TARGET", "the new target", "target", "target_b", None),
           ("OLD_TARGET", "the old target", "target", "target_a", None)),
    "03": (("OLD_TARGET", "old target (A)", "target", "target_a", None),
           ("NEW_TARGET", "new target (B)", "target", "target_b", None),
           ("OLD_DRAFTER", "old drafter (on A)", "drafter", "drafter_a", "OLD_TARGET"),
           ("DATA", "data (optional)", "data", None, "OLD_TARGET")),
    "04": (("NEW_TARGET", "new target (B)", "target", "target_b", None),
           ("OLD_DRAFTER", "old drafter", "drafter", "drafter_a", "NEW_TARGET"),
           ("DATA", "new target's data", "data", None, None)),
}
#: The parameters a notebook's set-up reads, those of them the notebook has: its checkpoints, its data, the engines'
#: dumps and the dtype its targets load in.
CASE_PARAMETERS = ("OLD_TARGET", "NEW_TARGET", "OLD_DRAFTER", "NEW_DRAFTER", "DATA", "OLD_STATES", "NEW_STATES", "DTYPE")
#: The parameters the case itself reads, never a job's settings field of the same name.
CASE_OWN = ("WORLD", "WORLD_DIR", "SMOKE")
#: The world's checkpoint each name stands for in the world's case (notebooks without pickers).
WORLD_PATHS = {"OLD_TARGET": "target_a", "NEW_TARGET": "target_b", "OLD_DRAFTER": "drafter_a",
               "NEW_DRAFTER": "drafter_b_small"}


@dataclass
class Case:
    """Whose checkpoints a notebook runs on, the world's folder, its pickers, and what it could not do.

    Attributes:
        notebook: ``"03"``.
        demo: the offline world's case (nothing given); else every checkpoint is the user's.
        world: the world (built in its case, else its paths only: where pickers look, what counts as the demo).
        choices: the pickers (notebooks 02-04), or None.
        given: the parameters as the notebook was given them (checkpoints, data, dumps).
        not_done: what the notebook could not do with the checkpoints given, and why (said in its findings).
        base: the notebook's settings as its parameters give them (None: a notebook without one); :attr:`settings`
            adds the picks.
    """

    notebook: str
    demo: bool
    world: World
    choices: Choices | None
    given: dict[str, Any]
    not_done: list[str] = field(default_factory=list)
    base: Any = None

    @property
    def values(self) -> dict[str, str]:
        """What the notebook runs on, by name: the picks (else the parameters, else the world's defaults)."""
        if self.choices is not None:
            return self.choices.values()
        names = CHECKPOINTS.get(self.notebook, ((), ()))[0]
        return {name: str(getattr(self.world, WORLD_PATHS[name])) if self.demo else locate(self.given[name])
                for name in names}

    @property
    def settings(self) -> Any:
        """The notebook's settings on what it runs on: each checkpoint field (and ``data``, "" for none) from
        :attr:`values`, so a pick made in the panel reaches the jobs when the set-up cell runs again (None: the
        notebook has none)."""
        if self.base is None:
            return None
        names = {f.name for f in fields(self.base)}
        picks = {n.lower(): (v or None) if n == "DATA" else v for n, v in self.values.items() if n.lower() in names}
        return replace(self.base, **picks)

    @property
    def evidence(self) -> str:
        """Whose the numbers are (:func:`eaglelab.planning.provenance.evidence_source`): the checkpoints' owner."""
        checkpoints = [v for name, v in self.values.items() if name in CHECKPOINT_NAMES and v]
        return pv.evidence_source(checkpoints, self.world.root)

    @property
    def tag(self) -> str:
        return pv.tag(self.evidence)

    def panel(self, answer: Callable[[dict[str, str]], Any], button: str):
        """The pickers with their answer button (:class:`~eaglelab.workbook.widgets.ChoicePanel`)."""
        return ChoicePanel(self.choices, answer, button=button)

    def record(self, **kw) -> dict[str, Any]:
        """What the notebook ran on (:func:`~eaglelab.workbook.inputs_record.record_inputs`), with what it could not do;
        ``kw``: the data's line and kind, the logs, what an input is."""
        values = {**self.given, **self.values}
        checkpoints = {n: v for n, v in values.items() if n in CHECKPOINT_NAMES}
        data = values.get("DATA") or None
        return record_inputs(checkpoints, self.world.root, data=data, not_done=self.not_done, **kw)

    def save(self, numbers: dict[str, Any], bullets: list[str], figures_dir: str | Path, **kw) -> None:
        """Save the findings (``NN_findings.json``) with the inputs recorded (``kw``: as :meth:`record`)."""
        save_findings(self.notebook, {"inputs": self.record(**kw), **numbers}, bullets, figures_dir)


def open_case(notebook: str, parameters: Mapping[str, Any], settings: type | None = None) -> Case:
    """Set a notebook up from its parameters (a notebook passes ``globals()``; only the names below are read).

    In the order every notebook needs: the settings its jobs take (``settings``, built from the parameters of the
    same names, smoke-sized on a smoke run: a bad value is one line before anything else), the local paths (a
    mistyped dump folder is one line before any world is built), whose case it is, whether its targets load here,
    the world (``WORLD`` / ``WORLD_DIR``, ``tiny`` when ``SMOKE``; built only for the world's case), the pickers; and
    the figures take eaglelab's style.

    Args:
        notebook: ``"03"``.
        parameters: ``WORLD``, ``WORLD_DIR``, ``SMOKE`` and those of :data:`CASE_PARAMETERS` the notebook has (and
            the settings' fields in capitals).
        settings: the settings class of the notebook's jobs (``case.settings``), or None.

    Raises:
        ParameterError: one line naming the parameter: a value out of its range, a path that does not exist, a case
            that is neither all the user's nor all the world's, a target too large to load here.
    """
    smoke = bool(parameters.get("SMOKE", False))
    plots.use_style()
    # WORLD_DIR is the case's (where the world is built and the pickers look), not a job's: a job reads the world
    # its checkpoints lie in, and in the user's case there is none
    jobs = {name: value for name, value in parameters.items() if name not in CASE_OWN}
    base = from_parameters(settings, jobs, smoke) if settings is not None else None
    given_names = {n: parameters[n] for n in CASE_PARAMETERS if n in parameters}
    check_local_paths({n: v for n, v in given_names.items() if n in LOCAL_PATHS})
    demo = notebook_case(notebook, given_names)
    require_loadable(notebook, given_names)
    place = world_for("tiny" if smoke else parameters.get("WORLD", "demo"), parameters.get("WORLD_DIR"), needed=demo)
    not_done = []
    if notebook == "02" and not demo and not given(given_names.get("NEW_DRAFTER")):
        given_names = {**given_names, "NEW_DRAFTER": given_names.get("OLD_DRAFTER")}
        not_done.append("no NEW_DRAFTER given: the old drafter is checked against the new target on its own (A and B "
                        "below are the same checkpoint); give the new target's drafter to compare the two")
    choices = None
    if notebook in SLOTS:
        choices = Choices(notebook, [Slot(name, label, kind, given_names.get(name),
                                          world_default(demo, getattr(place, attr)) if attr else "", fits=fits)
                                     for name, label, kind, attr, fits in SLOTS[notebook]], root=str(place.root))
    return Case(notebook, demo, place, choices, given_names, not_done, base)
