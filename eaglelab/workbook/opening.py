"""A notebook's set-up as one call: :func:`open_case` checks the parameters, decides whose checkpoints it runs on,
builds (or only locates) the offline world, and returns the :class:`Case` the sections read.

The order is the one every notebook needs: the local paths first (a mistyped dump folder is one line before any
world is built), then whose case it is (:func:`~eaglelab.workbook.case.notebook_case`: all the user's, or all the
world's), then whether its targets load here (:func:`~eaglelab.workbook.feasibility.require_loadable`), then the
world (built only for the world's case), then the pickers (notebooks 02-04: a pick made below survives Run All).
At the end the case records what the notebook ran on and saves its findings with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eaglelab.data.world import World
from eaglelab.planning import provenance as pv
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
    """

    notebook: str
    demo: bool
    world: World
    choices: Choices | None
    given: dict[str, Any]
    not_done: list[str] = field(default_factory=list)

    @property
    def values(self) -> dict[str, str]:
        """What the notebook runs on, by name: the picks (else the parameters, else the world's defaults)."""
        if self.choices is not None:
            return self.choices.values()
        names = CHECKPOINTS.get(self.notebook, ((), ()))[0]
        return {name: str(getattr(self.world, WORLD_PATHS[name])) if self.demo else locate(self.given[name])
                for name in names}

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


def open_case(notebook: str, world: str = "demo", world_dir: str | None = None, smoke: bool = False, **parameters) -> Case:
    """Set a notebook up: check ``parameters`` (its checkpoints, ``DATA``, dumps, ``DTYPE``), decide the case, build or
    locate the world (``tiny`` when ``smoke``), and make its pickers.

    Raises:
        ParameterError: one line naming the parameter: a path that does not exist, a case that is neither all the
            user's nor all the world's, a target too large to load here.
    """
    check_local_paths({n: v for n, v in parameters.items() if n in LOCAL_PATHS})
    demo = notebook_case(notebook, parameters)
    require_loadable(notebook, parameters)
    place = world_for("tiny" if smoke else world, world_dir, needed=demo)
    not_done = []
    if notebook == "02" and not demo and not given(parameters.get("NEW_DRAFTER")):
        parameters = {**parameters, "NEW_DRAFTER": parameters.get("OLD_DRAFTER")}
        not_done.append("no NEW_DRAFTER given: the old drafter is checked against the new target on its own (A and B "
                        "below are the same checkpoint); give the new target's drafter to compare the two")
    choices = None
    if notebook in SLOTS:
        choices = Choices(notebook, [Slot(name, label, kind, parameters.get(name),
                                          world_default(demo, getattr(place, attr)) if attr else "", fits=fits)
                                     for name, label, kind, attr, fits in SLOTS[notebook]], root=str(place.root))
    return Case(notebook, demo, place, choices, dict(parameters), not_done)
