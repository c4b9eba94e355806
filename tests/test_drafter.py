"""Drafter model: exact layout, bit-exact save/load, foreign key names, clear errors, vocabulary maps."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from eaglelab.checkpoints.drafters.implied_config import drafter_config_for_target
from eaglelab.checkpoints.drafters.inspection import compare_checkpoints, inspect_checkpoint
from eaglelab.checkpoints.drafters.tensor_table import expected_eagle3_tensors
from eaglelab.cli import main
from eaglelab.errors import CheckpointMismatchError, OverwriteError
from eaglelab.model.drafter import Eagle3Drafter
from eaglelab.model.drafter_files import load_drafter, save_drafter
from eaglelab.model.vocab import build_vocab_map, count_tokens


@pytest.fixture
def drafter(tiny_llama):
    d = Eagle3Drafter.from_target_config(tiny_llama.config.to_dict(), draft_vocab_size=100, seed=3)
    counts = torch.bincount(torch.randint(0, 256, (5000,), generator=torch.Generator().manual_seed(1)), minlength=256)
    d.set_vocab_map(*build_vocab_map(counts, 100))
    return d


def _same(a: Eagle3Drafter, b: Eagle3Drafter, skip=("embed_tokens.weight",)):
    sa, sb = a.state_dict(), b.state_dict()
    return all(torch.equal(sa[k], sb[k]) for k in sa if k not in skip and not k.endswith("inv_freq"))


def test_config_from_target_follows_specforge(tiny_llama):
    cfg = drafter_config_for_target(tiny_llama.config.to_dict())
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]  # [1, L//2-1, L-4], L = 8
    assert cfg["draft_vocab_size"] == 256 and cfg["num_hidden_layers"] == 1
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]


@pytest.mark.parametrize("with_embedding", [False, True])
def test_save_load_round_trip_is_bit_exact(drafter, tiny_llama, tmp_path, with_embedding):
    drafter.set_embedding(tiny_llama.get_input_embeddings().weight.detach())
    save_drafter(drafter, tmp_path / "d", include_embedding=with_embedding)
    back = load_drafter(tmp_path / "d")
    assert _same(drafter, back, skip=() if with_embedding else ("embed_tokens.weight",))
    assert back.has_embedding == with_embedding
    assert torch.equal(back.d2t, drafter.d2t) and torch.equal(back.t2d, drafter.t2d)


def test_saved_keys_and_shapes_equal_the_expected_table(drafter, tmp_path):
    save_drafter(drafter, tmp_path / "d")
    sd = load_file(str(tmp_path / "d" / "model.safetensors"))
    expected = {n: e.shape for n, e in expected_eagle3_tensors(drafter.spec).items() if n != "embed_tokens.weight"}
    assert {k: tuple(v.shape) for k, v in sd.items()} == expected
    assert sd["d2t"].dtype == torch.int64 and sd["t2d"].dtype == torch.bool
    assert inspect_checkpoint(str(tmp_path / "d")).problems == []


def test_specforge_sglang_and_speculators_names_load(drafter, tmp_path):
    save_drafter(drafter, tmp_path / "d")
    sd = load_file(str(tmp_path / "d" / "model.safetensors"))
    for rename in (lambda k: "model." + k, lambda k: k.replace("midlayer.", "layers.0.")):
        other = tmp_path / f"o{id(rename)}"
        other.mkdir()
        (other / "config.json").write_text((tmp_path / "d" / "config.json").read_text())
        save_file({rename(k): v for k, v in sd.items()}, str(other / "model.safetensors"))
        assert _same(drafter, load_drafter(other))


def test_missing_unexpected_and_wrong_shape_keys_are_listed(drafter, tmp_path):
    save_drafter(drafter, tmp_path / "d")
    sd = load_file(str(tmp_path / "d" / "model.safetensors"))
    sd.pop("fc.weight")
    sd["lm_head.weight"] = sd["lm_head.weight"][:, :10].contiguous()
    sd["extra.weight"] = torch.zeros(2)
    save_file(sd, str(tmp_path / "d" / "model.safetensors"))
    with pytest.raises(CheckpointMismatchError) as err:
        load_drafter(tmp_path / "d")
    msg = str(err.value)
    assert "missing fc.weight" in msg and "unexpected extra.weight" in msg and "lm_head.weight [100, 10]" in msg


def test_inconsistent_vocab_maps_are_refused(drafter, tmp_path):
    save_drafter(drafter, tmp_path / "d")
    sd = load_file(str(tmp_path / "d" / "model.safetensors"))
    sd["d2t"] = sd["d2t"].clone()
    sd["d2t"][5] += 1
    save_file(sd, str(tmp_path / "d" / "model.safetensors"))
    with pytest.raises(CheckpointMismatchError, match="d2t"):
        load_drafter(tmp_path / "d")
    assert any("nonzero(t2d)" in p or "increasing" in p for p in inspect_checkpoint(str(tmp_path / "d")).problems)


def test_existing_checkpoint_is_not_overwritten(drafter, tmp_path):
    save_drafter(drafter, tmp_path / "d")
    with pytest.raises(OverwriteError):
        save_drafter(drafter, tmp_path / "d")
    save_drafter(drafter, tmp_path / "d", overwrite=True)


def test_vocab_map_from_frequencies_with_padding():
    counts = torch.zeros(50, dtype=torch.long)
    counts[[3, 7, 7, 9, 40]] = torch.tensor([5, 9, 9, 1, 2])
    d2t, t2d = build_vocab_map(counts, 8)
    used = torch.arange(8) + d2t
    assert t2d.sum() == 8 and torch.equal(torch.nonzero(t2d).flatten(), used)
    assert {3, 7, 9, 40} <= set(used.tolist())  # every occurring token is kept, the rest padded
    assert torch.all(used[1:] > used[:-1])
    top2 = build_vocab_map(counts, 2)[1].nonzero().flatten().tolist()
    assert top2 == [3, 7]  # the two most frequent, sorted


def test_count_tokens_respects_loss_mask():
    ids = torch.tensor([[1, 2, 2, 3]])
    mask = torch.tensor([[0, 1, 1, 0]])
    assert count_tokens(ids, 5, mask).tolist() == [0, 0, 2, 0, 0]


def test_ttt_unroll_shapes(drafter):
    ids = torch.randint(0, 256, (2, 12))
    aux = torch.randn(2, 12, 3 * 64)
    out = drafter.ttt_logits(ids, aux, 4)
    assert len(out) == 4 and all(o.shape == (2, 12, 100) for o in out)


def test_fc_norm_variant_round_trips(tiny_llama, tmp_path):
    d = Eagle3Drafter(drafter_config_for_target(tiny_llama.config.to_dict(), 64, fc_norm=True))
    save_drafter(d, tmp_path / "d")
    assert "fc_norm.2.weight" in load_file(str(tmp_path / "d" / "model.safetensors"))
    assert _same(d, load_drafter(tmp_path / "d"))


def test_head_initialised_from_the_targets_draft_rows(drafter, tiny_llama):
    drafter.init_head_from_target(tiny_llama.lm_head.weight.detach(), tiny_llama.model.norm.weight.detach())
    used = torch.arange(100) + drafter.d2t
    assert torch.equal(drafter.lm_head.weight, tiny_llama.lm_head.weight[used])
    assert torch.equal(drafter.norm.weight, tiny_llama.model.norm.weight)


def test_captured_states_cache_to_disk_and_back(tiny_llama, tmp_path):
    from eaglelab.data.states import HiddenStates, capture_hidden_states
    from eaglelab.model.targets import Target

    d = Eagle3Drafter.from_target_config(tiny_llama.config.to_dict(), draft_vocab_size=64)
    states = capture_hidden_states(Target.for_drafter(tiny_llama, d.spec), torch.randint(0, 256, (3, 10)), progress=False)
    back = HiddenStates.load(states.save(tmp_path / "states.safetensors"))
    for name in ("input_ids", "loss_mask", "aux", "last_hidden", "target_ids"):
        assert torch.equal(getattr(states, name), getattr(back, name))
    assert back.aux_layers == states.aux_layers == tuple(d.spec.aux_layer_ids)


def test_stored_greedy_ids_give_the_same_ttt_loss_as_full_logits(tiny_llama):
    """Training reads only the draft rows of lm_head when the capture kept the target's greedy ids."""
    from eaglelab.data.states import capture_hidden_states
    from eaglelab.model.targets import Target
    from eaglelab.model.vocab import build_vocab_map, count_tokens
    from eaglelab.train.ttt import TargetTokens, target_logits, ttt_forward

    d = Eagle3Drafter.from_target_config(tiny_llama.config.to_dict(), draft_vocab_size=64)
    ids = torch.randint(0, 256, (3, 12), generator=torch.Generator().manual_seed(1))
    d.set_vocab_map(*build_vocab_map(count_tokens(ids, 256), 64))
    d.set_embedding(tiny_llama.get_input_embeddings().weight.detach())
    states = capture_hidden_states(Target.for_drafter(tiny_llama, d.spec), ids, progress=False)
    assert torch.equal(states.target_ids, target_logits(tiny_llama.lm_head, states.last_hidden).argmax(-1))
    fast = TargetTokens.recompute(tiny_llama.lm_head, states, d.draft_target_ids())
    assert fast.draft_logits.shape == (3, 12, 64)
    full = target_logits(tiny_llama.lm_head, states.last_hidden)
    a, b = ttt_forward(d, states, fast, 3), ttt_forward(d, states, TargetTokens.from_logits(full, d.draft_target_ids()), 3)
    assert torch.allclose(a.loss, b.loss, atol=1e-5) and a.acc == b.acc and a.chain == b.chain


def test_serving_embedding_shares_the_targets_tensor_and_restores(drafter, tiny_llama):
    own = drafter.embed_tokens.weight
    target_embed = tiny_llama.get_input_embeddings().weight.detach()
    with drafter.serving_embedding(target_embed):
        assert drafter.embed_tokens.weight.data_ptr() == target_embed.data_ptr()  # no copy
    assert drafter.embed_tokens.weight is own
    with pytest.raises(CheckpointMismatchError):
        with drafter.serving_embedding(target_embed[:10]):
            pass


def test_compare_flags_a_warm_start_whose_vocabulary_map_was_regenerated(drafter, tmp_path):
    """The SpecForge #300 pitfall: same weights and shapes, a map rebuilt from other data."""
    save_drafter(drafter, tmp_path / "old")
    assert compare_checkpoints(str(tmp_path / "old"), str(tmp_path / "old")).vocab_maps.level == "same"
    counts = torch.bincount(torch.randint(0, 256, (5000,), generator=torch.Generator().manual_seed(2)), minlength=256)
    old_tokens = torch.arange(100) + drafter.d2t
    drafter.set_vocab_map(*build_vocab_map(counts, 100))  # what a warm start with a regenerated map writes
    save_drafter(drafter, tmp_path / "regenerated")
    moved = int((torch.arange(100) + drafter.d2t != old_tokens).sum())
    cmp_ = compare_checkpoints(str(tmp_path / "old"), str(tmp_path / "regenerated"))
    assert cmp_.verdict.level == "interchangeable"  # shapes alone cannot tell
    assert cmp_.vocab_maps.level == "moved" and cmp_.vocab_maps.moved == moved > 0
    assert "lm_head rows no longer match their tokens" in cmp_.vocab_maps.message
    js = cmp_.to_json()["vocab_maps"]
    assert js["moved_fraction"] == pytest.approx(moved / 100) and json.dumps(js)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["compare", str(tmp_path / "old"), str(tmp_path / "regenerated")]) == 0
    assert "vocabulary maps: MOVED" in out.getvalue()
