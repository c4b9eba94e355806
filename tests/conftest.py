"""Shared fixtures: offline settings, tiny random Llama models, the tiny world (built once per session).

The tiers (`make check` / `make test`) and the hypothesis profiles are `tests/tiers.py`, loaded here as a plugin.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("EAGLELAB_PROGRESS", "0")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import pytest  # noqa: E402
from filelock import FileLock  # noqa: E402

pytest_plugins = ["tests.tiers"]

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "data" / "fixtures" / "specforge-configs"


def pytest_addoption(parser):
    parser.addoption("--run-gpu", action="store_true", help="run tests that need a CUDA device")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-gpu"):
        return
    skip = pytest.mark.skip(reason="needs --run-gpu and a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def specforge_configs() -> list[Path]:
    files = sorted(FIXTURES.glob("*.json"))
    assert files, f"the repository ships SpecForge's drafter configs at {FIXTURES}"
    return files


def make_tiny_llama(layers: int = 8, hidden: int = 64, vocab: int = 256, seed: int = 0):
    """A random tiny Llama causal LM (no training), for unit tests."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=False)
    return LlamaForCausalLM(cfg).eval()


def fill_realistic(drafter, seed: int):
    """Weights ~ N(0, 1/fan_in) (activations of order one), norms around one, an embedding of unit rows.

    Returns:
        the generator, for what the caller draws next (a vocabulary map).
    """
    import math

    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in drafter.named_parameters():
            if p.dim() == 1:
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
            elif name == "embed_tokens.weight":
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
    drafter.has_embedding = True
    return gen


def run_cli(*argv: str) -> tuple[int, str, str]:
    """``eaglelab ARGV`` in this process: (exit code, stdout, stderr)."""
    import contextlib
    import io

    from eaglelab.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def tiny_llama():
    return make_tiny_llama()


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory):
    """The tiny offline world, built once per test session (or reused from $EAGLELAB_WORLDS)."""
    from eaglelab.data.world import default_world_dir
    from eaglelab.worlds.tiny import build_tiny_world

    if os.environ.get("EAGLELAB_WORLDS"):
        root = default_world_dir("tiny")
    elif os.environ.get("PYTEST_XDIST_WORKER"):  # -n 2: one world for both workers, in the run's shared folder
        root = tmp_path_factory.getbasetemp().parent / "worlds" / "tiny"
    else:
        root = tmp_path_factory.mktemp("worlds") / "tiny"
    os.environ["EAGLELAB_WORLDS"] = str(root.parent)  # notebooks executed by the tests find the same world
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(root.parent / "tiny.lock"):  # the first worker builds it, the other waits and reuses it
        return build_tiny_world(root)


@pytest.fixture(scope="session")
def smoke_run(tiny_world, tmp_path_factory):
    """Run one notebook in smoke mode (once per session): ``smoke_run("03")`` -> (output folder, NotebookRun).

    Figures and findings land in ``<folder>/figures``, scratch files in ``<folder>/scratch-NN``.
    """
    from eaglelab.workbook.runner import run_workbook

    done: dict[str, tuple] = {}

    def run(number: str):
        if number not in done:
            out = tmp_path_factory.mktemp(f"smoke-{number}")
            runs = run_workbook(out, smoke=True, only=[number], notebooks_dir=REPO / "notebooks", progress=False)
            done[number] = (out, runs[0])
        return done[number]

    return run


@pytest.fixture(scope="session")
def users_copy(tiny_world, tmp_path_factory):
    """The tiny world's targets and old drafter copied to a folder of the user's own (no world around them):
    ``old-target``, ``new-target``, ``old-drafter``."""
    import shutil

    root = tmp_path_factory.mktemp("mine")
    for name, src in (("old-target", tiny_world.target_a), ("new-target", tiny_world.target_b),
                      ("old-drafter", tiny_world.drafter_a)):
        shutil.copytree(src, root / name)
    return root
