"""Config diffs: one engine for any two configs, and the drafters' reading of their keys.

The engine reads two configs through one flattening (:func:`flatten`: a nested dict's fields as
``key.field``), walks the union of their keys, compares values and attaches each differing key's
:class:`KeyRule` (:func:`diff_views`, one :class:`ConfigDiff` a key). What a difference means, which
keys are nested and which absences are no difference is a family's own :class:`RuleTable`: the
drafters' here (:data:`DRAFTER_RULES`, :func:`diff_configs`), the targets' in
:mod:`eaglelab.checkpoints.target_compare` (:data:`~eaglelab.checkpoints.target_compare.TARGET_RULES`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eaglelab.checkpoints.spec import DEFAULT_DRAFT_VOCAB, is_speculators_config

# --------------------------------------------------------------------------- the engine


@dataclass(frozen=True)
class KeyRule:
    """How a difference in one config key matters."""

    category: str
    why: str


#: The rule of a key no table knows.
UNKNOWN = KeyRule("unknown", "not a key eaglelab knows; check what reads it")


@dataclass(frozen=True)
class ConfigDiff:
    """One differing key between two configs (two drafters' or two targets').

    Attributes:
        key: dotted key (a nested dict's fields flattened one level: ``eagle_config.*`` for drafters,
            ``rope_scaling.*`` for targets).
        a: value in A (None when absent).
        b: value in B.
        category: one of the family's categories (:attr:`RuleTable.order`): for drafters ``architecture``,
            ``behaviour``, ``loader``, ``metadata`` or ``unknown``.
        why: one line on what the difference does.
    """

    key: str
    a: Any
    b: Any
    category: str
    why: str


@dataclass(frozen=True)
class RuleTable:
    """One family's reading of config keys: what a difference in each means, and which differences are none.

    Attributes:
        rules: key (dotted for a nested field) -> its rule.
        order: the categories, most telling first and ``unknown`` last: the order diffs are listed in.
        nested: keys whose dict value is read field by field, as ``key.field`` (:func:`flatten`).
        inner: nested keys whose fields mean what the same key means at the top level.
        by_head: the rule of a dotted key no rule names, by the part before its first dot.
        defaults: what an absent key means to every reader: writing the default is no difference.
        null_is_absent: a null value reads as an absent key (as transformers reads a config), not as a value.
    """

    rules: Mapping[str, KeyRule]
    order: tuple[str, ...]
    nested: tuple[str, ...] = ()
    inner: tuple[str, ...] = ()
    by_head: Mapping[str, KeyRule] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    null_is_absent: bool = False

    def rule(self, key: str) -> KeyRule:
        """Category and reason for a (possibly dotted) key; unknown keys stay unknown."""
        if key in self.rules:
            return self.rules[key]
        head, dot, rest = key.partition(".")
        if not dot:
            return UNKNOWN
        return self.rule(rest) if head in self.inner else self.by_head.get(head, UNKNOWN)


def flatten(cfg: Mapping[str, Any], nested: tuple[str, ...]) -> dict[str, Any]:
    """The config with each ``nested`` key's dict value spread one level, as ``key.field`` (other values kept)."""
    out = {}
    for k, v in cfg.items():
        if k in nested and isinstance(v, dict):
            for kk, vv in v.items():
                out[f"{k}.{kk}"] = vv
        else:
            out[k] = v
    return out


_MISSING = object()


def diff_views(a: Mapping[str, Any], b: Mapping[str, Any], rules: RuleTable) -> list[ConfigDiff]:
    """Every key whose value differs between two flat views of configs, with its rule, in the table's order.

    An absent key is no difference where the other side holds its default (:attr:`RuleTable.defaults`);
    with :attr:`RuleTable.null_is_absent` a null is absent. An absent value is reported as None.
    """
    absent = None if rules.null_is_absent else _MISSING
    diffs = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key, absent), b.get(key, absent)
        default = rules.defaults.get(key, _MISSING)
        if va == vb or (va is absent and vb == default) or (vb is absent and va == default):
            continue
        rule = rules.rule(key)
        diffs.append(ConfigDiff(key, None if va is _MISSING else va, None if vb is _MISSING else vb,
                                rule.category, rule.why))
    return sorted(diffs, key=lambda d: (rules.order.index(d.category), d.key))


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


# --------------------------------------------------------------------------- drafters


def comparison_view(cfg: dict[str, Any]) -> dict[str, Any]:
    """One spelling of a drafter config for diffs: a format conversion alone shows no difference.

    A speculators config becomes the flat SpecForge-style config (layer fields from
    ``transformer_layer_config``, vLLM's top-level aux ids as nested layer outputs, one less) with
    its flags kept: ``norm_before_fc``, ``norm_before_residual``, ``fc_norm``, and its ``norm_output``
    as ``speculators.norm_output`` (it means something else than SpecForge's). SpecForge's
    ``norm_output: true`` is its default and is dropped. Not a conversion for writing: see
    :func:`eaglelab.checkpoints.variants.to_specforge_config`.
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
