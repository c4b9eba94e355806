"""The EAGLE-3 drafter spec: what a drafter config says, in either format, reading no files.

Facts follow ``docs/EAGLE3_FORMAT.md`` (SpecForge ``LlamaForCausalLMEagle3``, SGLang's MLA drafter
``Eagle3DeepseekV2ForCausalLM``): the sizes, flags and aux-layer ids of a drafter config, SGLang /
SpecForge's (flat, nested ``eagle_config`` ids as layer outputs) or vLLM / speculators'
(``transformer_layer_config``, top-level ids as layer inputs), and the conversion of those ids to
layer outputs. A SpecForge-layout config without ``draft_vocab_size`` is a full-vocabulary drafter,
as SpecForge, SGLang and vLLM read it; speculators' own schema defaults it to 32000.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eaglelab.checkpoints.files.config_types import check_config_types
from eaglelab.errors import ConfigError
from eaglelab.inputs import shown

DEFAULT_DRAFT_VOCAB = 32000
SPECFORGE = "specforge"
SPECULATORS = "speculators"
FLOAT_DTYPES = frozenset({"F32", "F16", "BF16", "F64", "F8_E4M3", "F8_E5M2"})


#: The fields that make a drafter layer's attention multi-head latent attention (DeepSeek-V2/V3, Kimi).
MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")

#: ``q_lora_rank`` of an MLA config that leaves the key out, per ``model_type``: the default of the config class
#: the engines build (SGLang's ``KimiK2Config`` in ``python/sglang/srt/configs/kimi_k2.py``, transformers'
#: ``DeepseekV3Config`` / ``DeepseekV2Config``, which vLLM and TorchSpec build). An explicit null is one ``q_proj``.
MLA_Q_LORA_DEFAULTS = {"kimi_k2": 1536, "deepseek_v3": 1536, "deepseek_v2": 1536}

#: The config key TorchSpec's ``tools/convert_to_hf.py`` writes into every export (since its commit c6232bc).
TORCHSPEC_MARKER = "_torchspec_version"


@dataclass(frozen=True)
class MlaShape:
    """The shapes of a multi-head latent attention layer (DeepSeek-V2/V3, Kimi-K2.5 drafters).

    Attributes:
        q_lora_rank: rank of the query's low-rank path (``q_a_proj`` -> ``q_a_layernorm`` -> ``q_b_proj``);
            None: one ``q_proj`` reads the input directly.
        kv_lora_rank: width of the compressed key-value latent (``kv_a_proj_with_mqa``, ``kv_b_proj``).
        qk_nope_head_dim: per-head query / key dims without RoPE.
        qk_rope_head_dim: per-head query dims with RoPE, and the one key part shared by all heads.
        v_head_dim: per-head value dims.
    """

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        """Per-head query / key width: the no-RoPE part, then the RoPE part."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True)
class DrafterSpec:
    """The weight-relevant and behaviour-relevant facts of one EAGLE-3 drafter config.

    Attributes:
        hidden_size: H, the drafter's width.
        target_hidden_size: Ht, width of each target hidden state fed to ``fc``.
        intermediate_size: I, MLP width.
        num_attention_heads: nh.
        num_key_value_heads: nkv.
        head_dim: d (H / nh when absent from the config; an MLA layer's query / key width).
        vocab_size: V, the target's vocabulary (rows of embed_tokens, length of t2d).
        draft_vocab_size: Vd, rows of lm_head and length of d2t (V when a SpecForge-layout config
            leaves it out: a full-vocabulary drafter).
        draft_vocab_given: whether the config writes ``draft_vocab_size`` (absent or null: SGLang
            serves the target's ``lm_head`` in place of the file's).
        mla: the multi-head latent attention shapes (None: Llama attention with q/k/v projections).
        fc_norm: whether ``fc_norm.{0,1,2}`` RMSNorms precede ``fc``, one per target state (EAGLE-3.1).
        norm_before_fc: one RMSNorm (``input_norm``) over the concatenated target states (speculators).
        input_norm_kept: the file holds ``input_norm.weight`` that is never applied (``norm_before_fc`` in an
            MLA config: SGLang's MLA class does not read the flag and skips the tensor).
        norm_before_residual: the attention residual is the normed hidden state (speculators).
        norm_before_head: ``norm`` is applied before ``lm_head`` (SpecForge ``norm_output``, default true).
        norm_fed_back: the normed state, not the raw one, is fed to the next step (speculators
            ``norm_output``, default false); logits are then ``lm_head`` of that state.
        qk_norm: per-head RMSNorms of queries and keys before RoPE (a speculators ``qwen3`` layer).
        aux_layer_ids: target layers read, as written in the config (None: tool default).
        aux_convention: ``sglang`` (nested ``eagle_config``, layer outputs), ``vllm``
            (top-level, layer inputs; also the nested ids of a TorchSpec vLLM export of a ``kimi_k2``
            drafter, which its exporter shifted by one) or None when no ids are given.
        torchspec_vllm_export: the file is TorchSpec's ``--export-for-vllm`` of a ``kimi_k2`` drafter
            (:func:`is_torchspec_vllm_export`).
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
    draft_vocab_given: bool = True
    mla: MlaShape | None = None
    fc_norm: bool = False
    norm_before_fc: bool = False
    input_norm_kept: bool = False
    norm_before_residual: bool = False
    norm_before_head: bool = True
    norm_fed_back: bool = False
    qk_norm: bool = False
    aux_layer_ids: tuple[int, ...] | None = None
    aux_convention: str | None = None
    torchspec_vllm_export: bool = False
    layer_prefix: str = "midlayer"
    max_position_embeddings: int | None = None
    rms_norm_eps: float = 1e-6
    hidden_act: str = "silu"
    attention_bias: bool = False

    @property
    def full_vocab(self) -> bool:
        """Whether the draft vocabulary is the target's whole vocabulary (no maps needed: draft id = target id)."""
        return self.draft_vocab_size == self.vocab_size

    @property
    def attention(self) -> str:
        """``mla`` (multi-head latent attention) or ``llama`` (q/k/v projections, grouped-query)."""
        return "llama" if self.mla is None else "mla"


def is_mla_config(cfg: dict[str, Any]) -> bool:
    """Whether a drafter layer's config asks for multi-head latent attention (``kv_lora_rank`` and kin)."""
    body = layer_body(cfg)
    return any(body.get(k) is not None for k in MLA_FIELDS if k != "q_lora_rank") or \
        any("mla" in str(a).lower() or "deepseek" in str(a).lower() for a in (cfg.get("architectures") or [])
            if "eagle" in str(a).lower())


def _mla_shape(body: dict[str, Any], where: str, tensor_names=None) -> MlaShape:
    return MlaShape(q_lora_rank=mla_q_lora_rank(body, where, tensor_names),
                    kv_lora_rank=_int(body, "kv_lora_rank", where),
                    qk_nope_head_dim=_int(body, "qk_nope_head_dim", where),
                    qk_rope_head_dim=_int(body, "qk_rope_head_dim", where),
                    v_head_dim=_int(body, "v_head_dim", where))


def mla_q_lora_rank(body: dict[str, Any], where: str = "config.json", tensor_names=None) -> int | None:
    """An MLA layer's ``q_lora_rank`` as the engines resolve it (None: one ``q_proj``).

    Written: the value (null: ``q_proj``). Absent: the default of the config class the engines build for the
    ``model_type`` (:data:`MLA_Q_LORA_DEFAULTS`, 1536), as SGLang, vLLM and TorchSpec read the file.

    Raises:
        ConfigError: absent with a ``model_type`` no engine gives a default, or absent while ``tensor_names``
            (the file's tensors, when known) hold a ``q_proj``: the engines would build the low-rank path.
    """
    if "q_lora_rank" in body:
        return None if body["q_lora_rank"] is None else _int(body, "q_lora_rank", where)
    kind = body.get("model_type")
    if kind not in MLA_Q_LORA_DEFAULTS:
        raise ConfigError(where, f"q_lora_rank absent and model_type {shown(kind)} gives it no default in any engine: "
                                 "write q_lora_rank (null for one q_proj)")
    if tensor_names is not None and any(str(n).endswith("self_attn.q_proj.weight") for n in tensor_names):
        raise ConfigError(where, f"q_lora_rank absent: SGLang, vLLM and TorchSpec read {MLA_Q_LORA_DEFAULTS[kind]} "
                                 f"({kind}'s default) but the file holds q_proj (no low-rank query): write q_lora_rank: null")
    return MLA_Q_LORA_DEFAULTS[kind]


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


def is_torchspec_vllm_export(cfg: dict[str, Any], tensor_names=None) -> bool:
    """Whether a file is TorchSpec's ``--export-for-vllm`` of a ``kimi_k2`` drafter.

    TorchSpec's ``tools/convert_to_hf.py`` writes :data:`TORCHSPEC_MARKER` into every export's config; the
    vLLM export renames ``midlayer.*`` to ``layers.0.*`` and, for ``model_type`` ``kimi_k2``, adds 1 to every
    aux id, nested ones included (vLLM's ids are layer inputs). The flat config of both exports is otherwise
    the same, so the tensor names (``tensor_names``; None: unknown, read as a native export) tell them apart.
    """
    if tensor_names is None or TORCHSPEC_MARKER not in cfg or cfg.get("model_type") != "kimi_k2" \
            or config_format(cfg) != SPECFORGE:
        return False
    names = [str(n) for n in tensor_names]
    return any(n.startswith("layers.0.") for n in names) and not any(n.startswith("midlayer.") for n in names)


def aux_layer_ids_from_config(cfg: dict[str, Any], tensor_names=None) -> tuple[tuple[int, ...] | None, str | None]:
    """Return ``(ids, convention)`` as written in a drafter config.

    The nested ``eagle_config.eagle_aux_hidden_state_layer_ids`` is SGLang / SpecForge's
    (ids are layer outputs); a top-level ``eagle_aux_hidden_state_layer_ids`` is vLLM /
    speculators' (ids are layer inputs). Nested wins when both are present, as in SGLang.
    The nested ids of a TorchSpec vLLM export (:func:`is_torchspec_vllm_export`) are layer inputs.
    """
    if cfg.get("eagle_config") is not None and not isinstance(cfg["eagle_config"], dict):
        raise ConfigError("config.json", f"field 'eagle_config' must be an object, got {cfg['eagle_config']!r}")
    nested = eagle_config(cfg).get("eagle_aux_hidden_state_layer_ids")
    if nested:
        convention = "vllm" if is_torchspec_vllm_export(cfg, tensor_names) else "sglang"
        return _layer_ids(nested, "eagle_config.eagle_aux_hidden_state_layer_ids"), convention
    top = cfg.get("eagle_aux_hidden_state_layer_ids")
    if top:
        return _layer_ids(top, "eagle_aux_hidden_state_layer_ids"), "vllm"
    return None, None


def _layer_ids(ids: Any, key: str) -> tuple[int, ...]:
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise ConfigError("config.json", f"field {key!r} must be a list of layer numbers, got {ids!r}")
    return tuple(ids)


def drafter_spec_from_config(cfg: dict[str, Any], where: str = "config.json", tensor_names=None) -> DrafterSpec:
    """Build a DrafterSpec from a SpecForge-style or speculators-style drafter config.

    Args:
        cfg: the config dict.
        where: the file named in errors.
        tensor_names: the names of the file's tensors, when known: they tell a TorchSpec vLLM export
            (aux ids shifted) from a native one, and an absent ``q_lora_rank`` from a ``q_proj`` file.

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
    ids, convention = aux_layer_ids_from_config(cfg, tensor_names)
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
    elif is_mla_config(cfg):
        flags = mla_flags(cfg, where)
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
    mla = _mla_shape(body, where, tensor_names) if is_mla_config(cfg) else None
    head_dim = mla.qk_head_dim if mla else body.get("head_dim") or hidden // heads
    vocab = _int(body, "vocab_size", where)
    # absent or null: SpecForge, SGLang and vLLM read the target's vocabulary; speculators' schema says 32000
    given = body.get("draft_vocab_size") is not None
    draft_default = DEFAULT_DRAFT_VOCAB if is_speculators_config(cfg) else vocab
    return DrafterSpec(
        hidden_size=hidden,
        # absent or null (speculators' default): the target is as wide as the drafter
        target_hidden_size=hidden if body.get("target_hidden_size") is None else _int(body, "target_hidden_size", where),
        intermediate_size=_int(body, "intermediate_size", where),
        num_attention_heads=heads,
        num_key_value_heads=_int(body, "num_key_value_heads", where, body.get("num_key_value_heads") or heads),
        head_dim=_int({"head_dim": head_dim}, "head_dim", where),
        vocab_size=vocab,
        draft_vocab_size=_int(body, "draft_vocab_size", where) if given else draft_default,
        draft_vocab_given=given,
        mla=mla,
        **flags,
        aux_layer_ids=ids,
        aux_convention=convention,
        torchspec_vllm_export=is_torchspec_vllm_export(cfg, tensor_names),
        layer_prefix=layer_prefix,
        max_position_embeddings=body.get("max_position_embeddings"),
        rms_norm_eps=_eps(body.get("rms_norm_eps", 1e-6), where),
        hidden_act=str(body.get("hidden_act", "silu")),
        attention_bias=_flag(body, "attention_bias", False, where),
    )


def mla_flags(cfg: dict[str, Any], where: str = "config.json") -> dict[str, bool]:
    """The flags of a SpecForge-layout MLA config as SGLang's MLA class reads them (``kimi_k25_eagle3.py``).

    At both layouts SGLang has shipped (PR #24826, and PR #26506's EAGLE-3.1 one): ``lm_head`` always reads
    ``norm(h)``; the residual is the raw hidden state (``norm_before_residual`` is not read); ``norm_before_fc``
    is not read and ``input_norm.weight`` is skipped (kept here, never applied). The EAGLE-3.1 layout adds
    ``fc_norm`` (or the older ``use_aux_norm``: either one true) and ``norm_output`` (true: ``norm(h)`` is fed
    to the next step). The PR #24826 layout reads neither; :func:`eaglelab.checkpoints.drafters.variants.cautions` says so.
    """
    nested = eagle_config(cfg)
    before_fc = _flag(nested, "norm_before_fc", _flag(cfg, "norm_before_fc", False, where), where)
    return dict(fc_norm=_flag(cfg, "fc_norm", False, where) or _flag(cfg, "use_aux_norm", False, where),
                norm_before_fc=False, input_norm_kept=before_fc, norm_before_head=True,
                norm_fed_back=_flag(cfg, "norm_output", False, where))


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
