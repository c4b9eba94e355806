"""Typed command-line values: each flag's number is finite and within its range, or argparse says so in one line.

Used as argparse ``type=`` functions, so an impossible value (``--accept-len 0.5``, ``--cycle-ms nan``,
``--steps 0``) is an argument error, exit code 2, before any work starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re

from eaglelab.inputs import is_ascii_digits
from eaglelab.settings import default_of, field_help, flag_name, range_problem, settings_fields

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


#: What each checkpoint is called on every command (its flag; the settings field is the same word with ``_``).
#: Notebook parameters use the same words in capitals (:data:`eaglelab.workbook.runner.CHECKPOINT_PARAMETERS`).
CHECKPOINT_FLAGS = ("old-target", "new-target", "old-drafter", "new-drafter", "old-states", "new-states")


def checkpoint(parser, name: str, help: str, required: bool = False) -> None:
    """Add the flag of one checkpoint (``--old-target``, ...).

    Args:
        parser: the subcommand's parser (or a mutually exclusive group of it).
        name: one of :data:`CHECKPOINT_FLAGS`.
        help: what the flag takes on this command.
        required: the command refuses to run without it; checked after parsing (:func:`missing_required`), so the
            refusal names every checkpoint missing at once.
    """
    dest = name.replace("-", "_")
    parser.add_argument(f"--{name}", dest=dest, help=help + (" (required)" if required else ""))
    if required:
        parser.set_defaults(required_checkpoints=(*(parser.get_default("required_checkpoints") or ()), f"--{name}"))


def missing_required(args) -> str | None:
    """The first required checkpoint flag that was not given, or None (checked after parsing, so one line names
    it as the command's other refusals do)."""
    for flag in getattr(args, "required_checkpoints", None) or ():
        if getattr(args, flag[2:].replace("-", "_"), None) is None:
            return flag
    return None


# --------------------------------------------------------------------------- flags from the settings

def _annotation(text: str) -> tuple[str, bool]:
    """A field's annotation as (the type of one value, whether the flag takes several)."""
    parts = [p.strip() for p in str(text).split("|") if p.strip() != "None"]
    many = re.fullmatch(r"(?:tuple|list|Sequence)\[(\w+)(?:, \.\.\.)?\]", parts[0]) if len(parts) == 1 else None
    if many:
        return many.group(1), True
    return (parts[0] if len(parts) == 1 else "str"), False


def _ranged(one, meta):
    """``one`` (a whole or a finite number) then the field's declared range (:func:`eaglelab.settings.range_problem`),
    its likely mix-up said with the refusal."""
    whole = one in (count, count0)

    def checked(text: str):
        value = one(text)
        problem = range_problem(value, meta, whole)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value

    return checked


def _value_type(base: str, meta, where: str):
    """The argparse ``type`` of one value: whole numbers and finite numbers within the field's range."""
    low, above, high = meta.get("min"), meta.get("above"), meta.get("max")
    if base == "int":
        if above is not None or low not in (0, 1):
            raise TypeError(f"{where}: a whole-number flag takes min=0 or min=1 (and a max)")
        one = count if low == 1 else count0
        return one if high is None else _ranged(one, meta)
    if base == "float":
        known = {(None, 0, None): positive, (1, None, None): accept_len, (0, None, 1): fraction,
                 (None, None, None): _number}
        return known.get((low, above, high)) or _ranged(_number, meta)
    if base in ("str", "Path"):
        return None
    raise TypeError(f"{where}: no flag for a field of type {base}")


def _comma_separated(one):
    """The ``type`` of a comma-separated list whose every value is ``one``'s."""

    def several(text: str) -> list:
        return [one(part) for part in text.split(",")]

    return several


def _plain(text: str) -> str:
    """A docstring's words as help: ``code`` and :func:`roles` without their markup."""
    return re.sub(r":\w+:`~?([^`]+)`", r"\1", text).replace("``", "")


def add_settings(parser, cls, skip: tuple[str, ...] = (), helps: dict[str, str] | None = None,
                 into: dict | None = None) -> None:
    """One flag per field of the settings dataclass ``cls``, declared by the field alone.

    The flag's name, type and range, choices and default come from the field (:func:`eaglelab.settings.option`),
    its help from the class docstring's ``Attributes`` entry, unless the field or ``helps`` gives another.
    A checkpoint's field becomes its shared flag (:func:`checkpoint`); a field without a default is required.

    Args:
        skip: fields this command sets itself (not flags).
        helps: field name -> help on this command, where it says more than the docstring.
        into: field name -> the group its flag joins (a mutually exclusive one), instead of ``parser``.
    """
    docs = field_help(cls)
    if parser.get_default("settings_class") is None:  # the command's settings, for the parity test and --help readers
        parser.set_defaults(settings_class=cls)
    parser.set_defaults(settings_classes=(*(parser.get_default("settings_classes") or ()), cls))
    for f in settings_fields(cls):
        if f.name in skip:
            continue
        meta, name, default = f.metadata, flag_name(f), default_of(f)
        text = _plain((helps or {}).get(f.name) or meta.get("help") or docs.get(f.name, "")).rstrip(".")
        if default is not dataclasses.MISSING and default is not None and not isinstance(default, bool) and default != ():
            text += f" (default: {','.join(map(str, default)) if isinstance(default, tuple) else default})"
        required = default is dataclasses.MISSING
        where = (into or {}).get(f.name, parser)
        if meta.get("positional"):
            extra = {} if required else {"nargs": "?", "default": default}
            where.add_argument(f.name, metavar=f.name.upper(), help=text, **extra)
            continue
        if name in CHECKPOINT_FLAGS:
            checkpoint(where, name, text, required=required)
            continue
        base, many = _annotation(f.type)
        kw: dict = {"dest": f.name, "help": text}
        if not isinstance(default, bool) and not meta.get("choices"):
            kw["metavar"] = name.upper().replace("-", "_") + (",..." if meta.get("comma") else "")
        if base == "bool":
            kw.update(action=argparse.BooleanOptionalAction if default else "store_true", default=bool(default))
        else:
            kw.update(type=_value_type(base, meta, f"{cls.__name__}.{f.name}"))
            if meta.get("choices"):
                kw["choices"] = list(meta["choices"])
            if many and meta.get("comma"):
                kw["type"] = _comma_separated(kw["type"] or str)
            elif many and meta.get("repeat"):
                kw["action"] = "append"  # onto None: argparse would append to a shared default list
            elif many:
                kw["nargs"] = meta.get("count") or "+"
            if required:
                kw["required"], kw["help"] = True, text + " (required)"
            else:
                kw["default"] = (None if default is dataclasses.MISSING or meta.get("repeat") else
                                 list(default) if many and default is not None else default)
        where.add_argument(*([f"-{meta['short']}"] if meta.get("short") else []), f"--{name}", **kw)


def settings_from(args, cls, **given):
    """The settings the parsed flags describe; ``given`` sets the fields the command sets itself."""
    values = {}
    for f in settings_fields(cls):
        if f.name in given or not hasattr(args, f.name):
            continue
        value = getattr(args, f.name)
        if value is None and f.metadata.get("repeat"):  # the flag never given: the field's default
            continue
        values[f.name] = tuple(value) if isinstance(value, list) else value
    return cls(**values, **given)
