"""A settings field declared once: its default, its range, its choices and its command-line spelling.

Every job's settings dataclass declares its fields with :func:`option`; the command line builds the
command's flags from them (:func:`eaglelab.cli.arguments.add_settings`: the type and range check, the
choices, the default, and the help from the class docstring's ``Attributes``), and the notebooks'
parameters are the same fields' names in capitals. So a default, a range or a help text is written in one
place, and ``tests/test_parity.py`` ties every command and notebook to it. Standard library only: the
metadata commands import it.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from typing import Any

#: The drafts per cycle every command, job and notebook starts from (``k``; the verify checks ``k + 1`` tokens).
DEFAULT_K = 3
#: prompts decoded for real wherever a τ is also measured (notebook 01's closed loop, the probe, the sweep, the
#: fine-tune), and the tokens generated for each: CPU timing, not a fit
DEFAULT_MEASURE_PROMPTS = 4
DEFAULT_MEASURE_TOKENS = 48


def option(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING, min: float | None = None,
           above: float | None = None, max: float | None = None, choices: tuple | None = None, flag: str | None = None,
           old: tuple[str, ...] = (), help: str | None = None, cli: bool = True, positional: bool = False,
           comma: bool = False, count: int | str | None = None, short: str | None = None, repeat: bool = False) -> Any:
    """A dataclass field with its command-line face.

    Args:
        default, factory: the field's default (or a factory for a mutable one); neither: required.
        min, above, max: the range of a number (``min`` and ``max`` inclusive, ``above`` exclusive).
        choices: the values a string may take.
        flag: the flag's name when it is not the field's (``sequences`` for ``train_sequences``).
        old: the flag's earlier spellings (``--target-a``): still taken for one release, with a note.
        help: the flag's help when the class docstring's entry for the field is not it.
        cli: False keeps the field off the command line (set by code, not by the user).
        positional: the command takes it as an argument, not a flag (``compare OLD_DRAFTER NEW_DRAFTER``).
        comma: several values as one comma-separated word (``--chain 0.7,0.5,0.3``), not one word each.
        count: several values, exactly this many (``--aux-layers 1 6 11``), or ``"*"``: any number, the bare flag too.
        short: a one-letter spelling beside the flag (``-p`` for ``--param``).
        repeat: several values, one per use of the flag (``-p A=1 -p B=2``).
    """
    meta = {"min": min, "above": above, "max": max, "choices": tuple(choices) if choices else None, "flag": flag,
            "old": tuple(old) or None, "help": help, "cli": None if cli else False,
            "positional": positional or None, "comma": comma or None,
            "count": count, "short": short, "repeat": repeat or None}
    return dataclasses.field(default=default, default_factory=factory,
                             metadata={k: v for k, v in meta.items() if v is not None})


def field_help(cls: type) -> dict[str, str]:
    """Each field's entry in the class docstring's ``Attributes:`` section (``a, b: text`` documents both), the
    entries of the classes it extends first (a subclass's own entry wins); ``{NAME}`` reads the constant NAME of
    the class's module, so a default named in a help text is the code's own."""
    entries: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            module = sys.modules.get(klass.__module__)
            names = vars(module) if module is not None else {}
            entries |= {k: _CONSTANT.sub(lambda m, g=names: _shown(g, m), v)
                        for k, v in _attributes(klass.__dict__.get("__doc__") or "").items()}
    return entries


#: ``{NAME}`` in a settings docstring: the value of the module's constant NAME (a default written once, as code).
_CONSTANT = re.compile(r"\{([A-Z][A-Z0-9_]*)\}")


def _shown(names: dict[str, Any], match: re.Match) -> str:
    if match.group(1) not in names:
        return match.group(0)
    value = names[match.group(1)]
    return ", ".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)


def _attributes(doc: str) -> dict[str, str]:
    """The entries of one docstring's ``Attributes:`` section."""
    section = re.split(r"\n\s*Attributes:\s*\n", doc, maxsplit=1)
    if len(section) < 2:
        return {}
    entries: dict[str, str] = {}
    names: list[str] = []
    indent = None
    for line in section[1].splitlines():
        if not line.strip():
            continue
        width = len(line) - len(line.lstrip())
        indent = width if indent is None else indent
        if width < indent:  # the section ended
            break
        head = re.match(r"\s*([A-Za-z_][\w, ]*?):\s+(.*)", line) if width == indent else None
        if head:
            names = [n.strip() for n in head.group(1).split(",")]
            for n in names:
                entries[n] = head.group(2).strip()
        else:
            for n in names:
                entries[n] += " " + line.strip()
    return entries


def settings_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of a settings dataclass that are on the command line."""
    return [f for f in dataclasses.fields(cls) if f.metadata.get("cli", True) and f.init]


def flag_name(f: dataclasses.Field) -> str:
    """The field's flag, without the dashes: its name with ``-`` for ``_`` unless the field says otherwise."""
    return f.metadata.get("flag") or f.name.replace("_", "-")


def default_of(f: dataclasses.Field) -> Any:
    """The field's default (its factory's value), or :data:`dataclasses.MISSING` for a required field."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING
