"""What text the plug-in probe runs on, and whether a verdict can be read from it: said before anything loads.

The probe's data is resolved here, once: :func:`eaglelab.data.sets.probe_set` takes the same
:class:`DataChoice` and loads the text it names, and the pickers and the command line say it
(:func:`describe_probe_data`) before a target loads, so the two cannot disagree. The precedence
is :mod:`eaglelab.data.sets`'s:

1. the user's file (``DATA`` / ``--data``);
2. else the world's held-out conversations, when the old target lies in a built world that keeps
   them (the demo world, or ``--world-dir``);
3. else the built-in standard-library text. It is the tiny world's own kind of text (its drafter
   was trained on standard-library docstrings and code), and for a world's targets the probe can
   decide on it; for targets outside a world it is a fallback unlike what their drafter serves, and
   the old drafter's τ on it says how it does on that text, not whether it transfers: no verdict.

Metadata only (folders and file names): no torch, no tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eaglelab.checkpoints.files.sources import local_path
from eaglelab.data.world import World
from eaglelab.errors import ParameterError, SourceError
from eaglelab.inputs import printable

FILE, WORLD, BUILT_IN = "file", "world", "built-in"
#: What the user can do when the probe has no text of the drafter's kind.
GIVE_DATA = "give your conversations (a .jsonl / .txt file) for a verdict"


@dataclass(frozen=True)
class DataChoice:
    """The text the probe will run on, in one sentence, and whether a verdict can be read from it.

    Attributes:
        kind: ``file`` (the user's), ``world`` (a world's held-out conversations) or ``built-in``
            (standard-library text shipped with Python).
        line: one printable sentence: what the text is, and why it was chosen.
        decides: whether it is the old drafter's kind of text (the user's, a world's own): False for
            the built-in fallback, where the probe gives no verdict.
    """

    kind: str
    line: str
    decides: bool


def world_of(checkpoint: str | Path | None) -> World | None:
    """The built world a checkpoint folder belongs to (its parent holds a world manifest), else None.

    This is how the command line and the notebooks agree on data: a target inside
    ``data/worlds/demo`` is probed on that world's conversations by both. A hub id, a single file,
    an empty name or a path the OS refuses belongs to no world.
    """
    if checkpoint is None or not str(checkpoint).strip():
        return None

    try:
        folder = local_path(str(checkpoint))
        if not folder.is_dir():
            return None  # hub ids, single files
        root = folder.resolve().parent
        if (root / "manifest.json").is_file() and (root / "target-a").is_dir() and (root / "drafter-a").is_dir():
            return World.at(root)
    except (SourceError, OSError, ValueError, RuntimeError):  # a name too long, a NUL byte, a symlink loop
        return None
    return None


def world_for_data(checkpoint: str | None, world_dir: str | None) -> World | None:
    """The world whose data a job uses (the probe, the dumps, a fine-tune): ``world_dir`` when given, else the
    world the job's target (``checkpoint``) lies in, if any.

    Raises:
        ParameterError: (``--world-dir``) ``world_dir`` is not a folder.
    """
    if world_dir in (None, ""):
        return world_of(checkpoint)
    world = World.at(world_dir)
    try:
        found = world.root.is_dir()
    except (OSError, ValueError):
        found = False
    if not found:
        raise ParameterError("--world-dir", f"{printable(str(world_dir))} is not a folder")
    return world


def _same_world(old_target: str | None, world: World) -> bool:
    """Whether the old target is the world's own (unknown, None: the world was found from it)."""
    if old_target is None:
        return True
    own = world_of(old_target)
    try:
        return own is not None and own.root.resolve() == world.root.resolve()
    except (OSError, ValueError, RuntimeError):
        return False


def probe_data_choice(data_file: str | Path | None, world: World | None, old_target: str | None = None) -> DataChoice:
    """The probe's data, resolved: the one precedence :func:`eaglelab.data.sets.probe_set` loads.

    Args:
        data_file: the user's text / JSONL file (None or empty: none given).
        world: the world whose data to use (:func:`world_for_data`), or None.
        old_target: the old target, when known: built-in text in a world is that world's own kind of
            text only for the world's own target (None: the world was found from the old target).
    """
    if data_file not in (None, ""):
        return DataChoice(FILE, f"your file {printable(str(data_file))}", True)
    if world is None:
        return DataChoice(BUILT_IN, f"built-in standard-library text: the targets are not in a world and no DATA was "
                                    f"given; {GIVE_DATA}", False)
    name = printable(world.root.name)
    try:
        replies, own_text = world.has_replies(), world.data_a.is_file()
    except (OSError, ValueError):
        replies = own_text = False
    if replies:
        return DataChoice(WORLD, f"the {name} world's held-out conversations: target A's own replies, the text its "
                                 "drafter was trained on", True)
    if own_text and _same_world(old_target, world):
        return DataChoice(BUILT_IN, f"built-in standard-library text, the {name} world's own kind (its drafter was "
                                    "trained on standard-library text)", True)
    why = ("keeps no conversations and the old target is not its own" if own_text else
           "keeps neither conversations nor its drafter's text")
    return DataChoice(BUILT_IN, f"built-in standard-library text: the world at {printable(str(world.root))} {why}, "
                                f"and no DATA was given; {GIVE_DATA}", False)


def describe_probe_data(data: str | None, old_target: str, world_dir: str | None = None) -> DataChoice:
    """What data the probe will use for these settings, and why, before anything loads (metadata only).

    Args:
        data: the user's file (``DATA`` / ``--data``; None or empty: none).
        old_target: the old target (``OLD_TARGET`` / ``--old-target``): the world it lies in gives the data.
        world_dir: the world folder to take the data from (``--world-dir``; None: the old target's).

    Raises:
        ParameterError: (``--world-dir``) ``world_dir`` is not a folder.
    """
    return probe_data_choice(data, world_for_data(old_target, world_dir), old_target)
