"""Issue #31: nothing a user passes runs as code, nothing a user wrote is lost, every file read back is hostile.

One named test (or a few) per class of fault the issue lists: parameters as data, generated scripts
quoted (run for real in bash, the engines replaced by recorders), no user file replaced or deleted,
files read back through the validation layer, exclusive and exactly resumable runs, the transport's
deadline and caps, paths kept as paths and arguments within their range. The generated hostile
corpus of the same classes runs in ``tests/test_fuzz.py`` and ``benchmarks/fuzz.py``.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eaglelab.cli import main
from eaglelab.errors import ConfigError, EngineError, OutputError, OverwriteError, ParameterError
from eaglelab.workbook.runner import injected_cell, parse_parameter

from . import script_stubs
from .conftest import REPO

#: Folder and file names built to break quoting in bash, YAML and JSON (and to run code if they did).
HOSTILE_NAMES = [
    "with space", "quote'single", 'quote"double', "$(touch PWNED)", "`touch PWNED`", "; touch PWNED #", "$HOME",
    "$SERVER_PID", "$HERE", "${IFS}x", "*", "~", "-rf", "--flag", "back\\slash", "ümlaut", "😀", "#hash", "a&&b",
    "a|b", ">out", "!bang", "%p", "a: b", "{a,b}", "[x]", "\\$x", "'; touch PWNED; '", '"; touch PWNED; "', "- item",
]


def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` and its sha256: what must come out of a refused command unchanged."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- 1. parameters are data


@pytest.mark.parametrize("text, problem", [
    ("X={1, 2}", "set"), ("X=b'abc'", "bytes"), ("X=1j", "complex"), ("X=(1, {2})", "set"), ("X=1e309", "finite"),
    ("X={1: 2}", "keys"), ("1X=3", "valid parameter name"), ("NOEQUALS", "NAME=VALUE"),
    ("X=" + "[" * 40 + "]" * 40, "deeper"), ("X=" + "x" * 70_000, "cap"),
])
def test_parameter_values_other_than_json_types_are_one_line(text, problem):
    with pytest.raises(ParameterError, match=problem):
        parse_parameter(text)


@pytest.mark.parametrize("text, value", [
    ("X=(0.1, 0.3)", [0.1, 0.3]), ("X={{}}", "{{}}"), ("X=" + "(" * 300, "(" * 300), ("X=None", None),
    ("X=True", True), ("X='a\"b'", 'a"b'), ("X=$HOME", "$HOME"), ("X=__import__('os')", "__import__('os')"),
])
def test_tuples_become_lists_and_non_literals_stay_text(text, value):
    assert parse_parameter(text) == ("X", value)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,10}", fullmatch=True), JSON_VALUES, min_size=1, max_size=4))
def test_injected_cell_is_data_whatever_the_values(values):
    """The cell parses to: import, one ``globals().update(json.loads(<string constant>))``, del; and gives the values back."""
    source = injected_cell(values)
    tree = ast.parse(source)
    kinds = [type(node).__name__ for node in tree.body]
    assert kinds == ["Import", "Expr", "Delete"], kinds
    call = tree.body[1].value
    assert ast.unparse(call.func) == "globals().update"
    (inner,) = call.args
    assert ast.unparse(inner.func) == "_json.loads" and isinstance(inner.args[0], ast.Constant)
    assert isinstance(inner.args[0].value, str)
    namespace: dict = {}
    exec(compile(source, "<injected>", "exec"), namespace)
    assert {k: namespace[k] for k in values} == json.loads(json.dumps(values))


@pytest.mark.notebook
def test_a_hostile_parameter_reaches_a_real_kernel_as_the_same_text(tmp_path):
    """A value built to end papermill's literal arrives in the kernel as data; nothing of it runs."""
    import nbformat

    from eaglelab.workbook.runner import run_workbook

    marker = tmp_path / "PWNED"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('VALUE = None\nOUT = ""', metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("import json, pathlib\npathlib.Path(OUT).write_text(json.dumps(VALUE))")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    books = tmp_path / "notebooks"
    books.mkdir()
    nbformat.write(nb, str(books / "01_probe.ipynb"))
    hostile = ["a\"b", f"')\nimport pathlib; pathlib.Path({str(marker)!r}).write_text('x')\n('", "\\", '"""', "'''",
               "\n".join(["x"] * 3), "{0}", "\x00", "\udcff".encode("utf-8", "surrogatepass").decode("utf-8", "replace")]
    out = tmp_path / "result.json"
    run_workbook(tmp_path / "run", parameters={"VALUE": hostile, "OUT": str(out)}, notebooks_dir=books, progress=False)
    assert json.loads(out.read_text()) == hostile and not marker.exists()


def test_a_parameter_of_another_type_than_its_default_is_refused(capsys, tmp_path):
    assert main(["run", "--only", "01", "--prepare-only", "--out", str(tmp_path), "-p", "K=2.5"]) == 2
    assert "K" in error_line(capsys)
    assert main(["run", "--only", "01", "--prepare-only", "--out", str(tmp_path), "-p", "K=4",
                 "-p", "EXPONENTS=(0.1, 0.2)"]) == 0


# --------------------------------------------------------------------------- 2. generated scripts quote everything


def _hostile_recipe_inputs(tiny_world, root: Path, name: str) -> tuple[Path, Path]:
    drafter = root / name / "drafter"
    shutil.copytree(tiny_world.drafter_a, drafter)
    target = root / name / "target"
    target.mkdir()
    shutil.copy(tiny_world.target_b / "config.json", target / "config.json")
    return drafter, target


@pytest.mark.parametrize("engine", ["specforge", "speculators"])
def test_every_hostile_name_reaches_the_engines_as_the_same_word(tiny_world, tmp_path, engine):
    """The generated run.sh, run by bash with the engines replaced by recorders: each value arrives whole, nothing else runs."""
    import yaml

    from eaglelab.engines.recipes import RecipeSettings, build_recipe

    for n, name in enumerate(HOSTILE_NAMES):
        drafter, target = _hostile_recipe_inputs(tiny_world, tmp_path / f"in-{n}", name)
        settings = RecipeSettings(engine, str(drafter), str(target), data=f"{name}/prompts.jsonl", workdir=f"w {name}",
                                  chat_template=name)
        recipe = build_recipe(settings)
        out = recipe.write(tmp_path / f"out-{n}")
        calls, proc = script_stubs.run_script(out / "run.sh", tmp_path / f"out-{n}")
        assert proc.returncode == 0 and proc.stderr == "", (name, proc.stderr[-500:])
        script_stubs.assert_same_calls(script_stubs.engine_calls(calls), script_stubs.expected_calls(recipe, out), name)
        assert ["mkdir", "-p", "--", f"w {name}"] in calls
        assert not list(tmp_path.rglob("PWNED")) and not list(tmp_path.rglob("out"))
        if engine == "specforge":
            cfg = yaml.safe_load((out / "warm.yaml").read_text())
            assert cfg["model"]["draft_checkpoint_path"] == str(drafter) and cfg["data"]["chat_template"] == name


@pytest.mark.parametrize("bad", ["line\nbreak", "tab\there", "esc\x1b[2J", "nul\x00", "del\x7f", "sep\u2028x"])
@pytest.mark.parametrize("flag", ["--data", "--workdir", "--chat-template"])
def test_control_characters_in_a_recipe_value_are_refused(tiny_world, tmp_path, capsys, bad, flag):
    out = tmp_path / "recipe"
    argv = ["recipe", "--engine", "specforge", "--old-drafter", str(tiny_world.drafter_a), "--new-target",
            str(tiny_world.target_b),
            "--out", str(out), flag, bad]
    assert main(argv) == 2
    assert flag in error_line(capsys) and not out.exists()


def test_a_drafter_folder_named_with_a_newline_is_refused_not_written(tiny_world, tmp_path, capsys):
    drafter, target = _hostile_recipe_inputs(tiny_world, tmp_path, "new\nline")
    assert main(["recipe", "--engine", "speculators", "--old-drafter", str(drafter), "--new-target", str(target),
                 "--out", str(tmp_path / "recipe")]) == 2
    assert "--old-drafter" in error_line(capsys) and not (tmp_path / "recipe").exists()


# --------------------------------------------------------------------------- 3. no user file replaced or deleted


def test_drafter_init_refuses_a_sharded_target_and_leaves_it_whole(tiny_world, tmp_path, capsys):
    target = tmp_path / "sharded-target"
    shutil.copytree(tiny_world.target_a, target)
    before = tree_digest(target)
    assert main(["drafter", "init", "--target", str(tiny_world.target_a), "--out", str(target)]) == 2
    assert "eaglelab did not write" in error_line(capsys)
    assert main(["drafter", "init", "--target", str(tiny_world.target_a), "--out", str(target), "--force"]) == 2
    capsys.readouterr()
    assert tree_digest(target) == before


def test_force_replaces_only_what_eaglelab_wrote(tiny_world, tmp_path, capsys):
    out = tmp_path / "drafter"
    init = ["drafter", "init", "--target", str(tiny_world.target_a), "--out", str(out)]
    assert main(init) == 0
    assert main(init) == 2 and "--force" in error_line(capsys)
    assert main(init + ["--force", "--seed", "1"]) == 0
    (out / "NOTES.md").write_text("mine")
    assert main(init + ["--force"]) == 2 and "NOTES.md" in error_line(capsys)
    assert (out / "NOTES.md").read_text() == "mine" and (out / "model.safetensors").is_file()


def test_recipe_and_report_never_replace_a_users_file(tiny_world, tmp_path, capsys):
    out = tmp_path / "recipe"
    out.mkdir()
    (out / "warm.yaml").write_text("mine: true\n")
    argv = ["recipe", "--engine", "specforge", "--old-drafter", str(tiny_world.drafter_a), "--new-target",
            str(tiny_world.target_b), "--out", str(out)]
    assert main(argv) == 2 and "warm.yaml" in error_line(capsys)
    assert main(argv + ["--force"]) == 2
    capsys.readouterr()
    assert (out / "warm.yaml").read_text() == "mine: true\n" and sorted(p.name for p in out.iterdir()) == ["warm.yaml"]
    figures = tmp_path / "figures"
    figures.mkdir()
    mine = tmp_path / "plan.md"
    mine.write_text("my notes\n")
    assert main(["report", "--figures", str(figures), "--out", str(mine)]) == 2
    assert "not a game plan eaglelab wrote" in error_line(capsys) and mine.read_text() == "my notes\n"
    assert main(["report", "--figures", str(figures)]) == 0  # its own file, written and then replaced
    assert main(["report", "--figures", str(figures)]) == 0
    capsys.readouterr()


@pytest.mark.world
def test_demo_build_never_deletes_a_users_folder(tmp_path, capsys):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "thesis.tex").write_text("years of work")
    assert main(["demo", "build", "--world", "tiny", "--out", str(folder)]) == 2
    assert "manifest" in error_line(capsys)
    assert main(["demo", "build", "--world", "tiny", "--out", str(folder), "--force"]) == 2
    capsys.readouterr()
    assert tree_digest(folder) == {"thesis.tex": hashlib.sha256(b"years of work").hexdigest()}


def test_a_world_build_with_files_it_did_not_write_is_not_replaced(tmp_path):
    from eaglelab.worlds.artifacts import cached_build

    built = cached_build(tmp_path / "a", {"v": 1}, lambda d: (d / "x.txt").write_text("x") and None, log=lambda m: None)
    (built / "user.txt").write_text("mine")
    with pytest.raises(OverwriteError, match="user.txt"):
        cached_build(built, {"v": 2}, lambda d: (d / "x.txt").write_text("y") and None, log=lambda m: None)
    assert (built / "user.txt").read_text() == "mine" and (built / "x.txt").read_text() == "x"


@pytest.mark.parametrize("place", ["a file", "under a file", "proc", "no such user", "empty"])
def test_an_unwritable_out_is_one_line(tiny_world, tmp_path, capsys, place):
    (tmp_path / "file").write_text("x")
    out = {"a file": tmp_path / "file", "under a file": tmp_path / "file" / "sub", "proc": Path("/proc/eaglelab-out"),
           "no such user": "~nosuchuser-eaglelab/x", "empty": ""}[place]
    for argv in (["recipe", "--engine", "specforge", "--old-drafter", str(tiny_world.drafter_a), "--new-target",
                  str(tiny_world.target_b), "--out", str(out)],
                 ["drafter", "init", "--target", str(tiny_world.target_a), "--out", str(out)],
                 ["run", "--only", "01", "--prepare-only", "--out", str(out)]):
        assert main(argv) == 2, argv
        assert error_line(capsys)
    assert (tmp_path / "file").read_text() == "x"


# --------------------------------------------------------------------------- 4. every file read back is hostile input

FINDINGS_CASES = {
    "not json": b"{", "a list": b"[]", "numbers a list": b'{"numbers": []}', "bullets not text": b'{"bullets": [1]}',
    "plan a string": json.dumps({"numbers": {"plan": "x"}}).encode(),
    "scenario missing": json.dumps({"numbers": {"plan": {"sources": {}}}}).encode(),
    "scenario wrong types": json.dumps({"numbers": {"plan": {"scenario": {"baseline_tps": "82"}, "sources": {}}}}).encode(),
    "unknown field": json.dumps({"numbers": {"plan": {"scenario": {"nope": 1}, "sources": {}}}}).encode(),
    "impossible tau": json.dumps({"numbers": {"plan": {"scenario": {
        "baseline_tps": 82, "cycle_ms": 30, "accept_len": 0.5, "goal_tps": 150, "samples": 1, "gen_tps": 1},
        "sources": {}}}}).encode(),
    "NaN": b'{"numbers": {"x": NaN}}',
}


@pytest.mark.parametrize("case", sorted(FINDINGS_CASES))
def test_report_on_a_malformed_findings_file_is_one_line(tmp_path, capsys, case):
    (tmp_path / "01_findings.json").write_bytes(FINDINGS_CASES[case])
    assert main(["report", "--figures", str(tmp_path)]) == 2
    assert "01_findings.json" in error_line(capsys)


@pytest.mark.parametrize("record", [
    {"config": {"steps": -5, "batch_size": 8, "ttt_length": 3}, "train_sequences": 10},
    {"config": {"steps": 10, "batch_size": 8, "ttt_length": 3}, "train_sequences": 0},
    {"config": {"steps": 10, "batch_size": 8, "ttt_length": 1e9}, "train_sequences": 10},
    {"config": "x", "train_sequences": 10}, {"config": {"steps": True, "batch_size": 8, "ttt_length": 3},
                                             "train_sequences": 10},
])
def test_recipe_from_a_run_with_impossible_numbers_is_one_line(tiny_world, tmp_path, capsys, record):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps(record))
    assert main(["recipe", "--engine", "specforge", "--old-drafter", str(tiny_world.drafter_a), "--new-target",
                 str(tiny_world.target_b), "--out", str(tmp_path / "recipe"), "--from-run", str(run)]) == 2
    assert "run.json" in error_line(capsys)


WORKER = {"vllm_version": "0.32.0", "k": 3, "outputs": [[1, 2, 3]], "tokens_per_s": 10.0, "engine_start_s": 2.0,
          "warnings": [], "spec": {"tau": 2.0, "position_rate_unconditional": [0.5, 0.3, 0.1],
                                   "position_rate_conditional": [0.5, 0.6, 0.33], "num_drafts": 10,
                                   "num_accepted_tokens": 10}, "spec_log_lines": []}


@pytest.mark.parametrize("change", [
    {"outputs": "1 2 3"}, {"outputs": [[1, -2]]}, {"outputs": [[1.5]]}, {"outputs": [[1], [2]]},
    {"spec": {**WORKER["spec"], "tau": -3}}, {"spec": {**WORKER["spec"], "tau": 9}},
    {"spec": {**WORKER["spec"], "position_rate_conditional": [5.0]}},
    {"spec": {**WORKER["spec"], "num_accepted_tokens": 31}}, {"vllm_version": 0.32}, {"k": "3"},
    {"warnings": "x"}, {"engine_start_s": -1}, {"tokens_per_s": True}, {"spec": "x"},
])
def test_a_worker_answer_of_wrong_types_is_refused(change):
    from eaglelab.engines.vllm import run_from_result

    assert run_from_result(WORKER, "one", 1).tau == 2.0
    with pytest.raises(EngineError):
        run_from_result({**WORKER, **change}, "one", 1)


def test_pickers_pass_over_fifos_huge_and_broken_configs(tiny_world, tmp_path):
    from eaglelab.workbook.widgets import find_checkpoints

    shutil.copytree(tiny_world.drafter_a, tmp_path / "good")
    for name in ("fifo", "huge", "broken"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(b"")
    os.mkfifo(tmp_path / "fifo" / "config.json")
    (tmp_path / "huge" / "config.json").write_bytes(b" " * (2 << 20) + b"{}")
    (tmp_path / "broken" / "config.json").write_text("{")
    (tmp_path / "loop").symlink_to(tmp_path)
    start = time.perf_counter()
    assert find_checkpoints(tmp_path) == [str(tmp_path / "good")]
    assert time.perf_counter() - start < 30  # a FIFO would block forever; this is not a speed check


# --------------------------------------------------------------------------- 5. runs are exclusive and resume exactly


def _finetune(tiny_world, out: Path, *extra: str, steps: int = 6) -> list[str]:
    return ["finetune", "--new-target", str(tiny_world.target_b), "--old-drafter", str(tiny_world.drafter_a), "--steps",
            str(steps), "--out", str(out), "--sequences", "16", "--eval-sequences", "8", "--ttt-length", "2", "--log-every", "2",
            "--eval-every", "6", "--checkpoint-every", "2", "--batch-size", "4", *extra]


def test_a_run_folder_in_use_is_refused_and_a_resume_checks_its_settings(tiny_world, tmp_path, capsys):
    from eaglelab.outputs import open_output_folder
    from eaglelab.train.run_files import RUN_KIND, read_metrics

    out = tmp_path / "run"
    assert main(_finetune(tiny_world, out, "--stop-after", "3")) == 0
    capsys.readouterr()
    with open_output_folder(out, RUN_KIND, resume=True):  # another run holds the folder
        assert main(_finetune(tiny_world, out, "--resume")) == 2
        assert "in use" in error_line(capsys)
    assert main(_finetune(tiny_world, out, "--resume", "--lr", "0.01")) == 2
    assert "lr" in error_line(capsys)
    assert main(_finetune(tiny_world, out, "--resume", steps=1)) == 2  # below the checkpoint's step 2
    assert "step 2" in error_line(capsys)
    with open(out / "metrics.jsonl", "a") as fh:  # what a kill mid-write leaves
        fh.write('{"step": 3, "lo')
    assert main(_finetune(tiny_world, out, "--resume")) == 0
    assert "torn last line" in capsys.readouterr().out
    assert [r["step"] for r in read_metrics(out)] == [2, 4, 6]


def test_a_torn_line_in_the_middle_of_the_metrics_is_one_line(tmp_path):
    from eaglelab.train.run_files import read_metrics_file

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 2}\n{"step": 4, "lo\n{"step": 6}\n')
    with pytest.raises(ConfigError, match="line 2"):
        read_metrics_file(path)
    path.write_text('{"step": 2}\n{"step": 4}\n{"st')
    rows, note = read_metrics_file(path)
    assert [r["step"] for r in rows] == [2, 4] and "line 3" in note


def test_resume_with_another_vocabulary_is_one_line(tiny_world, tmp_path, capsys):
    out = tmp_path / "run"
    base = ["finetune", "--new-target", str(tiny_world.target_b), "--scratch", "--steps", "4", "--out", str(out),
            "--sequences", "16", "--eval-sequences", "8", "--ttt-length", "2", "--checkpoint-every", "2",
            "--batch-size", "4"]
    assert main(base + ["--draft-vocab", "64", "--stop-after", "2"]) == 0
    assert main(base + ["--draft-vocab", "96", "--resume"]) == 2
    assert "draft_vocab_size" in error_line(capsys)


# --------------------------------------------------------------------------- 6. the transport has a deadline


def test_a_trickling_hub_is_cut_off_at_the_deadline(tmp_path, monkeypatch, capsys):
    from .hub_server import HubServer, point_client_at, trickle
    from .test_hub import TINY, write_synthetic_drafter

    with HubServer(tmp_path / "hub") as hub:
        write_synthetic_drafter(hub.revision_dir("acme/drafter"), TINY)
        point_client_at(monkeypatch, hub.endpoint, tmp_path / "hf-home")
        monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "1.5")
        body = json.dumps(TINY).encode()
        hub.fault = lambda r: (200, {"Content-Length": str(len(body))}, trickle(body, 0.4)) \
            if r.filename == "config.json" else None
        start = time.perf_counter()
        assert main(["inspect", "acme/drafter"]) == 2
        seconds = time.perf_counter() - start
    line = error_line(capsys)
    assert "acme/drafter" in line and "1.5 s" in line
    assert seconds < 4, f"{seconds:.1f} s for a 1.5 s deadline"  # each byte came within 0.4 s: only the deadline ends it


@pytest.mark.parametrize("lie", ["content-length over the cap", "no content-length"])
def test_a_huge_config_is_refused_at_the_cap_not_after_the_download(tmp_path, monkeypatch, capsys, lie):
    from eaglelab.inputs import MAX_JSON_BYTES

    from .hub_server import HubServer, point_client_at, zeros
    from .test_hub import TINY, write_synthetic_drafter

    total = 1 << 30
    headers = {"content-length over the cap": {"Content-Length": str(total)}, "no content-length": {}}[lie]
    with HubServer(tmp_path / "hub") as hub:
        write_synthetic_drafter(hub.revision_dir("acme/drafter"), TINY)
        point_client_at(monkeypatch, hub.endpoint, tmp_path / "hf-home")
        hub.fault = lambda r: (200, headers, zeros(total)) if r.filename == "config.json" else None
        assert main(["inspect", "acme/drafter"]) == 2
        sent = hub.body_bytes("config.json")
    assert "cap" in error_line(capsys)
    assert sent < MAX_JSON_BYTES + (64 << 20), f"{sent:,} bytes sent before the refusal"


# --------------------------------------------------------------------------- 7. paths are paths; arguments have ranges


@pytest.mark.parametrize("name", ["tab\there", "new\nline", "bad\udcffbyte"])
def test_a_drafter_in_a_folder_with_a_control_or_undecodable_name_reads_as_itself(tiny_world, tmp_path, capsys, name):
    try:
        folder = tmp_path / name
        shutil.copytree(tiny_world.drafter_a, folder)
    except (UnicodeEncodeError, OSError):
        pytest.skip("this file system refuses the name")
    assert main(["inspect", str(folder), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["problems"] == []


def test_load_target_refuses_a_pickle_only_target(tiny_world, tmp_path):
    from eaglelab.errors import UnsafeFormatError
    from eaglelab.model.targets import load_target

    target = tmp_path / "pickled"
    shutil.copytree(tiny_world.target_a, target)
    (target / "model.safetensors").rename(target / "pytorch_model.bin")
    with pytest.raises(UnsafeFormatError, match="pickle"):
        load_target(target)


def test_arguments_with_a_meaning_get_their_range(tiny_world, tmp_path, capsys):
    assert main(["speculate", "--target", str(tiny_world.target_a), "--drafter", str(tiny_world.drafter_a),
                 "--prompt", "  "]) == 2
    assert "--prompt" in error_line(capsys)
    assert main(["probe", "--old-target", str(tiny_world.target_a), "--new-target", str(tiny_world.target_b), "--old-drafter",
                 str(tiny_world.drafter_a), "--seq-len", "5000"]) == 2
    assert "context" in error_line(capsys)
    with pytest.raises(SystemExit) as stopped:  # a cycle shorter than 10 µs is refused where the flag is read
        main(["perf", "--baseline-tps", "82", "--cycle-ms", "1e-308", "--accept-len", "2"])
    assert stopped.value.code == 2 and "--cycle-ms: must be a number in [0.01, " in error_line(capsys)
    assert main(["perf", "--baseline-tps", "82", "--cycle-ms", "5", "--accept-len", "2"]) == 2
    assert "shorter than one plain decoding step" in error_line(capsys)


def test_drafter_init_on_a_shallow_target_names_three_distinct_layers(tmp_path, capsys):
    from .conftest import make_tiny_llama

    model = make_tiny_llama(layers=6)
    model.save_pretrained(str(tmp_path / "t6"))
    assert main(["drafter", "init", "--target", str(tmp_path / "t6"), "--out", str(tmp_path / "d")]) == 0
    cfg = json.loads((tmp_path / "d" / "config.json").read_text())
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
    assert main(["drafter", "export", "--to", "speculators", str(tmp_path / "d"), str(tmp_path / "v"), "--target",
                 str(tmp_path / "t6")]) == 0
    assert main(["drafter", "init", "--target", str(tmp_path / "t6"), "--out", str(tmp_path / "e"), "--aux-layers",
                 "1", "2", "2"]) == 2
    assert "distinct" in error_line(capsys)


def test_logprobs_that_sum_past_one_are_refused(tmp_path, capsys):
    line = {"prompt_token_ids": [1, 2, 3], "prompt_logprobs": [None, {"2": -0.1, "5": -0.2, "7": -0.3},
                                                                {"3": -0.1}]}
    for name in ("old.jsonl", "new.jsonl"):
        (tmp_path / name).write_text(json.dumps(line) + "\n")
    assert main(["predict", "--old-logprobs", str(tmp_path / "old.jsonl"), "--new-logprobs", str(tmp_path / "new.jsonl"),
                 "--accept-len", "2", "--k", "3"]) == 2
    assert "sum to" in error_line(capsys)


def test_one_timing_pair_is_too_few_to_judge():
    from eaglelab.model.decoding import timing_trust

    t = timing_trust([0.010], [1.2], [3.69], 1.0, 3.69, 0.010, 0.012, 0.013)
    assert not t["ok"] and "too few runs to judge" in t["note"]
    t = timing_trust([0.010, 0.0101, 0.0099], [1.2, 1.21, 1.19], [0.8, 0.81, 0.79], 1.0, 0.8, 0.010, 0.012, 0.013)
    assert t["ok"]


def test_predict_calibration_naming_a_predictor_engines_cannot_feed_is_one_line(tmp_path, capsys):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"numbers": {"chosen_engine": "cos(last)^γ",
                                           "predictors": {"cos(last)^γ": {"gamma": 1.0, "worst_held_out": 0.1}}}}))
    line = {"prompt_token_ids": [1, 2], "prompt_logprobs": [None, {"2": -0.1}]}
    for name in ("old.jsonl", "new.jsonl"):
        (tmp_path / name).write_text(json.dumps(line) + "\n")
    assert main(["predict", "--old-logprobs", str(tmp_path / "old.jsonl"), "--new-logprobs", str(tmp_path / "new.jsonl"),
                 "--accept-len", "2", "--k", "3", "--calibration", str(cal)]) == 2
    assert "engine logprobs" in error_line(capsys)


def test_a_second_workbook_run_on_one_folder_is_refused(tmp_path, capsys):
    from eaglelab.outputs import open_output_folder

    with open_output_folder(tmp_path / "run", "workbook run", shared=True):
        assert main(["run", "--only", "01", "--prepare-only", "--out", str(tmp_path / "run")]) == 2
        assert "in use" in error_line(capsys)


def test_subprocess_cli_errors_are_one_line_without_traceback(tmp_path):
    """The console entry point itself, in a fresh process: ~nosuchuser and an unwritable --out."""
    proc = subprocess.run([sys.executable, "-m", "eaglelab", "report", "--figures", "~nosuchuser-eaglelab/f"],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_output_errors_name_the_path(tmp_path):
    from eaglelab.outputs import open_output_folder

    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError, match="f/sub"):
        open_output_folder(tmp_path / "f" / "sub", "drafter")
