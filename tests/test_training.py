"""Training: loss decreases, resume reproduces the uninterrupted run, nothing is overwritten, warm start wins, DDP runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from eaglelab.data.states import capture_data
from eaglelab.data.tokens import builtin_sequences
from eaglelab.errors import OverwriteError
from eaglelab.model.targets import load_target
from eaglelab.train.finetune import finetune
from eaglelab.train.training import TrainConfig, read_metrics


@pytest.fixture(scope="module")
def world_b(tiny_world):
    """Target B and its captured states on the built-in data (train 96, held out 24)."""
    from eaglelab.model.drafter_files import load_drafter

    model, tok = load_target(tiny_world.target_b, device="cpu")
    spec = load_drafter(tiny_world.drafter_a).spec
    data = capture_data(model, spec, builtin_sequences(tok, 64, "train", 96), builtin_sequences(tok, 64, "held_out", 24),
                        progress=False)
    return model, data


def test_loss_decreases(world_b):
    from eaglelab.train.finetune import initial_drafter
    from eaglelab.train.training import train_drafter
    from eaglelab.train.ttt import evaluate_drafter

    model, data = world_b
    cfg = TrainConfig(steps=40, batch_size=8, ttt_length=3, log_every=5, eval_every=0)
    drafter = initial_drafter(model, None, data.train.input_ids)
    before = evaluate_drafter(drafter, data.held_out, model.lm_head, k=3)
    res = train_drafter(drafter, data.train, model.lm_head, cfg, progress=False)
    after = evaluate_drafter(drafter, data.held_out, model.lm_head, k=3)
    losses = [m["loss"] for m in res.metrics]
    # soft cross-entropy against the target's distribution: its entropy is a floor, so look for a clear drop
    assert losses[-1] < losses[0] and after["loss"] < before["loss"] - 1.0
    assert after["acc"][0] > before["acc"][0] + 0.1 and after["accept_len"] > before["accept_len"]


def test_resume_reproduces_the_uninterrupted_curve(world_b, tmp_path):
    model, data = world_b
    cfg = TrainConfig(steps=24, batch_size=4, ttt_length=3, log_every=4, eval_every=12, checkpoint_every=8)
    finetune(model, None, data, cfg, tmp_path / "full", progress=False)
    part = finetune(model, None, data, cfg, tmp_path / "part", progress=False, stop_after=13)
    assert part.final_dir is None and (tmp_path / "part" / "checkpoints" / "step-8").is_dir()
    with pytest.raises(OverwriteError):
        finetune(model, None, data, cfg, tmp_path / "part", progress=False)
    finetune(model, None, data, cfg, tmp_path / "part", resume=True, progress=False)
    a, b = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "part")
    assert [m["step"] for m in a] == [m["step"] for m in b]
    for x, y in zip(a, b):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-5, abs=1e-6)
        assert x["acc"] == pytest.approx(y["acc"], abs=1e-4)
    assert (tmp_path / "part" / "final" / "model.safetensors").is_file()
    with pytest.raises(OverwriteError):
        finetune(model, None, data, cfg, tmp_path / "full", progress=False)


def test_warm_start_beats_scratch_on_the_new_target(tiny_world, world_b):
    model, data = world_b
    cfg = TrainConfig(steps=30, batch_size=8, ttt_length=4, log_every=30, eval_every=30)
    warm = finetune(model, tiny_world.drafter_a, data, cfg, progress=False).metrics[-1]["eval_accept_len"]
    scratch = finetune(model, None, data, cfg, progress=False).metrics[-1]["eval_accept_len"]
    assert warm > scratch + 0.1


def test_a_loaded_old_drafter_is_read_once_and_left_as_it_was(tiny_world, world_b, tmp_path):
    """The budget sweep's warm runs start from copies of the drafter loaded once: the same numbers as from its
    folder, the folder never read again (moved away here), the loaded drafter unchanged."""
    import shutil

    from eaglelab.model.drafter_files import load_drafter
    from eaglelab.train.finetune import budget_sweep

    model, data = world_b
    cfg = TrainConfig(steps=3, batch_size=4, ttt_length=3, log_every=3, eval_every=3)
    folder = tmp_path / "old-drafter"
    shutil.copytree(tiny_world.drafter_a, folder)
    from_folder = budget_sweep(model, folder, data, [4, 8], [0], cfg, epochs=1)
    old = load_drafter(folder)
    before = {k: v.clone() for k, v in old.state_dict().items() if not v.is_meta}  # meta: the embedding, lent when used
    shutil.move(folder, tmp_path / "moved")
    from_object = budget_sweep(model, old, data, [4, 8], [0], cfg, epochs=1)
    assert from_object == from_folder and len(from_object["warm start"]) == 3
    after = {k: v for k, v in old.state_dict().items() if not v.is_meta}
    assert after.keys() == before.keys() and all(torch.equal(before[k], v) for k, v in after.items())


def test_rebuilding_the_vocab_of_a_warm_start_warns(tiny_world, world_b):
    model, data = world_b
    cfg = TrainConfig(steps=1, batch_size=2, ttt_length=2, log_every=1, eval_every=0)
    with pytest.warns(UserWarning, match="lm_head rows"):
        finetune(model, tiny_world.drafter_a, data, cfg, rebuild_vocab=True, progress=False)


def test_cli_finetune_writes_metrics_and_resumes(tiny_world, tmp_path):
    out = tmp_path / "run"
    base = [sys.executable, "-m", "eaglelab", "finetune", "--new-target", str(tiny_world.target_b), "--old-drafter",
            str(tiny_world.drafter_a), "--steps", "6", "--out", str(out), "--sequences", "16", "--eval-sequences", "8",
            "--ttt-length", "2", "--log-every", "2", "--eval-every", "6", "--checkpoint-every", "2", "--batch-size", "4"]
    subprocess.run(base + ["--stop-after", "3"], check=True, capture_output=True)
    again = subprocess.run(base, capture_output=True, text=True)
    assert again.returncode == 2 and "--resume" in again.stderr
    subprocess.run(base + ["--resume"], check=True, capture_output=True)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 4, 6] and all(len(r["acc"]) == 2 for r in rows)
    assert (out / "final" / "config.json").is_file()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_two_processes_gloo(tiny_world, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(_free_port()), "-m",
           "eaglelab", "finetune", "--new-target", str(tiny_world.target_b), "--scratch", "--steps", "4", "--out",
           str(tmp_path / "ddp"), "--sequences", "16", "--eval-sequences", "8", "--ttt-length", "2", "--log-every", "2",
           "--eval-every", "0", "--batch-size", "4", "--device", "cpu"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(x) for x in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 4]  # rank 0 alone writes
    assert torch.isfinite(torch.tensor([r["loss"] for r in rows])).all()
