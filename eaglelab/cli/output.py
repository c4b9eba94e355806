"""How the command line prints: JSON and plain tables."""

from __future__ import annotations

import json
import math

from eaglelab.inputs import printable


def print_json(obj) -> None:
    """Strict JSON (no ``NaN`` / ``Infinity``): a number that is not finite becomes null, and the
    object's ``non_finite`` entry says which ones and what they were (``{"summary.speedup": "inf"}``)."""
    replaced: dict[str, str] = {}
    clean = _finite(obj, "", replaced)
    if replaced and isinstance(clean, dict):
        clean["non_finite"] = {**clean.get("non_finite", {}), **replaced}
    print(json.dumps(clean, indent=2, default=str, allow_nan=False))


def _finite(obj, path: str, replaced: dict[str, str]):
    if isinstance(obj, float) and not math.isfinite(obj):
        replaced[path or "value"] = repr(obj)
        return None
    if isinstance(obj, dict):
        return {k: _finite(v, f"{path}.{k}" if path else str(k), replaced) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v, f"{path}[{i}]", replaced) for i, v in enumerate(obj)]
    return obj


def table(rows: list[list], headers: list[str]) -> str:
    """Rows as aligned columns; cells are made printable (a name from a file cannot move the cursor)."""
    cells = [headers] + [[printable(str(c)) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
