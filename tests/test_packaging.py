"""Packaging: environment.yml matches pyproject; every subcommand has --help; metadata commands skip torch."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _names(reqs):
    return {re.split(r"[<>=!~ ]", r.strip())[0].lower().replace("_", "-") for r in reqs}


def test_environment_yml_lists_the_same_packages():
    py = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = _names(py["dependencies"]) | _names(py["optional-dependencies"]["dev"])
    env = (REPO / "environment.yml").read_text()
    listed = _names(re.findall(r"^\s+- ([A-Za-z][\w.-]*[<>=~]=?[^\s]*)\s*$", env, flags=re.M)) - {"python"}
    assert listed == wanted


SUBCOMMANDS = [["run"], ["inspect"], ["compare"], ["perf"], ["drafter", "init"], ["drafter", "export"], ["speculate"],
               ["probe"], ["finetune"], ["plan"], ["predict"], ["report"], ["showroom"], ["recipe"], ["demo", "build"]]


@pytest.mark.parametrize("cmd", SUBCOMMANDS, ids=" ".join)
def test_every_subcommand_has_help(cmd):
    proc = subprocess.run([sys.executable, "-m", "eaglelab", *cmd, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "usage: eaglelab" in proc.stdout


@pytest.mark.parametrize("args", [["inspect"], ["nonsense"], ["perf", "--cycle-ms", "fast"], ["recipe", "--engine", "x"]],
                         ids=" ".join)
def test_argument_errors_are_one_line_exit_2(args):
    proc = subprocess.run([sys.executable, "-m", "eaglelab", *args], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "error:" in proc.stderr and "--help" in proc.stderr


def test_metadata_commands_do_not_import_torch(tmp_path, tiny_world):
    from eaglelab.worlds.synthetic_checkpoints import write_synthetic_drafter
    from tests.test_drift import SGLANG, VLLM_HTTP

    d = write_synthetic_drafter(tmp_path / "k2")
    (tmp_path / "old.jsonl").write_text(json.dumps(VLLM_HTTP) + "\n")
    (tmp_path / "new.jsonl").write_text(json.dumps(SGLANG) + "\n")
    code = ("import sys, contextlib, io\nfrom eaglelab.cli import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    main(['inspect', {str(d)!r}]); main(['compare', {str(d)!r}, {str(d)!r}]);"
            " main(['perf', '--baseline-tps', '82', '--cycle-ms', '30', '--accept-len', '2']);"
            " main(['plan', '--old-samples', '1400000']);"
            f" main(['predict', '--old-logprobs', {str(tmp_path / 'old.jsonl')!r},"
            f" '--new-logprobs', {str(tmp_path / 'new.jsonl')!r}, '--chain', '0.6,0.4']);"
            f" main(['recipe', '--job', 'probe', '--engine', 'specforge', '--old-drafter', {str(tiny_world.drafter_a)!r},"
            f" '--old-target', {str(tiny_world.target_a)!r}, '--new-target', {str(tiny_world.target_b)!r}, '--out',"
            f" {str(tmp_path / 'recipe')!r}])\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]" and (tmp_path / "recipe" / "run.sh").is_file()
