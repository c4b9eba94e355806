"""The EAGLE-3 drafter in PyTorch, with SpecForge / SGLang parameter names, computing every variant
SpecForge and speculators compute (``docs/EAGLE3_FORMAT.md`` §1.1).

Data flow of the one decoder layer::

    g      = fc(concat(low, mid, high))                 # [B, S, H]   fc_norm / input_norm first if set
    e      = input_layernorm(embed(token))              # [B, S, H]
    h      = attention(concat(e, hidden_norm(g))) + r   # q/k/v read 2H; r = g (hidden_norm(g) when
                                                        #   norm_before_residual)
    h      = mlp(post_attention_layernorm(h)) + h
    logits = lm_head(norm(h))                           # [B, S, Vd]; draft id -> target id via d2t
                                                        #   (lm_head(h) for SpecForge norm_output: false)

In training-time test (TTT) and in drafting, ``h`` is fed back as the next step's hidden state
(``norm(h)`` for speculators' ``norm_output: true``). Position ``t`` of the drafter pairs the
target's state at ``t`` with the token at ``t + 1`` and predicts the token at ``t + 2``.
"""

from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from eaglelab.checkpoints.drafter_config import drafter_config_for_target
from eaglelab.checkpoints.spec import DrafterSpec, drafter_spec_from_config
from eaglelab.checkpoints.tensor_table import check_vocab_maps
from eaglelab.checkpoints.variants import Rope, check_computed, layer_body, rope_of
from eaglelab.errors import CheckpointMismatchError, ConfigError
from eaglelab.model.vocab import identity_vocab_map


class RMSNorm(nn.Module):
    """Llama RMSNorm (computed in float32, cast back)."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


def rope_inv_freq(head_dim: int, rope: Rope) -> torch.Tensor:
    """Inverse frequencies [head_dim / 2] of ``rope`` (default, linear, llama3 or YaRN scaling)."""
    if rope.kind == "default":  # bit-for-bit what the references compute in float32
        return 1.0 / (rope.theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    return torch.tensor(rope.inverse_frequencies(head_dim), dtype=torch.float64).float()


def rope_cos_sin(inv_freq: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype, scale: float = 1.0):
    """cos / sin for ``positions`` [B, S] -> each [B, 1, S, head_dim] (times YaRN's ``scale``)."""
    freqs = positions.to(torch.float32)[..., None] * inv_freq.to(positions.device)[None, None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
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
        v: values [B, nkv, T, d].
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


class DrafterAttention(nn.Module):
    """Attention over concat(embedding, hidden) [.., 2H]; GQA; RoPE (per-head q / k RMSNorms first in a qwen3 layer)."""

    def __init__(self, spec: DrafterSpec, rope: Rope):
        super().__init__()
        H, nh, nkv, d = spec.hidden_size, spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim
        self.nh, self.nkv, self.d = nh, nkv, d
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
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.nh != self.nkv)
        return self.o_proj(out.transpose(1, 2).reshape(B, S, self.nh * self.d))

    def forward_ttt(self, x: torch.Tensor, positions: torch.Tensor, step_kv: list) -> torch.Tensor:
        """One TTT unroll step (SpecForge's training attention).

        Step 0 attends causally over the sequence; step i also attends, at each position t,
        to the keys steps 1..i produced at that same t (the draft chain of length i that
        followed t). ``step_kv`` collects (k, v) per step and is appended to in place.

        Args:
            x: [B, S, 2H].
            positions: [B, S], already offset by the step index.
            step_kv: list of (k, v), each [B, nkv, S, d].
        """
        B, S, _ = x.shape
        q, k, v = self._qkv(x, positions)
        step_kv.append((k, v))
        rep = self.nh // self.nkv
        k0, v0 = step_kv[0]
        k0, v0 = k0.repeat_interleave(rep, 1), v0.repeat_interleave(rep, 1)
        scale = 1.0 / math.sqrt(self.d)
        scores = (q @ k0.transpose(-1, -2)) * scale  # [B, nh, S, S]
        causal = torch.ones(S, S, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        diag_k = [kk.repeat_interleave(rep, 1) for kk, _ in step_kv[1:]]
        diag = [(q * kk).sum(-1, keepdim=True) * scale for kk in diag_k]  # each [B, nh, S, 1]
        probs = torch.softmax(torch.cat([scores, *diag], dim=-1).float(), dim=-1).to(q.dtype)
        out = probs[..., :S] @ v0
        for j, (_, vv) in enumerate(step_kv[1:]):
            out = out + probs[..., S + j: S + j + 1] * vv.repeat_interleave(rep, 1)
        return self.o_proj(out.transpose(1, 2).reshape(B, S, self.nh * self.d))


class DrafterMLP(nn.Module):
    def __init__(self, spec: DrafterSpec):
        super().__init__()
        from transformers.activations import ACT2FN

        self.gate_proj = nn.Linear(spec.hidden_size, spec.intermediate_size, bias=False)
        self.up_proj = nn.Linear(spec.hidden_size, spec.intermediate_size, bias=False)
        self.down_proj = nn.Linear(spec.intermediate_size, spec.hidden_size, bias=False)
        self.act = ACT2FN[spec.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class DrafterLayer(nn.Module):
    """The ``midlayer``: hidden_norm / input_layernorm -> attention(2H) -> MLP, with residuals."""

    def __init__(self, spec: DrafterSpec, rope: Rope):
        super().__init__()
        H, eps = spec.hidden_size, spec.rms_norm_eps
        self.norm_before_residual = spec.norm_before_residual
        self.hidden_norm = RMSNorm(H, eps)
        self.input_layernorm = RMSNorm(H, eps)
        self.self_attn = DrafterAttention(spec, rope)
        self.post_attention_layernorm = RMSNorm(H, eps)
        self.mlp = DrafterMLP(spec)

    def forward(self, emb, hidden, positions, cache=None, step_kv=None):
        normed = self.hidden_norm(hidden)
        x = torch.cat([self.input_layernorm(emb), normed], dim=-1)
        if step_kv is not None:
            attn = self.self_attn.forward_ttt(x, positions, step_kv)
        else:
            attn = self.self_attn(x, positions, cache)
        h = (normed if self.norm_before_residual else hidden) + attn
        return h + self.mlp(self.post_attention_layernorm(h))


class Eagle3Drafter(nn.Module):
    """EAGLE-3 drafter with SpecForge parameter names (``fc``, ``midlayer.*``, ``norm``, ``lm_head``).

    Args:
        config: the drafter's config.json as a dict, SpecForge or speculators format; each flag is
            read in its own format's meaning (:mod:`eaglelab.checkpoints.variants`).
        seed: seed of the weight initialisation.
        where: the file named in errors.

    Attributes:
        spec: the parsed DrafterSpec.
        config: a copy of the config dict, written back on save (in its own format).
        has_embedding: False until the embedding is loaded or taken from the target.

    Raises:
        UnsupportedDrafterError: a family or flag eaglelab does not compute exactly (one line naming it).
    """

    def __init__(self, config: dict[str, Any], seed: int = 0, where: str = "config.json"):
        super().__init__()
        self.config = copy.deepcopy(config)
        check_computed(config, where)
        self.spec = spec = drafter_spec_from_config(config, where)
        H, Ht, eps = spec.hidden_size, spec.target_hidden_size, spec.rms_norm_eps
        self.embed_tokens = nn.Embedding(spec.vocab_size, H)
        self.embed_tokens.weight.requires_grad_(False)
        if spec.norm_before_fc:
            self.input_norm = RMSNorm(3 * Ht, eps)
        if spec.fc_norm:
            self.fc_norm = nn.ModuleList(RMSNorm(Ht, eps) for _ in range(3))
        self.fc = nn.Linear(3 * Ht, H, bias=False)
        try:
            self.midlayer = DrafterLayer(spec, rope_of(layer_body(config), where))
        except KeyError as exc:  # transformers' ACT2FN
            raise ConfigError(where, f"hidden_act {spec.hidden_act!r} is not an activation transformers knows") from exc
        self.norm = RMSNorm(H, spec.rms_norm_eps)
        self.lm_head = nn.Linear(H, spec.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(spec.draft_vocab_size, dtype=torch.int64))
        self.register_buffer("t2d", torch.zeros(spec.vocab_size, dtype=torch.bool))
        self.has_embedding = False
        self.reset_parameters(seed=seed)
        self.set_vocab_map(*identity_vocab_map(spec.vocab_size, spec.draft_vocab_size))

    def reset_parameters(self, std: float | None = None, seed: int = 0) -> None:
        """Initialise linear weights N(0, std) (``initializer_range``), norms to ones."""
        std = std if std is not None else float(self.config.get("initializer_range", 0.02))
        gen = torch.Generator().manual_seed(seed)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight") or name.startswith("fc_norm"):
                nn.init.ones_(p)
            elif name != "embed_tokens.weight":
                with torch.no_grad():
                    p.copy_(torch.randn(p.shape, generator=gen) * std)

    # ----------------------------------------------------------------- pieces
    @property
    def aux_layer_ids(self) -> tuple[int, ...] | None:
        return self.spec.aux_layer_ids

    def set_vocab_map(self, d2t: torch.Tensor, t2d: torch.Tensor) -> None:
        problems = check_vocab_maps(d2t.numpy(), t2d.numpy(), self.spec.draft_vocab_size)
        if problems:
            raise CheckpointMismatchError("d2t/t2d", "; ".join(problems))
        self.d2t.copy_(d2t)
        self.t2d.copy_(t2d)

    def set_embedding(self, weight: torch.Tensor) -> None:
        """Copy the target's input embedding [V, H] (what SGLang injects at run time)."""
        if tuple(weight.shape) != tuple(self.embed_tokens.weight.shape):
            raise CheckpointMismatchError(
                "embed_tokens", f"target embedding {list(weight.shape)} vs drafter "
                                f"{list(self.embed_tokens.weight.shape)}")
        with torch.no_grad():
            self.embed_tokens.weight.copy_(weight)
        self.has_embedding = True

    @contextlib.contextmanager
    def serving_embedding(self, weight: torch.Tensor):
        """Read ``weight`` [V, H] as the embedding inside the block, without copying it.

        SGLang serves a drafter with the serving target's embedding; this lets one drafter be
        evaluated on two targets in turn at no memory cost (a copy of a 163840 x 7168 embedding
        is 4.7 GB). The drafter's own embedding is back in place afterwards.
        """
        if tuple(weight.shape) != tuple(self.embed_tokens.weight.shape):
            raise CheckpointMismatchError(
                "embed_tokens", f"target embedding {list(weight.shape)} vs drafter "
                                f"{list(self.embed_tokens.weight.shape)}")
        own, had = self.embed_tokens.weight, self.has_embedding
        self.embed_tokens.weight = nn.Parameter(weight.detach(), requires_grad=False)
        self.has_embedding = True
        try:
            yield self
        finally:
            self.embed_tokens.weight, self.has_embedding = own, had

    def init_head_from_target(self, lm_head_weight: torch.Tensor, norm_weight: torch.Tensor | None = None) -> None:
        """Start ``lm_head`` from the target's head rows of the draft vocabulary (and ``norm`` from its final norm).

        EAGLE-1/2 reuse the target's head outright; EAGLE-3 trains its own, and this starts it at
        the target's (measured on SmolLM2-135M: a marginal gain after 60 steps, τ 1.21 vs 1.19).
        Call after the vocabulary map is set.

        Args:
            lm_head_weight: the target's lm_head [V, H].
            norm_weight: the target's final RMSNorm weight [H].
        """
        with torch.no_grad():
            self.lm_head.weight.copy_(lm_head_weight[self.t2d].to(self.lm_head.weight.dtype))
            if norm_weight is not None:
                self.norm.weight.copy_(norm_weight.to(self.norm.weight.dtype))

    def project(self, aux: torch.Tensor) -> torch.Tensor:
        """fc over the three target states. aux: [B, S, 3 Ht] -> [B, S, H]."""
        if self.spec.norm_before_fc:
            aux = self.input_norm(aux)
        if self.spec.fc_norm:
            parts = aux.chunk(3, dim=-1)
            aux = torch.cat([n(p) for n, p in zip(self.fc_norm, parts)], dim=-1)
        return self.fc(aux)

    def step(self, token_ids, hidden, positions, cache: DrafterKV | None = None, step_kv=None):
        """One pass of the decoder layer.

        Args:
            token_ids: [B, S] target-vocabulary ids (the token *after* each hidden state).
            hidden: [B, S, H] projected target states or the previous step's output.
            positions: [B, S] RoPE positions.
            cache: inference KV cache (appended to).
            step_kv: TTT per-step keys (training / offline evaluation).

        Returns:
            [B, S, H] pre-norm hidden states.
        """
        emb = self.embed_tokens(token_ids).to(hidden.dtype)
        return self.midlayer(emb, hidden, positions, cache=cache, step_kv=step_kv)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """A step's output [B, S, H] -> draft-vocabulary logits [B, S, Vd]."""
        if self.spec.norm_before_head or self.spec.norm_fed_back:
            hidden = self.norm(hidden)
        return self.lm_head(hidden)

    def feed_back(self, hidden: torch.Tensor) -> torch.Tensor:
        """A step's output [B, S, H] -> the next step's hidden state (normed for speculators' norm_output)."""
        return self.norm(hidden) if self.spec.norm_fed_back else hidden

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Draft ids -> target ids: ``draft + d2t[draft]``."""
        return draft_ids + self.d2t[draft_ids]

    def draft_target_ids(self) -> torch.Tensor:
        """[Vd] the target id of each draft id (ascending, as ``t2d`` marks them)."""
        return self.to_target_ids(torch.arange(self.spec.draft_vocab_size, device=self.d2t.device))

    def ttt_logits(self, input_ids: torch.Tensor, aux: torch.Tensor, steps: int) -> list[torch.Tensor]:
        """Training-time-test unroll over whole sequences.

        Args:
            input_ids: [B, S] token ids x_0..x_{S-1}.
            aux: [B, S, 3 Ht] target aux hidden states at each position.
            steps: unroll length (SpecForge default 7).

        Returns:
            ``steps`` tensors [B, S, Vd]: step i at position t predicts token t + 2 + i from
            token t + 1 + i (ids past the end are padded with 0; mask them out).
        """
        B, S = input_ids.shape
        positions = torch.arange(S, device=input_ids.device).expand(B, S)
        hidden = self.project(aux)
        step_kv: list = []
        out = []
        for i in range(steps):
            ids = shift_left(input_ids, 1 + i)
            hidden = self.step(ids, hidden, positions + i, step_kv=step_kv)
            out.append(self.logits(hidden))
            hidden = self.feed_back(hidden)
        return out

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_target_config(cls, target_cfg: dict[str, Any], draft_vocab_size: int | None = None,
                           aux_layer_ids: list[int] | None = None, seed: int = 0, **overrides) -> Eagle3Drafter:
        """A fresh drafter sized for a target, as SpecForge derives its config."""
        return cls(drafter_config_for_target(target_cfg, draft_vocab_size, aux_layer_ids, **overrides), seed=seed)


def shift_left(ids: torch.Tensor, n: int) -> torch.Tensor:
    """ids[:, n:] padded at the end with token 0, as SpecForge and speculators pad. [B, S] -> [B, S].

    A padded position's output reaches no other position (its keys are read only by itself), and
    the loss and acceptance masks drop it.
    """
    if n == 0:
        return ids
    pad = torch.zeros_like(ids[:, :1]).expand(-1, min(n, ids.shape[1]))
    return torch.cat([ids[:, n:], pad], dim=1)[:, : ids.shape[1]]


# --------------------------------------------------------------------------- vocabulary map


# --------------------------------------------------------------------------- save / load


