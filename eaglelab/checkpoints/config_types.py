"""The JSON type and range of every config field eaglelab reads, checked once when a config is read.

Drafter and target configs come from outside (a user's folder, a hub repository): before any
reader uses a field, its value is checked here against :data:`FIELD_TYPES`, in every place the
field can sit (top level, ``eagle_config``, speculators' ``transformer_layer_config``, a
multimodal target's ``text_config`` / ``language_config``, RoPE's ``rope_scaling`` /
``rope_parameters``). A wrong type is a :class:`~eaglelab.errors.ConfigError` naming the field's
path, never a coercion (``"8"`` is not 8, ``true`` is not 1, ``[1.0]`` is not a layer id) and
never a crash further in. ``null`` means "absent", as transformers reads it. Fields eaglelab
does not read are left alone.
"""

from __future__ import annotations

from typing import Any

from eaglelab.errors import ConfigError
from eaglelab.inputs import MAX_FIELD_INT, json_type, printable, shown

SIZE = "a positive integer"
COUNT = "an integer >= 0"
LAYER_IDS = "a list of layer numbers (integers >= 0)"
POSITIVE = "a positive number"
NON_NEGATIVE = "a number >= 0"
FRACTION = "a number in (0, 1]"
EPS = "a number in (0, 1)"
BOOL = "true or false"
STRING = "a string"
STRINGS = "a list of strings"
OBJECT = "an object"

#: field -> the kind of value it must hold.
FIELD_TYPES: dict[str, str] = {
    **dict.fromkeys(("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
                     "vocab_size", "draft_vocab_size", "target_hidden_size", "num_hidden_layers",
                     "max_position_embeddings", "original_max_position_embeddings",
                     # multi-head latent attention and mixture of experts (DeepSeek-V3, Kimi)
                     "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                     "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "num_experts"), SIZE),
    **dict.fromkeys(("first_k_dense_replace", "n_shared_experts"), COUNT),
    "eagle_aux_hidden_state_layer_ids": LAYER_IDS,
    **dict.fromkeys(("rope_theta", "factor", "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow"),
                    POSITIVE),
    **dict.fromkeys(("mscale", "mscale_all_dim"), NON_NEGATIVE),
    "partial_rotary_factor": FRACTION,
    "rms_norm_eps": EPS,
    **dict.fromkeys(("fc_norm", "norm_before_fc", "norm_before_residual", "norm_output", "tie_word_embeddings",
                     "attention_bias", "mlp_bias", "use_aux_hidden_state", "use_input_layernorm_in_first_layer",
                     "use_last_layernorm", "use_mtp_layernorm"), BOOL),
    **dict.fromkeys(("hidden_act", "model_type", "torch_dtype", "dtype", "speculators_model_type", "rope_type",
                     "type"), STRING),
    **dict.fromkeys(("architectures", "layer_types"), STRINGS),
    **dict.fromkeys(("eagle_config", "transformer_layer_config", "text_config", "language_config", "rope_scaling",
                     "rope_parameters"), OBJECT),
}

#: Objects whose fields are checked too (a config's sub-configs).
_NESTED = ("eagle_config", "transformer_layer_config", "text_config", "language_config", "rope_scaling",
           "rope_parameters")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


_CHECKS = {
    SIZE: lambda v: _is_int(v) and 1 <= v <= MAX_FIELD_INT,
    COUNT: lambda v: _is_int(v) and 0 <= v <= MAX_FIELD_INT,
    LAYER_IDS: lambda v: isinstance(v, list) and all(_is_int(i) and 0 <= i <= 100_000 for i in v),
    POSITIVE: lambda v: _is_number(v) and v > 0,
    NON_NEGATIVE: lambda v: _is_number(v) and v >= 0,
    FRACTION: lambda v: _is_number(v) and 0 < v <= 1,
    EPS: lambda v: _is_number(v) and 0 < v < 1,
    BOOL: lambda v: isinstance(v, bool),
    STRING: lambda v: isinstance(v, str),
    STRINGS: lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v),
    OBJECT: lambda v: isinstance(v, dict),
}


def check_config_types(cfg: Any, where: str, error: type[ConfigError] = ConfigError) -> dict[str, Any]:
    """Check every known field of a config (and of its sub-configs) for its JSON type and range.

    Args:
        cfg: the parsed config.
        where: the file (or hub id) for messages.

    Returns:
        ``cfg`` itself, now safe for the readers.

    Raises:
        ConfigError: naming the field's path and what it must hold, e.g.
            ``field 'eagle_config.eagle_aux_hidden_state_layer_ids' must be a list of layer numbers``.
    """
    where = printable(where)
    if not isinstance(cfg, dict):
        raise error(where, f"config is {json_type(cfg)}, not a JSON object")
    stack: list[tuple[str, dict[str, Any]]] = [("", cfg)]
    while stack:
        prefix, obj = stack.pop()
        for key, value in obj.items():
            kind = FIELD_TYPES.get(key)
            if kind is None or value is None:
                continue
            if not _CHECKS[kind](value):
                raise error(where, f"field {printable(prefix + key)!r} must be {kind}, got {shown(value)}")
            if key in _NESTED and len(prefix.split(".")) < 4:
                stack.append((f"{prefix}{key}.", value))
                if key == "rope_parameters":  # transformers 5: one set per attention type
                    stack.extend((f"{prefix}{key}.{k}.", v) for k, v in value.items() if isinstance(v, dict))
    return cfg
