"""How the command line prints JSON (plain tables: :func:`eaglelab.outputs.table`)."""

from __future__ import annotations

from eaglelab.outputs import strict_json_text


def print_json(obj) -> None:
    """Strict JSON (no ``NaN`` / ``Infinity``): a number that is not finite becomes null, and the
    object's ``non_finite`` entry says which ones and what they were (``{"summary.speedup": "inf"}``)."""

    print(strict_json_text(obj))
