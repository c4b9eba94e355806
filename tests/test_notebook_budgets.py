"""#57's budgets, held: a notebook's findings cell picks and orders the reports' sentences (<= 70 non-blank lines across
the five notebooks), and the notebooks read results by attribute, not by string keys into dicts (<= 30 lookups)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("0*.py"))
FINDINGS_LINES = 70
KEY_LOOKUPS = 30


def cells(path: Path) -> list[tuple[str, str]]:
    """(header, body) of each ``# %%`` cell of a jupytext percent file."""
    text = path.read_text()
    return list(zip(re.findall(r"^# %%.*$", text, flags=re.M), re.split(r"^# %%.*$", text, flags=re.M)[1:]))


def findings_lines(path: Path) -> int:
    """Non-blank, non-comment lines of the code cell under the ``## Findings`` heading."""
    out, under = 0, False
    for head, body in cells(path):
        if "[markdown]" in head:
            under = "## Findings" in body
            continue
        if under:
            out += sum(1 for line in body.splitlines() if line.strip() and not line.strip().startswith("#"))
        under = False
    return out


def key_lookups(path: Path) -> list[str]:
    """Every subscript by a string constant (``report["speedup"]``), f-strings included."""
    found = []
    for head, body in cells(path):
        if "[markdown]" in head:
            continue
        for node in ast.walk(ast.parse(body)):
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
                found.append(f"{path.name}: {ast.unparse(node)[:60]}")
    return found


def test_the_findings_cells_only_pick_and_order_sentences():
    assert len(NOTEBOOKS) == 5
    lines = {p.name: findings_lines(p) for p in NOTEBOOKS}
    assert all(n > 0 for n in lines.values()), lines  # every notebook ends with its findings
    assert sum(lines.values()) <= FINDINGS_LINES, lines


def test_the_notebooks_read_results_by_attribute():
    found = [k for p in NOTEBOOKS for k in key_lookups(p)]
    assert len(found) <= KEY_LOOKUPS, found
