"""EAGLE-3 drafter schema: what a config implies, reading no files.

Facts follow ``docs/EAGLE3_FORMAT.md`` (SpecForge ``LlamaForCausalLMEagle3``): from a drafter
config, the expected key -> shape table; the classification of each config key by what a
difference in it does; and the conventions of the aux-layer ids in SGLang / SpecForge (nested,
layer outputs) and vLLM / speculators (top level, layer inputs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eaglelab.checkpoints.config_types import check_config_types
from eaglelab.errors import ConfigError

DEFAULT_DRAFT_VOCAB = 32000
SPECFORGE = "specforge"
SPECULATORS = "speculators"
FLOAT_DTYPES = frozenset({"F32", "F16", "BF16", "F64", "F8_E4M3", "F8_E5M2"})


@dataclass(frozen=True)
class DrafterSpec:
    """The weight-relevant and behaviour-relevant facts of one EAGLE-3 drafter config.

    Attributes:
        hidden_size: H, the drafter's width.
        target_hidden_size: Ht, width of each target hidden state fed to ``fc``.
        intermediate_size: I, MLP width.
        num_attention_heads: nh.
        num_key_value_heads: nkv.
        head_dim: d (H / nh when absent from the config).
        vocab_size: V, the target's vocabulary (rows of embed_tokens, length of t2d).
        draft_vocab_size: Vd, rows of lm_head and length of d2t.
        fc_norm: whether ``fc_norm.{0,1,2}`` RMSNorms precede ``fc``, one per target state (EAGLE-3.1).
        norm_before_fc: one RMSNorm (``input_norm``) over the concatenated target states (speculators).
        norm_before_residual: the attention residual is the normed hidden state (speculators).
        norm_before_head: ``norm`` is applied before ``lm_head`` (SpecForge ``norm_output``, default true).
        norm_fed_back: the normed state, not the raw one, is fed to the next step (speculators
            ``norm_output``, default false); logits are then ``lm_head`` of that state.
        qk_norm: per-head RMSNorms of queries and keys before RoPE (a speculators ``qwen3`` layer).
        aux_layer_ids: target layers read, as written in the config (None: tool default).
        aux_convention: ``sglang`` (nested ``eagle_config``, layer outputs), ``vllm``
            (top-level, layer inputs) or None when no ids are given.
        layer_prefix: ``midlayer`` (SpecForge / SGLang) or ``layers.0`` (speculators / vLLM).
        max_position_embeddings: positions the drafter was configured for.
        rms_norm_eps: epsilon of every RMSNorm.
        hidden_act: MLP activation.
        attention_bias: whether q/k/v/o carry biases (not in the reference layout).
    """

    hidden_size: int
    target_hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    draft_vocab_size: int
    fc_norm: bool = False
    norm_before_fc: bool = False
    norm_before_residual: bool = False
    norm_before_head: bool = True
    norm_fed_back: bool = False
    qk_norm: bool = False
    aux_layer_ids: tuple[int, ...] | None = None
    aux_convention: str | None = None
    layer_prefix: str = "midlayer"
    max_position_embeddings: int | None = None
    rms_norm_eps: float = 1e-6
    hidden_act: str = "silu"
    attention_bias: bool = False


@dataclass(frozen=True)
class ExpectedTensor:
    """One entry of the expected tensor table.

    Attributes:
        name: state-dict key.
        shape: expected shape.
        dtype: ``float`` (any float dtype, consistent across weights), ``I64`` or ``BOOL``.
        required: False for tensors loaders accept either way (``embed_tokens``).
        meaning: one line saying what the tensor is.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    required: bool
    meaning: str


def _int(cfg: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(where, f"field {key!r} must be a positive integer, got {value!r}")
    return value


def config_format(cfg: dict[str, Any]) -> str:
    """``speculators`` for a speculators / vLLM config (``transformer_layer_config``), else ``specforge``."""
    if "transformer_layer_config" in cfg or cfg.get("speculators_model_type") == "eagle3":
        return SPECULATORS
    return SPECFORGE


def layer_body(cfg: dict[str, Any]) -> dict[str, Any]:
    """The decoder layer's own fields: ``transformer_layer_config`` in speculators, the config itself in SpecForge."""
    if config_format(cfg) == SPECULATORS:
        body = cfg.get("transformer_layer_config") or {}
        return body if isinstance(body, dict) else {}
    return cfg


def eagle_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The nested ``eagle_config`` object SGLang / SpecForge read ({} when absent or not an object)."""
    nested = cfg.get("eagle_config")
    return nested if isinstance(nested, dict) else {}


def is_speculators_config(cfg: dict[str, Any]) -> bool:
    """True for a speculators / vLLM-format EAGLE-3 config (``transformer_layer_config``)."""
    return config_format(cfg) == SPECULATORS


def _eps(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ConfigError(where, f"field 'rms_norm_eps' must be a number in (0, 1), got {value!r}")
    return float(value)


def _flag(cfg: dict[str, Any], key: str, default: bool, where: str) -> bool:
    value = cfg.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(where, f"field {key!r} must be true or false, got {value!r}")
    return value


def is_eagle3_config(cfg: dict[str, Any]) -> bool:
    """True when ``cfg`` describes an EAGLE-3 drafter in either ecosystem format."""
    archs = cfg.get("architectures") or []
    return (
        any("eagle3" in str(a).lower() for a in archs)
        or is_speculators_config(cfg)
        or ("draft_vocab_size" in cfg and cfg.get("num_hidden_layers") == 1)
    )


def aux_layer_ids_from_config(cfg: dict[str, Any]) -> tuple[tuple[int, ...] | None, str | None]:
    """Return ``(ids, convention)`` as written in a drafter config.

    The nested ``eagle_config.eagle_aux_hidden_state_layer_ids`` is SGLang / SpecForge's
    (ids are layer outputs); a top-level ``eagle_aux_hidden_state_layer_ids`` is vLLM /
    speculators' (ids are layer inputs). Nested wins when both are present, as in SGLang.
    """
    if cfg.get("eagle_config") is not None and not isinstance(cfg["eagle_config"], dict):
        raise ConfigError("config.json", f"field 'eagle_config' must be an object, got {cfg['eagle_config']!r}")
    nested = eagle_config(cfg).get("eagle_aux_hidden_state_layer_ids")
    if nested:
        return _layer_ids(nested, "eagle_config.eagle_aux_hidden_state_layer_ids"), "sglang"
    top = cfg.get("eagle_aux_hidden_state_layer_ids")
    if top:
        return _layer_ids(top, "eagle_aux_hidden_state_layer_ids"), "vllm"
    return None, None


def _layer_ids(ids: Any, key: str) -> tuple[int, ...]:
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise ConfigError("config.json", f"field {key!r} must be a list of layer numbers, got {ids!r}")
    return tuple(ids)


def drafter_spec_from_config(cfg: dict[str, Any], where: str = "config.json") -> DrafterSpec:
    """Build a DrafterSpec from a SpecForge-style or speculators-style drafter config.

    Raises:
        ConfigError: not an EAGLE-3 config, or a size field missing / invalid.
    """
    check_config_types(cfg, where)
    if not is_eagle3_config(cfg):
        archs = cfg.get("architectures")
        raise ConfigError(
            where,
            f"not an EAGLE-3 drafter config (architectures={archs!r}, no draft_vocab_size); "
            "expected e.g. LlamaForCausalLMEagle3",
        )
    layer_prefix = "midlayer"
    body = cfg
    ids, convention = aux_layer_ids_from_config(cfg)
    if is_speculators_config(cfg):
        if not isinstance(cfg.get("transformer_layer_config"), dict):
            raise ConfigError(where, "speculators config without a 'transformer_layer_config' object")
        body = dict(layer_body(cfg))
        layer_prefix = "layers.0"
        body.setdefault("draft_vocab_size", cfg.get("draft_vocab_size"))
        body.setdefault("target_hidden_size", cfg.get("target_hidden_size"))
        # speculators' flags live at the top level; norm_output means "feed the normed state back"
        flags = dict(fc_norm=_flag(cfg, "fc_norm", False, where),
                     norm_before_fc=_flag(cfg, "norm_before_fc", False, where),
                     norm_before_residual=_flag(cfg, "norm_before_residual", False, where),
                     norm_before_head=True, norm_fed_back=_flag(cfg, "norm_output", False, where),
                     qk_norm=body.get("model_type") == "qwen3")
    else:
        # SpecForge's norm_output: "norm before lm_head", default true; norm_before_fc as SGLang reads it
        # (nested first); norm_before_residual is read by neither: see variants.refusals
        flags = dict(fc_norm=_flag(cfg, "fc_norm", False, where),
                     norm_before_fc=_flag(eagle_config(cfg), "norm_before_fc", _flag(cfg, "norm_before_fc", False, where),
                                          where),
                     norm_before_head=_flag(cfg, "norm_output", True, where))
    if body.get("num_hidden_layers", 1) != 1:
        raise ConfigError(where, f"EAGLE-3 drafters have one layer, config says {body['num_hidden_layers']}")
    hidden = _int(body, "hidden_size", where)
    heads = _int(body, "num_attention_heads", where)
    head_dim = body.get("head_dim") or hidden // heads
    return DrafterSpec(
        hidden_size=hidden,
        # absent or null (speculators' default): the target is as wide as the drafter
        target_hidden_size=hidden if body.get("target_hidden_size") is None else _int(body, "target_hidden_size", where),
        intermediate_size=_int(body, "intermediate_size", where),
        num_attention_heads=heads,
        num_key_value_heads=_int(body, "num_key_value_heads", where, body.get("num_key_value_heads") or heads),
        head_dim=_int({"head_dim": head_dim}, "head_dim", where),
        vocab_size=_int(body, "vocab_size", where),
        draft_vocab_size=_int(body, "draft_vocab_size", where, body.get("draft_vocab_size") or DEFAULT_DRAFT_VOCAB),
        **flags,
        aux_layer_ids=ids,
        aux_convention=convention,
        layer_prefix=layer_prefix,
        max_position_embeddings=body.get("max_position_embeddings"),
        rms_norm_eps=_eps(body.get("rms_norm_eps", 1e-6), where),
        hidden_act=str(body.get("hidden_act", "silu")),
        attention_bias=_flag(body, "attention_bias", False, where),
    )


def expected_eagle3_tensors(spec: DrafterSpec) -> dict[str, ExpectedTensor]:
    """The key -> shape table a drafter with ``spec`` must have.

    Returns:
        name -> ExpectedTensor, in the order of the data flow (fc, midlayer, norm, lm_head,
        vocabulary maps); ``embed_tokens.weight`` is listed as optional.
    """
    H, Ht, I = spec.hidden_size, spec.target_hidden_size, spec.intermediate_size
    nh, nkv, d = spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim
    V, Vd, p = spec.vocab_size, spec.draft_vocab_size, spec.layer_prefix
    rows: list[ExpectedTensor] = [
        ExpectedTensor("embed_tokens.weight", (V, H), "float", False,
                       f"the target's input embedding, {V} rows = the target's vocabulary; frozen, "
                       "often not saved (SGLang injects the target's)"),
    ]
    if spec.norm_before_fc:
        rows.append(ExpectedTensor("input_norm.weight", (3 * Ht,), "float", True,
                                   "one RMSNorm over concat(low, mid, high) before fc (speculators norm_before_fc)"))
    if spec.fc_norm:
        rows += [ExpectedTensor(f"fc_norm.{i}.weight", (Ht,), "float", True,
                                f"RMSNorm of aux hidden state {i} ({['low', 'mid', 'high'][i]}) before fc")
                 for i in range(3)]
    rows += [
        ExpectedTensor("fc.weight", (H, 3 * Ht), "float", True,
                       "projects concat(low, mid, high) target hidden states to the drafter's width"),
        ExpectedTensor(f"{p}.hidden_norm.weight", (H,), "float", True, "RMSNorm of the incoming hidden state"),
        ExpectedTensor(f"{p}.input_layernorm.weight", (H,), "float", True, "RMSNorm of the token embedding"),
        ExpectedTensor(f"{p}.self_attn.q_proj.weight", (nh * d, 2 * H), "float", True,
                       "query projection of concat(embedding, hidden), 2H wide"),
        ExpectedTensor(f"{p}.self_attn.k_proj.weight", (nkv * d, 2 * H), "float", True, "key projection, 2H wide"),
        ExpectedTensor(f"{p}.self_attn.v_proj.weight", (nkv * d, 2 * H), "float", True, "value projection, 2H wide"),
        ExpectedTensor(f"{p}.self_attn.o_proj.weight", (H, nh * d), "float", True, "attention output projection"),
        *([ExpectedTensor(f"{p}.self_attn.{n}_norm.weight", (d,), "float", True,
                          f"per-head RMSNorm of the {w} before RoPE (qwen3 layer)")
           for n, w in (("q", "queries"), ("k", "keys"))] if spec.qk_norm else []),
        ExpectedTensor(f"{p}.post_attention_layernorm.weight", (H,), "float", True, "RMSNorm before the MLP"),
        ExpectedTensor(f"{p}.mlp.gate_proj.weight", (I, H), "float", True, "MLP gate"),
        ExpectedTensor(f"{p}.mlp.up_proj.weight", (I, H), "float", True, "MLP up projection"),
        ExpectedTensor(f"{p}.mlp.down_proj.weight", (H, I), "float", True, "MLP down projection"),
        ExpectedTensor("norm.weight", (H,), "float", True, "final RMSNorm before lm_head"),
        ExpectedTensor("lm_head.weight", (Vd, H), "float", True,
                       f"the drafter's own head over its {Vd}-token draft vocabulary"),
        ExpectedTensor("d2t", (Vd,), "I64", True, "draft id -> target id offset: target = draft + d2t[draft]"),
        ExpectedTensor("t2d", (V,), "BOOL", True, "t2d[target id] is true when the token is in the draft vocabulary"),
    ]
    if spec.attention_bias:
        rows += [ExpectedTensor(f"{p}.self_attn.{n}_proj.bias", (o,), "float", True, f"{n}_proj bias")
                 for n, o in (("q", nh * d), ("k", nkv * d), ("v", nkv * d), ("o", H))]
    return {r.name: r for r in rows}


def table_problems(spec: DrafterSpec, cfg: dict[str, Any]) -> list[str]:
    """Why the expected-tensor table of ``cfg`` would not form one EAGLE-3 layer (empty: consistent).

    Checks the wiring the format fixes: ``fc`` maps three target states to the drafter's width,
    q/k/v read concat(embedding, hidden) (2H), ``o_proj`` and the MLP return to H, ``lm_head``
    covers the draft vocabulary and the maps match it, ``fc_norm`` tensors exist exactly when the
    config asks for them, every dimension is positive, and the config differs from itself in nothing.
    """
    t = expected_eagle3_tensors(spec)
    H, Ht, p = spec.hidden_size, spec.target_hidden_size, spec.layer_prefix
    q, kv = spec.num_attention_heads * spec.head_dim, spec.num_key_value_heads * spec.head_dim
    want = {"fc.weight": (H, 3 * Ht), f"{p}.self_attn.q_proj.weight": (q, 2 * H),
            f"{p}.self_attn.k_proj.weight": (kv, 2 * H), f"{p}.self_attn.v_proj.weight": (kv, 2 * H),
            f"{p}.self_attn.o_proj.weight": (H, q), f"{p}.mlp.down_proj.weight": (H, spec.intermediate_size),
            "lm_head.weight": (spec.draft_vocab_size, H), "d2t": (spec.draft_vocab_size,), "t2d": (spec.vocab_size,)}
    problems = [f"{name} is {list(t[name].shape) if name in t else 'missing'}, the layer needs {list(shape)}"
                for name, shape in want.items() if name not in t or t[name].shape != shape]
    problems += [f"{name} has a non-positive dimension {list(e.shape)}" for name, e in t.items() if min(e.shape) <= 0]
    if spec.draft_vocab_size > spec.vocab_size:
        problems.append(f"draft vocabulary {spec.draft_vocab_size} exceeds the target vocabulary {spec.vocab_size}")
    if ("fc_norm.0.weight" in t) != bool(cfg.get("fc_norm")):
        problems.append("fc_norm tensors do not follow the config's fc_norm flag")
    if spec.num_attention_heads % spec.num_key_value_heads:
        problems.append(f"{spec.num_attention_heads} query heads do not group over {spec.num_key_value_heads} kv heads")
    if diff_configs(cfg, cfg):
        problems.append("the config differs from itself (unstable keys)")
    return problems


def expected_parameters(spec: DrafterSpec, include_embedding: bool = False) -> int:
    """Parameter count implied by a config (vocabulary maps excluded)."""
    total = 0
    for name, t in expected_eagle3_tensors(spec).items():
        if t.dtype != "float" or (name == "embed_tokens.weight" and not include_embedding):
            continue
        n = 1
        for s in t.shape:
            n *= s
        total += n
    return total


def strip_prefix(name: str) -> str:
    """Key without a leading ``model.`` (SGLang tries both spellings)."""
    return name[len("model."):] if name.startswith("model.") else name


def canonical_tensor_name(name: str) -> str:
    """SpecForge spelling of a key from any layout (``model.`` dropped, ``layers.0.`` -> ``midlayer.``)."""
    name = strip_prefix(name)
    return "midlayer." + name[len("layers.0."):] if name.startswith("layers.0.") else name


def check_tensors_against_spec(
    spec: DrafterSpec, tensors: dict[str, tuple[tuple[int, ...], str]]
) -> list[str]:
    """Problems of a tensor table (name -> (shape, dtype)) against the expected table.

    Reports missing, unexpected, wrong-shaped and wrong-dtype tensors, and mixed float dtypes.
    Keys with a ``model.`` prefix are matched as SGLang would.
    """
    expected = expected_eagle3_tensors(spec)
    actual = {strip_prefix(k): v for k, v in tensors.items()}
    problems: list[str] = []
    for name, exp in expected.items():
        if name not in actual:
            if exp.required:
                problems.append(f"missing tensor {name} (expected {list(exp.shape)})")
            continue
        shape, dtype = actual[name]
        if tuple(shape) != exp.shape:
            problems.append(f"{name}: shape {list(shape)}, expected {list(exp.shape)}")
        if exp.dtype == "float" and dtype not in FLOAT_DTYPES:
            problems.append(f"{name}: dtype {dtype}, expected a float dtype")
        elif exp.dtype != "float" and dtype != exp.dtype:
            problems.append(f"{name}: dtype {dtype}, expected {exp.dtype}")
    for name in actual:
        if name not in expected:
            problems.append(f"unexpected tensor {name} (SGLang drops it silently, vLLM raises)")
    float_dtypes = {actual[n][1] for n, e in expected.items() if n in actual and e.dtype == "float"}
    if len(float_dtypes) > 1:
        problems.append(f"weights mix float dtypes {sorted(float_dtypes)}")
    return problems


def check_vocab_maps(d2t, t2d, draft_vocab_size: int) -> list[str]:
    """Invariants of the vocabulary maps: ``t2d.sum() == Vd`` and ``nonzero(t2d) == arange(Vd) + d2t``.

    Args:
        d2t: integer array [Vd].
        t2d: bool array [V].
        draft_vocab_size: Vd from the config.
    """
    import numpy as np

    d2t = np.asarray(d2t).astype(np.int64)
    t2d = np.asarray(t2d).astype(bool)
    problems = []
    if t2d.ndim != 1:
        return [f"t2d has shape {list(t2d.shape)}, expected one dimension [V]"]
    if d2t.shape != (draft_vocab_size,):
        problems.append(f"d2t has shape {list(d2t.shape)}, expected [{draft_vocab_size}]")
        return problems
    if int(t2d.sum()) != draft_vocab_size:
        problems.append(f"t2d marks {int(t2d.sum())} tokens, expected draft_vocab_size {draft_vocab_size}")
    targets = np.arange(draft_vocab_size) + d2t
    if (targets < 0).any() or (targets >= t2d.shape[0]).any():
        problems.append("d2t maps draft ids outside the target vocabulary")
    elif not np.array_equal(np.nonzero(t2d)[0], targets):
        if np.any(np.diff(targets) <= 0):
            problems.append("arange(Vd) + d2t is not strictly increasing (draft vocabulary must be sorted)")
        else:
            problems.append("nonzero(t2d) != arange(Vd) + d2t (the two maps disagree)")
    return problems


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


# --------------------------------------------------------------------------- config diff

@dataclass(frozen=True)
class KeyRule:
    """How a difference in one config key matters."""

    category: str
    why: str


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


@dataclass(frozen=True)
class ConfigDiff:
    """One differing key between two configs.

    Attributes:
        key: dotted key (nested dicts flattened one level for ``eagle_config``).
        a: value in A (None when absent).
        b: value in B.
        category: ``architecture``, ``behaviour``, ``loader``, ``metadata`` or ``unknown``.
        why: one line on what the difference does.
    """

    key: str
    a: Any
    b: Any
    category: str
    why: str


_MISSING = object()


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


def _flatten(cfg: dict[str, Any]) -> dict[str, Any]:
    cfg = _one_rope_spelling(cfg)
    out = {}
    for k, v in cfg.items():
        if k in ("eagle_config", "transformer_layer_config") and isinstance(v, dict):
            for kk, vv in v.items():
                out[f"{k}.{kk}"] = vv
        else:
            out[k] = v
    return out


def classify_key(key: str) -> KeyRule:
    """Category and reason for a (possibly dotted) config key; unknown keys stay unknown."""
    if key in CONFIG_KEY_RULES:
        return CONFIG_KEY_RULES[key]
    if key.startswith("transformer_layer_config."):
        return classify_key(key.split(".", 1)[1])
    if key.startswith("eagle_config."):
        return KeyRule(_BEH, "EAGLE settings read by SGLang / SpecForge")
    return KeyRule("unknown", "not a key eaglelab knows; check what reads it")


def diff_configs(a: dict[str, Any], b: dict[str, Any]) -> list[ConfigDiff]:
    """Every key whose value differs between two configs, classified.

    Speculators configs are compared through their SpecForge-style view (:func:`comparison_view`),
    so a format conversion alone shows no difference. Architecture differences come first,
    then behaviour, loader, metadata, unknown.
    """
    fa, fb = _flatten(comparison_view(a or {})), _flatten(comparison_view(b or {}))
    diffs = []
    for key in sorted(set(fa) | set(fb)):
        va, vb = fa.get(key, _MISSING), fb.get(key, _MISSING)
        if va == vb:
            continue
        rule = classify_key(key)
        diffs.append(ConfigDiff(key, None if va is _MISSING else va, None if vb is _MISSING else vb,
                                rule.category, rule.why))
    order = {_ARCH: 0, _BEH: 1, _LOAD: 2, _META: 3, "unknown": 4}
    return sorted(diffs, key=lambda d: (order[d.category], d.key))


# --------------------------------------------------------------------------- aux layers

def default_aux_layer_outputs(num_target_layers: int) -> tuple[int, int, int]:
    """Layer *outputs* both SGLang and vLLM read by default for an L-layer target: [1, L//2-1, L-4]."""
    L = num_target_layers
    return (1, L // 2 - 1, L - 4)


def aux_ids_as_layer_outputs(ids: tuple[int, ...] | None, convention: str | None,
                             num_target_layers: int) -> tuple[int, ...]:
    """Translate configured ids to 0-based decoder-layer *outputs* (None: the default).

    SGLang ids are layer outputs already; a vLLM id ``i`` is the input of layer i, which is
    the output of layer i - 1.
    """
    if ids is None:
        return default_aux_layer_outputs(num_target_layers)
    if convention == "vllm":
        return tuple(i - 1 for i in ids)
    return tuple(ids)


@dataclass
class Verdict:
    """A compatibility verdict with its reasons.

    Attributes:
        level: ``interchangeable``, ``warm-start`` or ``incompatible``.
        reasons: one line each, the most serious first.
    """

    level: str
    reasons: list[str] = field(default_factory=list)


_LEVELS = {"interchangeable": 0, "warm-start": 1, "incompatible": 2}


def _escalate(current: str, new: str) -> str:
    return new if _LEVELS[new] > _LEVELS[current] else current


def drafter_verdict(a: DrafterSpec, b: DrafterSpec, diffs: list[ConfigDiff]) -> Verdict:
    """Can drafter A's weights take drafter B's slot (and vice versa)?

    interchangeable: same tensor shapes and same behaviour-relevant settings;
    warm-start: the body loads but something must be re-initialised or re-mapped, or the
    drafter was trained under other settings (aux layers, RoPE) and needs fine-tuning;
    incompatible: the body's shapes differ, so no weight carries over.
    """
    level, reasons = "interchangeable", []
    body = [("hidden_size", a.hidden_size, b.hidden_size),
            ("target_hidden_size", a.target_hidden_size, b.target_hidden_size),
            ("intermediate_size", a.intermediate_size, b.intermediate_size),
            ("num_attention_heads", a.num_attention_heads, b.num_attention_heads),
            ("num_key_value_heads", a.num_key_value_heads, b.num_key_value_heads),
            ("head_dim", a.head_dim, b.head_dim)]
    for key, va, vb in body:
        if va != vb:
            level = "incompatible"
            reasons.append(f"{key} {va} vs {vb}: the drafter body's weights have other shapes")
    if a.vocab_size != b.vocab_size:
        level = _escalate(level, "warm-start")
        reasons.append(f"target vocabulary {a.vocab_size} vs {b.vocab_size}: t2d and embed_tokens differ; "
                       "rebuild the vocabulary map for the new tokenizer and retrain lm_head rows")
    if a.draft_vocab_size != b.draft_vocab_size:
        level = _escalate(level, "warm-start")
        reasons.append(f"draft vocabulary {a.draft_vocab_size} vs {b.draft_vocab_size}: lm_head and d2t "
                       "must be re-initialised (the body carries over)")
    if a.fc_norm != b.fc_norm:
        level = _escalate(level, "warm-start")
        reasons.append("fc_norm differs: the fc_norm weights exist on one side only (initialise to ones)")
    if a.qk_norm != b.qk_norm:
        level = _escalate(level, "warm-start")
        reasons.append("decoder layer type differs (qwen3's q_norm / k_norm on one side only): initialise them to ones")
    if a.norm_before_fc != b.norm_before_fc:
        level = _escalate(level, "warm-start")
        reasons.append("norm_before_fc differs: input_norm exists on one side only (initialise to ones)")
    if a.aux_layer_ids is not None and b.aux_layer_ids is not None:
        # compare as layer outputs: vLLM-style ids are one more than SGLang-style ones
        out_a = aux_ids_as_layer_outputs(a.aux_layer_ids, a.aux_convention, 0)
        out_b = aux_ids_as_layer_outputs(b.aux_layer_ids, b.aux_convention, 0)
        if out_a != out_b:
            level = _escalate(level, "warm-start")
            reasons.append(f"aux layers (as layer outputs) {list(out_a)} vs {list(out_b)}: "
                           "fc was trained on other layers")
    elif (a.aux_layer_ids is None) != (b.aux_layer_ids is None):
        reasons.append("one config names aux layers, the other relies on the default [1, L//2-1, L-4]; "
                       "check them against the target with --target")
    for d in diffs:
        if d.key in ("rope_theta", "rope_scaling", "rope_parameters", "hidden_act", "rms_norm_eps",
                     "norm_output", "speculators.norm_output", "norm_before_residual"):
            level = _escalate(level, "warm-start")
            reasons.append(f"{d.key} {d.a!r} vs {d.b!r}: {d.why}; fine-tune before serving")
        elif d.key == "max_position_embeddings":
            reasons.append(f"max_position_embeddings {d.a} vs {d.b}: weights load either way; "
                           "check acceptance at long context")
        elif d.category == "unknown":
            reasons.append(f"unknown key {d.key}: {d.a!r} vs {d.b!r}, not judged")
    if level == "interchangeable" and not reasons:
        reasons.append("same shapes and behaviour settings; differences, if any, are metadata")
    elif level == "interchangeable":
        reasons.insert(0, "same tensor shapes; the weights load into either slot")
    return Verdict(level, reasons)


def target_layer_count(target_cfg: dict[str, Any]) -> int | None:
    """``num_hidden_layers`` of a target config, looking inside ``text_config`` for VL models."""
    for cfg in (target_cfg, target_cfg.get("text_config") or {}, target_cfg.get("language_config") or {}):
        if isinstance(cfg.get("num_hidden_layers"), int):
            return cfg["num_hidden_layers"]
    return None


def _target_field(target_cfg: dict[str, Any], key: str):
    for cfg in (target_cfg, target_cfg.get("text_config") or {}, target_cfg.get("language_config") or {}):
        if key in cfg:
            return cfg[key]
    return None


def drafter_vs_target(spec: DrafterSpec, drafter_cfg: dict[str, Any], target_cfg: dict[str, Any]) -> Verdict:
    """Does a drafter fit a target? Hidden size, vocabulary, aux layers and their convention, context.

    Returns:
        Verdict with level ``interchangeable`` (fits as is), ``warm-start`` (loads but reads
        other layers or positions than it should) or ``incompatible`` (cannot load).
    """
    level, reasons = "interchangeable", []
    t_hidden = _target_field(target_cfg, "hidden_size")
    t_vocab = _target_field(target_cfg, "vocab_size")
    L = target_layer_count(target_cfg)
    if t_hidden is not None and t_hidden != spec.target_hidden_size:
        level = "incompatible"
        reasons.append(f"target hidden_size {t_hidden} but drafter fc expects 3 x {spec.target_hidden_size}")
    if t_vocab is not None and t_vocab != spec.vocab_size:
        level = "incompatible"
        reasons.append(f"target vocab_size {t_vocab} but drafter t2d / embed_tokens have {spec.vocab_size}")
    if L is not None:
        outs = aux_ids_as_layer_outputs(spec.aux_layer_ids, spec.aux_convention, L)
        bad = [i for i in outs if not 0 <= i < L]
        if bad:
            level = "incompatible"
            reasons.append(f"aux layers {list(outs)} (as layer outputs) fall outside the target's {L} layers")
        default = default_aux_layer_outputs(L)
        if spec.aux_layer_ids is None:
            reasons.append(f"no aux ids in the config: SGLang and vLLM both read layer outputs {list(default)}")
        elif spec.aux_convention == "sglang":
            reasons.append(
                f"nested ids {list(spec.aux_layer_ids)} (SGLang / SpecForge convention): SGLang captures "
                f"outputs of layers {list(outs)}; vLLM ignores the nested field and captures outputs "
                f"{list(default)}" + ("" if outs == default else " — a mismatch: serve on SGLang, or add "
                                      f"top-level ids {[i + 1 for i in outs]} for vLLM"))
        else:
            reasons.append(
                f"top-level ids {list(spec.aux_layer_ids)} (vLLM / speculators convention, layer inputs): "
                f"vLLM captures outputs of layers {list(outs)}; SGLang ignores the top-level field and "
                f"captures outputs {list(default)}" + ("" if outs == default else " — a mismatch: add nested "
                                                       f"eagle_config ids {list(outs)} for SGLang"))
    t_ctx = _target_field(target_cfg, "max_position_embeddings")
    d_ctx = spec.max_position_embeddings
    if t_ctx and d_ctx and d_ctx < t_ctx:
        reasons.append(f"drafter configured for {d_ctx} positions, target for {t_ctx}: expect lower "
                       "acceptance on prompts longer than the drafter's training context")
    if not reasons:
        reasons.append("hidden size, vocabulary and aux layers fit the target")
    return Verdict(level, reasons)
