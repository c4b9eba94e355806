"""What a notebook ran on: each input's value and provenance, and what it could not do with the user's inputs.

A notebook's findings cell puts :func:`record_inputs` into its numbers under ``"inputs"``; the game plan
(:mod:`eaglelab.workbook.report`) opens with one row per notebook from these records, warns when notebooks
ran on different checkpoints for one name (their numbers are then not one case), and says on which inputs
its verdicts rest. Without the record, a reader who did not run the notebooks cannot tell the demo world's
numbers from theirs.

The record, as JSON::

    {"checkpoints": {"NEW_TARGET": {"value": "/abs/new", "shown": "~/new", "source": "yours", "what": ""}, ...},
     "not_done": ["the new target is too large to load here (1.03 T parameters): no fine-tune ran; ..."]}

Read back from a findings file it is hostile input (:meth:`InputsRecord.from_json`: one-line
:class:`~eaglelab.errors.ConfigError`); rendered, every text is escaped for markdown (:func:`md_text`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from eaglelab.errors import ConfigError, ParameterError
from eaglelab.inputs import json_type, printable, quoted
from eaglelab.markdown import CELL_CHARS, md_text
from eaglelab.planning import provenance as pv
from eaglelab.workbook.choices import REPO_ROOT, locate

#: The checkpoints' names (the naming contract of issue #38), in the order the game plan's table shows them.
CHECKPOINT_NAMES = ("OLD_TARGET", "NEW_TARGET", "OLD_DRAFTER", "NEW_DRAFTER", "OLD_STATES", "NEW_STATES")
#: Every name a record holds: the checkpoints, then the data and the serving logs.
NAMES = (*CHECKPOINT_NAMES, "DATA", "LOG_FILES")
#: The game plan's column for each name.
COLUMNS = {"OLD_TARGET": "old target", "NEW_TARGET": "new target", "OLD_DRAFTER": "old drafter",
           "NEW_DRAFTER": "new drafter", "OLD_STATES": "old target's dumps", "NEW_STATES": "new target's dumps",
           "DATA": "data", "LOG_FILES": "serving logs"}
#: Columns the table always has; the others only when some notebook recorded them.
ALWAYS_SHOWN = ("OLD_TARGET", "NEW_TARGET", "OLD_DRAFTER")
#: Folders of the repository whose files are bundled samples standing in for the user's (``[sample]``).
BUNDLED_DIRS = (REPO_ROOT / "data" / "logs", REPO_ROOT / "data" / "fixtures")
#: What a notebook's data is when no file was given: the data layer's kind (``DataSource.kind``) -> provenance.
DATA_KINDS = {"world-replies": pv.DEMO, "built-in": pv.SAMPLE}
#: A notebook whose checkpoints are some the demo world's, some the user's (not a provenance label).
MIXED = "mixed"


@dataclass(frozen=True)
class Input:
    """One input a notebook ran on.

    Attributes:
        value: the path (absolute when local), hub id, or paths (``; ``-joined); None when no file stood
            behind it (data the notebook drew from the world or built in: ``shown`` says which).
        shown: the value as the game plan shows it (``demo world: target-b``, ``data/logs/x.log``, ``~/new``).
        source: its provenance label (:data:`~eaglelab.planning.provenance.LABELS`).
        what: a short line on what it is ("the world's held-out conversations"), or "".
    """

    value: str | None
    shown: str
    source: str
    what: str = ""


@dataclass(frozen=True)
class InputsRecord:
    """A notebook's inputs by name, and what it could not do with the user's inputs, and why."""

    inputs: dict[str, Input] = field(default_factory=dict)
    not_done: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"checkpoints": {name: asdict(i) for name, i in self.inputs.items()}, "not_done": list(self.not_done)}

    @classmethod
    def from_json(cls, obj: Any, where: str) -> InputsRecord:
        """A record read back from a findings file: every field checked, nothing coerced.

        Raises:
            ConfigError: naming ``where`` and the first thing wrong, in one line.
        """
        if not isinstance(obj, dict):
            raise ConfigError(where, f"its 'inputs' is not an object (got {json_type(obj)})")
        unknown = [k for k in obj if k not in ("checkpoints", "not_done")]
        if unknown:
            raise ConfigError(where, f"its 'inputs' has an unknown key {quoted(unknown[0], 40)}")
        checkpoints, not_done = obj.get("checkpoints", {}), obj.get("not_done", [])
        if not isinstance(checkpoints, dict):
            raise ConfigError(where, f"its 'inputs.checkpoints' is not an object (got {json_type(checkpoints)})")
        if not isinstance(not_done, list) or not all(isinstance(s, str) for s in not_done):
            raise ConfigError(where, "its 'inputs.not_done' is not a list of text")
        return cls({name: _input_from_json(name, entry, where) for name, entry in checkpoints.items()}, tuple(not_done))

    def evidence(self) -> str | None:
        """Whose checkpoints the notebook ran on: DEMO, YOURS, :data:`MIXED`, or None when it recorded none."""
        sources = {i.source for name, i in self.inputs.items() if name in CHECKPOINT_NAMES and i.value is not None}
        if not sources:
            return None
        return next(iter(sources)) if len(sources) == 1 else MIXED


def _input_from_json(name: Any, entry: Any, where: str) -> Input:
    if name not in NAMES:
        raise ConfigError(where, f"its 'inputs' names {quoted(name, 40)}, not one of {', '.join(NAMES)}")
    at = f"its 'inputs.checkpoints.{name}'"
    if not isinstance(entry, dict):
        raise ConfigError(where, f"{at} is not an object (got {json_type(entry)})")
    unknown = [k for k in entry if k not in ("value", "shown", "source", "what")]
    if unknown:
        raise ConfigError(where, f"{at} has an unknown key {quoted(unknown[0], 40)}")
    value, shown, source, what = entry.get("value"), entry.get("shown"), entry.get("source"), entry.get("what", "")
    if value is not None and not isinstance(value, str):
        raise ConfigError(where, f"{at}.value is not text or null (got {json_type(value)})")
    if not isinstance(shown, str) or not isinstance(what, str):
        raise ConfigError(where, f"{at}.shown and .what must be text")
    if not isinstance(source, str) or source not in pv.LABELS:
        raise ConfigError(where, f"{at}.source is {quoted(source, 40)}, not one of {', '.join(pv.LABELS)}")
    return Input(value, shown, source, what)


# --------------------------------------------------------------------------- recording (the notebooks' side)


def record_inputs(checkpoints: Mapping[str, str | Path | None], world_root: str | Path | None, data: str | None = None,
                  data_line: str | None = None, logs: Iterable[str] | None = None,
                  not_done: Iterable[str] | None = None, *, data_kind: str | None = None,
                  what: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What a notebook ran on, for its findings' ``"inputs"`` (JSON-able).

    Args:
        checkpoints: name (:data:`CHECKPOINT_NAMES`) -> the path or hub id the notebook ran on (the world's
            default resolved, as the notebook used it); None or "" for one it did not use.
        world_root: the offline world's folder (a checkpoint inside it is ``demo``); None: no world.
        data: the data file (``DATA``) when one was given.
        data_line: the data set's one line (``DataSource.description``): what the data was.
        logs: the serving logs read (``LOG_FILES``): ``sample`` when all are bundled, else ``logs``.
        not_done: sentences of what the notebook could not do with the user's inputs and why.
        data_kind: without ``data``, the data layer's kind (``DataSource.kind``): ``world-replies`` is the demo
            world's, ``built-in`` (the default) text standing in for the user's (``sample``).
        what: name -> a short line on what that input is.

    Raises:
        ParameterError: a name outside :data:`CHECKPOINT_NAMES`, or a value that is not text.
    """
    what = dict(what or {})
    inputs: dict[str, Input] = {}
    for name, value in checkpoints.items():
        if name not in CHECKPOINT_NAMES:
            raise ParameterError("record_inputs", f"{quoted(name, 40)} is not one of {', '.join(CHECKPOINT_NAMES)}")
        if value is None or value == "":
            continue
        if not isinstance(value, (str, Path)):
            raise ParameterError(name, f"must be a path or hub id (text), got {json_type(value)}")
        inputs[name] = _one_input(str(value), world_root, what.get(name, ""))
    if data:
        inputs["DATA"] = _one_input(str(data), world_root, what.get("DATA", data_line or ""))
    elif data_line:
        source = DATA_KINDS.get(data_kind or "built-in", pv.SAMPLE)
        inputs["DATA"] = Input(None, printable(data_line), source, printable(what.get("DATA", "")))
    logs = [str(f) for f in ([logs] if isinstance(logs, (str, Path)) else logs or ()) if f]
    if logs:
        found = [_local(f) or Path(f) for f in logs]
        source = pv.SAMPLE if all(_bundled(p) for p in found) else pv.LOGS
        inputs["LOG_FILES"] = Input("; ".join(str(p) for p in found),
                                    ", ".join(_shown(p, source, world_root) for p in found), source,
                                    printable(what.get("LOG_FILES", f"{len(logs)} file{'s' * (len(logs) != 1)}")))
    return InputsRecord(inputs, tuple(printable(s) for s in not_done or ())).to_json()


def _one_input(value: str, world_root: str | Path | None, what: str) -> Input:
    """A checkpoint, dump folder or data file: demo inside the world, sample when bundled, else the user's."""
    local = _local(value)
    if local is not None and world_root is not None and _inside(local, Path(world_root)):
        source = pv.DEMO
    elif local is not None and _bundled(local):
        source = pv.SAMPLE
    else:
        source = pv.YOURS
    return Input(str(local) if local is not None else value, _shown(local or value, source, world_root), source,
                 printable(what))


def _local(value: str) -> Path | None:
    """The resolved local path ``value`` names as the notebook found it (:func:`locate`), or None (a hub id)."""
    try:
        p = Path(locate(value)).expanduser()
        return p.resolve() if p.exists() else None
    except (OSError, ValueError, RuntimeError):
        return None


def _inside(path: Path, folder: Path) -> bool:
    try:
        folder = folder.resolve()
    except (OSError, RuntimeError):
        return False
    return path == folder or folder in path.parents


def _bundled(path: Path) -> bool:
    return any(_inside(path, d) for d in BUNDLED_DIRS)


def _shown(value: Path | str, source: str, world_root: str | Path | None) -> str:
    """``demo world: target-b`` inside the world, ``data/logs/x.log`` for a bundled file, ``~/...`` at home."""
    if not isinstance(value, Path):
        return printable(value)
    if source == pv.DEMO and world_root is not None:
        root = Path(world_root).resolve()
        world = root.name if root.name.endswith("world") else f"{root.name} world"
        return printable(f"{world}: {value.relative_to(root).as_posix() if value != root else '.'}")
    try:
        home = Path.home()
    except (RuntimeError, KeyError):  # no home folder known
        home = None
    for base in (b for b in (REPO_ROOT, home) if b is not None):
        if _inside(value, base):
            rel = value.relative_to(base.resolve()).as_posix()
            return printable(rel if base == REPO_ROOT else f"~/{rel}")
    return printable(value.as_posix())


# --------------------------------------------------------------------------- rendering (the game plan's side)


def cell(i: Input | None) -> str:
    """A table cell: the value shown, what it is, its tag; ``—`` for an input not used."""
    if i is None:
        return "—"
    what = f" ({md_text(i.what, CELL_CHARS)})" if i.what else ""
    # a path is cut in the middle (its end names the file); a description of text at its end, words kept whole
    return f"{md_text(i.shown, CELL_CHARS, middle=i.value is not None)}{what} {pv.tag(i.source)}"


def inputs_table(records: Mapping[str, InputsRecord | None]) -> list[str]:
    """The markdown table: one row per notebook that ran, a column per name some notebook recorded."""
    names = [n for n in NAMES if n in ALWAYS_SHOWN or any(r is not None and n in r.inputs for r in records.values())]
    lines = ["| notebook | " + " | ".join(COLUMNS[n] for n in names) + " |", "|---|" + "---|" * len(names)]
    for nb, record in records.items():
        cells = [cell(record.inputs.get(n)) for n in names] if record is not None else ["*not recorded*"] * len(names)
        lines.append(f"| {nb} | " + " | ".join(cells) + " |")
    return lines


def _joined(nbs: list[str]) -> str:
    """``02``, ``02 and 04``, ``02, 03 and 04``."""
    return nbs[0] if len(nbs) == 1 else ", ".join(nbs[:-1]) + " and " + nbs[-1]


def _notebooks(nbs: list[str]) -> str:
    return ("notebook " if len(nbs) == 1 else "notebooks ") + _joined(nbs)


def whose_words(evidence: str | None) -> str:
    """``the demo world``, ``your checkpoints``, ...: whose checkpoints a notebook ran on, in a sentence."""
    return {pv.DEMO: "the demo world", pv.YOURS: "your checkpoints", MIXED: "the demo world's and yours, mixed",
            pv.SAMPLE: "bundled samples"}.get(evidence or "", "inputs it did not record")


def conflicts(records: Mapping[str, InputsRecord | None]) -> list[str]:
    """Markdown list items when notebooks ran on different checkpoints for one name: whose each notebook's
    were, then per name which notebook ran on which. Empty when every name holds one value in all records."""
    differ: dict[str, dict[tuple[str, str], tuple[str, list[str]]]] = {}
    for name in CHECKPOINT_NAMES:
        by_value: dict[tuple[str, str], tuple[str, list[str]]] = {}
        for nb, record in records.items():
            i = record.inputs.get(name) if record is not None else None
            if i is not None and i.value is not None:
                by_value.setdefault((i.value, i.source), (i.shown, []))[1].append(nb)
        if len(by_value) > 1:
            differ[name] = by_value
    if not differ:
        return []
    involved = sorted({nb for by_value in differ.values() for _, nbs in by_value.values() for nb in nbs})
    by_evidence: dict[str, list[str]] = {}
    for nb in involved:
        by_evidence.setdefault(whose_words(records[nb].evidence()), []).append(nb)
    groups = list(by_evidence.items())
    said = "; ".join([f"{_notebooks(groups[0][1])} ran on {groups[0][0]}"]
                     + [f"{_joined(nbs)} on {on}" for on, nbs in groups[1:]])
    lines = [f"- **Not one case:** {said}: their numbers are not one case ({', '.join(differ)} "
             f"differ{'s' * (len(differ) == 1)} between them)."]
    for name, by_value in differ.items():
        each = "; ".join(f"{_joined(nbs)} on {md_text(shown, CELL_CHARS, middle=True)} {pv.tag(source)}"
                         for (_, source), (shown, nbs) in by_value.items())
        lines.append(f"  - {name}: {each}.")
    return lines


def inputs_section(records: Mapping[str, InputsRecord | None]) -> list[str]:
    """``## What this plan was computed from``: the table, then the warnings, what was not done, and the
    notebooks that did not record their inputs (older findings files)."""
    lines = ["## What this plan was computed from", ""]
    if not records:
        return lines + ["*No notebook has run yet: nothing was computed.*", ""]
    lines += inputs_table(records) + [""]
    notes = conflicts(records)
    for nb, record in records.items():
        if record is None:
            notes.append(f"- Notebook {nb} did not record its inputs (its findings predate the record): run it again "
                         "to see what it ran on.")
            continue
        notes += [f"- **Notebook {nb}, not done with your inputs:** {md_text(s)}" for s in record.not_done]
    return lines + (notes + [""] if notes else [])


def resting_on(records: Mapping[str, InputsRecord | None], notebooks: Iterable[str],
               fallback: Mapping[str, str | None]) -> dict[str, str | None]:
    """Whose checkpoints each notebook's numbers rest on: the record's evidence, else ``fallback`` (the findings'
    own ``evidence``), else None."""
    out = {}
    for nb in notebooks:
        record = records.get(nb)
        evidence = record.evidence() if record is not None else None
        out[nb] = evidence if evidence is not None else fallback.get(nb)
    return out


def on_words(evidence: str | None) -> str:
    """``on the demo world (an illustration)``, ``on your checkpoints``, ...: for a heading."""
    return {pv.DEMO: "on the demo world (an illustration)", pv.YOURS: "on your checkpoints",
            MIXED: "on the demo world's checkpoints and yours, mixed (not one case)",
            pv.SAMPLE: "on bundled samples (an illustration)"}.get(evidence or "", "on inputs it did not record")
