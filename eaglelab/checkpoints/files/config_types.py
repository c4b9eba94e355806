"""The JSON type and range of every config field eaglelab reads, checked once when a config is read.

Drafter and target configs come from outside (a user's folder, a hub repository): before any
reader uses a field, its value is checked here against :data:`FIELD_TYPES`, in every place the
field can sit (top level, ``eagle_config``, speculators' ``transformer_layer_config``, a
multimodal target's ``text_config`` / ``language_config``, RoPE's ``rope_scaling`` /
``rope_parameters``). A wrong type is a :class:`~eaglelab.errors.ConfigError` naming the field's
path, never a coercion (``"8"`` is not 8, ``true`` is not 1, ``[1.0]`` is not a layer id) and
never a crash further in. ``null`` means "absent", as transformers reads it. Fields eaglelab
does not read are left alone.

RoPE's fields are also checked against each other (:func:`rope_problem`): a base above 1, a scaling
factor of at least 1, llama3's band and YaRN's ramp the right way round, YaRN's attention factor
bounded, as transformers validates them. A config that passes is one the model code can compute.
"""

from __future__ import annotations

import math
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
                     # multi-head latent attention and mixture of experts (DeepSeek-V3, Kimi; Qwen-MoE; Mixtral)
                     "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                     "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "num_experts",
                     "num_local_experts", "moe_layer_freq", "decoder_sparse_step"), SIZE),
    **dict.fromkeys(("first_k_dense_replace", "n_shared_experts", "shared_expert_intermediate_size"), COUNT),
    **dict.fromkeys(("eagle_aux_hidden_state_layer_ids", "mlp_only_layers"), LAYER_IDS),
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


#: The largest layer count (and layer id) a config may claim: a hundred times the deepest published model (Llama 3.1
#: 405B: 126 layers). Everything that walks a model's layers walks at most this many.
MAX_LAYERS = 100_000
#: The largest count of experts or heads: published models route to at most 384 experts (Kimi-K2) and 128 heads.
MAX_UNITS = 1 << 20
#: The largest width (hidden, head, MLP, latent ranks) and vocabulary: published ones are at most 2^18 (Gemma's
#: 262,144 tokens; widths up to 53,248).
MAX_WIDTH = 1 << 24
#: Fields whose ceiling is below :data:`~eaglelab.inputs.MAX_FIELD_INT` (the rest: positions, which nothing walks):
#: a 1 KB config claiming 2^40 layers is refused here, before anything loops or allocates over it.
FIELD_CEILINGS: dict[str, int] = {
    **dict.fromkeys(("num_hidden_layers", "first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step"),
                    MAX_LAYERS),
    **dict.fromkeys(("num_attention_heads", "num_key_value_heads", "n_routed_experts", "num_experts_per_tok",
                     "num_experts", "num_local_experts", "n_shared_experts"), MAX_UNITS),
    **dict.fromkeys(("hidden_size", "head_dim", "intermediate_size", "vocab_size", "draft_vocab_size",
                     "target_hidden_size", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                     "v_head_dim", "moe_intermediate_size", "shared_expert_intermediate_size"), MAX_WIDTH),
}


def ceiling(key: str) -> int:
    """The largest value field ``key`` may hold (:data:`FIELD_CEILINGS`, else 2^53)."""
    return FIELD_CEILINGS.get(key, MAX_FIELD_INT)


_CHECKS = {
    SIZE: lambda v, top: _is_int(v) and 1 <= v <= top,
    COUNT: lambda v, top: _is_int(v) and 0 <= v <= top,
    LAYER_IDS: lambda v, top: isinstance(v, list) and all(_is_int(i) and 0 <= i < MAX_LAYERS for i in v),
    POSITIVE: lambda v, top: _is_number(v) and v > 0,
    NON_NEGATIVE: lambda v, top: _is_number(v) and v >= 0,
    FRACTION: lambda v, top: _is_number(v) and 0 < v <= 1,
    EPS: lambda v, top: _is_number(v) and 0 < v < 1,
    BOOL: lambda v, top: isinstance(v, bool),
    STRING: lambda v, top: isinstance(v, str),
    STRINGS: lambda v, top: isinstance(v, list) and all(isinstance(s, str) for s in v),
    OBJECT: lambda v, top: isinstance(v, dict),
}


#: The largest YaRN attention factor ``0.1 * mscale * ln(factor) + 1`` accepted (published models: 1.0 to 1.5).
#: It multiplies cos and sin, and an MLA layer's softmax scale takes its square: at most 100 keeps both
#: finite in float16.
MAX_YARN_MSCALE = 100.0


def float_of(v: Any) -> float:
    """``v`` as a float; an integer too large for one is infinity (a ``float()`` would raise)."""
    try:
        return float(v)
    except OverflowError:
        return math.inf


def yarn_mscale(factor: float, mscale: float) -> float:
    """YaRN's attention factor for ``factor`` and ``mscale`` (1 when the factor does not stretch)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def rope_problem(fields: dict[str, Any], prefix: str = "") -> str | None:
    """Why one set of RoPE fields cannot be computed, in one line naming the field (None: it can).

    The fields are those of one object (a config's top level, its ``rope_scaling`` or ``rope_parameters``,
    or a drafter's merged RoPE); only fields that are present and numbers are compared, as transformers'
    ``rope_config_validation`` compares them (``beta_fast`` / ``beta_slow`` with its defaults 32 / 1):

    - ``rope_theta`` above 1: the inverse frequencies are ``theta ** (-i / d)``, and YaRN divides by
      ``ln(theta)``; at 1 every position rotates alike, below 1 the frequencies grow without bound;
    - ``factor`` at least 1 (transformers: "must be a float or int >= 1"; below 1 frequencies grow);
    - llama3's ``high_freq_factor`` above ``low_freq_factor`` (the smoothing divides by their difference);
    - YaRN's ``beta_fast`` not below ``beta_slow`` (Kimi-K2 writes 1 and 1);
    - YaRN's attention factor for ``mscale`` / ``mscale_all_dim`` at most :data:`MAX_YARN_MSCALE`.
    """
    def num(key: str) -> float | None:
        v = fields.get(key)
        return float_of(v) if _is_number(v) else None

    theta, factor = num("rope_theta"), num("factor")
    if theta is not None and theta <= 1:
        return (f"field '{prefix}rope_theta' must be greater than 1 (RoPE's base; YaRN divides by ln(theta)), "
                f"got {shown(fields['rope_theta'])}")
    if factor is not None and factor < 1:
        return f"field '{prefix}factor' must be at least 1 (a RoPE scaling factor, as transformers checks it), " \
               f"got {shown(fields['factor'])}"
    low, high = num("low_freq_factor"), num("high_freq_factor")
    if low is not None and high is not None and high <= low:
        return (f"field '{prefix}high_freq_factor' must be greater than low_freq_factor (llama3 smooths between "
                f"them), got {shown(fields['high_freq_factor'])} and {shown(fields['low_freq_factor'])}")
    fast, slow = num("beta_fast"), num("beta_slow")
    if (fast is not None or slow is not None) and (fast or 32.0) < (slow or 1.0):
        return (f"field '{prefix}beta_fast' must not be below beta_slow (YaRN's ramp; defaults 32 and 1), "
                f"got {shown(fields.get('beta_fast'))} and {shown(fields.get('beta_slow'))}")
    for key in ("mscale", "mscale_all_dim"):
        m = num(key)
        if m is not None and factor is not None and not yarn_mscale(factor, m) <= MAX_YARN_MSCALE:
            return (f"field '{prefix}{key}' makes YaRN's attention factor 0.1 * {key} * ln(factor) + 1 exceed "
                    f"{MAX_YARN_MSCALE:g}, got {key} {shown(fields[key])} with factor {shown(fields['factor'])}")
    return None


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
            top = ceiling(key)
            if not _CHECKS[kind](value, top):
                bound = f" up to {top:,}" if kind in (SIZE, COUNT) and top < MAX_FIELD_INT else \
                    f" below {MAX_LAYERS:,}" if kind == LAYER_IDS else ""
                raise error(where, f"field {printable(prefix + key)!r} must be {kind}{bound}, got {shown(value)}")
        problem = rope_problem(obj, printable(prefix))
        if problem:
            raise error(where, problem)
        for key, value in obj.items():
            if key in _NESTED and isinstance(value, dict) and len(prefix.split(".")) < 4:
                stack.append((f"{prefix}{key}.", value))
                if key == "rope_parameters":  # transformers 5: one set per attention type
                    stack.extend((f"{prefix}{key}.{k}.", v) for k, v in value.items() if isinstance(v, dict))
    return cfg
