"""Verdicts: can one drafter take another's slot, and does a drafter fit a target (from configs and shapes).

A drafter's fit to a target includes its RoPE against the target's (:func:`rope_fit`), and a drafter whose
trainer is known to train at another RoPE than the engines serve gets a caution (:func:`trainer_cautions`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eaglelab.checkpoints.drafters.spec import (
    DrafterSpec,
    aux_ids_as_layer_outputs,
    default_aux_layer_outputs,
    is_mla_config,
    layer_body,
)
from eaglelab.checkpoints.drafters.variants import Rope, rope_of
from eaglelab.checkpoints.files.config_diff import ConfigDiff
from eaglelab.checkpoints.targets.config import TargetWeights, target_field, target_layer_count, text_config
from eaglelab.errors import EaglelabError
from eaglelab.inputs import shown


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
            ("num_attention_heads", a.num_attention_heads, b.num_attention_heads)]
    if a.attention != b.attention:
        level = "incompatible"
        same = all(va == vb for _, va, vb in body[:3])
        reasons.append(f"attention {a.attention} vs {b.attention}: no attention weight carries over" +
                       ("; fc, the MLP and the norms have the same shapes and could seed a new drafter" if same else ""))
    elif a.mla is not None:
        body += [(key, getattr(a.mla, key), getattr(b.mla, key)) for key in
                 ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")]
    else:
        body += [("num_key_value_heads", a.num_key_value_heads, b.num_key_value_heads), ("head_dim", a.head_dim, b.head_dim)]
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
        full = [f"{label} drafts over the whole vocabulary (no maps)" for label, s in (("A", a), ("B", b)) if s.full_vocab]
        reasons.append(f"draft vocabulary {a.draft_vocab_size} vs {b.draft_vocab_size}: lm_head and d2t "
                       "must be re-initialised (the body carries over)" + (f"; {', '.join(full)}" if full else ""))
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


def drafter_vs_target(spec: DrafterSpec, drafter_cfg: dict[str, Any], target_cfg: dict[str, Any],
                      weights: TargetWeights | None = None, drafter_tensors=()) -> Verdict:
    """Does a drafter fit a target? Hidden size, vocabulary, aux layers and their convention, context.

    Args:
        spec, drafter_cfg: the drafter.
        target_cfg: the target's config (a multimodal one's language model read from ``text_config``).
        weights: the target's headers summarised, when it has weights: the embedding and head the
            drafter borrows are checked by shape and named (a ``language_model.`` prefix included), and
            the quantization said.
        drafter_tensors: the drafter's tensor names (whether it ships its own ``lm_head``).

    Returns:
        Verdict with level ``interchangeable`` (fits as is), ``warm-start`` (loads but reads
        other layers or positions than it should) or ``incompatible`` (cannot load).
    """
    level, reasons = "interchangeable", []
    t_hidden = target_field(target_cfg, "hidden_size")
    t_vocab = target_field(target_cfg, "vocab_size")
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
    t_ctx = target_field(target_cfg, "max_position_embeddings")
    d_ctx = spec.max_position_embeddings
    if t_ctx and d_ctx and d_ctx < t_ctx:
        reasons.append(f"drafter configured for {d_ctx} positions, target for {t_ctx}: expect lower "
                       "acceptance on prompts longer than the drafter's training context")
    reasons += rope_fit(spec, drafter_cfg, target_cfg)
    if weights is not None:
        level = _escalate(level, _weights_fit(spec, weights, drafter_tensors, reasons))
    if not reasons:
        reasons.append("hidden size, vocabulary and aux layers fit the target")
    return Verdict(level, reasons)


def _weights_fit(spec: DrafterSpec, weights: TargetWeights, drafter_tensors, reasons: list[str]) -> str:
    """The target's embedding and head against the drafter, by shape and name; the target's quantization."""
    level = "interchangeable"
    heads = weights.heads
    if heads is None:
        reasons.append("the target's headers hold no language-model embedding: the drafter's embedding could not "
                       "be checked against it")
    else:
        want = (spec.vocab_size, spec.target_hidden_size)  # the target's own rows and width
        if weights.embed_shape != want:
            level = "incompatible"
            reasons.append(f"the target's {heads.embed_tokens} is {list(weights.embed_shape)}, the drafter reads "
                           f"{list(want)} (its vocabulary, the target's width)")
        own_head = any(n.removeprefix("model.") == "lm_head.weight" for n in drafter_tensors)
        if spec.full_vocab and not own_head:
            reasons.append(f"the drafter has no lm_head of its own and drafts with the target's, {heads.lm_head}")
        if weights.prefixed:
            reasons.append(f"the target keeps its language model under '{heads.prefix}': embedding "
                           f"{heads.embed_tokens}, head {heads.lm_head}; SpecForge reads model.embed_tokens.weight and "
                           "lm_head.weight unless its embedding_key / lm_head_key name these (eaglelab recipe sets them)")
    if weights.quantization.method != "none":
        reasons.append(f"the target is quantized ({weights.quantization.method}: {weights.quantization.scheme}): the "
                       "hidden states the drafter reads are the quantized model's; probe and train on this target, "
                       "not its bf16 original")
    return level


# --------------------------------------------------------------------------- RoPE against the target and the trainer

#: The base TorchSpec's MLA drafter builds its YaRN rotary at: ``_init_rope`` passes no ``base``, so the
#: rotary's default applies whatever the config's ``rope_theta`` (tests/torchspec_reference.py restates it).
TORCHSPEC_YARN_THETA = 10000.0
TORCHSPEC_SOURCE = "lightseekorg/TorchSpec torchspec/models/draft/deepseek_eagle.py, _init_rope, commit 6f21829"


def _scaling(rope: Rope) -> str:
    if rope.kind == "default":
        return "none"
    if rope.kind == "linear":
        return f"linear x{rope.factor:g}"
    return f"{rope.kind} x{rope.factor:g} over {rope.original_max_position_embeddings}"


def rope_fit(spec: DrafterSpec, drafter_cfg: dict[str, Any], target_cfg: dict[str, Any]) -> list[str]:
    """The drafter's RoPE against its target's, one line per difference with what it does to acceptance.

    The engines rotate the drafter's queries and keys by its own config. A RoPE other than the target's
    is harmless only if the drafter was trained with it; a drafter set up from the target's config (how
    SpecForge and TorchSpec derive one) and served with another rotates positions otherwise than it
    learned, and loses acceptance as positions grow. YaRN's band (which dims it stretches) is given in
    the drafter's own rotated pairs. A RoPE that cannot be read is said (the target's) or refused where
    the drafter is computed (the drafter's), not judged here.
    """
    try:
        mine = rope_of(layer_body(drafter_cfg))
    except EaglelabError:
        return []
    try:
        theirs = rope_of(text_config(target_cfg), "the target's config")
    except EaglelabError as exc:
        return [f"the target's RoPE is not compared with the drafter's: {exc.problem}"]
    out = []
    if mine.theta != theirs.theta:
        out.append(f"RoPE theta {mine.theta:g} vs the target's {theirs.theta:g}: positions rotate at other speeds; "
                   f"unless the drafter was trained at {mine.theta:g}, acceptance falls as positions grow")
    if mine.kind != theirs.kind:
        out.append(f"RoPE scaling {_scaling(mine)} vs the target's {_scaling(theirs)}: the slow dims rotate "
                   "differently, the more the longer the prompt; acceptance falls with position")
        return out
    if mine.factor != theirs.factor and mine.kind != "default":
        out.append(f"RoPE {mine.kind} factor {mine.factor:g} vs the target's {theirs.factor:g}: positions are "
                   "stretched by another factor; acceptance falls with position")
    if mine.kind in ("llama3", "yarn"):
        out += _band_fit(mine, theirs, spec.mla.qk_rope_head_dim if spec.mla is not None else spec.head_dim)
    return out


def _band_fit(mine: Rope, theirs: Rope, dims: int) -> list[str]:
    """llama3's and YaRN's band of stretched dims, and YaRN's magnitudes, against the target's."""
    out = []
    if mine.original_max_position_embeddings != theirs.original_max_position_embeddings:
        out.append(f"RoPE original context {mine.original_max_position_embeddings} vs the target's "
                   f"{theirs.original_max_position_embeddings}: {mine.kind} stretches another band of dims; "
                   "acceptance falls with position")
    if mine.kind == "llama3" and (mine.low_freq_factor, mine.high_freq_factor) != \
            (theirs.low_freq_factor, theirs.high_freq_factor):
        out.append(f"llama3 low / high_freq_factor {mine.low_freq_factor:g} / {mine.high_freq_factor:g} vs the "
                   f"target's {theirs.low_freq_factor:g} / {theirs.high_freq_factor:g}: another band of dims is "
                   "stretched; acceptance falls with position")
    if mine.kind != "yarn":
        return out
    if (mine.beta_fast, mine.beta_slow) != (theirs.beta_fast, theirs.beta_slow):
        band = "" if dims < 2 or dims % 2 else \
            " (pairs {}-{} vs {}-{} of the drafter's {})".format(*mine._yarn_range(dims), *theirs._yarn_range(dims),
                                                                 dims // 2)
        out.append(f"YaRN beta_fast / beta_slow {mine.beta_fast:g} / {mine.beta_slow:g} vs the target's "
                   f"{theirs.beta_fast:g} / {theirs.beta_slow:g}: the ramp between kept and stretched dims moves"
                   f"{band}; those dims rotate differently, the more the longer the prompt")
    if (mine.mscale, mine.mscale_all_dim) != (theirs.mscale, theirs.mscale_all_dim):
        out.append(f"YaRN mscale / mscale_all_dim {mine.mscale:g} / {mine.mscale_all_dim:g} vs the target's "
                   f"{theirs.mscale:g} / {theirs.mscale_all_dim:g}: cos / sin (and an MLA layer's softmax scale) "
                   "are scaled otherwise at every position; acceptance changes at every length")
    return out


def trainer_cautions(cfg: dict[str, Any]) -> list[str]:
    """Where the drafter's trainer is known to train at another RoPE than the engines serve, one line each.

    TorchSpec's MLA drafter with YaRN trains at θ 10000 whatever ``rope_theta`` says, while SGLang (and
    eaglelab) serve the config's θ. A TorchSpec export says so in its config (``_torchspec_version``,
    written by ``tools/convert_to_hf.py``); without that key the trainer is unknown and the caution is
    conditional. Only an MLA drafter with YaRN at another θ than 10000 gets it.
    """
    if not isinstance(cfg, dict) or not is_mla_config(cfg):
        return []
    try:
        rope = rope_of(layer_body(cfg))
    except EaglelabError:
        return []
    if rope.kind != "yarn" or rope.theta == TORCHSPEC_YARN_THETA:
        return []
    version = cfg.get("_torchspec_version")
    who = "if this drafter was trained with TorchSpec" if version is None else \
        f"exported by TorchSpec (_torchspec_version {shown(version, 30)})"
    return [f"{who}: TorchSpec's MLA drafter builds YaRN at theta {TORCHSPEC_YARN_THETA:g} whatever rope_theta says "
            f"({TORCHSPEC_SOURCE}), so it trained at {TORCHSPEC_YARN_THETA:g} where SGLang and eaglelab serve "
            f"{rope.theta:g}; `eaglelab probe` measures its acceptance as served"]
