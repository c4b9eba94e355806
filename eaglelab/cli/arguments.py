"""Typed command-line values: each flag's number is finite and within its range, or argparse says so in one line.

Used as argparse ``type=`` functions, so an impossible value (``--accept-len 0.5``, ``--cycle-ms nan``,
``--steps 0``) is an argument error, exit code 2, before any work starts.
"""

from __future__ import annotations

import argparse
import math
import sys

from eaglelab.inputs import is_ascii_digits

#: Largest count a flag takes (steps, sequences, tokens): far beyond any real run, small enough to stay exact.
MAX_COUNT = 10**12


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a finite number")
    return value


def positive(text: str) -> float:
    """A finite number > 0 (tok/s, milliseconds, samples, learning rates)."""
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text[:40]!r}")
    return value


def fraction(text: str) -> float:
    """A share: a finite number in [0, 1]."""
    value = _number(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"a share lies in [0, 1], got {text[:40]!r}")
    return value


def accept_len(text: str) -> float:
    """An acceptance length τ: finite and >= 1 (it counts the bonus token, so 1 means no gain)."""
    value = _number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"τ counts the bonus token, so it is at least 1; got {text[:40]!r}")
    return value


def _integer(text: str, low: int) -> int:
    word = text.strip()
    if not is_ascii_digits(word[1:] if word[:1] in ("+", "-") else word) or len(word) > 13:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number")
    value = int(word)
    if not low <= value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be a whole number in [{low}, {MAX_COUNT:.0e}], got {text[:40]!r}")
    return value


def count(text: str) -> int:
    """A whole number >= 1 (steps, sequences, drafts per cycle, GPUs)."""
    return _integer(text, 1)


def count0(text: str) -> int:
    """A whole number >= 0 (a seed, prompts to measure)."""
    return _integer(text, 0)


def numbers(text: str) -> list[float]:
    """A comma-separated list of finite numbers."""
    return [_number(x) for x in text.split(",")]



class DeprecatedAlias(argparse.Action):
    """An old spelling of a flag: stores into the new flag's destination and says, once, what it is now called.

    For one release after a rename (``--steps`` → ``--k`` on ``probe``, ``--target-tps`` → ``--goal-tps``):
    the note goes to stderr and the command runs as with the new spelling.
    """

    def __init__(self, option_strings, dest, new: str, **kwargs):
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):

        print(f"note: {option_string} is now {self.new}; the old spelling goes in the next release", file=sys.stderr)
        setattr(namespace, self.dest, values)


def alias(parser, old: str, new: str, dest: str, **kwargs) -> None:
    """Register ``old`` as a deprecated spelling of ``new`` (same ``dest`` and type), hidden from ``--help``."""
    parser.add_argument(old, dest=dest, action=DeprecatedAlias, new=new, help=argparse.SUPPRESS, **kwargs)


#: What each checkpoint is called on every command (its flag; the settings field is the same word with ``_``).
#: Notebook parameters use the same words in capitals (:data:`eaglelab.workbook.runner.CHECKPOINT_PARAMETERS`).
CHECKPOINT_FLAGS = ("old-target", "new-target", "old-drafter", "new-drafter", "old-states", "new-states")


def checkpoint(parser, name: str, help: str, required: bool = False, old: tuple[str, ...] = ()) -> None:
    """Add the flag of one checkpoint (``--old-target``, ...) with its deprecated spellings.

    Args:
        parser: the subcommand's parser (or a mutually exclusive group of it).
        name: one of :data:`CHECKPOINT_FLAGS`.
        help: what the flag takes on this command.
        required: the command refuses to run without it; checked after parsing (:func:`missing_required`),
            so that an old spelling satisfies it too.
        old: the spellings this command took before (deprecated aliases for one release).
    """
    dest = name.replace("-", "_")
    parser.add_argument(f"--{name}", dest=dest, help=help + (" (required)" if required else ""))
    for spelling in old:
        alias(parser, spelling, f"--{name}", dest)
    if required:
        parser.set_defaults(required_checkpoints=(*(parser.get_default("required_checkpoints") or ()), f"--{name}"))


def missing_required(args) -> str | None:
    """The first required flag with deprecated spellings (a checkpoint's, ``predict``'s logprobs) that was given in
    no spelling, or None. argparse's own ``required`` would refuse an old spelling."""
    for flag in getattr(args, "required_checkpoints", None) or ():
        if getattr(args, flag[2:].replace("-", "_"), None) is None:
            return flag
    return None
