"""#57 item 6: the showroom, a whole workbook run's game plan, figures and notebooks in the repository, stamped.

The writer is tested on a run folder built here; the committed showroom (docs/example) is checked as a visitor
reads it: the stamp, every image the game plan shows, and its headline numbers as docs/MEASURED.md quotes them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from eaglelab.cli import main
from eaglelab.workbook.showroom import GAME_PLAN, STAMP, linked_images
from tests.conftest import REPO

SHOWROOM = REPO / "docs" / "example"


def _run(tmp_path, smoke=False, image=True):
    figures, runs = tmp_path / "figures", tmp_path / "runs"
    figures.mkdir()
    runs.mkdir()
    (figures / GAME_PLAN).write_text("# plan\n\n![the options](01_options.png)\n")
    if image:
        (figures / "01_options.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (figures / "01_options.pdf").write_bytes(b"%PDF")
    probe = {"verdict": {"level": "PLUG IN"}, "plugin": {"accept_len_on_a": 2.414, "accept_len_on_b": 2.207}}
    (figures / "03_findings.json").write_text(json.dumps({"notebook": "03", "numbers": probe, "bullets": ["- x"]}))
    (figures / "04_findings.json").write_text(json.dumps({"notebook": "04", "numbers": {"chosen": "warm start",
                                                                                         "smoke": smoke}, "bullets": []}))
    (runs / "03_plugin_probe.ipynb").write_text(json.dumps({"cells": [], "path": str(tmp_path / "data" / "x")}))
    return ["--figures", str(figures), "--runs", str(runs), "--out", str(tmp_path / "example")]


def test_a_whole_runs_plan_figures_and_notebooks_are_copied_and_stamped(tmp_path, capsys):
    argv = _run(tmp_path)
    assert main(["showroom", *argv, "--commit", "a" * 40, "--root", str(tmp_path)]) == 0
    out = tmp_path / "example"
    stamp = json.loads((out / STAMP).read_text())
    assert stamp["commit"] == "a" * 40 and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", stamp["made"])
    assert stamp["headline"] == {"03 verdict": "PLUG IN", "03 τ on A": 2.41, "03 τ on B": 2.21,
                                 "04 recommendation": "warm start"}
    assert sorted(p.name for p in out.rglob("*") if p.is_file() and not p.name.startswith(".")) == sorted(
        [GAME_PLAN, "01_options.png", "03_findings.json", "04_findings.json", "03_plugin_probe.ipynb", STAMP])
    assert "PLUG IN" in capsys.readouterr().out
    assert json.loads((out / "notebooks" / "03_plugin_probe.ipynb").read_text())["path"] == "./data/x"  # not this machine's
    assert main(["showroom", *argv]) == 2  # its own showroom: replaced only when told
    assert "--force" in capsys.readouterr().err
    assert main(["showroom", *argv, "--force"]) == 0


def test_the_showroom_is_a_metadata_command(tmp_path):
    code = ("import sys\nfrom eaglelab.cli import main\n"
            f"assert main(['showroom', *{_run(tmp_path)!r}]) == 0\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("smoke, image, says", [(True, True, "a smoke run's findings"),
                                                (False, False, "shows images that are not there: 01_options.png")])
def test_a_smoke_run_or_a_plan_without_its_images_is_no_showroom(tmp_path, capsys, smoke, image, says):
    assert main(["showroom", *_run(tmp_path, smoke=smoke, image=image)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and not (tmp_path / "example").exists()
def test_the_committed_showroom_is_a_whole_run_its_stamp_and_measured_md_agree():
    stamp = json.loads((SHOWROOM / STAMP).read_text())
    assert re.fullmatch(r"[0-9a-f]{40}", stamp["commit"]) and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", stamp["made"])
    plan = (SHOWROOM / GAME_PLAN).read_text()
    images = linked_images(plan)
    assert images and all((SHOWROOM / p).is_file() for p in images), images
    assert len(list((SHOWROOM / "notebooks").glob("0[1-5]_*.ipynb"))) == 5
    measured = (REPO / "docs" / "MEASURED.md").read_text()
    section = measured[measured.index("## The showroom"):]
    for name, value in stamp["headline"].items():
        shown = f"{value:.2f}" if isinstance(value, float) else str(value)
        assert f"{name}: {shown}" in section, (name, shown)
    assert stamp["commit"][:12] in section
    readme = (REPO / "README.md").read_text()
    assert "docs/example/GAME_PLAN.md" in readme and any(f"docs/example/{p}" in readme for p in images)
