"""What one forward of a target reads and computes, from its config: the serving-cost model's target side.

Bytes follow the quantization and its ignore list (:func:`kept_unquantized`: a Kimi checkpoint's attention,
shared experts, dense MLP and ``lm_head`` stay bf16, only the routed experts are int4); a MoE forward reads
the experts its tokens route to (:func:`distinct_experts_touched`); MLA keeps one latent per token and layer,
which every tensor-parallel rank holds whole. Only numpy.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from eaglelab.checkpoints.files.config_types import check_config_types
from eaglelab.checkpoints.targets.config import text_config
from eaglelab.errors import ParameterError
from eaglelab.serving.load_checks import check_target_config, config_bits, dtype_bits

#: Kernels per layer of a dense / a MoE layer, launched one by one without CUDA graphs (norms, projections,
#: rotary, attention, activation; a MoE layer adds routing, expert GEMMs and their gather / scatter).
KERNELS_PER_LAYER = {"dense": 14, "moe": 30}

#: Bytes per KV element by ``--kv-dtype``.
KV_DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp32": 4.0}


def require_kv_dtype(kv_dtype: str) -> str:
    """``kv_dtype`` when it is one of :data:`KV_DTYPE_BYTES`; else ParameterError naming ``--kv-dtype``."""
    if kv_dtype not in KV_DTYPE_BYTES:
        raise ParameterError("--kv-dtype", f"unknown KV dtype {kv_dtype!r}; choose one of {', '.join(KV_DTYPE_BYTES)}")
    return kv_dtype


def distinct_experts_touched(num_tokens, experts_total: int, experts_per_token: int):
    """Expected distinct experts a batch of t tokens routes to: N (1 - (1 - K/N)^t).

    Assumes uniform, independent routing; real routers are skewed, so this is an upper bound.
    """
    t = np.asarray(num_tokens, dtype=float)
    return experts_total * (1 - (1 - experts_per_token / experts_total) ** t)


@dataclass(frozen=True)
class TargetShape:
    """What one forward of the target (and of its drafter) reads and computes, whole (before tensor parallelism).

    Attributes:
        dense_bytes: weights every forward reads: attention, dense MLPs, shared experts, ``lm_head``.
        active_params: parameters a token computes with (two FLOPs each).
        kv_bytes_per_token: KV-cache bytes of one context token, all the layers that keep every token (full
            attention; every layer of a model without ``layer_types``).
        kv_ways: how many ways tensor parallelism can split the KV cache (a GQA model's KV heads; 1 for MLA,
            whose latent every GPU holds whole).
        attention_flops_per_context: FLOPs of one new token's attention per context token, those layers.
        window_kv_bytes_per_token, window_tokens, window_attention_flops_per_context: the sliding-window layers'
            KV bytes and attention FLOPs per context token, read over the last ``window_tokens`` tokens only.
        state_bytes: the linear-attention (state-space) layers' recurrent state of one request: read every step,
            the same at any context.
        layers, hidden_size: the forward's depth and width (all-reduces, launches).
        moe_layers, experts_total, experts_per_token, expert_bytes: the routed experts (0 for a dense model).
        total_bytes: every weight, for the memory the KV cache is left.
        draft_bytes, draft_params, draft_vocab: one drafter forward's weights, per-token parameters (an EAGLE-3
            layer, its fc and its ``lm_head``) and vocabulary, estimated from the target's width.
    """

    dense_bytes: float
    active_params: float
    kv_bytes_per_token: float = 0.0
    kv_ways: int = 1
    attention_flops_per_context: float = 0.0
    layers: int = 1
    hidden_size: int = 0
    moe_layers: int = 0
    experts_total: int = 0
    experts_per_token: int = 0
    expert_bytes: float = 0.0
    total_bytes: float = 0.0
    draft_bytes: float = 0.0
    draft_params: float = 0.0
    draft_vocab: int = 0
    window_kv_bytes_per_token: float = 0.0
    window_tokens: int = 0
    window_attention_flops_per_context: float = 0.0
    state_bytes: float = 0.0

    def __post_init__(self):
        """Every byte and FLOP term finite and >= 0, and a token's experts among the layer's: else a forward could
        read negative bytes, or a verify cost less than a decode step."""
        bad = [f"{k} {v!r}" for k, v in asdict(self).items() if not (isinstance(v, (int, float)) and 0 <= v < math.inf)]
        if self.moe_layers and not 1 <= self.experts_per_token <= self.experts_total:
            bad.append(f"experts_per_token {self.experts_per_token!r} of experts_total {self.experts_total!r}")
        if bad:
            raise ParameterError("target shape", "every byte and FLOP term must be a finite number >= 0: " + ", ".join(bad))

    @property
    def kernels(self) -> int:
        """Kernels one forward launches one by one when it is not a CUDA graph."""
        return (self.layers - self.moe_layers) * KERNELS_PER_LAYER["dense"] + self.moe_layers * KERNELS_PER_LAYER["moe"]

    def kv_read_bytes(self, context) -> np.ndarray:
        """KV-cache (and recurrent-state) bytes one request holds, and one forward reads, at ``context`` tokens."""
        c = np.asarray(context, dtype=float)
        return c * self.kv_bytes_per_token + np.minimum(c, self.window_tokens) * self.window_kv_bytes_per_token \
            + self.state_bytes

    def attention_flops(self, context) -> np.ndarray:
        """FLOPs of one new token's attention at ``context`` tokens (sliding layers over their window only)."""
        c = np.asarray(context, dtype=float)
        return c * self.attention_flops_per_context \
            + np.minimum(c, self.window_tokens) * self.window_attention_flops_per_context

    def weight_bytes(self, tokens) -> np.ndarray:
        """Weight bytes a forward over ``tokens`` tokens reads: the dense ones and the experts its tokens wake."""
        t = np.asarray(tokens, dtype=float)
        if not self.moe_layers:
            return np.zeros_like(t) + self.dense_bytes
        experts = distinct_experts_touched(t, self.experts_total, self.experts_per_token)
        return self.dense_bytes + self.moe_layers * experts * self.expert_bytes


#: Module kinds a quantization's ignore list can keep at the model's dtype, and the words that name them.
MODULE_KINDS = ("attention", "dense_mlp", "shared_experts", "experts", "lm_head")


def kept_unquantized(cfg: dict) -> set[str]:
    """The module kinds (:data:`MODULE_KINDS`) a config's quantization leaves at the model's dtype.

    Read from ``quantization_config``'s ``ignore`` (compressed-tensors), ``modules_to_not_convert`` (HF) or
    ``exclude_modules`` (ModelOpt), by the module kinds each entry names: the entries are data, never run as
    regular expressions. ``lm_head`` stays unquantized unless the config says ``"lm_head": true``.
    """
    q = cfg.get("quantization_config") or text_config(cfg).get("quantization_config") or {}
    if not isinstance(q, dict):
        return set(MODULE_KINDS)
    entries = []
    for key in ("ignore", "modules_to_not_convert", "exclude_modules"):
        value = q.get(key)
        if isinstance(value, list):
            entries += [str(v).lower()[:200] for v in value[:1000]]
    kept = set() if q.get("lm_head") is True else {"lm_head"}
    for entry in entries:
        words = entry.replace("re:", " ")
        if "router" in words or words.rstrip("$").endswith((".gate", "mlp.gate")):  # the MoE router: a few KB a layer
            continue
        if "lm_head" in words:
            kept.add("lm_head")
        if "attn" in words or "attention" in words:
            kept.add("attention")
        if "shared_expert" in words:
            kept.add("shared_experts")
        elif "expert" in words:
            kept.add("experts")
        elif "mlp" in words or "gate_proj" in words or "up_proj" in words or "down_proj" in words:
            kept.add("dense_mlp")
    return kept


#: ``layer_types`` values by the kind of attention they cost as (transformers' names; Qwen3-Next, gpt-oss, Gemma).
LAYER_KINDS = {"full_attention": "full", "attention": "full", "sliding_attention": "sliding",
               "chunked_attention": "sliding", "linear_attention": "linear", "mamba": "linear", "ssm": "linear"}


def layer_kinds(text: dict, layers: int, where: str) -> dict[str, int]:
    """How many layers keep every token (``full``), a window of them (``sliding``, with ``window``), or a recurrent
    state (``linear``): from ``layer_types``, else ``full_attention_interval`` (every n-th layer full, the others
    linear), else every layer sliding where ``use_sliding_window`` is true, else full.

    Raises:
        ParameterError: a layer type not in :data:`LAYER_KINDS` (named: it is refused, not costed as full
            attention), a ``layer_types`` of another length than the layers, or sliding layers with no window.
    """
    types = text.get("layer_types")
    counts = {"full": 0, "sliding": 0, "linear": 0}
    if isinstance(types, list) and types:
        if len(types) != layers:
            raise ParameterError(where, f"layer_types names {len(types)} layers, the config has {layers}")
        for t in types:
            kind = LAYER_KINDS.get(t) if isinstance(t, str) else None
            if kind is None:
                raise ParameterError(where, f"layer type {str(t)[:40]!r} is not one the serving-cost model reads "
                                            f"({', '.join(sorted(LAYER_KINDS))})")
            counts[kind] += 1
    elif isinstance(text.get("full_attention_interval"), int) and text["full_attention_interval"] > 0:
        counts["full"] = layers // text["full_attention_interval"]  # Qwen3-Next / 3.5: every n-th layer full
        counts["linear"] = layers - counts["full"]
    elif text.get("use_sliding_window") is True and text.get("sliding_window"):
        counts["sliding"] = layers
    else:
        counts["full"] = layers
    window = text.get("sliding_window") or text.get("attention_chunk_size")
    if counts["sliding"] and not (isinstance(window, int) and not isinstance(window, bool) and window > 0):
        raise ParameterError(where, "sliding-window layers need sliding_window, a whole number of tokens > 0")
    return {**counts, "window": int(window) if counts["sliding"] else 0}


def linear_state_elements(text: dict, heads: int, head_dim: int) -> int:
    """One linear-attention layer's recurrent state of one request, elements: value heads x key dim x value dim
    (Qwen3-Next's gated DeltaNet: ``linear_num_value_heads``, ``linear_key_head_dim``, ``linear_value_head_dim``),
    plus its short convolution's window; the attention heads' shape where the config names none."""
    v_heads = int(text.get("linear_num_value_heads") or heads)
    k_heads = int(text.get("linear_num_key_heads") or v_heads)
    dk, dv = int(text.get("linear_key_head_dim") or head_dim), int(text.get("linear_value_head_dim") or head_dim)
    conv = max(int(text.get("linear_conv_kernel_dim") or 4) - 1, 0) * (2 * k_heads * dk + v_heads * dv)
    return v_heads * dk * dv + conv


def shape_from_config(cfg: dict, weight_bits: float | None = None, kv_dtype: str = "bf16",
                      where: str = "config.json") -> TargetShape:
    """A :class:`TargetShape` from a transformers config (dense, GQA / MLA attention, routed experts).

    ``weight_bits``: bits per quantized weight (default: the quantization's, with half a bit of scales, else the
    ``torch_dtype``'s); the modules its ignore list keeps (:func:`kept_unquantized`) count at the dtype's bits.
    Embeddings are left out of the bytes (a token reads its row only); ``lm_head`` is read whole.
    """
    text = text_config(cfg)
    check_config_types(text, where)
    check_target_config(text, where)
    require_kv_dtype(kv_dtype)
    try:
        H, L, V = int(text["hidden_size"]), int(text["num_hidden_layers"]), int(text["vocab_size"])
    except (KeyError, TypeError, ValueError):
        raise ParameterError(where, "a target config needs hidden_size, num_hidden_layers and vocab_size") from None
    quantized = weight_bits or config_bits(cfg, where)
    stored = dtype_bits(cfg, where)
    kept = kept_unquantized(cfg) if weight_bits is None and quantized != stored else set()

    def per(kind: str) -> float:
        return (stored if kind in kept else quantized) / 8

    kv_elem = KV_DTYPE_BYTES[kv_dtype]
    heads = int(text.get("num_attention_heads") or 1)
    layered: dict = {}  # the sliding-window and linear-attention layers' terms, when the config has them
    if text.get("kv_lora_rank"):  # MLA (DeepSeek-V3, Kimi-K2): a compressed latent per token and layer
        q_rank, kv_rank = int(text.get("q_lora_rank") or 0), int(text["kv_lora_rank"])
        rope, nope = int(text.get("qk_rope_head_dim") or 64), int(text.get("qk_nope_head_dim") or 128)
        v_dim = int(text.get("v_head_dim") or 128)
        attn = (H * q_rank + q_rank * heads * (nope + rope) if q_rank else H * heads * (nope + rope)) \
            + H * (kv_rank + rope) + kv_rank * heads * (nope + v_dim) + heads * v_dim * H
        kv, kv_ways = L * (kv_rank + rope) * kv_elem, 1
        attn_flops = L * 2 * heads * (2 * kv_rank + rope)  # absorbed: scores over rank + rope, values over rank
    else:
        head_dim = int(text.get("head_dim") or H // heads)
        kv_heads = int(text.get("num_key_value_heads") or heads)
        attn = H * heads * head_dim * 2 + H * kv_heads * head_dim * 2
        kinds = layer_kinds(text, L, where)
        kv, kv_ways = kinds["full"] * 2 * kv_heads * head_dim * kv_elem, kv_heads
        attn_flops = kinds["full"] * 4 * heads * head_dim
        if kinds["sliding"]:
            window = kinds["window"]
            layered.update(window_kv_bytes_per_token=kinds["sliding"] * 2 * kv_heads * head_dim * kv_elem,
                           window_tokens=window, window_attention_flops_per_context=kinds["sliding"] * 4 * heads * head_dim)
        if kinds["linear"]:
            layered["state_bytes"] = kinds["linear"] * linear_state_elements(text, heads, head_dim) * kv_elem
    inter = int(text.get("intermediate_size") or 4 * H)
    head = V * H
    draft_vocab = min(V, 32000)
    draft_params = 4 * H * H + 3 * H * inter + 3 * H * H + draft_vocab * H  # one layer (2H in), fc, lm_head
    common = dict(kv_bytes_per_token=kv, kv_ways=kv_ways, attention_flops_per_context=attn_flops, layers=L,
                  hidden_size=H, draft_bytes=draft_params * stored / 8, draft_params=draft_params,
                  draft_vocab=draft_vocab, **layered)
    experts = int(text.get("n_routed_experts") or text.get("num_experts") or text.get("num_local_experts") or 0)
    if experts:
        top = int(text.get("num_experts_per_tok") or 1)
        moe_inter = int(text.get("moe_intermediate_size") or inter)
        dense_layers = min(int(text.get("first_k_dense_replace") or 0), L)
        moe_layers = L - dense_layers
        shared = int(text.get("n_shared_experts") or 0) * 3 * H * moe_inter
        expert = 3 * H * moe_inter
        dense_bytes = L * attn * per("attention") + dense_layers * 3 * H * inter * per("dense_mlp") \
            + moe_layers * shared * per("shared_experts") + head * per("lm_head")
        active = L * attn + dense_layers * 3 * H * inter + moe_layers * (shared + top * expert) + head
        total = dense_bytes + moe_layers * experts * expert * per("experts") + head * stored / 8
        return TargetShape(dense_bytes, active, moe_layers=moe_layers, experts_total=experts, experts_per_token=top,
                           expert_bytes=expert * per("experts"), total_bytes=total, **common)
    dense_bytes = L * (attn * per("attention") + 3 * H * inter * per("dense_mlp")) + head * per("lm_head")
    active = L * (attn + 3 * H * inter) + head
    return TargetShape(dense_bytes, active, total_bytes=dense_bytes + head * stored / 8, **common)
