"""Where `make workbook`'s time goes, stage by stage and cell by cell, read from the build's and the run's own records.

- the demo world's build: every stage's manifest (``data/worlds/cache/stages/<stage>/manifest.json``) records
  ``build_seconds`` (stages built before that field existed say "not recorded");
- the notebooks: every executed copy under the run folder (``runs/workbook/*.ipynb``) holds papermill's
  duration of each cell and of the whole notebook.

Prints a Markdown table; ``--update docs/MEASURED.md`` writes it between the file's
``<!-- workbook-profile:begin -->`` and ``<!-- workbook-profile:end -->`` lines, so the table stays what the
last run measured.

    python benchmarks/workbook_profile.py [--world data/worlds/demo] [--run runs/workbook] [--cells 3] [--update FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- workbook-profile:begin -->", "<!-- workbook-profile:end -->"
#: the largest record read (a manifest or an executed notebook with its figures)
MAX_BYTES = 256 << 20


class ProfileError(Exception):
    """A record that is missing or does not read: one line naming the file, exit 2."""


def read_json(path: Path) -> dict:
    """One record (a JSON object), or :class:`ProfileError` naming the file."""
    try:
        if path.stat().st_size > MAX_BYTES:
            raise ProfileError(f"{path}: larger than {MAX_BYTES >> 20} MB")
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise ProfileError(f"{path}: not a readable JSON record ({exc.__class__.__name__})") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: not a JSON object")
    return data


def stage_rows(world: Path) -> list[tuple[str, float | None]]:
    """(stage, seconds or None) for every stage the world was assembled from, in build order."""
    manifest = read_json(world / "manifest.json")
    stages = manifest.get("stages")
    if not isinstance(stages, dict):
        raise ProfileError(f"{world / 'manifest.json'}: names no build stages (not a demo world)")
    rows = []
    for name, folder in stages.items():
        if not isinstance(folder, str) or not folder or "/" in folder or folder.startswith("."):
            raise ProfileError(f"{world / 'manifest.json'}: stage {name!r} names no stage folder")
        seconds = read_json(world.parent / "cache" / "stages" / folder / "manifest.json").get("build_seconds")
        ok = isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and 0 <= seconds < 1e7
        rows.append((str(name), float(seconds) if ok else None))
    return rows


def notebook_rows(run: Path, cells: int) -> list[tuple[str, float, list[tuple[float, str]]]]:
    """(notebook, seconds, its ``cells`` slowest cells as (seconds, first line)) per executed copy."""
    rows = []
    for path in sorted(run.glob("*.ipynb")):
        nb = read_json(path)
        cells_of = nb.get("cells")
        if not isinstance(cells_of, list):
            raise ProfileError(f"{path}: not a notebook (no list of cells)")
        timed = []
        for cell in cells_of:
            took = _duration(cell)
            if isinstance(cell, dict) and cell.get("cell_type") == "code" and took is not None:
                source = cell.get("source", "")
                source = "".join(x for x in source if isinstance(x, str)) if isinstance(source, list) else str(source)
                first = next((ln.strip() for ln in source.splitlines() if ln.strip() and not ln.startswith("#")), "")
                timed.append((took, first[:70].replace("|", "/").replace("`", "'")))
        total = _duration(nb)
        if total is None:
            total = sum(t for t, _ in timed)
        rows.append((path.stem, float(total), sorted(timed, reverse=True)[:cells]))
    if not rows:
        raise ProfileError(f"{run}: no executed notebooks (run `make workbook` first)")
    return rows


def _duration(record) -> float | None:
    """papermill's ``metadata.papermill.duration`` of a cell or a notebook, when it is a plausible number of seconds."""
    meta = record.get("metadata") if isinstance(record, dict) else None
    took = (meta.get("papermill") if isinstance(meta, dict) else None) or {}
    took = took.get("duration") if isinstance(took, dict) else None
    ok = isinstance(took, (int, float)) and not isinstance(took, bool) and 0 <= took < 1e7
    return float(took) if ok else None


def table(stages, notebooks) -> str:
    def minutes(s: float | None) -> str:
        return "not recorded" if s is None else f"{s / 60:.1f} min"

    lines = ["| part | time | where it goes |", "|---|---|---|"]
    built = [s for _, s in stages if s is not None]
    lines += [f"| world: {name} | {minutes(s)} | |" for name, s in stages]
    lines.append(f"| **the demo world** | **{minutes(sum(built))}**" + (" of the recorded stages" if len(built) < len(stages)
                                                                        else "") + " | |")
    for name, seconds, slow in notebooks:
        where = "; ".join(f"`{line}` {t:.0f} s" for t, line in slow)
        lines.append(f"| notebook {name} | {minutes(seconds)} | {where} |")
    total = sum(built) + sum(s for _, s, _ in notebooks)
    lines.append(f"| **in all** | **{minutes(total)}** | set-up and the wheel download not included |")
    return "\n".join(lines)


def update(path: Path, text: str) -> None:
    """Replace the block between the markers of ``path`` (atomically); exit 2 when the markers are missing."""
    try:
        doc = path.read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:
        raise ProfileError(f"{path}: cannot be read ({exc.__class__.__name__})") from None
    if BEGIN not in doc or END not in doc or doc.index(BEGIN) > doc.index(END):
        raise ProfileError(f"{path}: no '{BEGIN}' ... '{END}' block to update")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(f"{head}{BEGIN}\n{text}\n{END}{tail}")
    os.replace(tmp, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=Path, default=ROOT / "data" / "worlds" / "demo")
    ap.add_argument("--run", type=Path, default=ROOT / "runs" / "workbook")
    ap.add_argument("--cells", type=int, default=3, help="slowest cells shown per notebook")
    ap.add_argument("--update", type=Path, help="a Markdown file with the workbook-profile markers")
    args = ap.parse_args()
    try:
        text = table(stage_rows(args.world), notebook_rows(args.run, args.cells))
        if args.update:
            update(args.update, text)
    except ProfileError as exc:
        print(f"workbook_profile: {exc}", file=sys.stderr)
        sys.exit(2)
    print(text)


if __name__ == "__main__":
    main()
