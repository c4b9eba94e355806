"""Your case, whole (issue #38): one ``eaglelab run`` line points every notebook at the user's checkpoints, none of
them substitutes the demo world's, and the game plan opens with what each notebook ran on.

The tiny world's checkpoints are copied to a folder of the user's own (not a world), and the whole workbook runs
on them in smoke mode; the executed notebooks' records say which paths each read.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from eaglelab.data.corpus import docstrings, split_held_out
from eaglelab.errors import ParameterError
from eaglelab.workbook.runner import run_workbook

from .conftest import REPO


@pytest.fixture(scope="module")
def users_pair(users_copy):
    """The tiny world's pair and old drafter, copied where no world is, with the user's text to probe and train on."""
    _, held = split_held_out(docstrings())
    (users_copy / "conversations.txt").write_text("\n\n".join(held))
    return users_copy


@pytest.mark.notebook
def test_one_line_runs_every_notebook_on_the_users_checkpoints(users_pair, tmp_path):
    mine, out = users_pair, tmp_path / "run"
    no_world = tmp_path / "no-world"  # were any notebook to reach for the demo world, it would be built here
    params = {"OLD_TARGET": str(mine / "old-target"), "NEW_TARGET": str(mine / "new-target"),
              "OLD_DRAFTER": str(mine / "old-drafter"), "DATA": str(mine / "conversations.txt"),
              "WORLD_DIR": str(no_world), "SERVING_ENGINE": None}
    runs = run_workbook(out, smoke=True, parameters=params, notebooks_dir=REPO / "notebooks", progress=False)
    assert [r.notebook.name[:2] for r in runs] == ["01", "02", "03", "04", "05"] and not any(r.not_run for r in runs)
    assert not no_world.exists()  # no demo world was built, nor read
    figures = out / "figures"
    expected = {"01": ("OLD_TARGET", "OLD_DRAFTER"), "02": ("OLD_TARGET", "NEW_TARGET", "OLD_DRAFTER", "NEW_DRAFTER"),
                "03": ("OLD_TARGET", "NEW_TARGET", "OLD_DRAFTER"), "04": ("NEW_TARGET", "OLD_DRAFTER"),
                "05": ("OLD_TARGET", "NEW_TARGET", "OLD_DRAFTER")}
    for run in runs:
        nb = run.notebook.name[:2]
        record = json.loads((figures / f"{nb}_findings.json").read_text())["numbers"]["inputs"]["checkpoints"]
        for name in expected[nb]:
            path = params["OLD_DRAFTER"] if name == "NEW_DRAFTER" else params[name]  # 02: no NEW_DRAFTER given
            assert Path(record[name]["value"]).resolve() == Path(path).resolve(), (nb, name, record[name])
            assert record[name]["source"] == "yours", (nb, name)
        executed = nbformat.read(run.output, as_version=4)
        text = "\n".join(o.get("text", "") + str(o.get("data", {}).get("text/markdown", ""))
                         for c in executed.cells for o in c.get("outputs", []))
        assert "[demo]" not in text.replace("[demo]**", ""), nb  # no number of this run is the demo world's
    findings_02 = json.loads((figures / "02_findings.json").read_text())
    assert any("no NEW_DRAFTER given" in b for b in findings_02["bullets"])  # said, not filled in from the world
    data_03 = json.loads((figures / "03_findings.json").read_text())["numbers"]["inputs"]["checkpoints"]["DATA"]
    assert Path(data_03["value"]) == mine / "conversations.txt" and data_03["source"] == "yours"
    plan = (figures / "GAME_PLAN.md").read_text()
    header = plan[plan.index("## What this plan was computed from"):plan.index("## 01")]
    assert header.count("[your checkpoints]") >= 12 and "[demo]" not in header.split("\n\n")[1], header
    assert "not one case" not in header


@pytest.mark.notebook
def test_a_gap_in_the_users_case_is_one_line_before_anything_runs(users_pair, tmp_path):
    mine = users_pair
    with pytest.raises(ParameterError, match="OLD_DRAFTER: not given, while OLD_TARGET, NEW_TARGET are yours"):
        run_workbook(tmp_path / "run", smoke=True, only=["03"], notebooks_dir=REPO / "notebooks", progress=False,
                     parameters={"OLD_TARGET": str(mine / "old-target"), "NEW_TARGET": str(mine / "new-target"),
                                 "WORLD_DIR": str(tmp_path / "no-world")})
