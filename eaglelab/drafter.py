"""The EAGLE-3 drafter in PyTorch, in the exact SpecForge / SGLang parameter layout.

Data flow of the one decoder layer (``shared/EAGLE3_FORMAT.md``)::

    g      = fc(concat(low, mid, high))                 # [B, S, H]   (fc_norm first if set)
    e      = input_layernorm(embed(token))              # [B, S, H]
    h      = attention(concat(e, hidden_norm(g))) + g   # q/k/v read 2H
    h      = mlp(post_attention_layernorm(h)) + h
    logits = lm_head(norm(h))                           # [B, S, Vd]; draft id -> target id via d2t

In training-time test (TTT) and in drafting, the pre-norm ``h`` is fed back as the next
step's hidden state. Position ``t`` of the drafter pairs the target's state at ``t`` with the
token at ``t + 1`` and predicts the token at ``t + 2``.
"""

from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from eaglelab.errors import CheckpointMismatchError, ConfigError, OverwriteError
from eaglelab.schema import (
    DEFAULT_DRAFT_VOCAB,
    DrafterSpec,
    as_specforge_config,
    check_vocab_maps,
    default_aux_layer_outputs,
    drafter_spec_from_config,
)


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


def rope_inv_freq(head_dim: int, theta: float) -> torch.Tensor:
    """Inverse frequencies of default RoPE, [head_dim / 2]."""
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))


def rope_cos_sin(inv_freq: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype):
    """cos / sin for ``positions`` [B, S] -> each [B, 1, S, head_dim]."""
    freqs = positions.to(torch.float32)[..., None] * inv_freq.to(positions.device)[None, None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype)[:, None], emb.sin().to(dtype)[:, None]


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
    """Attention over concat(embedding, hidden) [.., 2H]; GQA; RoPE."""

    def __init__(self, spec: DrafterSpec, rope_theta: float):
        super().__init__()
        H, nh, nkv, d = spec.hidden_size, spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim
        self.nh, self.nkv, self.d = nh, nkv, d
        self.q_proj = nn.Linear(2 * H, nh * d, bias=spec.attention_bias)
        self.k_proj = nn.Linear(2 * H, nkv * d, bias=spec.attention_bias)
        self.v_proj = nn.Linear(2 * H, nkv * d, bias=spec.attention_bias)
        self.o_proj = nn.Linear(nh * d, H, bias=spec.attention_bias)
        self.register_buffer("inv_freq", rope_inv_freq(d, rope_theta), persistent=False)

    def _qkv(self, x: torch.Tensor, positions: torch.Tensor):
        B, S, _ = x.shape
        q = self.q_proj(x).view(B, S, self.nh, self.d).transpose(1, 2)
        k = self.k_proj(x).view(B, S, self.nkv, self.d).transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.nkv, self.d).transpose(1, 2)
        cos, sin = rope_cos_sin(self.inv_freq, positions, q.dtype)
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

    def __init__(self, spec: DrafterSpec, rope_theta: float):
        super().__init__()
        H, eps = spec.hidden_size, spec.rms_norm_eps
        self.hidden_norm = RMSNorm(H, eps)
        self.input_layernorm = RMSNorm(H, eps)
        self.self_attn = DrafterAttention(spec, rope_theta)
        self.post_attention_layernorm = RMSNorm(H, eps)
        self.mlp = DrafterMLP(spec)

    def forward(self, emb, hidden, positions, cache=None, step_kv=None):
        x = torch.cat([self.input_layernorm(emb), self.hidden_norm(hidden)], dim=-1)
        if step_kv is not None:
            attn = self.self_attn.forward_ttt(x, positions, step_kv)
        else:
            attn = self.self_attn(x, positions, cache)
        h = hidden + attn
        return h + self.mlp(self.post_attention_layernorm(h))


def _rope_theta(cfg: dict[str, Any]) -> float:
    params = cfg.get("rope_parameters") or {}
    theta = cfg.get("rope_theta", params.get("rope_theta", 10000.0))
    scaling = cfg.get("rope_scaling") or {}
    kind = (scaling.get("rope_type") or scaling.get("type") or params.get("rope_type") or "default")
    if kind not in ("default", "llama3"):
        # llama3 scaling only changes frequencies beyond the original context; others change more
        raise ConfigError("config.json", f"RoPE type {kind!r} is not supported by eaglelab's drafter model")
    return float(theta)


class Eagle3Drafter(nn.Module):
    """EAGLE-3 drafter with SpecForge parameter names (``fc``, ``midlayer.*``, ``norm``, ``lm_head``).

    Args:
        config: the drafter's config.json as a dict (SpecForge style).
        seed: seed of the weight initialisation.

    Attributes:
        spec: the parsed DrafterSpec.
        config: a copy of the config dict, written back on save.
        has_embedding: False until the embedding is loaded or taken from the target.
    """

    def __init__(self, config: dict[str, Any], seed: int = 0):
        super().__init__()
        self.config = copy.deepcopy(config)
        self.spec = spec = drafter_spec_from_config(config)
        if config.get("norm_output") or config.get("norm_before_residual"):
            raise ConfigError("config.json", "norm_output / norm_before_residual variants are not modelled")
        H, Ht = spec.hidden_size, spec.target_hidden_size
        self.embed_tokens = nn.Embedding(spec.vocab_size, H)
        self.embed_tokens.weight.requires_grad_(False)
        if spec.fc_norm:
            self.fc_norm = nn.ModuleList(RMSNorm(Ht, spec.rms_norm_eps) for _ in range(3))
        self.fc = nn.Linear(3 * Ht, H, bias=False)
        self.midlayer = DrafterLayer(spec, _rope_theta(config))
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
        own = self.embed_tokens.weight
        self.embed_tokens.weight = nn.Parameter(weight.detach(), requires_grad=False)
        try:
            yield self
        finally:
            self.embed_tokens.weight = own

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
        """[B, S, H] -> draft-vocabulary logits [B, S, Vd]."""
        return self.lm_head(self.norm(hidden))

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
            token t + 1 + i (ids past the end are padded with the last id; mask them out).
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
        return out

    def forward(self, batch, target, steps: int, decay: float = 0.8):
        """TTT loss and metrics on a batch (see :func:`eaglelab.evaluation.ttt_forward`).

        Defined as ``forward`` so a DDP wrapper can call it and all-reduce the gradients.
        """
        from eaglelab.evaluation import ttt_forward

        return ttt_forward(self, batch, target, steps, decay)

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_target_config(cls, target_cfg: dict[str, Any], draft_vocab_size: int | None = None,
                           aux_layer_ids: list[int] | None = None, seed: int = 0, **overrides) -> Eagle3Drafter:
        """A fresh drafter sized for a target, as SpecForge derives its config."""
        return cls(drafter_config_for_target(target_cfg, draft_vocab_size, aux_layer_ids, **overrides), seed=seed)


def shift_left(ids: torch.Tensor, n: int) -> torch.Tensor:
    """ids[:, n:] padded at the end by repeating the last id. [B, S] -> [B, S]."""
    if n == 0:
        return ids
    pad = ids[:, -1:].expand(-1, min(n, ids.shape[1]))
    return torch.cat([ids[:, n:], pad], dim=1)[:, : ids.shape[1]]


def drafter_config_for_target(target_cfg: dict[str, Any], draft_vocab_size: int | None = None,
                              aux_layer_ids: list[int] | None = None, **overrides) -> dict[str, Any]:
    """SpecForge-style drafter config for a transformers target config.

    Copies the target's width, heads, MLP width, vocabulary, eps and RoPE; one layer; draft
    vocabulary ``min(32000, V)`` by default; aux ids (layer outputs) default [1, L//2-1, L-4],
    written nested under ``eagle_config`` as SGLang / SpecForge read them.
    """
    t = target_cfg.get("text_config") or target_cfg
    L = t["num_hidden_layers"]
    V = t["vocab_size"]
    ids = list(aux_layer_ids) if aux_layer_ids is not None else list(default_aux_layer_outputs(L))
    if len(ids) != 3 or not all(0 <= i < L for i in ids):
        raise ConfigError("aux_layer_ids", f"need three layer ids in [0, {L}), got {ids}")
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "num_hidden_layers": 1,
        "hidden_size": t["hidden_size"],
        "intermediate_size": t["intermediate_size"],
        "num_attention_heads": t["num_attention_heads"],
        "num_key_value_heads": t.get("num_key_value_heads", t["num_attention_heads"]),
        "head_dim": t.get("head_dim") or t["hidden_size"] // t["num_attention_heads"],
        "hidden_act": t.get("hidden_act", "silu"),
        "rms_norm_eps": t.get("rms_norm_eps", 1e-6),
        "rope_theta": (t.get("rope_parameters") or {}).get("rope_theta", t.get("rope_theta", 10000.0)),
        "max_position_embeddings": t.get("max_position_embeddings", 2048),
        "vocab_size": V,
        "draft_vocab_size": draft_vocab_size or min(DEFAULT_DRAFT_VOCAB, V),
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True},
        "torch_dtype": "float32",
    }
    cfg.update(overrides)
    return cfg


# --------------------------------------------------------------------------- vocabulary map

def identity_vocab_map(vocab_size: int, draft_vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first Vd target ids as the draft vocabulary: d2t all zeros."""
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[:draft_vocab_size] = True
    return torch.zeros(draft_vocab_size, dtype=torch.int64), t2d


def build_vocab_map(token_counts: torch.Tensor, draft_vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Draft vocabulary from target-token frequencies (SpecForge's recipe).

    Take the Vd most frequent ids (ties broken by the lower id), pad with unused ids when
    fewer than Vd occur, sort ascending; ``d2t[i] = used[i] - i``; ``t2d[j] = j in used``.

    Args:
        token_counts: [V] counts of each target id over positions with loss_mask 1.
        draft_vocab_size: Vd.

    Returns:
        (d2t [Vd] int64, t2d [V] bool).
    """
    V = token_counts.shape[0]
    if draft_vocab_size > V:
        raise ConfigError("draft_vocab_size", f"{draft_vocab_size} exceeds the target vocabulary {V}")
    counts = token_counts.to(torch.float64)
    # stable order: by count descending, then id ascending
    order = sorted(range(V), key=lambda j: (-counts[j].item(), j)) if V <= 4096 else \
        torch.argsort(-counts + torch.arange(V, dtype=torch.float64) / (V * 2.0), stable=True).tolist()
    occurring = [j for j in order if counts[j] > 0][:draft_vocab_size]
    chosen = set(occurring)
    pad = (j for j in range(V) if j not in chosen)
    while len(occurring) < draft_vocab_size:
        occurring.append(next(pad))
    used = torch.tensor(sorted(occurring), dtype=torch.int64)
    d2t = used - torch.arange(draft_vocab_size)
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[used] = True
    return d2t, t2d


def count_tokens(sequences, vocab_size: int, loss_masks=None) -> torch.Tensor:
    """Counts [V] of target ids over sequences (optionally only where the loss mask is 1)."""
    counts = torch.zeros(vocab_size, dtype=torch.int64)
    for i, ids in enumerate(sequences):
        ids = torch.as_tensor(ids).reshape(-1)
        if loss_masks is not None:
            ids = ids[torch.as_tensor(loss_masks[i]).reshape(-1).bool()]
        counts += torch.bincount(ids, minlength=vocab_size)[:vocab_size]
    return counts


# --------------------------------------------------------------------------- save / load

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def drafter_state_dict(model: Eagle3Drafter, include_embedding: bool = False,
                       dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """State dict in SpecForge key names (RoPE buffers excluded; d2t / t2d kept exact)."""
    sd = {}
    for k, v in model.state_dict().items():
        if k.endswith("inv_freq") or (k == "embed_tokens.weight" and not include_embedding):
            continue
        v = v.detach()
        if dtype is not None and v.is_floating_point():
            v = v.to(dtype)
        sd[k] = v.contiguous().cpu()
    return sd


def save_drafter(model: Eagle3Drafter, out_dir: str | Path, include_embedding: bool = False,
                 dtype: str | None = None, overwrite: bool = False, extra_config: dict | None = None) -> Path:
    """Write ``config.json`` + ``model.safetensors`` (SpecForge / SGLang layout), atomically.

    Args:
        model: the drafter.
        out_dir: folder to write.
        include_embedding: also save ``embed_tokens.weight`` (SGLang ignores it either way).
        dtype: ``float32`` / ``bfloat16`` / ``float16`` for the saved weights (default: as is).
        overwrite: replace an existing checkpoint in ``out_dir``; otherwise refuse.
        extra_config: keys merged into the written config.

    Raises:
        OverwriteError: ``out_dir`` already holds a checkpoint and ``overwrite`` is False.
    """
    from safetensors.torch import save_file

    from eaglelab.atomic import atomic_path, write_json_atomic

    out = Path(out_dir)
    if (out / "model.safetensors").exists() and not overwrite:
        raise OverwriteError(out, "already holds a drafter checkpoint; pass overwrite=True (--force) to replace it")
    out.mkdir(parents=True, exist_ok=True)
    sd = drafter_state_dict(model, include_embedding, _DTYPES[dtype] if dtype else None)
    with atomic_path(out / "model.safetensors") as tmp:
        save_file(sd, str(tmp), metadata={"format": "pt", "producer": "eaglelab"})
    cfg = copy.deepcopy(model.config)
    cfg["torch_dtype"] = dtype or str(next(iter(v for v in sd.values() if v.is_floating_point())).dtype)[6:]
    cfg.update(extra_config or {})
    write_json_atomic(out / "config.json", cfg)
    return out


def normalise_drafter_keys(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Accept SpecForge (``midlayer.*``), SGLang-prefixed (``model.*``) and speculators (``layers.0.*``) names."""
    out = {}
    for k, v in sd.items():
        k = k[len("model."):] if k.startswith("model.") else k
        k = "midlayer." + k[len("layers.0."):] if k.startswith("layers.0.") else k
        out[k] = v
    return out


def load_drafter_state(model: Eagle3Drafter, sd: dict[str, torch.Tensor], where: str) -> None:
    """Load a state dict strictly: every required key present with the right shape, nothing unknown.

    ``embed_tokens.weight`` may be absent (``model.has_embedding`` then stays False).

    Raises:
        CheckpointMismatchError: listing every missing, unexpected and wrong-shaped key.
    """
    sd = normalise_drafter_keys(sd)
    own = {k: v for k, v in model.state_dict().items() if not k.endswith("inv_freq")}
    missing = [k for k in own if k not in sd and k != "embed_tokens.weight"]
    unexpected = [k for k in sd if k not in own]
    wrong = [f"{k} {list(sd[k].shape)} (expected {list(own[k].shape)})"
             for k in own if k in sd and sd[k].shape != own[k].shape]
    if missing or unexpected or wrong:
        parts = []
        if missing:
            parts.append("missing " + ", ".join(missing))
        if unexpected:
            parts.append("unexpected " + ", ".join(unexpected))
        if wrong:
            parts.append("wrong shape " + ", ".join(wrong))
        raise CheckpointMismatchError(where, "; ".join(parts))
    problems = check_vocab_maps(sd["d2t"].numpy(), sd["t2d"].numpy(), model.spec.draft_vocab_size)
    if problems:
        raise CheckpointMismatchError(where, "; ".join(problems))
    with torch.no_grad():
        for k, v in sd.items():
            target = own[k]
            target.copy_(v.to(target.dtype))
    model.has_embedding = "embed_tokens.weight" in sd


def load_drafter(source: str | Path, dtype: torch.dtype = torch.float32) -> Eagle3Drafter:
    """Load a drafter folder (SpecForge / SGLang layout, or speculators) into :class:`Eagle3Drafter`.

    Weights are read with safetensors (never unpickled). A missing ``embed_tokens`` is
    allowed: take it from the target with :meth:`Eagle3Drafter.set_embedding`.

    Raises:
        SourceError / ConfigError: unreadable folder or config.
        CheckpointMismatchError: missing, unexpected or wrong-shaped tensors, or bad d2t / t2d.
    """
    from safetensors.torch import load_file

    from eaglelab.sources import load_checkpoint

    ck = load_checkpoint(str(source))
    if ck.kind == "hub":
        from huggingface_hub import snapshot_download

        ck = load_checkpoint(snapshot_download(str(source), allow_patterns=["*.json", "*.safetensors"]))
    if ck.config is None:
        raise ConfigError(source, "no config.json beside the weights")
    model = Eagle3Drafter(as_specforge_config(ck.config))
    sd: dict[str, torch.Tensor] = {}
    for f in ck.weight_files:
        sd.update(load_file(f))
    load_drafter_state(model, sd, str(source))
    return model.to(dtype)
