"""A target read without the model: its language model's config, its weights' prefix, its quantization.

Quantization is named from each scheme's own config or, without one, from the tensors its format writes
(compressed-tensors, FP8 blocks, ModelOpt NVFP4, GPTQ); weight names are found under any prefix; and none
of the readers fails on a config of any shape (a property test over arbitrary JSON). Targets' config diffs run
on the one engine the drafters' use, each family with its own rule table.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglelab.checkpoints.drafters.config_rules import DRAFTER_RULES, diff_configs
from eaglelab.checkpoints.drafters.inspection import inspect_checkpoint
from eaglelab.checkpoints.files.config_diff import ConfigDiff, diff_views, flatten
from eaglelab.checkpoints.targets.compare import TARGET_RULES, diff_target_configs, target_view
from eaglelab.checkpoints.targets.config import head_names, quantization_of, target_field, target_layer_count
from eaglelab.errors import CheckpointMismatchError
from eaglelab.worlds.synthetic_checkpoints import write_synthetic_weights

COMPRESSED = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
              "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group",
                                                        "group_size": 16},
                                            "input_activations": {"num_bits": 4, "type": "float"}}},
              "ignore": ["lm_head"]}


@pytest.mark.parametrize("config, modelopt, dtypes, method, words", [
    ({"quantization_config": COMPRESSED}, None, {}, "compressed-tensors", "FLOAT4 weights, groups of 16, activations FLOAT4"),
    ({"text_config": {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}}, None, {},
     "fp8", "128 x 128 blocks"),
    ({}, {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "group_size": 16,
                                                              "exclude_modules": ["lm_head"]}}, {}, "modelopt", "NVFP4"),
    ({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128}}, None, {}, "gptq", "INT4 weights"),
    ({}, None, {"layers.0.mlp.weight": "U8", "layers.0.mlp.weight_scale_2": "F32"}, "modelopt", "weight_scale_2"),
    ({}, None, {"layers.0.mlp.weight": "F8_E4M3", "layers.0.mlp.weight_scale_inv": "F32"}, "fp8", "weight_scale_inv"),
    ({}, None, {"a.weight_packed": "I32", "a.weight_scale": "BF16"}, "compressed-tensors", "weight_packed"),
    ({"torch_dtype": "bfloat16"}, None, {"a.weight": "BF16"}, "none", "BF16"),
])
def test_quantization_is_named_from_its_config_or_its_tensors(config, modelopt, dtypes, method, words):
    q = quantization_of(config, dtypes, modelopt)
    assert q.method == method and words in q.line, q.line


@pytest.mark.parametrize("names, embed, head, prefix", [
    (["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"], "model.embed_tokens.weight",
     "lm_head.weight", ""),
    (["language_model.model.embed_tokens.weight", "language_model.model.norm.weight", "language_model.lm_head.weight",
      "vision_tower.embed_tokens.weight"], "language_model.model.embed_tokens.weight", "language_model.lm_head.weight",
     "language_model."),
    (["model.language_model.embed_tokens.weight", "model.language_model.norm.weight", "lm_head.weight"],
     "model.language_model.embed_tokens.weight", "lm_head.weight", "model.language_model."),
    (["model.embed_tokens.weight", "model.norm.weight", "model.mtp.embed_tokens.weight"], "model.embed_tokens.weight",
     "model.embed_tokens.weight", ""),  # no head: tied, as the config says
])
def test_weight_names_are_found_under_any_prefix(names, embed, head, prefix):
    h = head_names(names, {"tie_word_embeddings": head == embed}, "t")
    assert (h.embed_tokens, h.lm_head, h.prefix) == (embed, head, prefix)


def test_missing_weights_are_one_line():
    with pytest.raises(CheckpointMismatchError, match="no embed_tokens.weight"):
        head_names(["vision_tower.embed_tokens.weight"], {}, "t")
    with pytest.raises(CheckpointMismatchError, match="tie_word_embeddings false"):
        head_names(["model.embed_tokens.weight", "model.norm.weight"], {"tie_word_embeddings": False}, "t")


def test_inspect_names_a_target_and_its_storage(tmp_path):
    """An NVFP4 target as Model-Optimizer exports it: its quantization read from hf_quant_config.json."""
    folder = write_synthetic_weights(tmp_path / "t", [("model.embed_tokens.weight", (64, 8), "BF16"),
                                                      ("model.layers.0.mlp.down_proj.weight", (8, 16), "U8"),
                                                      ("model.layers.0.mlp.down_proj.weight_scale", (8, 2), "F8_E4M3"),
                                                      ("model.layers.0.mlp.down_proj.weight_scale_2", (), "F32"),
                                                      ("model.norm.weight", (8,), "BF16"), ("lm_head.weight", (64, 8), "BF16")])
    (folder / "config.json").write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 2,
                                                    "hidden_size": 8, "vocab_size": 64}))
    (folder / "hf_quant_config.json").write_text(json.dumps({"producer": {"name": "modelopt", "version": "0.42.0"},
                                                             "quantization": {"quant_algo": "NVFP4", "group_size": 16}}))
    insp = inspect_checkpoint(str(folder))
    assert insp.family.name == "target model" and not insp.computed
    assert any("modelopt: NVFP4, groups of 16 [hf_quant_config.json]" in line for line in insp.target_lines())
    assert insp.to_json()["target"]["prefix"] == ""


JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 10**6) | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
                    max_leaves=12)
KEYS = st.sampled_from(["text_config", "language_config", "quantization_config", "num_hidden_layers", "hidden_size",
                        "rope_scaling", "vision_config", "kv_lora_rank", "architectures", "config_groups", "ignore",
                        "weight_block_size", "quant_method", "tie_word_embeddings"])


@settings(max_examples=200, deadline=None, derandomize=True)
@given(a=st.dictionaries(KEYS, JSON, max_size=6), b=st.dictionaries(KEYS, JSON, max_size=6),
       modelopt=st.one_of(st.none(), st.dictionaries(st.sampled_from(["quantization", "producer"]), JSON)))
def test_any_config_reads_without_a_crash(a, b, modelopt):
    """Whatever JSON a config holds, the target readers answer (a config of wrong types is refused earlier)."""
    qa, qb = quantization_of(a, {}, modelopt), quantization_of(b)
    assert isinstance(qa.line, str) and isinstance(qb.line, str)
    diffs = diff_target_configs(a, b, qa, qb)
    assert all(d.category for d in diffs) and target_view(a) is not None
    target_field(a, "hidden_size")
    target_layer_count(b)


def test_drafters_and_targets_diff_through_one_engine():
    """One engine under both diffs: one flattening (a nested dict's fields as ``key.field``), one walk, one record
    type, one reading of a key no table knows; each family's table says only which keys nest and what they mean."""
    rope_a, rope_b = {"rope_type": "yarn", "factor": 8.0}, {"rope_type": "yarn", "factor": 16.0}
    a = {"hidden_size": 64, "eagle_config": rope_a, "rope_scaling": rope_a, "a_new_field": 1}
    b = {"hidden_size": 64, "eagle_config": rope_b, "rope_scaling": rope_b, "a_new_field": 2}
    drafter, target = diff_configs(a, b), diff_target_configs(a, b)
    # the same nested dict spreads into the same field, under whichever key the family nests
    assert [(d.key, d.category, d.a, d.b) for d in drafter] == [
        ("eagle_config.factor", "behaviour", 8.0, 16.0), ("rope_scaling", "behaviour", rope_a, rope_b),
        ("a_new_field", "unknown", 1, 2)]
    assert [(d.key, d.category, d.a, d.b) for d in target] == [
        ("rope_scaling.factor", "rope and context", 8.0, 16.0), ("a_new_field", "unknown", 1, 2),
        ("eagle_config", "unknown", rope_a, rope_b)]
    assert {type(d) for d in drafter + target} == {ConfigDiff}
    assert drafter[-1].why == target[1].why  # one reading of an unknown key
    # each family's diff is the engine's walk over its own view with its own table
    assert drafter == diff_views(flatten(a, DRAFTER_RULES.nested), flatten(b, DRAFTER_RULES.nested), DRAFTER_RULES)
    assert target == diff_views(target_view(a), target_view(b), TARGET_RULES)
    assert {k: v for k, v in target_view(b).items() if k.startswith("rope_scaling")} == \
        flatten({"rope_scaling": rope_b}, TARGET_RULES.nested)


def test_a_prefixed_multimodal_target_is_followed_wherever_a_tensor_is_looked_up(tiny_world, tmp_path):
    """The tiny world's target A re-saved as a multimodal wrapper (``text_config``, weights under ``language_model.``,
    a vision tower): preflight, compare --target, drafter export --with-embedding, the probe's heads and a recipe."""
    import torch
    from safetensors.torch import load_file, save_file

    from eaglelab.checkpoints.drafters.inspection import compare_checkpoints
    from eaglelab.checkpoints.drafters.preflight import check_drafter
    from eaglelab.engines.recipes import RecipeSettings, build_recipe
    from eaglelab.model.heads import read_target_heads
    from tests.conftest import run_cli

    text = json.loads((tiny_world.target_a / "config.json").read_text())
    sd = load_file(str(tiny_world.target_a / "model.safetensors"))
    wrapped = {("language_model." + k if k.startswith(("model.", "lm_head.")) else k): v for k, v in sd.items()}
    wrapped["vision_tower.patch_embed.weight"] = torch.zeros(4, 3)
    wrapped["vision_tower.embed_tokens.weight"] = torch.zeros(8, 4)  # a tower's own embedding is not the text model's
    mm = tmp_path / "multimodal"
    mm.mkdir()
    save_file(wrapped, str(mm / "model.safetensors"))
    (mm / "config.json").write_text(json.dumps({"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava",
                                                "text_config": text, "vision_config": {"hidden_size": 4}}))
    spec, cfg = check_drafter(str(tiny_world.drafter_a), str(mm))
    assert cfg["text_config"]["hidden_size"] == spec.target_hidden_size
    verdict = compare_checkpoints(str(tiny_world.drafter_a), str(tiny_world.drafter_a), str(mm)).target_verdicts["a"]
    assert verdict.level == "interchangeable" and any("under 'language_model.'" in r for r in verdict.reasons)
    code, _, err = run_cli("drafter", "export", "--to", "speculators", str(tiny_world.drafter_a), str(tmp_path / "export"),
                           "--target", str(mm), "--with-embedding")
    assert code == 0, err
    exported = load_file(str(tmp_path / "export" / "model.safetensors"))
    assert torch.equal(exported["embed_tokens.weight"], sd["model.embed_tokens.weight"].to(exported["fc.weight"].dtype))
    heads, plain = read_target_heads(str(mm)), read_target_heads(str(tiny_world.target_a))
    assert heads.names["embed_tokens"] == "language_model.model.embed_tokens.weight"
    assert torch.equal(heads.lm_head, plain.lm_head) and torch.equal(heads.norm_weight, plain.norm_weight)
    keys = build_recipe(RecipeSettings("specforge", str(tiny_world.drafter_a), str(mm))).vocab_map["keys"]
    assert keys["embedding_key"][0] == "language_model.model.embed_tokens.weight"
    assert keys["lm_head_key"][0] in ("language_model.lm_head.weight", "language_model.model.embed_tokens.weight")
