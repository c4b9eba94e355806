"""One data path: the command line and the notebooks give the same numbers for the same question.

Notebook 03 and ``eaglelab probe``, notebook 04 and ``eaglelab finetune`` run on the tiny world with
the smoke parameters; their results must agree (the notebook runs in a Jupyter kernel, the CLI in
this process: same data layer, same functions, same numbers).
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from eaglelab.cli import main
from eaglelab.train.training import read_metrics


def cli_json(*args: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(args)) == 0
    return json.loads(out.getvalue())


def test_probe_cli_equals_notebook_03(tiny_world, smoke_run):
    out, _ = smoke_run("03")
    notebook = json.loads((out / "figures" / "03_findings.json").read_text())["numbers"]
    # the smoke parameters of notebook 03: 16 sequences of 64 tokens, k = 3, batches of 8
    cli = cli_json("probe", "--target-a", str(tiny_world.target_a), "--target-b", str(tiny_world.target_b),
                   "--drafter", str(tiny_world.drafter_a), "--sequences", "16", "--seq-len", "64", "--steps", "3",
                   "--batch-size", "8", "--json")
    assert cli["data"]["description"] == notebook["data"]
    assert cli["tokens"] == notebook["tokens"] and cli["labels"] == notebook["labels"]
    assert cli["argmax_agreement"] == pytest.approx(notebook["argmax_agreement"], rel=1e-6)
    for a, b in zip(cli["layers"], notebook["layers"], strict=True):
        assert a["layer"] == b["layer"]
        for key in ("cosine_mean", "rel_l2", "norm_ratio", "cka"):
            assert a[key] == pytest.approx(b[key], rel=1e-5), (a["layer"], key)
    for key in ("accept_len_on_a", "accept_len_on_b"):
        assert cli["plugin"][key] == pytest.approx(notebook["plugin"][key], rel=1e-5)
    assert cli["verdict"]["level"] == notebook["verdict"]["level"]


def test_finetune_cli_equals_notebook_04(tiny_world, smoke_run, tmp_path):
    out, _ = smoke_run("04")
    notebook = read_metrics(out / "scratch-04" / "warm")
    # the smoke parameters of notebook 04: 48 train / 16 held-out rows of 64 tokens, 20 steps, batch 8, TTT 5, lr 2e-3
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["finetune", "--target", str(tiny_world.target_b), "--init", str(tiny_world.drafter_a),
                     "--steps", "20", "--batch-size", "8", "--ttt-steps", "5", "--lr", "2e-3", "--sequences", "48",
                     "--eval-sequences", "16", "--seq-len", "64", "--out", str(tmp_path / "warm")]) == 0
    cli = read_metrics(tmp_path / "warm")
    assert [r["step"] for r in cli] == [r["step"] for r in notebook] and len(cli) >= 6
    for a, b in zip(cli, notebook):
        for key in ("loss", "accept_len", "lr"):
            assert a[key] == pytest.approx(b[key], rel=1e-4), (a["step"], key)
        if "eval_accept_len" in b:
            assert a["eval_accept_len"] == pytest.approx(b["eval_accept_len"], rel=1e-4)
