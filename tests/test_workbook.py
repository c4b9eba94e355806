"""The workbook: every notebook runs in smoke mode through the CLI's runner; failures name notebook and cell;
notebooks are stored without outputs and paired with their py:percent files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from eaglelab.errors import NotebookError, ParameterError
from eaglelab.workbook.runner import discover_notebooks, notebook_parameters, parse_parameter, run_workbook

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_five_numbered_notebooks_exist():
    assert [nb.name[:2] for nb in NOTEBOOKS] == ["01", "02", "03", "04", "05"]


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_without_outputs_with_one_parameters_cell(nb):
    cells = nbformat.read(nb, as_version=4).cells
    code = [c for c in cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code)
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and "SMOKE = False" in tagged[0].source
    assert cells[0].cell_type == "markdown" and "**Question.**" in cells[0].source


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_paired_py_percent_file_is_in_sync(nb):
    import jupytext

    py = nb.with_suffix(".py")
    assert py.is_file()
    from_py = jupytext.read(py)
    from_nb = nbformat.read(nb, as_version=4)
    assert [c.source.strip() for c in from_py.cells] == [c.source.strip() for c in from_nb.cells]
    # no jupytext version in either: saving in a JupyterLab with another jupytext rewrites nothing (#54)
    assert "jupytext_version: " not in py.read_text() and '"jupytext_version":' not in nb.read_text()
    assert from_nb.metadata["jupytext"]["notebook_metadata_filter"] == "-jupytext.text_representation.jupytext_version"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_in_smoke_mode(nb, smoke_run):
    out, run = smoke_run(nb.name[:2])
    assert run.output.is_file()
    figures = out / "figures"
    pngs = sorted(figures.glob(f"{nb.name[:2]}_*.png"))
    assert pngs and all(p.with_suffix(".pdf").is_file() and p.with_suffix(".json").is_file() for p in pngs)
    findings = json.loads((figures / f"{nb.name[:2]}_findings.json").read_text())
    assert findings["bullets"] and all("{" not in b for b in findings["bullets"])
    executed = nbformat.read(run.output, as_version=4)
    assert not any(o.get("output_type") == "error" for c in executed.cells for o in c.get("outputs", []))
    texts = [o.get("text", "") + o.get("data", {}).get("text/plain", "") for c in executed.cells for o in c.get("outputs", [])]
    stray = [t[:120] for t in texts if "PosixPath(" in t or "Loading weights" in t]
    assert not stray, f"cells end with stray reprs or transformers' bars: {stray}"
    if nb.name.startswith("04"):
        plan = (figures / "GAME_PLAN.md").read_text()
        assert "## 04" in plan and "![04_" in plan
        assert findings["numbers"]["recommendation"]["text"] in plan  # the decision, rendered, not retyped
        assert "on the demo world (an illustration)" in plan and "not projected" in plan
        assert findings["numbers"]["evidence"] == "demo" and len(findings["numbers"]["scaling"]["points"]["warm start"]) >= 6
        assert "## Hand-over" in plan and all(Path(p).is_file() for p in findings["numbers"]["recipes"].values())
    if nb.name[:2] in ("02", "04", "05"):  # smoke runs keep their scratch files beside the figures, not in data/
        assert any((out / f"scratch-{nb.name[:2]}").iterdir())


def test_game_plan_of_the_smoke_workbook(smoke_run, tmp_path):
    """The four notebooks' findings, assembled: the user's decision from 01, every bullet tagged, demo kept apart."""
    import shutil

    from eaglelab.workbook.report import write_game_plan

    for nb in ("01", "02", "03", "04"):
        out, _ = smoke_run(nb)
        for f in (out / "figures").glob(f"{nb}_*"):
            shutil.copy(f, tmp_path)
    plan = write_game_plan(tmp_path).read_text()
    assert "**[demo]**" in plan and "| speculative cycle | 30 ms | [default] |" in plan
    decision = plan[plan.index("## The decision for the founding case"):plan.index("## 01")]
    assert "No drafter reaches 150 tok/s" in decision and "[demo]" not in decision  # no demo number in it
    assert "![plan_options](plan_options.png)" in decision and (tmp_path / "plan_options.pdf").is_file()
    bullets = [line for line in plan.splitlines() if line.startswith("- **")]
    tags = ("[default]", "[entered]", "[demo]", "[sample]", "[derived]", "[assumed]", "[your")
    untagged = [b for b in bullets if not any(t in b for t in tags) and not b.startswith("- **[")]
    assert all("not projected" in b for b in untagged), untagged  # the only bullets without a source carry no number
    # one answer: 03's verdict and 04's recommendation, reconciled; 04 exports the drafter it recommends
    one = plan[plan.index("## One answer"):].split("\n## ")[0]
    recommended = json.loads((tmp_path / "04_findings.json").read_text())["numbers"]
    assert f"**{recommended['recommendation']['action']}**" in one
    assert recommended["chosen"] == recommended["recommendation"]["action"]


BROKEN = """\
import nbformat
nb = nbformat.v4.new_notebook()
nb.cells = [nbformat.v4.new_code_cell("SMOKE = False", metadata={"tags": ["parameters"]}),
            nbformat.v4.new_code_cell("x = 1"),
            nbformat.v4.new_code_cell("raise ValueError('deliberate failure')")]
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbformat.write(nb, "notebooks/01_broken.ipynb")
"""


@pytest.mark.notebook
def test_failing_cell_is_named_by_the_runner_and_the_cli(tmp_path):
    (tmp_path / "notebooks").mkdir()
    subprocess.run([sys.executable, "-c", BROKEN], cwd=tmp_path, check=True)
    with pytest.raises(NotebookError) as err:
        run_workbook(tmp_path / "out", smoke=True, notebooks_dir=tmp_path / "notebooks", progress=False)
    assert "01_broken.ipynb" in str(err.value) and "cell 3" in str(err.value) and "deliberate failure" in str(err.value)
    proc = subprocess.run([sys.executable, "-m", "eaglelab", "run", "--smoke", "--out", str(tmp_path / "cli")],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "01_broken.ipynb" in proc.stderr and "raise ValueError" in proc.stderr and "Traceback" not in proc.stderr


def test_executed_copies_never_overwrite_sources(tmp_path):
    with pytest.raises(NotebookError):
        run_workbook(REPO / "notebooks", smoke=True, notebooks_dir=REPO / "notebooks", progress=False)


def test_relative_path_parameters_become_absolute(tmp_path):
    from eaglelab.workbook.runner import absolutise_paths

    (tmp_path / "drafter").mkdir()
    assert absolutise_paths("drafter", tmp_path) == str((tmp_path / "drafter").resolve())
    assert absolutise_paths(["drafter", "org/hub-id"], tmp_path) == [str((tmp_path / "drafter").resolve()), "org/hub-id"]
    assert absolutise_paths(3, tmp_path) == 3


def test_unknown_parameter_names_are_refused_in_one_line(tmp_path):
    with pytest.raises(ParameterError, match="did you mean BASELINE_TPS"):
        run_workbook(tmp_path, only=["01"], parameters={"BASELINE_TPs": 80}, notebooks_dir=REPO / "notebooks",
                     progress=False)
    proc = subprocess.run([sys.executable, "-m", "eaglelab", "run", "--only", "02", "-p", "DRAFTER_C=x",
                           "--out", str(tmp_path / "cli")], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "DRAFTER_C" in proc.stderr
    assert not (tmp_path / "cli").exists()  # refused before any notebook ran
    # a name one selected notebook takes is fine for all (papermill injects it where it is used)
    assert {"OLD_TARGET", "SMOKE"} <= set(notebook_parameters(REPO / "notebooks" / "03_plugin_probe.ipynb"))


def test_parameters_and_selection():
    assert parse_parameter("STEPS=12") == ("STEPS", 12)
    assert parse_parameter("TARGET=org/model") == ("TARGET", "org/model")
    assert parse_parameter("BUDGETS=[1, 2]") == ("BUDGETS", [1, 2])
    assert [p.name[:2] for p in discover_notebooks(REPO / "notebooks", ["3", "01"])] == ["01", "03"]


@pytest.mark.notebook
def test_notebook_01_takes_tau_from_the_users_logs(tiny_world, tmp_path):
    """Logs outside the bundled samples are the user's: their median τ enters the decision, tagged [your logs]."""
    log = tmp_path / "my-sglang.log"
    log.write_text((REPO / "data" / "logs" / "sglang_kimi_k25_sample.log").read_text())
    # vLLM's sections are the smoke run's (test_notebook_runs_in_smoke_mode): here the logs are what is asked
    run_workbook(tmp_path / "out", smoke=True, only=["01"], notebooks_dir=REPO / "notebooks", progress=False,
                 parameters={"LOG_FILES": [str(log)], "SERVING_ENGINE": None})
    findings = json.loads((tmp_path / "out" / "figures" / "01_findings.json").read_text())
    plan = findings["numbers"]["plan"]
    assert plan["sources"]["accept_len"] == "logs" and plan["scenario"]["accept_len"] != 2.0
    assert any(b.startswith("- **Logs [your logs]:**") for b in findings["bullets"])


@pytest.mark.notebook
def test_notebook_03_from_the_engines_dumps_gives_the_live_verdict(tiny_world, smoke_run, tmp_path):
    """OLD_STATES / NEW_STATES: no target loaded, nothing decoded, and the live smoke run's numbers and verdict."""
    from eaglelab.jobs.probe import DumpSettings, dump_states

    out, _ = smoke_run("03")
    live = json.loads((out / "figures" / "03_findings.json").read_text())["numbers"]
    assert live["dump_gap"] < 1e-5  # section 4 of the live run: the dump path reproduced it
    for name, target, layout in (("a", tiny_world.target_a, "vllm"), ("b", tiny_world.target_b, "specforge")):
        dump_states(DumpSettings(str(target), str(tiny_world.drafter_a), str(tmp_path / name), layout=layout,
                                 sequences=16), progress=False)
    run_workbook(tmp_path / "out", smoke=True, only=["03"], notebooks_dir=REPO / "notebooks", progress=False,
                 parameters={"OLD_STATES": str(tmp_path / "a"), "NEW_STATES": str(tmp_path / "b")})
    findings = json.loads((tmp_path / "out" / "figures" / "03_findings.json").read_text())
    numbers = findings["numbers"]
    assert numbers["measured"] is None and numbers["states"] == {"old": str(tmp_path / "a"), "new": str(tmp_path / "b")}
    for key in ("accept_len_on_a", "accept_len_on_b"):
        assert numbers["plugin"][key] == pytest.approx(live["plugin"][key], abs=1e-5)
    assert numbers["verdict"]["level"] == live["verdict"]["level"]
    assert any("nothing decoded for real" in b for b in findings["bullets"])
    assert not (tmp_path / "out" / "figures" / "03_cka_map.png").exists()  # every layer needs the targets


def test_smoke_scratch_goes_beside_the_run_or_under_runs_never_to_the_checkouts_root(tmp_path):
    """`eaglelab run --smoke`: OUT/scratch-NN; SMOKE in JupyterLab (figures/ beside notebooks/): runs/smoke/scratch-NN."""
    from eaglelab.workbook.runner import scratch_dir

    run = tmp_path / "my-run"
    assert scratch_dir("../data/runs/04", str(run / "figures"), True, "04") == str((run / "scratch-04").resolve())
    checkout = tmp_path / "checkout"
    (checkout / "notebooks").mkdir(parents=True)
    got = scratch_dir("../data/runs/04", str(checkout / "notebooks" / ".." / "figures"), True, "04")
    assert got == str((checkout / "runs" / "smoke" / "scratch-04").resolve())
    assert scratch_dir("../data/runs/04", str(checkout / "figures"), False, "04") == "../data/runs/04"
