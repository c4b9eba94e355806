"""The workbook's profile: stage times from the build's manifests, cell times from papermill's executed copies."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglelab.worlds.artifacts import cached_build, write_manifest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "workbook_profile.py"
spec = importlib.util.spec_from_file_location("workbook_profile", SCRIPT)
profile = importlib.util.module_from_spec(spec)
spec.loader.exec_module(profile)


def built_world(root: Path) -> Path:
    """A world folder assembled from two stages the real builder made (each records its build_seconds)."""
    stages = {}
    for name, pause in (("target-a", 0.2), ("replies-a", 0.0)):
        folder = root / "cache" / "stages" / f"{name}-abc"

        def build(tmp: Path, pause=pause, name=name):
            time.sleep(pause)
            (tmp / "x.txt").write_text(name)

        cached_build(folder, {"stage": name}, build, log=lambda _: None)
        stages[name] = folder.name
    world = root / "demo"
    world.mkdir()
    write_manifest(world, {"stages": stages}, {"stages": stages})
    return world


def executed_run(run: Path) -> Path:
    """A two-cell notebook executed by papermill (the runner's engine), its copy in ``run``."""
    import papermill as pm

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import time\ntime.sleep(0.5)"),
                                         nbformat.v4.new_code_cell("# a comment first\nx = 1 | 2")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    run.mkdir(parents=True)
    source = run.parent / "05_source.ipynb"
    nbformat.write(nb, source)
    pm.execute_notebook(str(source), str(run / "05_drift_sweep.ipynb"), progress_bar=False, log_output=False,
                        kernel_name="python3")
    return run


@pytest.mark.notebook
def test_the_table_reads_stage_and_cell_times_from_the_records(tmp_path):
    world = built_world(tmp_path / "worlds")
    run = executed_run(tmp_path / "runs" / "workbook")
    stages, notebooks = profile.stage_rows(world), profile.notebook_rows(run, 2)
    assert [name for name, _ in stages] == ["target-a", "replies-a"]
    assert stages[0][1] >= 0.2 and stages[1][1] is not None and stages[1][1] < stages[0][1]
    (name, seconds, slow), = notebooks
    assert name == "05_drift_sweep" and seconds >= 0.5
    assert slow[0][0] >= 0.5 and slow[0][1] == "import time" and slow[1][1] == "x = 1 / 2"  # '|' kept out of the table
    text = profile.table(stages, notebooks)
    assert "| world: target-a |" in text and "| notebook 05_drift_sweep |" in text and "**in all**" in text

    doc = tmp_path / "MEASURED.md"
    doc.write_text(f"before\n{profile.BEGIN}\nold table\n{profile.END}\nafter\n")
    out = subprocess.run([sys.executable, str(SCRIPT), "--world", str(world), "--run", str(run), "--update", str(doc)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    new = doc.read_text()
    assert new.startswith("before\n") and new.endswith("after\n") and "old table" not in new
    assert "| notebook 05_drift_sweep |" in new


def test_a_stage_built_before_the_field_existed_is_said_so(tmp_path):
    world = built_world(tmp_path)
    stage = tmp_path / "cache" / "stages" / "target-a-abc" / "manifest.json"
    record = json.loads(stage.read_text())
    del record["build_seconds"]
    stage.write_text(json.dumps(record))
    rows = profile.stage_rows(world)
    assert rows[0] == ("target-a", None)
    assert "not recorded" in profile.table(rows, [("01", 60.0, [])])


@pytest.mark.parametrize("what", ["no run", "no markers", "not a world"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, what):
    world = built_world(tmp_path / "w")
    run = tmp_path / "run"
    run.mkdir()
    args = ["--world", str(world), "--run", str(run)]
    if what == "no markers":
        nbformat.write(nbformat.v4.new_notebook(), run / "01.ipynb")
        doc = tmp_path / "doc.md"
        doc.write_text("no block here\n")
        args += ["--update", str(doc)]
    elif what == "not a world":
        (world / "manifest.json").write_text("[1, 2]")
    out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith("workbook_profile: ")


@settings(max_examples=60, deadline=None)
@given(data=st.one_of(st.binary(max_size=200),
                      st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=5),
                                   lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                                max_size=4),
                                   max_leaves=12).map(lambda x: json.dumps(x).encode())))
def test_hostile_records_give_a_table_or_one_error(tmp_path_factory, data):
    """Any bytes as a world manifest or an executed notebook: a table or a ProfileError, nothing else."""
    root = tmp_path_factory.mktemp("hostile")
    (root / "demo").mkdir()
    (root / "demo" / "manifest.json").write_bytes(data)
    (root / "run").mkdir()
    (root / "run" / "01.ipynb").write_bytes(data)
    for read in (lambda: profile.stage_rows(root / "demo"), lambda: profile.notebook_rows(root / "run", 3)):
        try:
            rows = read()
        except profile.ProfileError as exc:
            assert str(root) in str(exc)
        else:
            assert isinstance(rows, list)
