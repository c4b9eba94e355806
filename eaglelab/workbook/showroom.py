"""The showroom: what a whole workbook run answers, to look at before anything runs (``eaglelab showroom``).

A full ``make workbook`` writes the game plan, its figures and findings (``figures/``) and the executed notebooks
(``runs/workbook/``). :func:`build_showroom` copies them into one folder (``docs/example/`` in the repository),
with ``STAMP.json``: the commit and date they were made from, how, and the headline numbers (03's verdict and τ, 04's
recommendation) that docs/MEASURED.md quotes. ``make showroom`` regenerates it. Files only: no torch.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from eaglelab.errors import ConfigError
from eaglelab.inputs import path_kind
from eaglelab.outputs import open_output_folder
from eaglelab.workbook.report import read_findings

STAMP = "STAMP.json"
GAME_PLAN = "GAME_PLAN.md"
#: A showroom holds the game plan's figures as PNG (the PDF twins stay in figures/), the findings and the notebooks.
KINDS = ("*.png", "*_findings.json", GAME_PLAN)
#: The most a showroom copies: files, and bytes of each (an executed notebook with its figures is a few MB).
MAX_FILES = 200
MAX_FILE_BYTES = 20_000_000
#: The files whose text names the checkout's path (written relative to it in the showroom).
TEXTS = (".md", ".json", ".ipynb")
_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


@dataclass(frozen=True)
class ShowroomSettings:
    """Where ``eaglelab showroom`` reads a whole workbook run, and where it writes the showroom.

    Attributes:
        figures: the run's figures, findings and game plan (``eaglelab report`` written).
        runs: the run's executed notebooks.
        out: the showroom's folder.
        commit: the commit the run was made from (git rev-parse HEAD), stamped.
        root: the checkout the run was made in: its absolute path in the texts copied is written ``.`` (the
            showroom is read from the repository, not from the machine that made it).
        force: replace a showroom eaglelab wrote there before.
    """

    figures: str = "figures"
    runs: str = "runs/workbook"
    out: str = "docs/example"
    commit: str = "unknown"
    root: str = "."
    force: bool = False


@dataclass
class Showroom:
    """The showroom written: its folder, the stamp and the files copied."""

    path: Path
    stamp: dict[str, Any]
    files: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "stamp": self.stamp, "files": self.files}

    def lines(self) -> list[str]:
        heads = ", ".join(f"{k} {v}" for k, v in self.stamp["headline"].items())
        return [f"{self.path}: {len(self.files)} files from commit {self.stamp['commit'][:12]} ({self.stamp['made']})",
                f"headline: {heads}"]


def headline(figures: Path, probe: dict[str, Any], finetune: dict[str, Any]) -> dict[str, Any]:
    """The numbers a visitor reads first: 03's verdict and τ on both targets (``probe``, its findings' numbers), 04's
    choice (``finetune``'s).

    Raises:
        ConfigError: naming ``figures``, findings without those numbers (not a whole run).
    """
    try:
        return {"03 verdict": probe["verdict"]["level"],
                "03 τ on A": round(float(probe["plugin"]["accept_len_on_a"]), 2),
                "03 τ on B": round(float(probe["plugin"]["accept_len_on_b"]), 2),
                "04 recommendation": str(finetune["chosen"])}
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(str(figures), f"its findings are not a whole workbook run's ({type(exc).__name__}: {exc})") from None


def linked_images(game_plan: str) -> list[str]:
    """The relative paths of the images a game plan shows."""
    return [m for m in _IMAGE.findall(game_plan) if "://" not in m]


def build_showroom(settings: ShowroomSettings) -> Showroom:
    """Copy a whole run's game plan, figures, findings and executed notebooks into ``out``, stamped.

    Raises:
        ConfigError: no game plan in ``figures`` (run ``make workbook``), a smoke run's findings, an image the plan
            shows that is not there, or more files than :data:`MAX_FILES`.
        OverwriteError: ``out`` holds other files, or a showroom and ``force`` is not given.
    """
    figures, runs = Path(settings.figures), Path(settings.runs)
    if path_kind(figures / GAME_PLAN, ConfigError) != "file":
        raise ConfigError(str(figures), f"no {GAME_PLAN}: run the whole workbook first (make workbook)")
    probe, finetune = (read_findings(figures / f"{nb}_findings.json")["numbers"] for nb in ("03", "04"))
    if finetune.get("smoke", False):
        raise ConfigError(str(figures), "holds a smoke run's findings: the showroom shows a whole run (make workbook)")
    plan = (figures / GAME_PLAN).read_text(encoding="utf-8")
    missing = [p for p in linked_images(plan) if path_kind(figures / p, ConfigError) != "file"]
    if missing:
        raise ConfigError(str(figures / GAME_PLAN), f"shows images that are not there: {', '.join(missing[:4])}")
    sources = sorted({p for kind in KINDS for p in figures.glob(kind)}) + sorted(runs.glob("[0-9][0-9]_*.ipynb"))
    if len(sources) > MAX_FILES:
        raise ConfigError(str(figures), f"{len(sources)} files to copy, more than a showroom holds ({MAX_FILES})")
    stamp = {"commit": settings.commit, "made": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
             "command": "make workbook, then eaglelab showroom", "headline": headline(figures, probe, finetune)}
    written, root = [], str(Path(settings.root).resolve())
    with open_output_folder(settings.out, "showroom", force=settings.force) as out:
        for src in sources:
            if src.stat().st_size > MAX_FILE_BYTES:
                raise ConfigError(str(src), f"is {src.stat().st_size / 1e6:.0f} MB, more than a showroom copies")
            rel = ("notebooks/" if src.suffix == ".ipynb" else "") + src.name
            if src.suffix in TEXTS:
                out.write_text(rel, src.read_text(encoding="utf-8").replace(root, "."))
            else:
                with out.writing(rel) as tmp:
                    shutil.copyfile(src, tmp)
            written.append(rel)
        out.write_json(STAMP, stamp)
    return Showroom(Path(settings.out), stamp, [*written, STAMP])
