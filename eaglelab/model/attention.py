"""The drafter layer's attention and its pieces: RMSNorm, RoPE, the KV cache, Llama and MLA attention.

Both attentions read concat(input_layernorm(embedding), hidden_norm(hidden)) [.., 2H] and share the
inference pass (a KV cache, SDPA) and the training-time-test pass (SpecForge's; TorchSpec's for MLA):
:class:`DrafterAttention` makes queries, keys and values as Llama does (grouped-query, RoPE on halves),
:class:`MlaAttention` as DeepSeek-V3's multi-head latent attention, as SGLang's MLA drafter computes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from eaglelab.checkpoints.drafters.spec import DrafterSpec
from eaglelab.checkpoints.drafters.variants import Rope


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, keep_float32: bool = False) -> torch.Tensor:
    """RMSNorm as Llama and DeepSeek compute it: the variance in float32, the normalised value cast back to
    ``x``'s dtype (or kept in float32) before the weight multiplies it. The one formula of the drafter's norms and
    the target's final norm read from its checkpoint (:meth:`eaglelab.model.heads.TargetHeads.norm`)."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * (x32 if keep_float32 else x32.to(x.dtype))


class RMSNorm(nn.Module):
    """Llama RMSNorm with a learned weight (:func:`rms_norm`)."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def rope_inv_freq(head_dim: int, rope: Rope) -> torch.Tensor:
    """Inverse frequencies [head_dim / 2] of ``rope`` (default, linear, llama3 or YaRN scaling)."""
    if rope.kind == "default":  # bit-for-bit what the references compute in float32
        return 1.0 / (rope.theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    return torch.tensor(rope.inverse_frequencies(head_dim), dtype=torch.float64).float()


def rope_cos_sin(inv_freq: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype, scale: float = 1.0,
                 pairs: bool = False):
    """cos / sin for ``positions`` [B, S] -> each [B, 1, S, head_dim] (times YaRN's ``scale``).

    ``pairs``: one angle per rotated pair, [B, 1, S, head_dim / 2] (interleaved RoPE, :func:`apply_rope_interleaved`).
    """
    freqs = positions.to(torch.float32)[..., None] * inv_freq.to(positions.device)[None, None, :]
    emb = freqs if pairs else torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos(), emb.sin()
    if scale != 1.0:
        cos, sin = cos * scale, sin * scale
    return cos.to(dtype)[:, None], sin.to(dtype)[:, None]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + _rotate_half(x) * sin


@dataclass
class DrafterKV:
    """Key / value cache of the drafter's single attention layer.

    Attributes:
        k: keys [B, nkv, T, d] (after RoPE), or None when empty.
        v: values [B, nkv, T, dv] (dv = d for Llama attention, ``v_head_dim`` for MLA).
    """

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def crop(self, length: int) -> None:
        """Keep the first ``length`` positions (drop rejected draft positions)."""
        if self.k is not None:
            self.k, self.v = self.k[:, :, :length], self.v[:, :, :length]


class _Attention(nn.Module):
    """Causal attention over concat(embedding, hidden) [.., 2H]: the inference and training-time-test passes.

    Subclasses say how queries, keys and values are made (:meth:`_qkv`); the passes are shared.
    Attributes set by them: ``nh`` / ``nkv`` query / key-value heads, ``d`` the query / key width,
    ``scale`` the softmax scale, ``sdpa_scale`` the same for SDPA (None: its own 1 / sqrt(d)).
    """

    nh: int
    nkv: int
    d: int
    scale: float
    sdpa_scale: float | None = None

    def _qkv(self, x: torch.Tensor, positions: torch.Tensor):
        """q [B, nh, S, d], k [B, nkv, S, d], v [B, nkv, S, dv], RoPE applied."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: DrafterKV | None) -> torch.Tensor:
        """Causal attention of the new positions over the cache and themselves.

        Args:
            x: [B, S, 2H] concat(input_layernorm(embed), hidden_norm(hidden)).
            positions: [B, S] RoPE positions of the new entries.
            cache: appended to in place; None attends within ``x`` only.
        """
        B, S, _ = x.shape
        q, k, v = self._qkv(x, positions)
        past = 0
        if cache is not None:
            past = cache.length
            k, v = cache.append(k, v)
        T = k.shape[2]
        mask = torch.ones(S, T, dtype=torch.bool, device=x.device).tril(diagonal=past)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.nh != self.nkv,
                                             scale=self.sdpa_scale)
        return self.o_proj(out.transpose(1, 2).reshape(B, S, -1))

    def forward_ttt(self, x: torch.Tensor, positions: torch.Tensor, step_kv: list) -> torch.Tensor:
        """One TTT unroll step (SpecForge's training attention, TorchSpec's for MLA).

        Step 0 attends causally over the sequence; step i also attends, at each position t,
        to the keys steps 1..i produced at that same t (the draft chain of length i that
        followed t). ``step_kv`` collects (k, v) per step and is appended to in place.

        Args:
            x: [B, S, 2H].
            positions: [B, S], already offset by the step index.
            step_kv: list of (k, v), each [B, nkv, S, d] / [B, nkv, S, dv].
        """
        B, S, _ = x.shape
        q, k, v = self._qkv(x, positions)
        step_kv.append((k, v))
        rep = self.nh // self.nkv
        k0, v0 = step_kv[0]
        k0, v0 = k0.repeat_interleave(rep, 1), v0.repeat_interleave(rep, 1)
        scores = (q @ k0.transpose(-1, -2)) * self.scale  # [B, nh, S, S]
        causal = torch.ones(S, S, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        diag_k = [kk.repeat_interleave(rep, 1) for kk, _ in step_kv[1:]]
        diag = [(q * kk).sum(-1, keepdim=True) * self.scale for kk in diag_k]  # each [B, nh, S, 1]
        probs = torch.softmax(torch.cat([scores, *diag], dim=-1).float(), dim=-1).to(q.dtype)
        out = probs[..., :S] @ v0
        for j, (_, vv) in enumerate(step_kv[1:]):
            out = out + probs[..., S + j: S + j + 1] * vv.repeat_interleave(rep, 1)
        return self.o_proj(out.transpose(1, 2).reshape(B, S, -1))


class DrafterAttention(_Attention):
    """Llama attention over concat(embedding, hidden) [.., 2H]; GQA; RoPE (per-head q / k RMSNorms first in a qwen3 layer)."""

    def __init__(self, spec: DrafterSpec, rope: Rope):
        super().__init__()
        H, nh, nkv, d = spec.hidden_size, spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim
        self.nh, self.nkv, self.d = nh, nkv, d
        self.scale = 1.0 / math.sqrt(d)
        self.q_proj = nn.Linear(2 * H, nh * d, bias=spec.attention_bias)
        self.k_proj = nn.Linear(2 * H, nkv * d, bias=spec.attention_bias)
        self.v_proj = nn.Linear(2 * H, nkv * d, bias=spec.attention_bias)
        self.o_proj = nn.Linear(nh * d, H, bias=spec.attention_bias)
        if spec.qk_norm:  # qwen3 layer: RMSNorm over each head's dims, before RoPE
            self.q_norm, self.k_norm = RMSNorm(d, spec.rms_norm_eps), RMSNorm(d, spec.rms_norm_eps)
        self.qk_norm = spec.qk_norm
        self.register_buffer("inv_freq", rope_inv_freq(d, rope), persistent=False)
        self.rope_scale = rope.attention_scale

    def _qkv(self, x: torch.Tensor, positions: torch.Tensor):
        B, S, _ = x.shape
        q = self.q_proj(x).view(B, S, self.nh, self.d)
        k = self.k_proj(x).view(B, S, self.nkv, self.d)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.nkv, self.d).transpose(1, 2)
        cos, sin = rope_cos_sin(self.inv_freq, positions, q.dtype, self.rope_scale)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


def apply_rope_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """GPT-J RoPE: dims (2j, 2j + 1) rotate together by frequency j, and stay where they are.

    Args:
        x: [B, h, S, r].
        cos, sin: [B, 1, S, r / 2], one angle per pair.
    """
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)


class MlaAttention(_Attention):
    """Multi-head latent attention over concat(embedding, hidden) [.., 2H], as SGLang's MLA drafter computes it.

    SGLang's ``Eagle3DeepseekV2ForCausalLM`` widens DeepSeek's ``q_a_proj`` and ``kv_a_proj_with_mqa`` to
    the 2H input; the rest is DeepSeek-V3's attention::

        q        = q_b_proj(q_a_layernorm(q_a_proj(x)))           # [B, S, nh, nope + rope] (or q_proj(x))
        c, k_pe  = kv_a_proj_with_mqa(x) split [kv_lora, rope]    # one RoPE key shared by every head
        k_nope, v = kv_b_proj(kv_a_layernorm(c)) split per head [nope, v]
        scores   = (q_nope . k_nope + rope(q_pe) . rope(k_pe)) * scale

    RoPE rotates interleaved pairs (SGLang's ``is_neox_style=False``), DeepSeek's YaRN on
    ``qk_rope_head_dim`` dims; the scale is ``qk_head_dim ** -0.5`` times YaRN's ``mscale(factor,
    mscale_all_dim)`` squared. The keys and values are materialised per head (TorchSpec's training form);
    SGLang's absorbed decode form is the same product in another order.
    """

    def __init__(self, spec: DrafterSpec, rope: Rope):
        super().__init__()
        m = spec.mla
        H, nh = spec.hidden_size, spec.num_attention_heads
        self.nh = self.nkv = nh
        self.d, self.nope, self.rope_dims, self.dv = m.qk_head_dim, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim
        self.kv_lora = m.kv_lora_rank
        eps = spec.rms_norm_eps
        if m.q_lora_rank is None:
            self.q_proj = nn.Linear(2 * H, nh * m.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(2 * H, m.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(m.q_lora_rank, eps)
            self.q_b_proj = nn.Linear(m.q_lora_rank, nh * m.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(2 * H, m.kv_lora_rank + m.qk_rope_head_dim, bias=False)
        self.kv_a_layernorm = RMSNorm(m.kv_lora_rank, eps)
        self.kv_b_proj = nn.Linear(m.kv_lora_rank, nh * (m.qk_nope_head_dim + m.v_head_dim), bias=False)
        self.o_proj = nn.Linear(nh * m.v_head_dim, H, bias=False)
        self.register_buffer("inv_freq", rope_inv_freq(m.qk_rope_head_dim, rope), persistent=False)
        self.rope_scale = rope.attention_scale
        mscale = rope.softmax_mscale
        self.scale = self.sdpa_scale = m.qk_head_dim ** -0.5 * mscale * mscale

    def _qkv(self, x: torch.Tensor, positions: torch.Tensor):
        B, S, _ = x.shape
        q = self.q_proj(x) if hasattr(self, "q_proj") else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(B, S, self.nh, self.d).transpose(1, 2)
        q_nope, q_pe = q.split([self.nope, self.rope_dims], dim=-1)
        c, k_pe = self.kv_a_proj_with_mqa(x).split([self.kv_lora, self.rope_dims], dim=-1)
        kv = self.kv_b_proj(self.kv_a_layernorm(c)).view(B, S, self.nh, self.nope + self.dv).transpose(1, 2)
        k_nope, v = kv.split([self.nope, self.dv], dim=-1)
        cos, sin = rope_cos_sin(self.inv_freq, positions, q.dtype, self.rope_scale, pairs=True)
        q_pe = apply_rope_interleaved(q_pe, cos, sin)
        k_pe = apply_rope_interleaved(k_pe.view(B, 1, S, self.rope_dims), cos, sin)
        q = torch.cat([q_nope, q_pe], dim=-1)
        k = torch.cat([k_nope, k_pe.expand(B, self.nh, S, self.rope_dims)], dim=-1)
        return q, k, v
