"""How a command prints its job's report, and a command declared as its settings and its job (:class:`Command`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eaglelab.cli.arguments import add_settings, settings_from
from eaglelab.inputs import printable
from eaglelab.outputs import strict_json_text


def print_json(obj) -> None:
    """Strict JSON (no ``NaN`` / ``Infinity``): a number that is not finite becomes null, and the
    object's ``non_finite`` entry says which ones and what they were (``{"summary.speedup": "inf"}``)."""
    print(strict_json_text(obj))


def print_report(report, as_json: bool, escape: bool = False) -> int:
    """A job's report as the command prints it: its ``to_json()`` with ``--json`` (its ``json_chunks()`` where it
    has them), else its ``lines()``; a job that answers in one line (a string), that line.

    Args:
        escape: print each line with its control and format characters escaped (text from checkpoints' files,
            which must not add a line or move the cursor); a decoded reply keeps its own line breaks.
    """
    if isinstance(report, str):  # a job whose whole answer is one line (what it wrote)
        print(printable(report) if escape else report)
    elif as_json and hasattr(report, "json_chunks"):  # a long report in pieces (a log's records, in bounded memory)
        for chunk in report.json_chunks():
            sys.stdout.write(chunk)
        print()
    elif as_json:
        print_json(report.to_json())
    else:
        for line in report.lines():
            print(printable(line) if escape else line)
    return 0


@dataclass(frozen=True)
class Command:
    """One subcommand: its settings (its flags are generated from them), its job, and its --help.

    Attributes:
        name: the subcommand's word (``perf``; ``init`` inside the ``drafter`` group).
        settings: the job's settings dataclass.
        job: the job, called with the settings the flags describe; it returns a report (``to_json()``, ``lines()``)
            or one line.
        help, description: the subcommand's line in ``eaglelab --help`` and the opening of its own ``--help``.
        json: the help of its ``--json`` flag (None: the command has none).
        escape: print each line with its control and format characters escaped (the default: a report quotes
            paths, names and files the user gave, which must not add a line or move the cursor); False only for a
            report whose lines are a decoded reply's own.
        progress: the job takes ``progress``, on unless ``--json``.
        helps: field -> help on this command, where it says more than the settings' docstring.
    """

    name: str
    settings: type
    job: Callable[..., Any]
    help: str
    description: str | None = None
    json: str | None = "machine-readable output"
    escape: bool = True
    progress: bool = False
    helps: dict[str, str] | None = None

    def add_to(self, sub) -> argparse.ArgumentParser:
        """The subcommand's parser on ``sub`` (``eaglelab``'s subparsers, or a group's)."""
        parser = sub.add_parser(self.name, help=self.help, description=self.description)
        add_settings(parser, self.settings, helps=self.helps)
        if self.json:
            parser.add_argument("--json", action="store_true", help=self.json)
        parser.set_defaults(func=self.run)
        return parser

    def run(self, args) -> int:
        """Build the settings from the parsed flags, call the job, print its report."""
        as_json = bool(getattr(args, "json", False))
        extra = {"progress": not as_json} if self.progress else {}
        return print_report(self.job(settings_from(args, self.settings), **extra), as_json, escape=self.escape)
