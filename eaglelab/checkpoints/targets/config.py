"""A target model read without the model: its language model's config, its weight names, its quantization.

A text model keeps its fields at the top of ``config.json`` and its weights under ``model.``; a
multimodal one (Kimi-K2.5's ``KimiK25ForConditionalGeneration``, Qwen2.5-VL, Llama 4) keeps the
language model's fields in ``text_config`` / ``language_config`` and its weights under a prefix
(``language_model.model.embed_tokens.weight``, ``model.language_model.embed_tokens.weight``).
Everything that looks up a target's field or tensor goes through here, so that a prefix is
followed everywhere or nowhere. Standard library only: metadata commands use it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from eaglelab.errors import CheckpointMismatchError
from eaglelab.inputs import printable, quoted

#: Parts of a tensor name that belong to a vision tower, projector or MTP head, never the language model.
NOT_TEXT = ("vision", "visual", "mm_projector", "multi_modal_projector", "audio", "mtp")


def text_config(config: dict[str, Any] | None) -> dict[str, Any]:
    """The language model's config: ``text_config`` / ``language_config`` of a multimodal target, else itself."""
    config = config or {}
    for key in ("text_config", "language_config"):
        if isinstance(config.get(key), dict):
            return config[key]
    return config


def target_field(config: dict[str, Any] | None, key: str) -> Any:
    """A field of the language model: the text config's value, else the top level's (None when absent)."""
    config = config or {}
    inner = text_config(config)
    if inner.get(key) is not None:
        return inner[key]
    return config.get(key)


def target_layer_count(config: dict[str, Any] | None) -> int | None:
    """``num_hidden_layers`` of the language model (None when absent or not an integer)."""
    value = target_field(config, "num_hidden_layers")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def is_mla_target(config: dict[str, Any] | None) -> bool:
    """Whether the language model uses multi-head latent attention (DeepSeek-V3, Kimi: ``kv_lora_rank``)."""
    return target_field(config, "kv_lora_rank") is not None


def is_multimodal(config: dict[str, Any] | None) -> bool:
    """Whether the config wraps its language model (``text_config`` / ``language_config``)."""
    return text_config(config) is not (config or {})


def architectures(cfg: dict[str, Any]) -> list[str]:
    """The config's ``architectures``, as strings (none when absent or not a list)."""
    archs = cfg.get("architectures")
    return [str(a) for a in archs] if isinstance(archs, list) else []


def is_target_config(cfg: dict[str, Any]) -> bool:
    """A language model's config, not a drafter's: a wrapped language model, several layers, or a model class."""
    layers = target_field(cfg, "num_hidden_layers")
    return is_multimodal(cfg) or (isinstance(layers, int) and layers > 1) or \
        any(a.endswith(("ForCausalLM", "ForConditionalGeneration", "LMHeadModel")) for a in architectures(cfg))


# --------------------------------------------------------------------------- weight names

@dataclass(frozen=True)
class HeadNames:
    """Where a target keeps what a drafter borrows from it, as its weight files spell it.

    Attributes:
        embed_tokens: the input embedding, e.g. ``model.embed_tokens.weight`` or
            ``language_model.model.embed_tokens.weight``.
        norm: the final RMSNorm beside it.
        lm_head: the output head (the embedding itself when tied).
        tied: whether ``lm_head`` is the embedding.
    """

    embed_tokens: str
    norm: str
    lm_head: str
    tied: bool

    @property
    def prefix(self) -> str:
        """What a text model's names gain in front: ``""`` for a text model, ``language_model.`` for Kimi-K2.5
        (``language_model.model.embed_tokens.weight``), ``model.language_model.`` for Qwen2.5-VL."""
        return _outer(self.embed_tokens[: -len("embed_tokens.weight")])

    def as_dict(self) -> dict[str, str]:
        return {"embed_tokens": self.embed_tokens, "norm": self.norm, "lm_head": self.lm_head}


def _outer(base: str) -> str:
    """``language_model.model.`` -> ``language_model.``; ``model.`` -> ``""``; any other base stays whole."""
    return base[: -len("model.")] if base == "model." or base.endswith(".model.") else base


#: ``tie_word_embeddings`` as transformers defaults it per ``model_type``, for a config that leaves it unset: the
#: field's default in each config class (transformers 5.24.0, ``models/<type>/configuration_<type>.py``: LlamaConfig,
#: Qwen2Config, DeepseekV3Config... false; GemmaConfig, Gemma3Config, Kimi_K25Config... true). Remote-code types
#: map as transformers maps them (``kimi_k2`` is read as ``deepseek_v3``). A type not listed is not tied.
TIE_DEFAULTS: dict[str, bool] = {
    **dict.fromkeys(("llama", "llama4", "llama4_text", "mistral", "ministral", "mixtral", "qwen2", "qwen2_moe", "qwen3",
                     "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen2_vl", "qwen2_5_vl", "qwen3_vl",
                     "qwen3_vl_moe", "deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "kimi_linear", "glm4",
                     "glm4_moe", "glm4v", "glm4v_moe", "gpt_oss", "phi", "phi3", "minimax", "minimax_m2", "granite",
                     "olmo2", "olmo3", "exaone", "exaone4", "hunyuan_v1_moe", "seed_oss", "longcat_flash", "llava"), False),
    **dict.fromkeys(("gemma", "gemma2", "gemma3", "gemma3_text", "gemma3n", "gemma3n_text", "kimi_k25", "mistral3",
                     "smollm3", "ernie4_5_moe", "gpt2", "opt", "falcon", "cohere", "starcoder2"), True),
}


def tied_embeddings(config: dict[str, Any] | None) -> tuple[bool, str]:
    """Whether a target's head is its embedding, and why: ``(tied, reason)``.

    ``tie_word_embeddings`` as the config sets it (the text config's, else the top level's); unset, the
    default transformers gives the model type (:data:`TIE_DEFAULTS`: the top level's type, whose class
    ties the head, else the text config's); an unknown type is not tied.
    """
    value = target_field(config, "tie_word_embeddings")
    if isinstance(value, bool):
        return value, f"the config says tie_word_embeddings {str(value).lower()}"
    for cfg in (config or {}, text_config(config)):
        kind = cfg.get("model_type")
        if isinstance(kind, str) and kind in TIE_DEFAULTS:
            return TIE_DEFAULTS[kind], (f"the config leaves tie_word_embeddings unset and transformers defaults it to "
                                        f"{str(TIE_DEFAULTS[kind]).lower()} for {kind}")
    return False, "the config leaves tie_word_embeddings unset and names no model type transformers ties by default"


def _files_named(files: Iterable[str]) -> str:
    """``model.safetensors`` or ``model-00001-of-00064.safetensors, ... (64 files)`` for a message."""
    names = [str(f).rsplit("/", 1)[-1] for f in files]
    if not names:
        return "its weights"
    return printable(", ".join(names[:2]) + (f", ... ({len(names)} files)" if len(names) > 2 else ""))


def head_names(names: Iterable[str], config: dict[str, Any] | None, where: str, files: Iterable[str] = ()) -> HeadNames:
    """A target's names of ``embed_tokens``, the final ``norm`` and ``lm_head``, prefixes followed.

    The language model's embedding is the shortest ``...embed_tokens.weight`` outside a vision
    tower or MTP head; the norm sits beside it; ``lm_head`` one level up (``language_model.lm_head``
    beside ``language_model.model.``), beside it, or at the top. No head: the embedding only when the
    config ties them (:func:`tied_embeddings`), as transformers would.

    Raises:
        CheckpointMismatchError: no language-model embedding, no norm beside it, or no head and
            ``tie_word_embeddings`` not true.
    """
    names = set(names)
    embeds = sorted((n for n in names if n.endswith("embed_tokens.weight")
                     and not any(part in n.lower() for part in NOT_TEXT)), key=lambda n: (len(n), n))
    if not embeds:
        raise CheckpointMismatchError(where, "holds no embed_tokens.weight of a language model (needed for the "
                                             "drafter's token embedding)")
    embed = embeds[0]
    base = embed[: -len("embed_tokens.weight")]  # e.g. "language_model.model." or "model."
    norm = base + "norm.weight"
    if norm not in names:
        raise CheckpointMismatchError(where, f"holds {printable(embed)} but no {printable(norm)} (the final norm)")
    candidates = [_outer(base) + "lm_head.weight", base + "lm_head.weight", "lm_head.weight"]
    head = next((c for c in candidates if c in names), None)
    if head is None:
        tied, why = tied_embeddings(config)
        if not tied:
            raise CheckpointMismatchError(where, f"no {printable(candidates[0])} in {_files_named(files)} and "
                                                 f"tie_word_embeddings is not true: {why}")
        return HeadNames(embed, norm, embed, True)
    return HeadNames(embed, norm, head, False)


@dataclass(frozen=True)
class TargetWeights:
    """What a target's safetensors headers say of the tensors a drafter borrows, and how the weights are stored.

    Attributes:
        heads: the names of the embedding, final norm and head (None: the headers hold no language-model
            embedding, e.g. a header-only sample without it).
        embed_shape, head_shape: their shapes ([V, H]), None when absent.
        quantization: the storage of the weights.
        problem: why ``heads`` is None, in words (no embedding, no norm, no head and not tied).
    """

    heads: HeadNames | None
    embed_shape: tuple[int, ...] | None
    head_shape: tuple[int, ...] | None
    quantization: Quantization
    problem: str | None = None

    @property
    def prefixed(self) -> bool:
        """Whether the names differ from a text model's (``model.embed_tokens.weight``, ``lm_head.weight``)."""
        return self.heads is not None and (self.heads.embed_tokens != "model.embed_tokens.weight" or
                                           self.heads.lm_head not in ("lm_head.weight", self.heads.embed_tokens))


def target_weights(tensors: dict[str, Any], config: dict[str, Any] | None, where: str,
                   modelopt: dict[str, Any] | None = None) -> TargetWeights:
    """:class:`TargetWeights` from a checkpoint's tensor table (name -> TensorInfo) and config."""
    quant = quantization_of(config, {n: t.dtype for n, t in tensors.items()}, modelopt)
    try:
        heads = head_names(tensors, config, where, sorted({t.file for t in tensors.values()}))
    except CheckpointMismatchError as exc:
        return TargetWeights(None, None, None, quant, exc.problem)
    return TargetWeights(heads, tuple(tensors[heads.embed_tokens].shape), tuple(tensors[heads.lm_head].shape), quant)


# --------------------------------------------------------------------------- quantization

@dataclass(frozen=True)
class Quantization:
    """How a target's weights are stored, as its files say.

    Attributes:
        method: ``compressed-tensors``, ``fp8``, ``modelopt``, ``gptq``, ``awq``, ``bitsandbytes``, another
            ``quant_method``, or ``none``.
        scheme: the scheme in words (``INT4 weights, groups of 32``, ``FP8 E4M3, 128 x 128 blocks``, ``NVFP4``).
        kept: modules the config keeps in higher precision (compressed-tensors ``ignore``,
            modelopt ``exclude_modules``), as written.
        evidence: where it was read (``config.json quantization_config``, ``hf_quant_config.json``, the headers).
    """

    method: str
    scheme: str
    kept: tuple[str, ...] = ()
    evidence: str = ""

    @property
    def line(self) -> str:
        if self.method == "none":
            return f"not quantized ({self.scheme})" if self.scheme else "not quantized"
        kept = f"; kept in higher precision: {', '.join(quoted(k, 60) for k in self.kept[:6])}" + \
            (" ..." if len(self.kept) > 6 else "") if self.kept else ""
        return f"{self.method}: {self.scheme}{kept} [{self.evidence}]"

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method, "scheme": self.scheme, "kept": list(self.kept), "evidence": self.evidence,
                "line": self.line}


def _words(value: Any, case=None) -> str:
    """A field in words for a line on a terminal: a string (``case``: ``str.upper`` / ``str.lower`` applied first)
    quoted unless it is a plain name, a number as written."""
    if isinstance(value, str):
        return quoted(case(value) if case else value, 60) if value else ""
    return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else ""


def _compressed_tensors_scheme(q: dict[str, Any]) -> str:
    parts = []
    groups = q.get("config_groups")
    for group in (groups.values() if isinstance(groups, dict) else []):
        weights = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(weights, dict):
            continue
        kind, bits = _words(weights.get("type"), str.upper) or "?", _words(weights.get("num_bits")) or "?"
        size, strategy = weights.get("group_size"), _words(weights.get("strategy"))
        how = f", groups of {size}" if isinstance(size, int) and not isinstance(size, bool) else \
            (f", per {strategy}" if strategy else "")
        acts = group.get("input_activations")
        act = f", activations {_words(acts.get('type'), str.upper)}{_words(acts.get('num_bits'))}" \
            if isinstance(acts, dict) else ""
        parts.append(f"{kind}{bits} weights{how}{act}")
    fmt = _words(q.get("format"))
    return "; ".join(dict.fromkeys(parts)) + (f" ({fmt})" if fmt else "") if parts else (fmt or "format not given")


def _config_quantization(q: dict[str, Any], evidence: str) -> Quantization:
    method = _words(q.get("quant_method"), str.lower) or "unknown"
    if method == "compressed-tensors":
        ignore = q.get("ignore")
        kept = tuple(str(x) for x in ignore) if isinstance(ignore, list) else ()
        return Quantization(method, _compressed_tensors_scheme(q), kept, evidence)
    if method == "fp8":
        block = q.get("weight_block_size")
        how = f"{_words(block[0])} x {_words(block[1])} blocks" if isinstance(block, list) and len(block) == 2 else "per tensor"
        fmt = _words(q.get("fmt"), str.upper) or "E4M3"
        acts = _words(q.get("activation_scheme"))
        kept = q.get("modules_to_not_convert") or q.get("ignored_layers")
        return Quantization(method, f"FP8 {fmt} weights, {how}" + (f", {acts} activations" if acts else ""),
                            tuple(str(x) for x in kept) if isinstance(kept, list) else (), evidence)
    if method == "modelopt":
        algo = _words(q.get("quant_algo")) or "?"
        size = q.get("group_size")
        kept = q.get("exclude_modules")
        return Quantization(method, f"{algo}" + (f", groups of {size}" if isinstance(size, int) else ""),
                            tuple(str(x) for x in kept) if isinstance(kept, list) else (), evidence)
    if method in ("gptq", "awq"):
        bits, size = q.get("bits", q.get("w_bit")), q.get("group_size", q.get("q_group_size"))
        return Quantization(method, f"INT{_words(bits) or '?'} weights" + (f", groups of {size}"
                                                                          if isinstance(size, int) else ""), (), evidence)
    if method == "bitsandbytes":
        bits = "4-bit" if q.get("load_in_4bit") else "8-bit" if q.get("load_in_8bit") else "?"
        return Quantization(method, f"{bits} {_words(q.get('bnb_4bit_quant_type'))}".strip(), (), evidence)
    return Quantization(method, ", ".join(f"{quoted(k, 40)}={_words(v)}" for k, v in list(q.items())[:4] if _words(v)), (),
                        evidence)


#: safetensors header signatures: (name suffix, dtype or None) -> (method, scheme).
_HEADER_SIGNS = (
    ("weight_packed", "compressed-tensors", "packed integer weights (weight_packed)"),
    ("weight_scale_inv", "fp8", "FP8 weights with inverse scales (weight_scale_inv)"),
    ("weight_scale_2", "modelopt", "NVFP4 weights (two-level scales, weight_scale_2)"),
    ("qweight", "gptq", "packed integer weights (qweight / qzeros)"),
)


def quantization_of(config: dict[str, Any] | None, dtypes: dict[str, str] | None = None,
                    modelopt: dict[str, Any] | None = None) -> Quantization:
    """How a target is quantized: from its config, modelopt's ``hf_quant_config.json``, or its headers.

    Args:
        config: the target's ``config.json`` (``quantization_config`` at the top or in the text config).
        dtypes: tensor name -> safetensors dtype (the headers), for files whose config says nothing.
        modelopt: ``hf_quant_config.json`` when present (NVIDIA Model-Optimizer's exports).
    """
    for where, cfg in (("config.json quantization_config", config or {}),
                       ("config.json text_config.quantization_config", text_config(config))):
        q = cfg.get("quantization_config")
        if isinstance(q, dict):
            return _config_quantization(q, where)
    if isinstance(modelopt, dict) and isinstance(modelopt.get("quantization"), dict):
        q = {"quant_method": "modelopt", **modelopt["quantization"]}
        return _config_quantization(q, "hf_quant_config.json")
    dtypes = dtypes or {}
    for suffix, method, scheme in _HEADER_SIGNS:
        if any(n.endswith(suffix) for n in dtypes):
            return Quantization(method, scheme, (), "the safetensors headers")
    floats = sorted({d for d in dtypes.values() if d.startswith(("F", "BF"))})
    if any(d.startswith("F8") for d in floats):
        return Quantization("fp8", f"{', '.join(d for d in floats if d.startswith('F8'))} weights", (),
                            "the safetensors headers")
    stored = _words(target_field(config, "torch_dtype")) or _words(target_field(config, "dtype"))
    return Quantization("none", ", ".join(floats) or stored, (), "the safetensors headers" if floats else "config.json")
