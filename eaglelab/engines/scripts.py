"""Bash scripts that quote every word: the steps of a generated recipe and how they are written.

A step's argv holds data (strings, quoted for bash with :func:`shlex.quote`, after
:func:`script_value` refused control characters that could end a comment line or change a path on
the way) and the script's own variables (:class:`Var`, :class:`Here`), the only words left
unquoted, inside double quotes. A user's path or name that starts with ``-`` is written so that the
engines' parsers read it as a value (:func:`path_word`, :func:`option`). Configs the script reads are
written as YAML with every string JSON-escaped in double quotes (:func:`yaml_text`).
"""

from __future__ import annotations

import json
import shlex
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eaglelab.errors import OutputError, ParameterError
from eaglelab.inputs import one_line, quoted, unshown_character
from eaglelab.outputs import open_output_folder, os_problem, where


@dataclass(frozen=True)
class Var:
    """A variable of the script itself (``$SERVER_PID``): the only word written unquoted, in double quotes."""

    name: str

    def __str__(self) -> str:
        return f"${self.name}"

    def shell(self) -> str:
        return f'"${self.name}"'


@dataclass(frozen=True)
class Here:
    """A file of the recipe's own folder, found at run time through the script's ``$HERE``."""

    name: str

    def __str__(self) -> str:
        return f"$HERE/{self.name}"

    def shell(self) -> str:
        return f'"$HERE"/{shlex.quote(self.name)}'


Word = str | Var | Here


@dataclass(frozen=True)
class Step:
    """One command of a recipe.

    Attributes:
        title: what it does, one line.
        argv: the command (``argv[0]`` the program): strings are data, always quoted for bash;
            :class:`Var` and :class:`Here` are the script's own variables.
        notes: comment lines printed above it (why, what to watch).
        engine_command: ``(engine, subcommand)`` whose own parser checks ``argv``, or None.
        background: start it in the background (a server the next steps talk to).
        stdout: a file its standard output goes to (quoted as data), or None.
    """

    title: str
    argv: list[Word]
    notes: list[str] = field(default_factory=list)
    engine_command: tuple[str, str] | None = None
    background: bool = False
    stdout: str | None = None

    def command(self) -> str:
        """The step as bash: its words quoted, one ``--flag value`` per line, its output redirected."""
        cmd = " \\\n    ".join(quote_args(self.argv))
        if self.stdout is not None:
            cmd += f" \\\n    > {shlex.quote(script_value('recipe output', self.stdout))}"
        return cmd

    def words(self) -> list[str]:
        """The argv as text, the script's variables spelled ``$NAME`` (what ``recipe.json`` records)."""
        return [str(w) for w in self.argv]

    def concrete(self, here: str | Path) -> list[str]:
        """The argv as the script runs it from the folder ``here`` (``$HERE`` filled in): for the engines' parsers."""
        return [str(Path(here) / w.name) if isinstance(w, Here) else str(w) for w in self.argv]

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "argv": self.words(), "notes": list(self.notes),
                "engine_command": list(self.engine_command) if self.engine_command else None,
                "background": self.background, "stdout": self.stdout}


def script_value(name: str, value: Any) -> str:
    """A user's value bound for the script or its configs: text without control or format characters, else refused.

    Quoting makes any other character safe in bash (:func:`shlex.quote`), YAML (JSON-escaped double
    quotes) and JSON; a line break, NUL or other control character would still end a comment line or
    change a path on the way, and a format character (a bidi override such as U+202E, the isolates
    U+2066-2069, a zero-width mark) makes the script read otherwise than bash runs it, so each is refused
    (:func:`~eaglelab.inputs.unshown_character`).

    Raises:
        ParameterError: naming the setting and the first offending character.
    """
    if not isinstance(value, str) or not value:
        raise ParameterError(name, f"must be a non-empty text, got {quoted(value, 60)}")
    bad = unshown_character(value)
    if bad is not None:
        i, c = bad
        raise ParameterError(name, f"holds the {'format' if unicodedata.category(c) == 'Cf' else 'control'} character "
                                   f"{one_line(c)} at position {i}: refused in a generated script, where it would read "
                                   "otherwise than bash runs it (rename the path)")
    return value


def path_word(value: str) -> str:
    """A path as a command's word that no parser reads as an option: a relative ``-k2`` becomes ``./-k2``.

    argparse (eaglelab, SpecForge's scripts, vLLM, SGLang, torchrun) and click / Typer (speculators, ``hf``)
    take a word that starts with ``-`` for an option, after a flag and as a positional alike; ``./`` names
    the same file. A hub id never starts with ``-``, and an absolute path never does.
    """
    return f"./{value}" if value.startswith("-") else value


def flag_value(flag: str, value: str) -> list[str]:
    """``[flag, value]``, or ``[flag=value]`` when ``value`` starts with ``-`` (a name, not a path: see
    :func:`path_word`), so that the engine's parser reads it as the flag's value, not as another option.

    Raises:
        ParameterError: ``value`` is ``--``, which argparse reads as no value even after ``=``.
    """
    if value == "--":
        raise ParameterError(flag, "'--' cannot reach the engines as a value (argparse reads it as the end of options)")
    return [f"{flag}={value}"] if value.startswith("-") else [flag, value]


def comment_line(text: str) -> str:
    """One comment line of the script (its text checked: nothing in it can end the line)."""
    return "#" + script_value("recipe comment", text)


def _quote(arg: Word) -> str:
    """One argument for bash: the script's own variables as such, every other word quoted as data."""
    if isinstance(arg, (Var, Here)):
        return arg.shell()
    return shlex.quote(script_value("recipe argument", arg))


def quote_args(argv: list[Word]) -> list[str]:
    """Quote each argument for bash, pairing ``--flag value`` on one line for reading."""
    def flag(w: Word) -> bool:
        return isinstance(w, str) and w.startswith("--")

    lines, i = [], 0
    while i < len(argv):
        arg = _quote(argv[i])
        if flag(argv[i]) and i + 1 < len(argv) and not flag(argv[i + 1]) and i > 0:
            lines.append(f"{arg} {_quote(argv[i + 1])}")
            i += 2
        else:
            lines.append(arg)
            i += 1
    # the program and its subcommands stay on the first line
    first = [lines.pop(0)]
    while lines and not lines[0].startswith("--"):
        first.append(lines.pop(0))
    return [" ".join(first)] + lines


def script_text(head: list[str], workdir: str, steps: list[Step]) -> str:
    """A recipe's whole script: its commented head, strict bash, its own folder as ``$HERE``, the work folder
    made, then the numbered steps."""
    return "\n".join([*head, "set -euo pipefail", 'HERE="$(cd "$(dirname "$0")" && pwd)"  # this recipe\'s own files',
                      f"mkdir -p -- {shlex.quote(script_value('--workdir', workdir))}", "", *steps_text(steps)])


def steps_text(steps: list[Step]) -> list[str]:
    """The numbered, commented steps of a script: each one's title and notes, then its command (a server in
    the background, waited for)."""
    body = []
    for n, step in enumerate(steps, 1):
        body.append(comment_line(f" --- {n}. {step.title}"))
        body += [comment_line(f" {line}") for line in step.notes]
        cmd = step.command()
        body.append(f"{cmd} &\nSERVER_PID=$!\n{wait_for_server(step)}" if step.background else cmd)
        body.append("")
    return body


def wait_for_server(step: Step) -> str:
    port = int(step.argv[step.argv.index("--port") + 1])
    return (f"trap 'kill $SERVER_PID 2>/dev/null' EXIT\n"
            f"until curl -sf http://127.0.0.1:{port}/health >/dev/null; do sleep 10; done  # wait until it serves")


def yaml_text(obj: dict, indent: int = 0) -> str:
    """A small YAML writer for nested dicts of scalars (the engines' configs need no more)."""
    lines = []
    for key, value in obj.items():
        pad = "  " * indent
        if isinstance(value, dict):
            lines.append(f"{pad}{key}:")
            lines.append(yaml_text(value, indent + 1).rstrip("\n"))
        else:
            lines.append(f"{pad}{key}: {json.dumps(value, ensure_ascii=False)}")
    return "\n".join(lines) + "\n"


def write_recipe_folder(out_dir: str | Path, script: str, files: dict[str, str], record: dict[str, Any],
                        overwrite: bool = False) -> Path:
    """A recipe's folder: ``run.sh`` (executable), its files and ``recipe.json``, written atomically.

    Raises:
        OverwriteError: ``out_dir`` holds a recipe and ``overwrite`` is False, or files eaglelab did not write.
        OutputError: the folder cannot be written.
    """
    with open_output_folder(out_dir, "recipe", force=overwrite) as out:
        written = out.write_text("run.sh", script)
        try:
            written.chmod(0o755)
        except OSError as exc:
            raise OutputError(where(written), f"cannot make it executable ({os_problem(exc)})") from None
        for name, text in files.items():
            out.write_text(name, text)
        out.write_json("recipe.json", record)
    return out.path
