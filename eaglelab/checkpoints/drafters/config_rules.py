"""The drafters' reading of their config keys: one spelling of a drafter config, and what each key's difference means.

Drafter configs are diffed through the one engine (:func:`eaglelab.checkpoints.files.config_diff.diff_views`)
with :data:`DRAFTER_RULES`: a speculators config is read through its SpecForge-style view
(:func:`comparison_view`), so a format conversion alone shows no difference.
"""

from __future__ import annotations

from typing import Any

from eaglelab.checkpoints.drafters.spec import DEFAULT_DRAFT_VOCAB, is_speculators_config
from eaglelab.checkpoints.files.config_diff import ConfigDiff, KeyRule, RuleTable, diff_views, flatten


def _one_rope_spelling(cfg: dict[str, Any]) -> dict[str, Any]:
    """Plain RoPE written as Transformers 5's ``rope_parameters`` becomes ``rope_theta`` (one spelling to diff)."""
    params = cfg.get("rope_parameters")
    if not isinstance(params, dict) or set(params) - {"rope_theta", "rope_type"} or \
            params.get("rope_type", "default") != "default" or "rope_theta" not in params or \
            cfg.get("rope_theta", params["rope_theta"]) != params["rope_theta"]:
        return cfg
    out = {k: v for k, v in cfg.items() if k != "rope_parameters"}
    out["rope_theta"] = params["rope_theta"]
    return out


def comparison_view(cfg: dict[str, Any]) -> dict[str, Any]:
    """One spelling of a drafter config for diffs: a format conversion alone shows no difference.

    A speculators config becomes the flat SpecForge-style config (layer fields from
    ``transformer_layer_config``, vLLM's top-level aux ids as nested layer outputs, one less) with
    its flags kept: ``norm_before_fc``, ``norm_before_residual``, ``fc_norm``, and its ``norm_output``
    as ``speculators.norm_output`` (it means something else than SpecForge's). SpecForge's
    ``norm_output: true`` is its default and is dropped. Not a conversion for writing: see
    :func:`eaglelab.checkpoints.drafters.variants.to_specforge_config`.
    """
    if not is_speculators_config(cfg):
        return {k: v for k, v in cfg.items() if not (k == "norm_output" and v is True)}
    body = dict(cfg.get("transformer_layer_config") or {})
    body.update(architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1,
                draft_vocab_size=cfg.get("draft_vocab_size", DEFAULT_DRAFT_VOCAB))
    if body.get("model_type", "llama") != "llama":
        body["speculators.layer"] = body["model_type"]
    body["model_type"] = "llama"
    if cfg.get("target_hidden_size") and cfg["target_hidden_size"] != body.get("hidden_size"):
        body["target_hidden_size"] = cfg["target_hidden_size"]
    for key in ("fc_norm", "norm_before_fc", "norm_before_residual"):
        if cfg.get(key):
            body[key] = cfg[key]
    if cfg.get("norm_output"):
        body["speculators.norm_output"] = cfg["norm_output"]
    if cfg.get("torch_dtype"):
        body["torch_dtype"] = cfg["torch_dtype"]
    ids = cfg.get("eagle_aux_hidden_state_layer_ids")
    if ids:
        body["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [int(i) - 1 for i in ids],
                                "use_aux_hidden_state": True}
    return body


_ARCH = "architecture"
_BEH = "behaviour"
_LOAD = "loader"
_META = "metadata"

CONFIG_KEY_RULES: dict[str, KeyRule] = {
    "hidden_size": KeyRule(_ARCH, "drafter width H: every weight's shape"),
    "target_hidden_size": KeyRule(_ARCH, "width of the target hidden states: fc input 3*Ht"),
    "intermediate_size": KeyRule(_ARCH, "MLP width: gate/up/down shapes"),
    "num_attention_heads": KeyRule(_ARCH, "q_proj / o_proj shapes"),
    "num_key_value_heads": KeyRule(_ARCH, "k_proj / v_proj shapes"),
    "head_dim": KeyRule(_ARCH, "q/k/v/o shapes"),
    "q_lora_rank": KeyRule(_ARCH, "MLA: rank of the query's low-rank path (q_a_proj, q_b_proj; absent: one q_proj)"),
    "kv_lora_rank": KeyRule(_ARCH, "MLA: width of the key-value latent (kv_a_proj_with_mqa, kv_b_proj)"),
    "qk_nope_head_dim": KeyRule(_ARCH, "MLA: per-head query / key dims without RoPE (q_b_proj, kv_b_proj rows)"),
    "qk_rope_head_dim": KeyRule(_ARCH, "MLA: per-head RoPE dims and the shared RoPE key (q_b_proj, kv_a_proj_with_mqa)"),
    "v_head_dim": KeyRule(_ARCH, "MLA: per-head value dims (kv_b_proj rows, o_proj input)"),
    "vocab_size": KeyRule(_ARCH, "target vocabulary: embed_tokens rows and t2d length"),
    "draft_vocab_size": KeyRule(_ARCH, "lm_head rows and d2t length"),
    "num_hidden_layers": KeyRule(_ARCH, "number of drafter layers (EAGLE-3: 1)"),
    "fc_norm": KeyRule(_ARCH, "adds fc_norm.{0,1,2} weights before fc"),
    "attention_bias": KeyRule(_ARCH, "adds q/k/v/o bias tensors"),
    "mlp_bias": KeyRule(_ARCH, "adds MLP bias tensors"),
    "transformer_layer_config": KeyRule(_ARCH, "speculators: the drafter layer's own config"),
    "max_position_embeddings": KeyRule(_BEH, "context the drafter was set up for: no shape change, "
                                             "but a drafter trained short degrades on long prompts"),
    "rope_theta": KeyRule(_BEH, "RoPE base: positions rotate differently, attention changes"),
    "rope_scaling": KeyRule(_BEH, "RoPE scaling: long-context positions change"),
    "rope_parameters": KeyRule(_BEH, "RoPE (transformers 5 spelling): positions change"),
    "rope_type": KeyRule(_BEH, "RoPE variant"),
    "rms_norm_eps": KeyRule(_BEH, "epsilon of every RMSNorm"),
    "hidden_act": KeyRule(_BEH, "MLP activation"),
    "eagle_config": KeyRule(_BEH, "which target layers feed the drafter (SGLang / SpecForge)"),
    "eagle_config.eagle_aux_hidden_state_layer_ids": KeyRule(
        _BEH, "which target layers feed fc (SGLang: layer outputs); a wrong choice is silent and ruinous"),
    "eagle_config.use_aux_hidden_state": KeyRule(_BEH, "whether aux hidden states are used at all"),
    "eagle_config.use_input_layernorm_in_first_layer": KeyRule(
        _BEH, "Model-Optimizer: hidden_norm in training (default true); SGLang ignores it and always applies it"),
    "eagle_config.use_last_layernorm": KeyRule(
        _BEH, "Model-Optimizer: the final norm before lm_head in training (default true); SGLang always applies it"),
    "eagle_config.use_mtp_layernorm": KeyRule(
        _BEH, "Model-Optimizer: EAGLE-1 / MTP-style norms without aux states (default false); SGLang ignores it"),
    "eagle_aux_hidden_state_layer_ids": KeyRule(
        _BEH, "which target layers feed fc (vLLM / speculators: layer inputs, one apart from SGLang's)"),
    "norm_output": KeyRule(_BEH, "SpecForge: false drops the final norm before lm_head (default true)"),
    "speculators.norm_output": KeyRule(_BEH, "speculators: the normed state is fed to the next step (EAGLE-3.1)"),
    "norm_before_residual": KeyRule(_BEH, "speculators: the attention residual is the normed hidden state"),
    "norm_before_fc": KeyRule(_ARCH, "speculators: one RMSNorm (input_norm) over the concatenated target states"),
    "speculators.layer": KeyRule(_ARCH, "speculators: the decoder layer type (qwen3 adds per-head q_norm / k_norm)"),
    "embed_requires_grad": KeyRule(_META, "speculators: whether training updates the embedding"),
    "layer_types": KeyRule(_BEH, "per-layer attention kind (sliding windows)"),
    "partial_rotary_factor": KeyRule(_BEH, "share of head dims that RoPE rotates"),
    "attention_dropout": KeyRule(_BEH, "dropout in attention (training only)"),
    "pretraining_tp": KeyRule(_BEH, "tensor-parallel slicing of the MLP at training (numerics only)"),
    "speculators_config": KeyRule(_BEH, "speculators: proposal method and verifier"),
    "architectures": KeyRule(_LOAD, "class the loaders instantiate"),
    "model_type": KeyRule(_LOAD, "config class the loaders use"),
    "target_model_type": KeyRule(_LOAD, "the target family the drafter was built for"),
    "speculators_model_type": KeyRule(_LOAD, "speculators' model class"),
    "speculators_version": KeyRule(_META, "version of speculators that wrote it"),
    "_torchspec_version": KeyRule(_META, "version of TorchSpec that exported it (its tools/convert_to_hf.py)"),
    "transformers_version": KeyRule(_META, "version that wrote the file"),
    "torch_dtype": KeyRule(_META, "dtype the file was saved in; loaders cast"),
    "dtype": KeyRule(_META, "dtype the file was saved in (transformers 5 spelling)"),
    "_name_or_path": KeyRule(_META, "where it was loaded from"),
    "use_cache": KeyRule(_META, "generation default"),
    "initializer_range": KeyRule(_META, "initialisation only"),
    "bos_token_id": KeyRule(_META, "special token id"),
    "eos_token_id": KeyRule(_META, "special token id"),
    "pad_token_id": KeyRule(_META, "special token id"),
    "max_window_layers": KeyRule(_META, "sliding-window bookkeeping, unused by a 1-layer Llama drafter"),
    "use_sliding_window": KeyRule(_META, "unused by a 1-layer Llama drafter"),
    "sliding_window": KeyRule(_META, "unused by a 1-layer Llama drafter"),
    "tie_word_embeddings": KeyRule(_LOAD, "must be false: lm_head is the drafter's own"),
    "has_no_defaults_at_init": KeyRule(_META, "speculators bookkeeping"),
}


#: What an absent key means to every reader: writing the default is no difference.
DEFAULTS: dict[str, Any] = {
    "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": False,
    "use_sliding_window": False, "fc_norm": False, "norm_before_fc": False, "num_hidden_layers": 1,
    "hidden_act": "silu", "eagle_config.use_aux_hidden_state": True,
    "eagle_config.use_input_layernorm_in_first_layer": True, "eagle_config.use_last_layernorm": True,
    "eagle_config.use_mtp_layernorm": False,
}


#: The drafters' reading: ``eagle_config`` and the speculators' ``transformer_layer_config`` are read field
#: by field (the latter's fields as the same keys at the top level); a null is absent, as transformers reads it.
DRAFTER_RULES = RuleTable(
    CONFIG_KEY_RULES, (_ARCH, _BEH, _LOAD, _META, "unknown"), nested=("eagle_config", "transformer_layer_config"),
    inner=("transformer_layer_config",), by_head={"eagle_config": KeyRule(_BEH, "EAGLE settings read by SGLang / SpecForge")},
    defaults=DEFAULTS, null_is_absent=True)


def diff_configs(a: dict[str, Any], b: dict[str, Any]) -> list[ConfigDiff]:
    """Every key whose value differs between two configs, classified.

    Speculators configs are compared through their SpecForge-style view (:func:`comparison_view`),
    so a format conversion alone shows no difference. Architecture differences come first,
    then behaviour, loader, metadata, unknown.
    """
    fa, fb = (flatten(_one_rope_spelling(comparison_view(cfg or {})), DRAFTER_RULES.nested) for cfg in (a, b))
    return diff_views(fa, fb, DRAFTER_RULES)
