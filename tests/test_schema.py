"""EAGLE-3 schema on real SpecForge configs, config-diff classes, verdicts, aux-layer conventions."""

from __future__ import annotations

import json

import pytest

from eaglelab.checkpoints.drafters.config_rules import diff_configs
from eaglelab.checkpoints.drafters.inspection import compare_checkpoints, inspect_checkpoint
from eaglelab.checkpoints.drafters.spec import aux_ids_as_layer_outputs, drafter_spec_from_config
from eaglelab.checkpoints.drafters.tensor_table import expected_eagle3_tensors, expected_parameters
from eaglelab.checkpoints.drafters.verdicts import drafter_verdict, drafter_vs_target
from eaglelab.worlds.synthetic_checkpoints import KIMI_K2_DRAFTER_CONFIG, write_synthetic_drafter


def test_every_specforge_config_gives_a_consistent_table(specforge_configs):
    assert len(specforge_configs) >= 20
    for f in specforge_configs:
        cfg = json.loads(f.read_text())
        spec = drafter_spec_from_config(cfg, str(f))
        table = expected_eagle3_tensors(spec)
        H, Ht = spec.hidden_size, spec.target_hidden_size
        assert table["fc.weight"].shape == (H, 3 * Ht)
        assert table["midlayer.self_attn.q_proj.weight"].shape == (spec.num_attention_heads * spec.head_dim, 2 * H)
        assert table["midlayer.self_attn.k_proj.weight"].shape[1] == 2 * H
        assert table["lm_head.weight"].shape == (spec.draft_vocab_size, H)
        assert table["d2t"].shape == (spec.draft_vocab_size,) and table["t2d"].shape == (spec.vocab_size,)
        assert table["embed_tokens.weight"].shape == (spec.vocab_size, H) and not table["embed_tokens.weight"].required
        assert ("fc_norm.0.weight" in table) == bool(cfg.get("fc_norm"))
        assert diff_configs(cfg, cfg) == []
        assert drafter_verdict(spec, spec, []).level == "interchangeable"


def test_kimi_k2_shapes_match_the_format_doc():
    spec = drafter_spec_from_config(KIMI_K2_DRAFTER_CONFIG)
    t = expected_eagle3_tensors(spec)
    assert t["fc.weight"].shape == (7168, 21504)
    assert t["midlayer.self_attn.q_proj.weight"].shape == (8192, 14336)
    assert t["lm_head.weight"].shape == (32000, 7168) and t["embed_tokens.weight"].shape == (163840, 7168)
    assert round(expected_parameters(spec) / 1e9, 2) == 1.19


def test_seed_case_is_interchangeable_with_classified_diff(tmp_path):
    k25 = {**KIMI_K2_DRAFTER_CONFIG, "max_position_embeddings": 262144, "max_window_layers": 48,
           "transformers_version": "4.56.2"}
    a = write_synthetic_drafter(tmp_path / "k2", KIMI_K2_DRAFTER_CONFIG)
    b = write_synthetic_drafter(tmp_path / "k25", k25, include_embedding=False)
    cmp_ = compare_checkpoints(str(a), str(b)).to_json()
    cats = {d["key"]: d["category"] for d in cmp_["config_diff"]}
    assert cats == {"max_position_embeddings": "behaviour", "max_window_layers": "metadata",
                    "transformers_version": "metadata"}
    assert cmp_["verdict"]["level"] == "interchangeable"
    assert [t["name"] for t in cmp_["tensor_diff"] if t["status"] != "same"] == ["embed_tokens.weight"]
    assert inspect_checkpoint(str(a)).problems == []


def _spec(**kw):
    return drafter_spec_from_config({**KIMI_K2_DRAFTER_CONFIG, **kw})


@pytest.mark.parametrize("change, level", [
    ({"draft_vocab_size": 16000}, "warm-start"),
    ({"vocab_size": 160000}, "warm-start"),
    ({"fc_norm": True}, "warm-start"),
    ({"rope_theta": 1e6}, "warm-start"),
    ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}}, "warm-start"),
    ({"hidden_size": 4096}, "incompatible"),
    ({"intermediate_size": 12288}, "incompatible"),
    ({"transformers_version": "9"}, "interchangeable"),
])
def test_verdict_levels(change, level):
    a = _spec()
    b = _spec(**change)
    v = drafter_verdict(a, b, diff_configs(KIMI_K2_DRAFTER_CONFIG, {**KIMI_K2_DRAFTER_CONFIG, **change}))
    assert v.level == level and v.reasons


def test_same_layers_in_both_conventions_are_not_a_difference():
    a = _spec()  # nested [1, 29, 57], SGLang: layer outputs
    cfg_b = {k: v for k, v in KIMI_K2_DRAFTER_CONFIG.items() if k != "eagle_config"}
    b = drafter_spec_from_config({**cfg_b, "eagle_aux_hidden_state_layer_ids": [2, 30, 58]})  # vLLM: inputs
    assert b.aux_convention == "vllm"
    assert drafter_verdict(a, b, []).level == "interchangeable"


def test_unknown_keys_are_reported_not_guessed():
    d = diff_configs({"a_new_field": 1}, {"a_new_field": 2})
    assert d[0].category == "unknown"


def test_aux_conventions_and_target_check():
    assert aux_ids_as_layer_outputs((2, 30, 58), "vllm", 61) == (1, 29, 57)
    assert aux_ids_as_layer_outputs(None, None, 61) == (1, 29, 57)
    target = {"hidden_size": 7168, "vocab_size": 163840, "num_hidden_layers": 61, "max_position_embeddings": 262144}
    v = drafter_vs_target(_spec(), KIMI_K2_DRAFTER_CONFIG, target)
    assert v.level == "interchangeable"
    assert any("131072 positions" in r for r in v.reasons)
    assert drafter_vs_target(_spec(), KIMI_K2_DRAFTER_CONFIG, {**target, "hidden_size": 4096}).level == "incompatible"
    shallow = drafter_vs_target(_spec(), KIMI_K2_DRAFTER_CONFIG, {**target, "num_hidden_layers": 40})
    assert shallow.level == "incompatible" and any("outside" in r for r in shallow.reasons)
    vl = {"text_config": target}
    assert drafter_vs_target(_spec(), KIMI_K2_DRAFTER_CONFIG, vl).level == "interchangeable"


def test_one_rope_in_two_spellings_is_no_difference():
    base = {"rope_theta": 10000.0}
    assert diff_configs(base, {"rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}) == []
    scaled = {"rope_parameters": {"rope_theta": 10000.0, "rope_type": "llama3", "factor": 8.0}}
    assert [d.key for d in diff_configs(base, scaled)] == ["rope_parameters", "rope_theta"]
    assert [d.key for d in diff_configs(base, {"rope_theta": 500000.0})] == ["rope_theta"]
