"""How the command line prints: JSON and plain tables."""

from __future__ import annotations

from eaglelab.inputs import printable
from eaglelab.outputs import strict_json_text


def print_json(obj) -> None:
    """Strict JSON (no ``NaN`` / ``Infinity``): a number that is not finite becomes null, and the
    object's ``non_finite`` entry says which ones and what they were (``{"summary.speedup": "inf"}``)."""

    print(strict_json_text(obj))


def table(rows: list[list], headers: list[str]) -> str:
    """Rows as aligned columns; cells are made printable (a name from a file cannot move the cursor)."""
    cells = [headers] + [[printable(str(c)) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
