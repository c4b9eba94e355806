"""Full-vocabulary drafters (TorchSpec's Kimi-K2.5 ones): no maps, and a head from the file or from the target.

The differential tests against SpecForge and speculators cover the arithmetic (``test_reference_drafters``,
variants ``full_vocab`` and ``no_draft_vocab_size``). Here: the files as the engines write them, and a drafter
whose file holds no ``lm_head`` (NVIDIA's Kimi-K2.6 drafter) drafting with the target's head, as vLLM serves it.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from eaglelab.checkpoints.drafters.inspection import inspect_checkpoint
from eaglelab.errors import CheckpointMismatchError
from eaglelab.model.drafter import Eagle3Drafter
from eaglelab.model.drafter_files import load_drafter, save_drafter
from tests.conftest import run_cli


def target_config(tiny_world) -> dict:
    return json.loads((tiny_world.target_a / "config.json").read_text())


def headless(tiny_world, folder, draft_vocab_size: int | None = None):
    """A full-vocabulary drafter of the tiny world's target A, its file without ``lm_head`` (and without maps)."""
    d = Eagle3Drafter.from_target_config(target_config(tiny_world), draft_vocab_size=draft_vocab_size or 512, seed=4)
    save_drafter(d, folder)
    sd = load_file(str(folder / "model.safetensors"))
    save_file({k: v for k, v in sd.items() if k != "lm_head.weight"}, str(folder / "model.safetensors"))
    return folder


def test_a_full_vocabulary_drafter_is_written_without_maps_and_read_back(tiny_world, tmp_path):
    cfg = {**Eagle3Drafter.from_target_config(target_config(tiny_world)).config}
    del cfg["draft_vocab_size"]  # as TorchSpec's K2.5 config: the full vocabulary
    d = Eagle3Drafter(cfg, seed=1)
    assert d.spec.full_vocab and not d.spec.draft_vocab_given and not d.has_vocab_map
    folder = save_drafter(d, tmp_path / "full", include_embedding=True)
    assert {"d2t", "t2d"}.isdisjoint(load_file(str(folder / "model.safetensors")))
    insp = inspect_checkpoint(str(folder))
    assert insp.problems == [] and insp.computed
    back = load_drafter(folder)
    ids, aux = torch.randint(0, 512, (1, 12)), torch.randn(1, 12, 3 * 64)
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(back.ttt_logits(ids, aux, 2), d.ttt_logits(ids, aux, 2), strict=True))
    assert torch.equal(back.draft_target_ids(), torch.arange(512))  # draft id = target id


def test_a_drafter_without_a_head_drafts_with_the_targets(tiny_world, tmp_path):
    from transformers import AutoModelForCausalLM

    folder = headless(tiny_world, tmp_path / "headless")
    insp = inspect_checkpoint(str(folder))
    assert insp.problems == [] and any("sglang issue #27829" in c for c in insp.cautions) and insp.sglang_random_head
    d = load_drafter(folder)
    assert not d.has_head
    ids, aux = torch.randint(0, 512, (1, 10)), torch.randn(1, 10, 3 * 64)
    with pytest.raises(CheckpointMismatchError, match="no lm_head of its own"):
        d.ttt_logits(ids, aux, 1)
    model = AutoModelForCausalLM.from_pretrained(tiny_world.target_a).eval()
    with torch.no_grad(), d.serving_target(model):
        hidden = d.step(ids, d.project(aux), torch.arange(10)[None])
        got = d.logits(hidden)
        want = model.lm_head(d.norm(hidden))
    assert torch.allclose(got, want, atol=1e-6) and not d.has_head  # lent, and given back
    assert set(load_file(str(save_drafter(d, tmp_path / "again") / "model.safetensors"))) == \
        set(load_file(str(folder / "model.safetensors")))  # written as it was read: no head, no maps
    code, out, err = run_cli("speculate", "--target", str(tiny_world.target_a), "--drafter", str(folder), "--prompt",
                         "def main(", "--max-new-tokens", "8", "--repeats", "1", "--json")
    assert code == 0, err
    assert json.loads(out)["matches_greedy"] is True


def test_a_headless_drafter_is_warm_started_from_the_targets_head(tiny_world, tmp_path):
    from transformers import AutoModelForCausalLM

    from eaglelab.train.finetune import initial_drafter

    model = AutoModelForCausalLM.from_pretrained(tiny_world.target_a).eval()
    d = initial_drafter(model, headless(tiny_world, tmp_path / "headless"), train_ids=None)
    assert d.has_head and torch.equal(d.lm_head.weight, model.lm_head.weight)
    assert "lm_head.weight" in load_file(str(save_drafter(d, tmp_path / "trained") / "model.safetensors"))


def test_a_reduced_vocabulary_without_a_head_is_refused_in_one_line(tiny_world, tmp_path):
    folder = headless(tiny_world, tmp_path / "reduced", draft_vocab_size=320)
    assert any("missing tensor lm_head.weight" in p for p in inspect_checkpoint(str(folder)).problems)
    code, _, err = run_cli("speculate", "--target", str(tiny_world.target_a), "--drafter", str(folder), "--prompt", "x")
    assert code == 2 and err.count("\n") == 1 and "lm_head.weight" in err
    with pytest.raises(CheckpointMismatchError, match="missing lm_head.weight"):
        load_drafter(folder)


def test_warm_start_recipes_for_a_full_vocabulary_drafter(tiny_world, tmp_path):
    """No map to keep; speculators' convert would write 32000 for a config without draft_vocab_size: refused."""
    from eaglelab.engines.recipes import RecipeSettings, build_recipe
    from eaglelab.errors import ParameterError

    cfg = {**Eagle3Drafter.from_target_config(target_config(tiny_world)).config}
    del cfg["draft_vocab_size"]
    folder = save_drafter(Eagle3Drafter(cfg), tmp_path / "full")
    recipe = build_recipe(RecipeSettings("specforge", str(folder), str(tiny_world.target_b)))
    assert "save_vocab_map.py" not in recipe.files and recipe.vocab_map["full_vocab"]
    assert 'vocab_mapping_path: ""' in recipe.files["warm.yaml"]
    with pytest.raises(ParameterError, match="convert would write 32000 for its 512-row lm_head"):
        build_recipe(RecipeSettings("speculators", str(folder), str(tiny_world.target_b)))
    (folder / "config.json").write_text(json.dumps({**cfg, "draft_vocab_size": 512}))
    assert build_recipe(RecipeSettings("speculators", str(folder), str(tiny_world.target_b))).vocab_map["full_vocab"]
