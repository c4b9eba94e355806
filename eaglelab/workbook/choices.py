"""What a notebook reads as its checkpoints: the parameters, the world's defaults, and the user's picks.

A notebook's checkpoints come from its ``parameters`` cell (papermill sets them; None means the
world's default). A pick in a live picker must survive *Run All*, which re-runs the parameters
cell: picks are kept per kernel, and a pick wins as long as the parameter still holds the value it
held when the pick was made. Editing the parameter afterwards means the user chose again, in the
cell: the parameter wins. Headless runs make no picks, so they read the parameters.

A pick is the state the notebook runs on (issue #54): the set-up cell that builds the :class:`Choices`
is where the notebook's variables and settings take it. A pick made after that cell ran (the panel's
button) is not in them yet, so until the set-up cell runs again (alone, or in Run All, which keeps the
pick) every other cell of that kernel is refused in one line (:func:`stale_picks`, installed as an
IPython input transformer) instead of computing on the set-up's checkpoints and tagging the result with
the pick's source. The parameters cell (it assigns ``SMOKE``), the set-up cell and the panel's still run.

Checks are the package's own metadata checks (:mod:`eaglelab.checkpoints.drafters.preflight`), one line
each, never a traceback. No ipywidgets here: the widgets (:mod:`eaglelab.workbook.widgets`) call
these functions, and so do the tests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eaglelab.checkpoints.drafters.preflight import check_drafter, check_target
from eaglelab.checkpoints.files.sources import local_path
from eaglelab.checkpoints.targets.config import text_config
from eaglelab.data.data_files import data_file
from eaglelab.data.probe_data import describe_probe_data
from eaglelab.errors import EaglelabError, ParameterError, SourceError
from eaglelab.inputs import printable, shown

DRAFTER, TARGET, DATA = "drafter", "target", "data"

# (notebook, name) -> (parameter value when picked, picked value): kept for the kernel's life
_PICKS: dict[tuple[str, str], tuple[Any, str]] = {}
# notebook -> the Choices its set-up cell built last, and the values that cell read (what the cells below read)
_SET_UP: dict[str, tuple[Choices, dict[str, str]]] = {}


@dataclass(frozen=True)
class Slot:
    """One checkpoint a notebook takes.

    Args:
        name: the notebook variable it sets (``DRAFTER_A``).
        label: what the picker says (``old drafter (A)``).
        kind: ``drafter``, ``target`` or ``data`` (what the check reads).
        parameter: the parameters cell's value (None: the default).
        default: the world's checkpoint ("" where there is none: data).
        fits: the slot whose target this drafter must fit (checked from configs and headers); for the
            probe's data, the old target's slot: the line then says what text the probe will run on and
            whether it can give a verdict on it (:func:`eaglelab.data.probe_data.describe_probe_data`).
        world_dir: for the probe's data, the world folder it takes the data from (``--world-dir``;
            None: the world the old target lies in).
    """

    name: str
    label: str
    kind: str
    parameter: Any
    default: str
    fits: str | None = None
    world_dir: str | None = None


@dataclass(frozen=True)
class Check:
    """A checked choice: ``ok`` and one printable line saying what it is, or what is wrong.

    ``warn``: usable, but the line says something the user should know (the same checkpoint twice).
    """

    ok: bool
    line: str
    warn: bool = False


@dataclass
class Choices:
    """The checkpoints of one notebook: parameters, defaults and picks (see the module docstring)."""

    notebook: str
    slots: list[Slot]
    root: str = ""  # where the pickers look for checkpoints (the world)
    picked: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # picks dropped on Run All, and why (the panel shows them)

    def __post_init__(self):
        for s in self.slots:
            pick = _PICKS.get((self.notebook, s.name))
            if pick is None:
                continue
            if pick[0] != s.parameter:  # the parameter was edited after the pick: the user chose again, in the cell
                self.notes.append(f"your pick {pick[1]!r} for {s.label} was dropped: the parameters cell now says "
                                  f"{s.parameter!r}")
                _PICKS.pop((self.notebook, s.name), None)
                continue
            fits = self.value(s.fits) if s.fits else None
            check = check_source(s.kind, pick[1], fits, s.world_dir)
            if not check.ok:  # deleted, rebuilt or otherwise broken since it was picked
                self.notes.append(f"your pick {pick[1]!r} for {s.label} was dropped: {check.line}; back to "
                                  f"{(str(s.parameter) if s.parameter not in (None, '') else s.default) or 'the default'!r}")
                _PICKS.pop((self.notebook, s.name), None)
                continue
            self.picked[s.name] = pick[1]
        _SET_UP[self.notebook] = (self, self.values())
        _install_guard()

    def value(self, name: str) -> str:
        """What the notebook reads for ``name``: the pick, else the parameter, else the default.

        A relative path is taken from the kernel's folder (``notebooks/``) or, where it is not there,
        from the repository root (``data/worlds/demo/drafter-a`` as the README spells it).
        """
        slot = self.slot(name)
        if name in self.picked:
            return locate(self.picked[name])
        return locate(str(slot.parameter)) if slot.parameter not in (None, "") else slot.default

    def values(self) -> dict[str, str]:
        """``{name: value}`` for every slot, in order."""
        return {s.name: self.value(s.name) for s in self.slots}

    def slot(self, name: str) -> Slot:
        for s in self.slots:
            if s.name == name:
                return s
        raise KeyError(name)

    def pick(self, name: str, value: str) -> None:
        """Record a pick for the rest of the kernel's life (Run All keeps it)."""
        value = value.strip()
        slot = self.slot(name)
        if value in ("", slot.default) and slot.parameter in (None, ""):
            self.picked.pop(name, None)  # back to the default: nothing to remember
            _PICKS.pop((self.notebook, name), None)
            return
        self.picked[name] = value
        _PICKS[(self.notebook, name)] = (slot.parameter, value)

    def check(self, values: dict[str, str] | None = None) -> dict[str, Check]:
        """Each slot's value checked from metadata (configs, headers), then the pairs, one line each."""
        values = values or self.values()
        checks = {s.name: check_source(s.kind, values[s.name], values.get(s.fits) if s.fits else None, s.world_dir)
                  for s in self.slots}
        for first, second in self._same_pairs(values):  # the same checkpoint twice compares it with itself: say so
            if checks[second.name].ok:
                checks[second.name] = Check(True, f"the same checkpoint as {first.label}: this compares it with "
                                                  f"itself ({checks[second.name].line})", warn=True)
        return checks

    def same(self, values: dict[str, str] | None = None) -> list[tuple[str, str]]:
        """Labels of slots of one kind that hold the same checkpoint."""
        return [(a.label, b.label) for a, b in self._same_pairs(values or self.values())]

    def _same_pairs(self, values: dict[str, str]) -> list[tuple[Slot, Slot]]:
        return [(t, s) for i, s in enumerate(self.slots) for t in self.slots[:i]
                if s.kind == t.kind != DATA and same_source(values[s.name], values[t.name])]


class StalePickError(ParameterError):
    """A cell run after a pick its notebook's set-up cell has not taken yet (IPython shows it as one line)."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


def stale_picks() -> list[str]:
    """One phrase per checkpoint picked since its notebook's set-up cell ran: ``label what-it-read -> picked``."""
    out = []
    for notebook, (choices, read) in _SET_UP.items():
        for s in choices.slots:
            pick = _PICKS.get((notebook, s.name))
            now = locate(pick[1]) if pick is not None and pick[0] == s.parameter else (
                locate(str(s.parameter)) if s.parameter not in (None, "") else s.default)
            if now != read[s.name]:
                out.append(f"{s.label} {printable(read[s.name]) or 'empty'} -> {printable(now) or 'empty'}")
    return out


def refuse_stale() -> None:
    """Raise :class:`StalePickError` when a pick is not yet in the notebook's variables (see the module docstring)."""
    if changed := stale_picks():
        raise StalePickError("picks", f"{'; '.join(changed)} since the set-up cell ran, which this cell would not "
                                      "use: run the set-up cell again (or Run All, which keeps the picks) first")


#: A cell that still runs while a pick is stale: the parameters cell, the set-up cell (it builds the Choices, itself or
#: through ``open_case``) and the panel's (it shows the picks; "Run Selected Cell and All Below" from it stops at the
#: next cell, not at the panel).
_STILL_RUNS = re.compile(r"\bChoices\(|\bChoicePanel\(|\bopen_case\(|\bcase\.panel\(|^SMOKE\s*=", re.MULTILINE)


def _guard(lines: list[str]) -> list[str]:
    """IPython input transformer: while a pick is stale, any other cell becomes :func:`refuse_stale`."""
    if not stale_picks() or _STILL_RUNS.search("".join(lines)):
        return lines
    return ["from eaglelab.workbook.choices import refuse_stale\n", "refuse_stale()\n"]


def _install_guard() -> None:
    """Put :func:`_guard` among the kernel's input transformers, once (nothing outside IPython)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and not any(getattr(t, "__name__", "") == "_guard" for t in shell.input_transformers_post):
        shell.input_transformers_post.append(_guard)


#: The repository root: a relative path missing from the kernel's folder is looked for here too.
REPO_ROOT = Path(__file__).resolve().parents[2]


def locate(value: str) -> str:
    """``value`` as the kernel should read it: as given when it exists from here (or is absolute, or a
    hub id), else the repository root's path of it when that exists, else as given."""
    value = (value or "").strip()
    try:
        p = local_path(value)
        if not value or p.is_absolute() or p.exists():
            return value
        repo = REPO_ROOT / p
        return str(repo) if repo.exists() else value
    except (SourceError, OSError, ValueError):
        return value


def looked_in(value: str) -> str:
    """Where a relative path was looked for, for the line that says it is missing."""
    return f" (looked in {Path.cwd()} and in the repository root {REPO_ROOT})" if not Path(value).is_absolute() else ""


def same_source(a: str, b: str) -> bool:
    """Whether two sources name the same checkpoint (resolved folders, or equal hub ids)."""
    if not a or not b:
        return False

    try:
        pa, pb = local_path(a), local_path(b)
    except SourceError:
        return a.strip() == b.strip()
    if pa.exists() and pb.exists():
        try:
            return pa.resolve() == pb.resolve()
        except OSError:
            return False
    return a.strip().rstrip("/") == b.strip().rstrip("/")


def check_source(kind: str, value: str, target: str | None = None, world_dir: str | None = None) -> Check:
    """One choice checked from metadata only (no tensor loaded, no torch).

    A checkpoint of the wrong kind is named as such: a drafter typed as a target ("a drafter
    (LlamaForCausalLMEagle3), not a target"), a target typed as a drafter ("a target model
    (LlamaForCausalLM), not a drafter"), by the preflight checks the command line runs too.

    Args:
        kind: ``drafter`` (its config and tensor table; its fit to ``target`` when given),
            ``target`` (its config and weight headers) or ``data`` (a readable file, or empty).
        value: a folder, ``.safetensors`` file, index, hub id or (data) a text / JSONL file.
        target: for a drafter, the target it must fit; for data, the old target: the line then says
            what text the probe will use (:func:`eaglelab.data.probe_data.describe_probe_data`), as a
            warning when no verdict can be read from it.
        world_dir: for data, the world folder the probe takes it from (None: the old target's).

    Returns:
        a :class:`Check`: what it is, or the typed error's message, as one printable line.
    """
    value = locate((value or "").strip())
    target = locate(target) if target else target
    try:
        if kind == DATA:
            if value:
                p = local_path(value)
                if not p.is_file():
                    return Check(False, f"{value}: no such file{looked_in(value)}")
                return Check(True, printable(data_file(p).line))  # its format from its head, as the loaders read it
            if target is None and world_dir is None:  # not the probe's data: the precedence, not a guess
                return Check(True, "none given: the world's own data when the target lies in a built world, else "
                                   "built-in standard-library text")
            choice = describe_probe_data(None, target or "", world_dir)
            return Check(True, printable(choice.line), warn=not choice.decides)
        if not value:
            return Check(False, "empty: pick a checkpoint or type a folder, file or hub id")
        if kind == TARGET:
            cfg = check_target(value)
            arch = (cfg.get("architectures") or ["?"])[0]
            text = text_config(cfg)
            return Check(True, f"target {arch}: {text.get('num_hidden_layers', '?')} layers, "
                               f"hidden {text.get('hidden_size', '?')}, vocab {text.get('vocab_size', '?')}")
        spec, _ = check_drafter(value, target or None)
        fit = " · fits the target" if target else ""
        return Check(True, f"drafter: hidden {spec.hidden_size}, draft vocab {spec.draft_vocab_size}, "
                           f"reads layers {list(spec.aux_layer_ids or []) or 'the default'}{fit}")
    except EaglelabError as e:
        missing = "no such file or folder" in str(e) or "no such target" in str(e)
        return Check(False, printable(str(e) + (looked_in(value) if missing else "")))
    except (OSError, ValueError) as e:  # a path the OS refuses (too long, NUL byte): still one line
        return Check(False, printable(f"{value}: {type(e).__name__}: {e}"))


#: Notebook parameters that name a local folder or file (never a hub id): checked before a world is built.
LOCAL_PATHS = {"OLD_STATES": "folder", "NEW_STATES": "folder", "DATA": "file"}


def check_local_paths(values: dict[str, Any], also_in: Path | None = None, prefix: str = "") -> None:
    """Each parameter of :data:`LOCAL_PATHS` in ``values`` that is set names an existing folder / file.

    Run first, before any world is built or target loaded: a mistyped dump folder is reported in one line,
    not after a world's 25-minute build. A relative path is found as the notebook finds it (:func:`locate`:
    the kernel's folder, then the repository root), or under ``also_in`` (the runner: the notebooks' folder).

    Args:
        values: parameter name -> value (names not in :data:`LOCAL_PATHS` are skipped).
        prefix: put before the name in the error (``-p `` for the command line).

    Raises:
        ParameterError: naming the parameter: not text, no such folder / file, or (DATA) a file whose format the
            loaders do not read (:func:`eaglelab.data.data_files.data_file`).
    """
    for name, kind in LOCAL_PATHS.items():
        value = values.get(name)
        if value in (None, ""):
            continue
        if not isinstance(value, str):
            raise ParameterError(f"{prefix}{name}", f"must be the path of a {kind} (text), got {shown(value)}")
        places = [Path(locate(value))] + ([also_in / value] if also_in is not None else [])
        try:
            found = any(p.is_dir() if kind == "folder" else p.is_file() for p in places)
        except (OSError, ValueError):  # a name too long, a NUL byte: no such path
            found = False
        if not found:
            raise ParameterError(f"{prefix}{name}", f"{printable(value)}: no such {kind}{looked_in(value)}")
        if name == "DATA":  # a file the loaders cannot read is one line now, not half way through a probe
            try:
                data_file(next(p for p in places if p.is_file()))
            except SourceError as exc:
                raise ParameterError(f"{prefix}{name}", printable(str(exc))) from None


def forget_picks() -> None:
    """Drop every pick of this kernel and what its set-up cells read (tests; a fresh start without restarting it)."""
    _PICKS.clear()
    _SET_UP.clear()
