"""How the command line prints JSON (plain tables: :func:`eaglelab.outputs.table`)."""

from __future__ import annotations

import sys

from eaglelab.inputs import printable
from eaglelab.outputs import strict_json_text


def print_json(obj) -> None:
    """Strict JSON (no ``NaN`` / ``Infinity``): a number that is not finite becomes null, and the
    object's ``non_finite`` entry says which ones and what they were (``{"summary.speedup": "inf"}``)."""
    print(strict_json_text(obj))


def print_report(report, as_json: bool, escape: bool = False) -> int:
    """A job's report as the command prints it: its ``to_json()`` with ``--json`` (its ``json_chunks()`` where it
    has them), else its ``lines()``.

    Args:
        escape: print each line with its control and format characters escaped (text from checkpoints' files,
            which must not add a line or move the cursor); a decoded reply keeps its own line breaks.
    """
    if as_json and hasattr(report, "json_chunks"):  # a long report in pieces (a log's records, in bounded memory)
        for chunk in report.json_chunks():
            sys.stdout.write(chunk)
        print()
    elif as_json:
        print_json(report.to_json())
    else:
        for line in report.lines():
            print(printable(line) if escape else line)
    return 0
