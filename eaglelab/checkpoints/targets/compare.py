"""Two targets compared from configs, headers and tokenizer files: what a drafter of the old one meets on the new.

Before any probe, a team asks of Kimi-K2 and Kimi-K2.5: the same architecture, depth and widths? the same
RoPE and context? which quantization? the same tokenizer, special tokens and chat template? This module
answers each from metadata alone (no torch, no transformers): a classified config diff of the two language
models (:func:`diff_target_configs`, a multimodal wrapper's ``text_config`` read as the language model),
each target's quantization (:func:`eaglelab.checkpoints.targets.config.quantization_of`), the tokenizers id
by id (:func:`compare_tokenizers`, and the ids a drafter's map uses), and the chat templates rendered on
one conversation (:func:`compare_templates`). :func:`target_verdict` says what it means for the drafter.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from eaglelab.checkpoints.files.config_diff import ConfigDiff, KeyRule, RuleTable, diff_views, flatten
from eaglelab.checkpoints.targets.chat_templates import SAMPLE_CONVERSATION, render_all, template_context, text_diff
from eaglelab.checkpoints.targets.config import Quantization, is_multimodal, text_config
from eaglelab.checkpoints.targets.tokenizer_files import Tokenizer, describe
from eaglelab.inputs import quoted

# --------------------------------------------------------------------------- config diff

_A, _L, _W, _ATT, _MOE, _ROPE, _Q, _TOK, _NUM, _MM, _LOAD, _META = (
    "architecture", "layers", "widths", "attention", "experts", "rope and context", "quantization", "tokens",
    "numerics", "multimodal", "loader", "metadata")
#: The order categories are listed in: what moves a drafter's input most first.
CATEGORIES = (_A, _L, _W, _ATT, _MOE, _ROPE, _Q, _TOK, _NUM, _MM, _LOAD, _META, "unknown")

TARGET_KEY_RULES: dict[str, KeyRule] = {
    "architectures": KeyRule(_A, "the model class (a multimodal wrapper reads its language model from text_config)"),
    "model_type": KeyRule(_A, "the config class"),
    "language_model.architectures": KeyRule(_A, "the language model's class inside a multimodal wrapper"),
    "language_model.model_type": KeyRule(_A, "the language model's config class"),
    "num_hidden_layers": KeyRule(_L, "depth: the drafter's aux layer ids name other depths (refit them)"),
    "first_k_dense_replace": KeyRule(_L, "how many leading layers are dense before the MoE layers"),
    "moe_layer_freq": KeyRule(_L, "which layers are MoE"),
    "num_nextn_predict_layers": KeyRule(_L, "MTP layers appended after the last decoder layer"),
    "hidden_size": KeyRule(_W, "width H: the drafter's fc reads 3 x H and its embedding is H wide; a drafter of "
                               "the other cannot load"),
    "intermediate_size": KeyRule(_W, "the dense MLP's width (the drafter's own MLP need not follow)"),
    "vocab_size": KeyRule(_W, "vocabulary: the drafter's embedding, t2d and a full-vocabulary lm_head are per id"),
    "num_attention_heads": KeyRule(_ATT, "query heads"),
    "num_key_value_heads": KeyRule(_ATT, "key-value heads (GQA)"),
    "head_dim": KeyRule(_ATT, "per-head width"),
    "q_lora_rank": KeyRule(_ATT, "MLA: the query's low rank"),
    "kv_lora_rank": KeyRule(_ATT, "MLA: the key-value latent"),
    "qk_nope_head_dim": KeyRule(_ATT, "MLA: per-head dims without RoPE"),
    "qk_rope_head_dim": KeyRule(_ATT, "MLA: per-head RoPE dims"),
    "v_head_dim": KeyRule(_ATT, "MLA: per-head value dims"),
    "attention_bias": KeyRule(_ATT, "biases in attention"),
    "attention_kind": KeyRule(_ATT, "MLA or grouped-query attention (derived from the fields above)"),
    "sliding_window": KeyRule(_ATT, "sliding-window attention"),
    "n_routed_experts": KeyRule(_MOE, "routed experts per MoE layer"),
    "num_experts": KeyRule(_MOE, "experts per MoE layer"),
    "n_shared_experts": KeyRule(_MOE, "shared experts per MoE layer"),
    "num_experts_per_tok": KeyRule(_MOE, "experts each token is routed to"),
    "moe_intermediate_size": KeyRule(_MOE, "each expert's width"),
    "routed_scaling_factor": KeyRule(_MOE, "the routed experts' output scale"),
    "topk_method": KeyRule(_MOE, "the router's selection"),
    "scoring_func": KeyRule(_MOE, "the router's scores"),
    "norm_topk_prob": KeyRule(_MOE, "whether the chosen experts' weights are renormalised"),
    "n_group": KeyRule(_MOE, "expert groups"),
    "topk_group": KeyRule(_MOE, "groups each token may use"),
    "rope_theta": KeyRule(_ROPE, "RoPE base: positions rotate differently; the drafter's RoPE should follow"),
    "max_position_embeddings": KeyRule(_ROPE, "context length: a drafter trained shorter degrades on longer prompts"),
    "rope_scaling": KeyRule(_ROPE, "RoPE scaling (long context)"),
    "rope_parameters": KeyRule(_ROPE, "RoPE (transformers 5 spelling)"),
    "quantization": KeyRule(_Q, "how the weights are stored: the hidden states the drafter reads move with it"),
    "bos_token_id": KeyRule(_TOK, "the begin-of-sequence id"),
    "eos_token_id": KeyRule(_TOK, "the end-of-sequence id(s)"),
    "pad_token_id": KeyRule(_TOK, "the padding id"),
    "media_placeholder_token_id": KeyRule(_TOK, "the id images are spliced in at"),
    "tie_word_embeddings": KeyRule(_TOK, "whether lm_head is the embedding"),
    "rms_norm_eps": KeyRule(_NUM, "epsilon of every RMSNorm"),
    "hidden_act": KeyRule(_NUM, "MLP activation"),
    "vision_config": KeyRule(_MM, "a vision tower: images and video become tokens the drafter never saw"),
    "use_unified_vision_chunk": KeyRule(_MM, "how media chunks are laid out"),
    "video_placeholder": KeyRule(_MM, "the placeholder of a video"),
    "auto_map": KeyRule(_LOAD, "remote code the loaders run (trust_remote_code)"),
    "torch_dtype": KeyRule(_META, "dtype the file was saved in"),
    "dtype": KeyRule(_META, "dtype the file was saved in (transformers 5 spelling)"),
    "transformers_version": KeyRule(_META, "version that wrote the file"),
    "_name_or_path": KeyRule(_META, "where it was loaded from"),
    "use_cache": KeyRule(_META, "generation default"),
    "initializer_range": KeyRule(_META, "initialisation only"),
    "ignore_index": KeyRule(_META, "the loss's ignored label"),
    "aux_loss_alpha": KeyRule(_META, "MoE training loss weight"),
    "seq_aux": KeyRule(_META, "MoE training loss"),
    "ep_size": KeyRule(_META, "expert parallelism at training"),
    "pretraining_tp": KeyRule(_META, "tensor parallelism at training"),
    "attention_dropout": KeyRule(_META, "dropout in training"),
    "rope_interleave": KeyRule(_NUM, "interleaved RoPE layout (DeepSeek)"),
}


#: The targets' reading: RoPE's dicts field by field, a dotted key read by its head's rule, no defaults (an absent
#: key differs from any value, null included: a wrapper that appears shows as its fields appearing).
TARGET_RULES = RuleTable(TARGET_KEY_RULES, CATEGORIES, nested=("rope_scaling", "rope_parameters"),
                         by_head=TARGET_KEY_RULES)


def target_view(config: dict[str, Any], quantization: Quantization | None = None) -> dict[str, Any]:
    """One spelling of a target's config for diffs: the language model's fields at the top, whatever the wrapper.

    A multimodal config's ``text_config`` fields are read as the language model's (so Kimi-K2's top-level
    ``hidden_size`` meets Kimi-K2.5's ``text_config.hidden_size``), its class as ``language_model.*``, its
    ``vision_config`` as one summary; ``rope_scaling`` is flattened one level; the quantization is one line.
    """
    config = config or {}
    inner = text_config(config)
    skip = ("text_config", "language_config", "vision_config", "quantization_config", "architectures", "model_type")
    view = flatten({k: v for k, v in {**config, **inner}.items() if k not in skip}, TARGET_RULES.nested)
    view["architectures"] = config.get("architectures")
    view["model_type"] = config.get("model_type")
    if is_multimodal(config):
        view["language_model.architectures"] = inner.get("architectures")
        view["language_model.model_type"] = inner.get("model_type")
    vision = config.get("vision_config")
    if isinstance(vision, dict):
        view["vision_config"] = ", ".join(f"{quoted(k)} {quoted(vision[k])}" for k in sorted(vision)
                                          if isinstance(vision[k], (int, float, str)) and not isinstance(vision[k], bool))[:200]
    view["attention_kind"] = "MLA" if inner.get("kv_lora_rank") is not None else "grouped-query"
    if quantization is not None:
        view["quantization"] = f"{quantization.method}: {quantization.scheme}" if quantization.method != "none" \
            else "not quantized"
        if quantization.kept:
            view["quantization.kept"] = list(quantization.kept)
    return view


def diff_target_configs(a: dict[str, Any], b: dict[str, Any], qa: Quantization | None = None,
                        qb: Quantization | None = None) -> list[ConfigDiff]:
    """Every field whose value differs between two targets' views (:func:`target_view`), classified, most telling
    first (``a``: old, ``b``: new; None when absent)."""
    return diff_views(target_view(a, qa), target_view(b, qb), TARGET_RULES)


# --------------------------------------------------------------------------- tokenizers

@dataclass
class TokenizerComparison:
    """Two tokenizers, id by id.

    Attributes:
        kinds: each side's layout (``tokenizer.json``, ``tiktoken.model``, ``none``).
        sizes: ids each names.
        same_vocabulary: the base vocabulary (and merges) identical.
        renamed: ids in both whose token differs (base vocabulary and added tokens).
        only_old, only_new: ids one side names and the other does not.
        special_changes: special / added tokens that differ, one line each (``id: old -> new``).
        specials: named special tokens that differ (``eos_token: [EOS] -> <|im_end|>``).
        drafter_ids: ids the drafter's draft vocabulary covers (None: no drafter given).
        drafter_renamed: of those, how many name another token in the new tokenizer.
        examples: a few renamed ids, for the eye.
    """

    kinds: tuple[str, str]
    sizes: tuple[int, int]
    same_vocabulary: bool
    renamed: int
    only_old: int
    only_new: int
    special_changes: list[str] = field(default_factory=list)
    specials: list[str] = field(default_factory=list)
    drafter_ids: int | None = None
    drafter_renamed: int | None = None
    examples: list[str] = field(default_factory=list)

    @property
    def comparable(self) -> bool:
        return "none" not in self.kinds

    @property
    def same(self) -> bool:
        """Same ids naming the same tokens, same special tokens."""
        return self.comparable and self.same_vocabulary and not self.renamed and not self.only_old and \
            not self.only_new and not self.special_changes and not self.specials

    @property
    def drafter_safe(self) -> bool:
        """No id the drafter reads or writes changed meaning (all ids when no drafter is given)."""
        if not self.comparable:
            return False
        if self.drafter_renamed is not None:
            return self.drafter_renamed == 0
        return self.renamed == 0 and self.only_old == 0

    @property
    def line(self) -> str:
        if not self.comparable:
            missing = " and ".join(side for side, k in zip(("old", "new"), self.kinds) if k == "none")
            return f"tokenizers not compared: no tokenizer.json or tiktoken.model in the {missing} target"
        drafter = "" if self.drafter_ids is None else \
            f"; of the drafter's {self.drafter_ids:,} draft tokens, {self.drafter_renamed:,} name other tokens"
        if self.same:
            return f"same tokenizer: {self.sizes[0]:,} ids, each naming the same token, same special tokens{drafter}"
        parts = []
        if not self.same_vocabulary:
            parts.append(f"{self.renamed:,} ids name other tokens" if self.renamed else "other merges")
        elif self.renamed:
            parts.append(f"{self.renamed:,} added tokens renamed")
        if self.only_old or self.only_new:
            parts.append(f"{self.only_old:,} ids only in the old, {self.only_new:,} only in the new")
        if self.special_changes:
            parts.append(f"{len(self.special_changes)} special-token change(s)")
        if self.specials:
            parts.append("; ".join(self.specials))
        base = "same base vocabulary" if self.same_vocabulary else "another vocabulary"
        return f"{base}: {', '.join(parts)}{drafter}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "same": self.same, "drafter_safe": self.drafter_safe, "line": self.line}


def compare_tokenizers(old: Tokenizer, new: Tokenizer, drafter_ids=None) -> TokenizerComparison:
    """Compare two tokenizers id by id, and (given) the ids of a drafter's draft vocabulary.

    Args:
        old, new: the two tokenizers.
        drafter_ids: the target ids a drafter's ``lm_head`` rows stand for (``arange(Vd) + d2t``), or None.
    """
    ids_old, ids_new = set(old.tokens) | set(old.added), set(new.tokens) | set(new.added)
    both = ids_old & ids_new
    renamed = sorted(i for i in both if old.token(i) != new.token(i))
    special = []
    for i in sorted(set(old.added) | set(new.added)):
        a, b = old.added.get(i), new.added.get(i)
        if a != b:
            special.append(f"{i}: {describe(a[0]) if a else '(none)'}{' [special]' if a and a[1] else ''} -> "
                           f"{describe(b[0]) if b else '(none)'}{' [special]' if b and b[1] else ''}")
    specials = [f"{name}: {describe(old.specials.get(name))} -> {describe(new.specials.get(name))}"
                for name in sorted(set(old.specials) | set(new.specials))
                if old.specials.get(name) != new.specials.get(name)]
    if old.eos_ids != new.eos_ids:
        specials.append(f"generation eos ids: {list(old.eos_ids)} -> {list(new.eos_ids)}")
    out = TokenizerComparison(
        (old.kind, new.kind), (old.size, new.size),
        old.kind == new.kind and old.vocabulary_digest == new.vocabulary_digest,
        len(renamed), len(ids_old - ids_new), len(ids_new - ids_old), special[:50], specials,
        examples=[f"{i}: {describe(old.token(i))} -> {describe(new.token(i))}" for i in renamed[:5]])
    if drafter_ids is not None:
        ids = {int(i) for i in drafter_ids}
        out.drafter_ids = len(ids)
        out.drafter_renamed = sum(1 for i in ids if old.token(i) != new.token(i))
    return out


# --------------------------------------------------------------------------- templates

@dataclass
class TemplateComparison:
    """The two default chat templates, as text and rendered on one conversation.

    Attributes:
        files: where each came from (None: no template).
        same_text: the template sources are identical.
        rendered: each side's rendering of :data:`SAMPLE_CONVERSATION` (None where it failed or is absent).
        problems: each side's rendering failure, one line (None where it rendered).
        diff: the unified diff of the two renderings.
        names: each side's template names (``default``, ``tool_use``, ...).
    """

    files: tuple[str | None, str | None]
    same_text: bool
    rendered: tuple[str | None, str | None]
    problems: tuple[str | None, str | None]
    diff: list[str]
    names: tuple[list[str], list[str]]

    @property
    def same(self) -> bool:
        """The same prompt reaches the model: equal texts, or equal renderings."""
        return self.same_text or (self.rendered[0] is not None and self.rendered[0] == self.rendered[1])

    @property
    def line(self) -> str:
        if self.files == (None, None):
            return "no chat template on either side (raw prompts)"
        if self.same_text:
            return "same chat template"
        if self.same:
            return "chat templates differ in text but render the sample conversation identically"
        if None in self.files:
            side = "old" if self.files[0] is None else "new"
            return f"only one side has a chat template (none in the {side} target)"
        failed = [f"{side}: {p}" for side, p in zip(("old", "new"), self.problems) if p]
        if failed:
            return "chat templates differ; " + "; ".join(failed)
        return f"another chat template: the sample conversation renders differently ({len(self.diff)} change(s))"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "same": self.same, "line": self.line}


def compare_templates(old: Tokenizer, new: Tokenizer) -> TemplateComparison:
    """Render each default template on :data:`SAMPLE_CONVERSATION` with its own special tokens (both in one
    child process), and diff them."""
    ta, tb = old.templates.get("default"), new.templates.get("default")
    jobs = [(t, template_context(SAMPLE_CONVERSATION, tok.specials)) for t, tok in ((ta, old), (tb, new)) if t is not None]
    done = iter(render_all(jobs))
    ra = next(done) if ta is not None else None
    rb = next(done) if tb is not None else None
    texts = (ra.text if ra else None, rb.text if rb else None)
    diff = text_diff(*texts) if None not in texts else []
    return TemplateComparison((old.template_file, new.template_file), ta == tb, texts,
                              (ra.problem if ra else None, rb.problem if rb else None), diff,
                              (sorted(old.templates), sorted(new.templates)))


# --------------------------------------------------------------------------- verdict

@dataclass(frozen=True)
class TargetVerdict:
    """What the comparison means for a drafter of the old target.

    Attributes:
        level: ``probe`` (same tokenizer and template: the probe decides), ``re-template`` (another
            chat template: data must be re-templated), ``new vocabulary`` (another tokenizer: the maps
            and lm_head are invalid), or ``incompatible`` (another width or vocabulary size: the drafter
            cannot load).
        line: the verdict in one line.
        reasons: the findings behind it, one line each.
    """

    level: str
    line: str
    reasons: tuple[str, ...] = ()


def target_verdict(diffs: list[ConfigDiff], tokenizers: TokenizerComparison,
                   templates: TemplateComparison) -> TargetVerdict:
    """The verdict line for the drafter: the most serious of widths, tokenizer, template, then the probe."""
    by_key = {d.key: d for d in diffs}
    reasons = [f"{quoted(d.key)}: {quoted(d.a, 80)} -> {quoted(d.b, 80)} ({d.why})" for d in diffs
               if d.category in (_A, _L, _W, _ATT, _MOE, _ROPE, _Q) and d.key not in ("model_type",)][:8]
    for key in ("hidden_size", "vocab_size"):
        if key in by_key:
            return TargetVerdict("incompatible", f"INCOMPATIBLE: {key} {quoted(by_key[key].a, 40)} -> "
                                                 f"{quoted(by_key[key].b, 40)}: the old "
                                                 "drafter cannot load on the new target; train one from scratch",
                                 tuple(reasons))
    reasons = [tokenizers.line, templates.line, *reasons]
    if tokenizers.comparable and not tokenizers.drafter_safe:
        return TargetVerdict("new vocabulary", "ANOTHER TOKENIZER: ids the drafter uses name other tokens, so its "
                                               "vocabulary maps and lm_head rows are invalid: rebuild the maps and "
                                               "retrain lm_head, or train from scratch", tuple(reasons))
    if not templates.same:
        return TargetVerdict("re-template", "ANOTHER CHAT TEMPLATE: same tokens, but the prompts the drafter meets "
                                            "change: re-template its training data with the new template before any "
                                            "fine-tune, and probe on templated prompts", tuple(reasons))
    if not tokenizers.comparable:
        return TargetVerdict("probe", "TOKENIZERS NOT COMPARED: the configs say what moved; the probe decides "
                                      "(eaglelab probe)", tuple(reasons))
    return TargetVerdict("probe", "SAME TOKENIZER AND TEMPLATE: nothing here invalidates the drafter; the probe "
                                  "decides how far the states moved (eaglelab probe)", tuple(reasons))
