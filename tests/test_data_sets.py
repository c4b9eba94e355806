"""The one data layer: precedence (user's file, world's conversations, built-in text), sources, world detection."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoTokenizer

from eaglelab.data.sets import finetune_set, measure_prompts, probe_set, world_of
from eaglelab.data.tokens import builtin_sequences
from eaglelab.errors import SourceError
from eaglelab.model.drafter_files import load_drafter
from eaglelab.model.targets import load_target


def test_world_of_finds_the_world_a_checkpoint_lies_in(tiny_world, tmp_path):
    assert world_of(tiny_world.target_a).root == tiny_world.root
    assert world_of(tiny_world.drafter_a).root == tiny_world.root
    assert world_of(tmp_path) is None and world_of("org/model") is None and world_of(None) is None


def test_probe_set_precedence(tiny_world, tmp_path):
    tok = AutoTokenizer.from_pretrained(str(tiny_world.target_a))
    built_in = probe_set(tok, 6, 32)
    assert built_in.source.kind == "built-in" and built_in.ids.shape == (6, 32)
    # every position counts but the last of a row: no token of the row follows it (nor can an engine's dump say)
    assert bool(built_in.counted[:, :-1].all()) and not built_in.counted[:, -1].any()
    assert torch.equal(built_in.ids, builtin_sequences(tok, 32, "held_out", 6))
    # the tiny world keeps no replies: its probe set is the built-in one
    assert torch.equal(probe_set(tok, 6, 32, world_of(tiny_world.target_a)).ids, built_in.ids)
    f = tmp_path / "mine.jsonl"
    f.write_text("\n".join(json.dumps({"text": "def add(a, b):\n    return a + b\n" * 20}) for _ in range(4)))
    mine = probe_set(tok, 3, 16, tiny_world, data_file=f)
    assert mine.source.kind == "file" and str(f) in str(mine.source) and len(mine.ids) == 3 and mine.positions == 45
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(SourceError, match="line 1"):
        probe_set(tok, 3, 16, data_file=bad)


def test_finetune_set_from_built_in_text_captures_the_drafter_layers(tiny_world):
    model, tok = load_target(tiny_world.target_b, device="cpu")
    spec = load_drafter(tiny_world.drafter_a).spec
    data, source = finetune_set(model, tok, spec, world=world_of(tiny_world.target_b), seq_len=32,
                                train_sequences=6, eval_sequences=4, progress=False)
    assert source.kind == "built-in" and "6 train rows" in source.description
    assert len(data.train) == 6 and len(data.held_out) == 4 and data.train.aux.shape[-1] == 3 * model.config.hidden_size
    assert data.aux_layer_outputs == spec.aux_layer_ids  # SGLang convention: the ids are layer outputs


def test_finetune_set_from_conversations_trains_and_holds_out_on_the_files_replies(tiny_world, tmp_path):
    """#54 item 4: a file of conversations is the fine-tune's data as the world's replies are (states on prompt +
    reply, the reply counted), its last conversations held out: no built-in text in what decides."""
    from eaglelab.data.conversations import conversation_responses

    model, tok = load_target(tiny_world.target_b, device="cpu")
    spec = load_drafter(tiny_world.drafter_a).spec
    f = tmp_path / "chats.jsonl"
    f.write_text("".join(json.dumps({"conversations": [{"role": "user", "content": f"what does {i} add?"},
                                                       {"role": "assistant", "content": f"it adds {i} to x " * 4}]})
                         + "\n" for i in range(9)))
    data, source = finetune_set(model, tok, spec, data_file=f, seq_len=24, train_sequences=6, eval_sequences=4,
                                progress=False)
    assert source.kind == "file" and "6 train / 2 held-out conversations of the file" in source.description
    replies = conversation_responses(f, tok, 24)
    assert len(data.train) == 6 and len(data.held_out) == 2
    # counted: the reply's tokens only (the last one has no next token in the row)
    assert int(data.train.loss_mask.sum()) == sum(len(r) for r in replies.replies[:6])
    assert int(data.held_out.loss_mask.sum()) == sum(len(r) for r in replies.replies[7:9])
    assert data.train.aux.shape[-1] == 3 * model.config.hidden_size and data.aux_layer_outputs == spec.aux_layer_ids
    one = tmp_path / "one.jsonl"
    one.write_text(f.read_text().splitlines()[0] + "\n")
    with pytest.raises(SourceError, match="at least two are needed"):
        finetune_set(model, tok, spec, data_file=one, seq_len=24, progress=False)


def test_measure_prompts_come_from_the_world_else_from_docstrings(tiny_world):
    tok = AutoTokenizer.from_pretrained(str(tiny_world.target_a))
    world_prompts = measure_prompts(tok, 3, tiny_world)
    assert world_prompts == [tok(p)["input_ids"] for p in tiny_world.held_out_prompts()[:3]]
    from eaglelab.data.corpus import docstrings, prompts_from_docstrings, split_held_out

    fallback = prompts_from_docstrings(split_held_out(docstrings())[1], 3)
    assert measure_prompts(tok, 3) == [tok(p)["input_ids"] for p in fallback]
