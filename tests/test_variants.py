"""Drafter variants and families: each flag read in its own format's meaning, computed or refused in one line.

The exact computation of every variant is checked against SpecForge and speculators themselves in
``test_reference_drafters.py``; here: recognition, refusals, cautions, the config diff, the field
table's coverage, the loss conventions in training, and a property test of the config reader.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from eaglelab.checkpoints.drafters.config_rules import diff_configs
from eaglelab.checkpoints.drafters.implied_config import drafter_config_for_target
from eaglelab.checkpoints.drafters.inspection import compare_checkpoints
from eaglelab.checkpoints.drafters.spec import drafter_spec_from_config
from eaglelab.checkpoints.drafters.variants import FIELDS, cautions, drafter_family, refusals, to_speculators_config
from eaglelab.errors import ConfigError, UnsupportedDrafterError
from eaglelab.model.drafter import Eagle3Drafter
from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[1]
TARGET = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
          "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 8, "vocab_size": 256,
          "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 512}


def specforge_cfg(**overrides) -> dict:
    return drafter_config_for_target(TARGET, 96, [1, 3, 4], **overrides)


def speculators_cfg(**flags) -> dict:
    cfg = to_speculators_config(specforge_cfg(), TARGET, "verifier")
    cfg.update(flags)
    return cfg


OTHER_FAMILIES = {
    "EAGLE-1/2 head": {"architectures": ["LlamaForCausalLMEagle"], "hidden_size": 4096, "num_hidden_layers": 1},
    "MTP head": {"architectures": ["DeepseekV3ForCausalLMNextN"], "num_nextn_predict_layers": 1},
    "Medusa heads": {"architectures": ["MedusaModel"], "medusa_num_heads": 4},
    "target model": {"architectures": ["LlamaForCausalLM"], "hidden_size": 64},
    "unknown": {"architectures": ["SomethingElse"], "hidden_size": 64},
}


def write_folder(folder: Path, cfg: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    save_file({"fc.weight": torch.zeros(4, 12)}, str(folder / "model.safetensors"))
    return folder


# --------------------------------------------------------------------------- families

@pytest.mark.parametrize("family", OTHER_FAMILIES)
def test_other_families_are_shown_by_shape_and_refused_by_the_models(family, tmp_path):
    cfg = OTHER_FAMILIES[family]
    assert drafter_family(cfg).name == family and not drafter_family(cfg).computed
    folder = write_folder(tmp_path / "d", cfg)
    code, out, _ = run_cli("inspect", str(folder))
    assert code == 0 and f"shapes and configs only: {family}" in out and "fc.weight" in out
    js = json.loads(run_cli("inspect", str(folder), "--json")[1])
    assert js["family"] == family and js["computed"] is False and js["spec"] is None
    # the model-running commands refuse it in one line, before any target is loaded
    code, out, err = run_cli("speculate", "--target", str(tmp_path / "no-such-target"), "--drafter", str(folder),
                         "--prompt", "hi")
    assert code == 2 and err.count("\n") == 1 and f"not computed by eaglelab: shapes and configs only: {family}" in err
    with pytest.raises(UnsupportedDrafterError):
        Eagle3Drafter(cfg)


def test_compare_with_another_family_judges_shapes_only(tmp_path):
    head = write_folder(tmp_path / "eagle2", OTHER_FAMILIES["EAGLE-1/2 head"])
    eagle = write_folder(tmp_path / "eagle", specforge_cfg())
    cmp_ = compare_checkpoints(str(head), str(eagle))
    assert cmp_.verdict.level == "incompatible"
    assert any("shapes and configs only: EAGLE-1/2 head" in r for r in cmp_.verdict.reasons)


# --------------------------------------------------------------------------- refused variants

REFUSED = {
    "gemma layer": (speculators_cfg(), lambda c: c["transformer_layer_config"].update(model_type="gemma3"),
                    "transformer_layer_config.model_type 'gemma3'"),
    "layer type not written": (speculators_cfg(), lambda c: c["transformer_layer_config"].pop("model_type"),
                               "without model_type: speculators builds a qwen3 layer, vLLM a llama one"),
    "mrope": (specforge_cfg(rope_scaling={"rope_type": "mrope", "mrope_section": [16, 24, 24]}), None,
              "RoPE type 'mrope'"),
    "dynamic": (specforge_cfg(rope_scaling={"type": "dynamic", "factor": 2.0}), None, "RoPE type 'dynamic'"),
    "llama3 without context": (specforge_cfg(rope_scaling={"rope_type": "llama3", "factor": 8.0}), None,
                               "original_max_position_embeddings"),
    "mlp bias": (specforge_cfg(mlp_bias=True), None, "mlp_bias"),
    "four aux layers": (specforge_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4]}), None,
                        "4 aux hidden-state layers"),
    "no aux states": (specforge_cfg(eagle_config={"use_aux_hidden_state": False}), None, "use_aux_hidden_state"),
    "sliding window": (speculators_cfg(), lambda c: c["transformer_layer_config"].update(
        layer_types=["sliding_attention"]), "sliding_attention"),
    "partial rope": (specforge_cfg(partial_rotary_factor=0.5), None, "partial_rotary_factor"),
    "specforge norm_before_residual": (specforge_cfg(norm_before_residual=True), None, "norm_before_residual"),
    "specforge tied head": (specforge_cfg(tie_word_embeddings=True), None, "tie_word_embeddings"),
    "specforge attention bias": (specforge_cfg(attention_bias=True), None, "attention_bias"),
    "both fc norms": (speculators_cfg(norm_before_fc=True, fc_norm=True), None, "norm_before_fc and fc_norm"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_variants_eaglelab_does_not_compute_are_refused_in_one_line(case):
    cfg, edit, flag = REFUSED[case]
    cfg = json.loads(json.dumps(cfg))
    if edit:
        edit(cfg)
    assert refusals(cfg) and flag in refusals(cfg)[0]
    with pytest.raises(UnsupportedDrafterError, match=re.escape(flag)) as err:
        Eagle3Drafter(cfg)
    assert "\n" not in str(err.value) and str(err.value).startswith("config.json: not computed by eaglelab")


def test_computed_variants_are_accepted():
    for cfg in (specforge_cfg(), specforge_cfg(fc_norm=True, norm_output=True), specforge_cfg(norm_output=False),
                specforge_cfg(head_dim=24, target_hidden_size=48), specforge_cfg(norm_before_fc=True),
                specforge_cfg(rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                            "original_max_position_embeddings": 64}),
                speculators_cfg(norm_before_residual=True, norm_output=True, fc_norm=True),
                speculators_cfg(norm_before_fc=True, attention_bias=True),
                speculators_cfg(transformer_layer_config={**speculators_cfg()["transformer_layer_config"],
                                                          "model_type": "qwen3"})):
        assert refusals(cfg) == [], cfg
        Eagle3Drafter(cfg)


def test_the_same_flag_name_is_read_in_each_formats_meaning():
    sf = drafter_spec_from_config(specforge_cfg(norm_output=False))
    assert not sf.norm_before_head and not sf.norm_fed_back  # SpecForge: no norm before lm_head
    sp = drafter_spec_from_config(speculators_cfg(norm_output=True))
    assert sp.norm_before_head and sp.norm_fed_back  # speculators: the normed state is fed back
    nested = drafter_spec_from_config(specforge_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 4],
                                                                  "norm_before_fc": True}))
    assert nested.norm_before_fc  # SGLang and vLLM read eagle_config's norm_before_fc first
    with pytest.raises(ConfigError, match="'norm_output' must be true or false"):
        drafter_spec_from_config(specforge_cfg(norm_output="yes"))


def test_cautions_name_the_flags_engines_read_otherwise():
    assert any("SGLang and vLLM serve it feeding the normed state back" in c
               for c in cautions(specforge_cfg(norm_output=True)))
    assert cautions(specforge_cfg()) == []
    bare = speculators_cfg()
    del bare["norm_before_residual"]
    assert any("vLLM reads true" in c for c in cautions(bare))
    assert any("silu" in c for c in cautions(specforge_cfg(hidden_act="gelu")))


def test_flags_show_in_the_classified_config_diff():
    rows = {d.key: d for d in diff_configs(specforge_cfg(), speculators_cfg(norm_before_residual=True,
                                                                             norm_output=True, fc_norm=True))}
    assert rows["norm_before_residual"].category == "behaviour"
    assert rows["speculators.norm_output"].category == "behaviour"
    assert rows["fc_norm"].category == "architecture"
    # a format conversion alone, or SpecForge's default written out, is no difference
    assert diff_configs(specforge_cfg(), to_speculators_config(specforge_cfg(), TARGET, "v")) == []
    assert diff_configs(specforge_cfg(), specforge_cfg(norm_output=True)) == []


def test_field_table_covers_every_field():
    doc = (REPO / "docs" / "EAGLE3_FORMAT.md").read_text()
    section = doc[doc.index("### 1.1"):doc.index("## 2")]
    rows = {m.group(1) for m in re.finditer(r"^\| `([^`]+)`", section, re.M)}
    assert set(FIELDS) <= rows, set(FIELDS) - rows


# --------------------------------------------------------------------------- property test of the reader

FLAG_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.text(max_size=3),
                        st.lists(st.integers(0, 9), max_size=5), st.dictionaries(st.text(max_size=3), st.integers()))
FLAG_NAMES = ("transformer_layer_config", "num_attention_heads", "fc_norm", "norm_before_fc", "norm_before_residual",
              "norm_output", "target_hidden_size", "head_dim", "rope_scaling", "rope_parameters", "attention_bias",
              "mlp_bias", "tie_word_embeddings", "eagle_config", "eagle_aux_hidden_state_layer_ids",
              "partial_rotary_factor", "hidden_act")


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(["specforge", "speculators"]),
       flags=st.dictionaries(st.sampled_from(FLAG_NAMES), FLAG_VALUES, max_size=4))
def test_any_flag_values_are_computed_or_refused_in_one_line(fmt, flags):
    cfg = specforge_cfg() if fmt == "specforge" else speculators_cfg()
    cfg.update(flags)
    try:
        d = Eagle3Drafter(cfg)
    except ConfigError as exc:  # UnsupportedDrafterError included
        assert "\n" not in str(exc) and exc.where
        return
    with torch.no_grad():  # what was accepted runs
        out = d.ttt_logits(torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4, 3 * d.spec.target_hidden_size), 2)
    assert len(out) == 2 and all(torch.isfinite(o).all() for o in out)


# --------------------------------------------------------------------------- loss conventions in training

def test_training_reports_its_loss_convention(tmp_path):
    from eaglelab.data.states import HiddenStates
    from eaglelab.errors import ParameterError
    from eaglelab.train.training import TrainConfig, read_metrics, train_drafter

    with pytest.raises(ParameterError, match="loss_convention"):
        TrainConfig(loss_convention="eagle")
    gen = torch.Generator().manual_seed(0)
    d = Eagle3Drafter(specforge_cfg())
    d.has_embedding = True
    states = HiddenStates(torch.randint(0, 256, (4, 12), generator=gen), torch.ones(4, 12, dtype=torch.bool),
                          torch.randn(4, 12, 192, generator=gen), torch.randn(4, 12, 64, generator=gen))
    head = torch.nn.Linear(64, 256, bias=False)
    for convention in ("specforge", "speculators"):
        cfg = TrainConfig(steps=2, batch_size=2, ttt_length=2, log_every=1, eval_every=0, checkpoint_every=2,
                          loss_convention=convention)
        train_drafter(d, states, head, cfg, run_dir=tmp_path / convention, progress=False)
        rows = read_metrics(tmp_path / convention)
        assert all(r["loss_convention"] == convention and len(r[f"acc_{convention}"]) == 2 for r in rows)
        assert json.loads((tmp_path / convention / "run.json").read_text())["config"]["loss_convention"] == convention
