"""Which drafters eaglelab computes, and what each engine makes of their config flags (no torch).

A drafter config comes in one of two formats: SpecForge's (read by SGLang; the layer fields at the
top level) or speculators' (read by vLLM; the layer fields under ``transformer_layer_config``). The
same flag name can mean different things in the two: ``norm_output`` is "apply the final norm before
lm_head" (default true) in SpecForge and "feed the normed hidden state to the next step" (default
false) in speculators. Everything here reads a flag in its own format's meaning.

eaglelab computes a drafter exactly as its engine does, or refuses it with one line naming the
flag (:func:`refusals`). That covers Llama-attention drafters (SpecForge, speculators) and the
MLA-attention drafters of the DeepSeek / Kimi family as SGLang computes them
(``Eagle3DeepseekV2ForCausalLM``). Other families (EAGLE-1/2 heads, MTP or Medusa heads) are
recognised from the config (:func:`drafter_family`): ``inspect`` and ``compare`` show their shapes
and configs, the model-running commands refuse them. The field-by-field table is in
``docs/EAGLE3_FORMAT.md`` §1.1; :data:`FIELDS` lists the fields it must cover.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from eaglelab.checkpoints.drafters.config_rules import comparison_view
from eaglelab.checkpoints.drafters.mla_variants import mla_cautions, mla_layout, mla_refusals
from eaglelab.checkpoints.drafters.spec import (
    MLA_FIELDS,
    SPECFORGE,
    SPECULATORS,
    aux_ids_as_layer_outputs,
    config_format,
    drafter_spec_from_config,
    eagle_config,
    is_eagle3_config,
    is_mla_config,
    layer_body,
)
from eaglelab.checkpoints.files.config_types import float_of, rope_problem, yarn_mscale
from eaglelab.checkpoints.targets.config import architectures, is_target_config, target_field, target_layer_count
from eaglelab.errors import UnsupportedDrafterError
from eaglelab.inputs import shown
from eaglelab.settings import DEFAULT_K

# Every config field the field table (docs/EAGLE3_FORMAT.md §1.1) covers; the docs test holds it to this list.
FIELDS = (
    "hidden_size", "target_hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
    "head_dim", "vocab_size", "draft_vocab_size", "num_hidden_layers", "rms_norm_eps", "hidden_act",
    "rope_theta", "rope_scaling", "rope_parameters", "max_position_embeddings", "fc_norm", "norm_before_fc",
    "norm_before_residual", "norm_output", "use_aux_norm", "attention_bias", "mlp_bias", "tie_word_embeddings",
    "pretraining_tp", "eagle_config.eagle_aux_hidden_state_layer_ids", "eagle_config.use_aux_hidden_state",
    "eagle_aux_hidden_state_layer_ids", "transformer_layer_config.model_type", "layer_types",
    "embed_requires_grad", "partial_rotary_factor", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
    "qk_rope_head_dim", "v_head_dim", "eagle_config.use_input_layernorm_in_first_layer",
    "eagle_config.use_last_layernorm", "eagle_config.use_mtp_layernorm",
)

ROPE_KINDS = ("default", "linear", "llama3", "yarn")


# --------------------------------------------------------------------------- families

@dataclass(frozen=True)
class Family:
    """What kind of drafter a config describes.

    Attributes:
        name: ``EAGLE-3``, ``EAGLE-3 MLA``, ``EAGLE-4``, ``EAGLE-1/2 head``, ``MTP head``, ``Medusa heads``,
            ``target model`` (a language model, not a drafter) or ``unknown``.
        computed: whether eaglelab can run it (subject to :func:`refusals` for EAGLE-3 variants).
        detail: what in the config said so.
    """

    name: str
    computed: bool
    detail: str = ""

    @property
    def line(self) -> str:
        """The one line ``inspect`` prints for a family eaglelab does not run."""
        return f"shapes and configs only: {self.name}" + (f" ({self.detail})" if self.detail else "")


def drafter_family(cfg: dict[str, Any]) -> Family:
    """Recognise the drafter family from a config alone.

    MLA attention (``kv_lora_rank`` and kin) in an EAGLE-3 drafter is the family of DeepSeek / Kimi
    drafters SGLang serves as ``Eagle3DeepseekV2ForCausalLM`` (the detail names the SGLang layout the flags
    need, :func:`mla_layout`); ``medusa_num_heads`` marks Medusa; ``num_nextn_predict_layers``
    or an ``MTP`` / ``NextN`` architecture marks multi-token-prediction heads; an ``Eagle4`` architecture
    (``LlamaForCausalLMEagle4``) or ``speculators_model_type`` ``eagle4`` is EAGLE-4, recognised before the
    EAGLE-3 test its one-layer shape would pass; an ``Eagle`` architecture without a 3 or 4 is EAGLE-1/2.
    """
    if not isinstance(cfg, dict):
        return Family("unknown", False, "config is not a JSON object")
    archs = architectures(cfg)
    arch_text = " ".join(archs).lower()
    body = layer_body(cfg)
    kind = str(cfg.get("speculators_model_type") or "").lower()
    if "medusa_num_heads" in cfg or "medusa" in arch_text or kind == "medusa":
        return Family("Medusa heads", False, f"architectures={archs}")
    if kind in ("mtp",) or "mtp" in arch_text or "nextn" in arch_text:
        return Family("MTP head", False, f"architectures={archs}")
    if "eagle4" in arch_text or kind == "eagle4":
        return Family("EAGLE-4", False, f"architectures={archs}: {EAGLE4_SERVED}")
    if is_eagle3_config(cfg):
        if is_mla_config(cfg):
            given = [k for k in MLA_FIELDS if body.get(k) is not None]
            return Family("EAGLE-3 MLA", True, f"multi-head latent attention: {', '.join(given) or arch_text}; "
                                               f"{mla_layout(cfg)}")
        return Family("EAGLE-3", True)
    if "eagle" in arch_text or kind in ("eagle", "eagle2"):
        return Family("EAGLE-1/2 head", False, f"architectures={archs}")
    if kind:
        return Family(f"speculators {shown(kind)} drafter", False, f"speculators_model_type={kind!r}")
    if is_target_config(cfg):
        mtp = target_field(cfg, "num_nextn_predict_layers")
        return Family("target model", False, f"architectures={archs}" + (f", {mtp} MTP layer(s)" if mtp else ""))
    return Family("unknown", False, f"architectures={archs}, no draft_vocab_size")


#: What an EAGLE-4 drafter is, and who serves it (no public source of its arithmetic was found to test against).
EAGLE4_SERVED = ("an EAGLE-4 drafter, served by an out-of-tree harness for SGLang and vLLM; its arithmetic has no "
                 "public reference eaglelab could compute it against")

# --------------------------------------------------------------------------- RoPE

@dataclass(frozen=True)
class Rope:
    """The drafter's rotary embedding, as SpecForge / SGLang and transformers compute it.

    Attributes:
        kind: ``default``, ``linear``, ``llama3`` or ``yarn``.
        theta: the base.
        factor: scaling factor (linear, llama3, yarn).
        low_freq_factor, high_freq_factor: llama3's band edges.
        original_max_position_embeddings: context the scaling is relative to (llama3, yarn).
        beta_fast, beta_slow, mscale, mscale_all_dim: YaRN's ramp and attention scale (DeepSeek style).
    """

    kind: str = "default"
    theta: float = 10000.0
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float = 1.0
    mscale_all_dim: float = 0.0

    def __post_init__(self):
        """Refuse parameters the computation cannot take (a ValueError naming the field).

        The readers refuse such a config first, naming its file (:func:`rope_of`,
        :func:`eaglelab.checkpoints.files.config_types.check_config_types`); this is the one place that
        computes, so no division by zero or overflow can be reached from any other caller either.
        """
        fields = {"rope_theta": self.theta, "factor": self.factor, "low_freq_factor": self.low_freq_factor,
                  "high_freq_factor": self.high_freq_factor, "beta_fast": self.beta_fast, "beta_slow": self.beta_slow,
                  "original_max_position_embeddings": self.original_max_position_embeddings}
        for key, value in {**fields, "mscale": self.mscale, "mscale_all_dim": self.mscale_all_dim}.items():
            low = 0 if key.startswith("mscale") else 1 if key == "original_max_position_embeddings" else None
            number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float_of(value))
            if not number or (value <= 0 if low is None else value < low):
                raise ValueError(f"RoPE field {key!r} must be a finite number "
                                 f"{'above 0' if low is None else f'of at least {low}'}, got {value!r}")
        if self.kind == "yarn":
            fields.update(mscale=self.mscale, mscale_all_dim=self.mscale_all_dim)
        problem = rope_problem(fields)
        if problem:
            raise ValueError(problem)

    def inverse_frequencies(self, head_dim: int) -> list[float]:
        """Per-pair inverse frequency [head_dim / 2] after scaling (in float64; the model casts)."""
        base = [1.0 / (self.theta ** (i / head_dim)) for i in range(0, head_dim, 2)]
        if self.kind == "linear":
            return [f / self.factor for f in base]
        if self.kind == "llama3":
            low_wl = self.original_max_position_embeddings / self.low_freq_factor
            high_wl = self.original_max_position_embeddings / self.high_freq_factor
            out = []
            for f in base:
                wl = 2 * math.pi / f
                if wl < high_wl:
                    out.append(f)
                elif wl > low_wl:
                    out.append(f / self.factor)
                else:  # high_freq_factor > low_freq_factor (__post_init__)
                    smooth = (self.original_max_position_embeddings / wl - self.low_freq_factor) / \
                        (self.high_freq_factor - self.low_freq_factor)
                    out.append((1 - smooth) * f / self.factor + smooth * f)
            return out
        if self.kind == "yarn":
            low, high = self._yarn_range(head_dim)
            hi = high + 0.001 if low == high else high
            out = []
            for i, f in enumerate(base):
                ramp = min(max((i - low) / (hi - low), 0.0), 1.0)
                keep = 1.0 - ramp  # share of the unscaled (extrapolated) frequency
                out.append(f / self.factor * (1 - keep) + f * keep)
            return out
        return base

    def _yarn_range(self, head_dim: int) -> tuple[int, int]:
        """transformers' ``find_correction_range`` (truncated): the dims YaRN ramps between.

        ``theta`` is above 1 (:meth:`__post_init__`), so ``ln(theta)`` is never 0; a ratio that over- or
        underflows (a beta near 0 or near the float limit) is taken as a difference of logarithms.
        """
        def dim(rotations: float) -> float:
            ratio = self.original_max_position_embeddings / (rotations * 2 * math.pi)
            log_ratio = math.log(ratio) if 0 < ratio < math.inf else \
                math.log(self.original_max_position_embeddings) - math.log(rotations) - math.log(2 * math.pi)
            return head_dim * log_ratio / (2 * math.log(self.theta))

        return max(math.floor(dim(self.beta_fast)), 0), min(math.ceil(dim(self.beta_slow)), head_dim - 1)

    @property
    def attention_scale(self) -> float:
        """Factor on cos and sin (YaRN's mscale ratio; 1 otherwise)."""
        if self.kind != "yarn":
            return 1.0
        return yarn_mscale(self.factor, self.mscale) / yarn_mscale(self.factor, self.mscale_all_dim)

    @property
    def softmax_mscale(self) -> float:
        """DeepSeek's YaRN factor on an MLA layer's softmax scale, applied squared (``mscale(factor, mscale_all_dim)``)."""
        return yarn_mscale(self.factor, self.mscale_all_dim) if self.kind == "yarn" else 1.0


def _number(value: Any, where: str, key: str, zero: bool = False) -> float:
    """A RoPE field as a finite float above 0 (at least 0 with ``zero``), or a refusal naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float_of(value)) or \
            value < 0 or (value == 0 and not zero):
        raise UnsupportedDrafterError(where, f"RoPE field {key!r} must be a {'non-negative' if zero else 'positive'} "
                                             f"number, got {shown(value)}")
    return float(value)


def _rope(where: str, *args, **kwargs) -> Rope:
    """A :class:`Rope`, its fields' consistency refused in one line naming ``where``."""
    try:
        return Rope(*args, **kwargs)
    except ValueError as exc:
        raise UnsupportedDrafterError(where, str(exc)) from None


def rope_of(body: dict[str, Any], where: str = "config.json") -> Rope:
    """The RoPE a drafter layer config asks for (v4 ``rope_theta`` / ``rope_scaling`` or v5 ``rope_parameters``).

    Raises:
        UnsupportedDrafterError: a scaling type eaglelab does not compute (dynamic, longrope, mrope, ...),
            or a field of a supported one missing or invalid.
    """
    params = body.get("rope_parameters")
    params = params if isinstance(params, dict) else {}
    scaling = body.get("rope_scaling")
    scaling = scaling if isinstance(scaling, dict) else {}
    merged = {**params, **scaling}
    theta = _number(body.get("rope_theta", params.get("rope_theta", 10000.0)), where, "rope_theta")
    kind = str(merged.get("rope_type") or merged.get("type") or "default")
    if kind not in ROPE_KINDS:
        raise UnsupportedDrafterError(where, f"RoPE type {kind!r} is not computed by eaglelab "
                                             f"(computed: {', '.join(ROPE_KINDS)})")
    if kind == "default":
        return _rope(where, "default", theta)
    if "factor" not in merged:
        raise UnsupportedDrafterError(where, f"RoPE type {kind!r} without a 'factor'")
    factor = _number(merged["factor"], where, "factor")
    if kind == "linear":
        return _rope(where, "linear", theta, factor)
    if "original_max_position_embeddings" not in merged:
        raise UnsupportedDrafterError(where, f"RoPE type {kind!r} without 'original_max_position_embeddings' "
                                             "(SpecForge refuses it; engines fall back differently)")
    original = int(_number(merged["original_max_position_embeddings"], where, "original_max_position_embeddings"))
    if kind == "llama3":
        return _rope(where, "llama3", theta, factor,
                     _number(merged.get("low_freq_factor", 1.0), where, "low_freq_factor"),
                     _number(merged.get("high_freq_factor", 4.0), where, "high_freq_factor"), original)
    return _rope(where, "yarn", theta, factor, original_max_position_embeddings=original,
                 beta_fast=_number(merged.get("beta_fast", 32.0), where, "beta_fast"),
                 beta_slow=_number(merged.get("beta_slow", 1.0), where, "beta_slow"),
                 mscale=_number(merged.get("mscale", 1.0) or 0.0, where, "mscale", zero=True),
                 mscale_all_dim=_number(merged.get("mscale_all_dim", 0.0) or 0.0, where, "mscale_all_dim", zero=True))


# --------------------------------------------------------------------------- exact or refused

def refusals(cfg: dict[str, Any], where: str = "config.json") -> list[str]:
    """Why eaglelab would not compute this drafter exactly as its engine does (empty: it does).

    One line per reason, each naming the flag.
    """
    family = drafter_family(cfg)
    if not family.computed:
        return [family.line]
    out: list[str] = []
    fmt = config_format(cfg)
    body = layer_body(cfg)
    if is_mla_config(cfg):
        out += mla_refusals(cfg, body, fmt)
    elif fmt == SPECULATORS:
        layer_type = body.get("model_type")
        if layer_type is None:
            out.append("transformer_layer_config without model_type: speculators builds a qwen3 layer, vLLM a "
                       "llama one; write the model_type")
        elif layer_type not in ("llama", "qwen3"):
            out.append(f"transformer_layer_config.model_type {layer_type!r}: eaglelab computes llama and qwen3 "
                       "decoder layers only")
        if cfg.get("norm_before_fc") and cfg.get("fc_norm"):
            out.append("norm_before_fc and fc_norm together: speculators refuses this config")
        layer_types = body.get("layer_types") or []
        if isinstance(layer_types, list) and "sliding_attention" in layer_types:
            out.append("layer_types with sliding_attention: a sliding-window drafter layer is not computed")
    else:
        if cfg.get("norm_before_residual"):
            out.append("norm_before_residual: true in a SpecForge-layout config: neither SpecForge nor SGLang reads "
                       "it (speculators' flag); keep the drafter in the speculators format")
        if cfg.get("tie_word_embeddings"):
            out.append("tie_word_embeddings: true in a SpecForge-layout config: SGLang then serves lm_head = the "
                       "target's embedding while SpecForge trains the drafter's own head")
        if cfg.get("attention_bias"):
            out.append("attention_bias: true in a SpecForge-layout config: SpecForge has no biases, SGLang keeps "
                       "o_proj's only")
    head_dim = body.get("head_dim")
    if head_dim is None and isinstance(body.get("hidden_size"), int) and isinstance(body.get("num_attention_heads"), int) \
            and body["num_attention_heads"] > 0:
        head_dim = body["hidden_size"] // body["num_attention_heads"]
    if isinstance(head_dim, int) and head_dim % 2:
        out.append(f"head_dim {head_dim} is odd: RoPE rotates pairs of dimensions")
    if body.get("mlp_bias"):
        out.append("mlp_bias: true: MLP biases are not computed")
    if isinstance(body.get("partial_rotary_factor"), (int, float)) and body["partial_rotary_factor"] != 1:
        out.append(f"partial_rotary_factor {body['partial_rotary_factor']}: partial RoPE is not computed")
    nested = eagle_config(cfg)
    if nested.get("use_aux_hidden_state") is False:
        out.append("eagle_config.use_aux_hidden_state: false: a drafter without target hidden states")
    ids = nested.get("eagle_aux_hidden_state_layer_ids") or cfg.get("eagle_aux_hidden_state_layer_ids")
    if isinstance(ids, list) and len(ids) != 3:
        out.append(f"{len(ids)} aux hidden-state layers: eaglelab's fc reads exactly 3")
    try:
        rope_of(body, where)
    except UnsupportedDrafterError as exc:
        out.append(exc.problem)
    return out


def cautions(cfg: dict[str, Any]) -> list[str]:
    """Flags computed as the format's own reference does, where another engine reads the same file otherwise.

    The file is computed (no refusal), but its served acceptance may differ from its trained one.
    """
    if not drafter_family(cfg).computed:
        return []
    out = []
    body = layer_body(cfg)
    mla = is_mla_config(cfg)
    if mla:
        out += mla_cautions(cfg, body)
    elif config_format(cfg) == SPECFORGE:
        if cfg.get("norm_output") is True:
            out.append("norm_output: true: SpecForge 0.2.0 trains it as plain EAGLE-3 (norm before lm_head, the "
                       "raw state fed to the next step); SGLang and vLLM serve it feeding the normed state back "
                       "(EAGLE-3.1). eaglelab computes SpecForge's meaning")
        if eagle_config(cfg).get("norm_before_fc", cfg.get("norm_before_fc")):
            out.append("norm_before_fc: SGLang and vLLM compute it; SpecForge 0.2.0 cannot train it")
    elif "norm_before_residual" not in cfg:
        out.append("norm_before_residual absent: speculators reads false, vLLM reads true; write it explicitly")
    if body.get("hidden_act", "silu") != "silu":
        out.append(f"hidden_act {body.get('hidden_act')!r}: SGLang and vLLM serve silu drafters only")
    if config_format(cfg) == SPECFORGE and body.get("draft_vocab_size") is None:
        out.append("no draft_vocab_size: SpecForge and vLLM read the full vocabulary and the file's own lm_head; "
                   "SGLang serves the target's lm_head instead (load_lm_head_from_target), and its Llama drafter "
                   "class reads the key unguarded: write draft_vocab_size " + f"{body.get('vocab_size')} to serve "
                   "the trained head on SGLang")
    return out


def check_computed(cfg: dict[str, Any], where: str = "config.json") -> None:
    """Raise :class:`UnsupportedDrafterError` naming the first reason eaglelab would not compute ``cfg`` exactly."""
    reasons = refusals(cfg, where)
    if reasons:
        more = f" (and {len(reasons) - 1} more: {'; '.join(reasons[1:])})" if len(reasons) > 1 else ""
        raise UnsupportedDrafterError(where, f"not computed by eaglelab: {reasons[0]}{more}")


# --------------------------------------------------------------------------- between formats

_LAYER_KEYS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
               "hidden_act", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters",
               "max_position_embeddings", "vocab_size", "attention_bias", "mlp_bias", "initializer_range",
               "pretraining_tp")


def to_speculators_config(cfg: dict[str, Any], target_cfg: dict[str, Any], verifier: str,
                          k: int = DEFAULT_K, where: str = "config.json") -> dict[str, Any]:
    """The speculators / vLLM config of a drafter: the same model, every flag in speculators' meaning.

    Args:
        cfg: the drafter config, either format (a speculators config gets its verifier updated).
        target_cfg: the target's config (its layer count and architectures).
        verifier: the target's name or path, recorded for vLLM.
        k: drafts per cycle of the default proposal method (its ``speculative_tokens``).

    Raises:
        UnsupportedDrafterError: a flag speculators cannot express (SpecForge ``norm_output: false``:
            vLLM always norms before lm_head), an MLA drafter, or a drafter eaglelab does not compute.
    """
    check_computed(cfg, where)
    spec = drafter_spec_from_config(cfg, where)
    if spec.mla is not None:
        raise UnsupportedDrafterError(where, "an MLA drafter has no speculators format (its drafter layer is llama or "
                                             "qwen3 only); serve it with SGLang from the SpecForge layout")
    if not spec.norm_before_head:
        raise UnsupportedDrafterError(where, "norm_output: false (SpecForge: lm_head reads the un-normed state) "
                                             "has no speculators equivalent; vLLM would apply the norm")
    L = target_layer_count(target_cfg)
    outs = aux_ids_as_layer_outputs(spec.aux_layer_ids, spec.aux_convention, L)
    if list(outs) != sorted(set(outs)):
        # vLLM keeps sorted(set(ids)) and concatenates the captured layers in that order: repeated ids
        # make fc's input the wrong width (a shape error at the first step), unsorted ones feed fc's
        # columns the wrong layers (silently)
        raise UnsupportedDrafterError(where, f"aux layers {list(outs)} (as layer outputs) are not distinct and "
                                             "ascending; vLLM captures sorted distinct layers, so it cannot serve them")
    body = layer_body(cfg)
    layer = {k: body[k] for k in _LAYER_KEYS if k in body}
    kind = "qwen3" if spec.qk_norm else "llama"
    layer.update(model_type=kind, architectures=["Qwen3ForCausalLM" if spec.qk_norm else "LlamaForCausalLM"],
                 num_hidden_layers=1, tie_word_embeddings=False, head_dim=spec.head_dim)
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.3.0",
        "draft_vocab_size": spec.draft_vocab_size,
        "target_hidden_size": spec.target_hidden_size,
        "norm_before_residual": spec.norm_before_residual,
        "norm_before_fc": spec.norm_before_fc,
        "fc_norm": spec.fc_norm,
        "norm_output": spec.norm_fed_back,
        # vLLM's ids are layer inputs: output of layer i == input of layer i + 1
        "eagle_aux_hidden_state_layer_ids": [i + 1 for i in outs],
        "transformer_layer_config": layer,
        "speculators_config": {
            "algorithm": "eagle3",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": k,
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": verifier,
                         "architectures": target_cfg.get("architectures") or ["LlamaForCausalLM"]},
        },
        "torch_dtype": cfg.get("torch_dtype", body.get("torch_dtype", "bfloat16")),
    }


def to_specforge_config(cfg: dict[str, Any], where: str = "config.json") -> dict[str, Any]:
    """The SpecForge / SGLang config of a drafter: the same model, or a refusal naming the flag.

    A SpecForge config is returned as is. A speculators config becomes the flat Llama config with
    nested aux ids (layer outputs: vLLM's layer inputs minus one).

    Raises:
        UnsupportedDrafterError: a speculators flag SGLang does not compute or reads otherwise
            (``norm_before_residual``; ``norm_output: true``, which SpecForge reads as its default).
    """
    check_computed(cfg, where)
    if config_format(cfg) == SPECFORGE:
        return cfg
    if layer_body(cfg).get("model_type") == "qwen3":
        raise UnsupportedDrafterError(where, "transformer_layer_config.model_type 'qwen3' (per-head q_norm / "
                                             "k_norm) has no SpecForge / SGLang equivalent; keep this drafter in "
                                             "the speculators format")
    for key, meaning in (("norm_before_residual", "the residual is the normed hidden state"),
                         ("norm_output", "the normed state is fed to the next step")):
        if cfg.get(key):
            raise UnsupportedDrafterError(where, f"{key}: true ({meaning}) has no SpecForge / SGLang equivalent; "
                                                 "keep this drafter in the speculators format")
    # what is left is the SpecForge-style view compare uses: flat layer fields, nested ids (vLLM's - 1)
    return {**comparison_view(cfg), "tie_word_embeddings": False}
