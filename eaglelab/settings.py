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
from collections.abc import Mapping
from typing import Any

from eaglelab.errors import ParameterError

#: The drafts per cycle every command, job and notebook starts from (``k``; the verify checks ``k + 1`` tokens).
DEFAULT_K = 3
#: prompts decoded for real wherever a τ is also measured (notebook 01's closed loop, the probe, the sweep, the
#: fine-tune), and the tokens generated for each: CPU timing, not a fit
DEFAULT_MEASURE_PROMPTS = 4
DEFAULT_MEASURE_TOKENS = 48


def option(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING, min: float | None = None,
           above: float | None = None, max: float | None = None, choices: tuple | None = None, flag: str | None = None,
           help: str | None = None, cli: bool = True, positional: bool = False,
           comma: bool = False, count: int | str | None = None, short: str | None = None, repeat: bool = False,
           mistake: str | None = None) -> Any:
    """A dataclass field with its command-line face.

    Args:
        default, factory: the field's default (or a factory for a mutable one); neither: required.
        min, above, max: the range of a number (``min`` and ``max`` inclusive, ``above`` exclusive).
        choices: the values a string may take.
        flag: the flag's name when it is not the field's (``sequences`` for ``train_sequences``).
        help: the flag's help when the class docstring's entry for the field is not it.
        cli: False keeps the field off the command line (set by code, not by the user).
        positional: the command takes it as an argument, not a flag (``compare OLD_DRAFTER NEW_DRAFTER``).
        comma: several values as one comma-separated word (``--chain 0.7,0.5,0.3``), not one word each.
        count: several values, exactly this many (``--aux-layers 1 6 11``), or ``"*"``: any number, the bare flag too.
        short: a one-letter spelling beside the flag (``-p`` for ``--param``).
        repeat: several values, one per use of the flag (``-p A=1 -p B=2``).
        mistake: the likely mix-up behind a value out of range, said with the refusal (``per request, not summed
            over the requests``): a range that is a physical bound says what its breach usually means.
    """
    meta = {"min": min, "above": above, "max": max, "choices": tuple(choices) if choices else None, "flag": flag,
            "help": help, "cli": None if cli else False,
            "positional": positional or None, "comma": comma or None,
            "count": count, "short": short, "repeat": repeat or None, "mistake": mistake}
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


def range_words(meta: dict) -> str:
    """A field's range in words (``a number in [0.01, 10000]``, ``a whole number >= 1``), from its option metadata."""
    low, above, high = meta.get("min"), meta.get("above"), meta.get("max")
    if low is not None and high is not None:
        return f"in [{low:g}, {high:g}]"
    if above is not None and high is not None:
        return f"in ({above:g}, {high:g}]"
    if low is not None:
        return f">= {low:g}"
    if above is not None:
        return f"> {above:g}"
    return f"<= {high:g}" if high is not None else "finite"


def range_problem(value: Any, meta: dict, whole: bool) -> str | None:
    """Why one value breaks its field's declared range (whole where the field is an int), or None."""
    low, above, high = meta.get("min"), meta.get("above"), meta.get("max")
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if whole and not (isinstance(value, int) and not isinstance(value, bool)):
        return f"must be a whole number {range_words(meta)}, got {value!r:.60}"
    if not number or value != value or value in (float("inf"), float("-inf")):
        return f"must be a finite number {range_words(meta)}, got {value!r:.60}"
    if (low is not None and value < low) or (above is not None and value <= above) or (high is not None and value > high):
        said = f"must be {'a whole number' if whole else 'a number'} {range_words(meta)}, got {value if whole else f'{value:g}'}"
        return said + (f" ({meta['mistake']})" if meta.get("mistake") else "")
    return None


def check_ranges(obj: Any) -> None:
    """Each field of the settings ``obj`` within the range and choices its :func:`option` declares: the one rule for
    flags, notebook parameters and the API alike (None is "not given", checked by the settings' own rules).

    Raises:
        ParameterError: naming the field's flag and the range (with its likely mix-up, where declared).
    """
    for f in dataclasses.fields(obj):
        meta, value = f.metadata, getattr(obj, f.name)
        ranged = any(meta.get(k) is not None for k in ("min", "above", "max"))
        if value is None or not (ranged or meta.get("choices")):
            continue
        values = value if isinstance(value, (tuple, list)) else (value,)
        whole = whole_field(f)
        for v in values:
            problem = None
            if meta.get("choices") and v not in meta["choices"]:
                problem = f"must be one of {', '.join(map(str, meta['choices']))}, got {v!r:.60}"
            elif ranged:
                problem = range_problem(v, meta, whole)
            if problem:
                raise ParameterError(f"--{flag_name(f)}", problem)


def whole_field(f: dataclasses.Field) -> bool:
    """Whether the field holds whole numbers (its annotation's value type is ``int``)."""
    return re.search(r"\bint\b", str(f.type)) is not None and "float" not in str(f.type)


def smoke_sized(settings: Any, smoke: bool) -> Any:
    """``settings`` with its class's smoke sizes (its ``SMOKE_SIZES`` class attribute) when ``smoke``, else as it is.

    A notebook's smoke run shrinks the work in one place, the settings class, not in an ``if SMOKE:`` block of each
    notebook; the sizes pass the fields' declared ranges like any value (:func:`check_ranges`).
    """
    return dataclasses.replace(settings, **type(settings).SMOKE_SIZES) if smoke else settings


def from_parameters(cls: type, parameters: Mapping[str, Any], smoke: bool = False) -> Any:
    """The settings ``cls`` of a notebook's jobs, from its parameters: each field whose name in capitals is a parameter
    (``SEQ_LEN`` for ``seq_len``: one name at every interface) takes its value; smoke-sized when ``smoke``.

    A parameter left at None or "" (or absent) is not given: the field keeps its default (a required path is ""); a
    list is taken as the tuple a field of tuples holds. Names that are no field are not read.

    Raises:
        ParameterError: a value outside its field's declared range or choices (the class's own check).
    """
    values = {}
    for f in (f for f in dataclasses.fields(cls) if f.init):
        value, default = parameters.get(f.name.upper()), default_of(f)
        if value is None or value == "":
            if default is dataclasses.MISSING:
                values[f.name] = ""
            continue
        values[f.name] = tuple(value) if isinstance(value, list) and isinstance(default, tuple) else value
    return smoke_sized(cls(**values), smoke)
