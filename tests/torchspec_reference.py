"""TorchSpec's MLA EAGLE-3 drafter and its training-time-test loop, restated for the tests.

TorchSpec trains the MLA drafters published for Kimi-K2.5 / K2.6. It is not on PyPI (the name there is
a placeholder package), so its arithmetic is restated here, in this project's words, from the source at
lightseekorg/TorchSpec commit 6f21829cd0e333c3b54d9d2706a0b0c8dc10de9d (the same files as
torchspec-project/TorchSpec at 6dda2bfc7b181158697245eee3f17d0e9c766750):

- ``torchspec/models/draft/deepseek_eagle.py``: ``DeepSeekMLAAttention`` (``_init_rope``,
  ``_compute_softmax_scale``, ``_project_qkv``, ``_apply_rope_and_assemble``, the cached ``forward``),
  ``DeepSeekDecoderLayer``, ``Eagle3DeepseekV2ForCausalLM``;
- ``torchspec/models/draft/llama3_eagle.py``: ``LlamaRotaryEmbedding``, ``LlamaYarnRotaryEmbedding`` and the
  ``yarn_*`` helpers, ``LlamaRMSNorm``, ``LlamaMLP``;
- ``torchspec/models/eagle3.py`` (``Eagle3Model.forward``, the unroll), ``torchspec/training/eagle3_trainer.py``
  (``_forward``: the token ids shifted by one first), ``torchspec/utils/tensor.py`` (``padding``),
  ``torchspec/models/ops/loss.py`` (the final norm, then ``lm_head``);
- ``torchspec/models/draft/auto.py`` (``AutoDraftModelConfig``: the config is transformers' ``DeepseekV3Config``);
- ``tools/convert_to_hf.py`` (``_fixup_export_config``; every export writes ``_torchspec_version``).

Where TorchSpec's trainer departs from SGLang's serving of the same file, restated as it is:

- **θ under YaRN**: ``_init_rope`` builds ``LlamaYarnRotaryEmbedding`` without ``base``, so a YaRN drafter
  trains at θ 10000 whatever ``rope_theta`` says (linear and dynamic scaling likewise; only the plain and
  llama3 rotaries get the config's θ). SGLang serves the config's θ (Kimi's 50000).
- **flags**: ``norm_output``, ``fc_norm`` and ``norm_before_fc`` are never read: logits are always
  ``lm_head(norm(h))`` and the raw ``h`` is fed to the next step.
- **q_lora_rank absent**: the config is transformers' ``DeepseekV3Config``, whose default is 1536, so the
  query takes a rank-1536 low-rank path (``q_a_proj`` / ``q_b_proj``), never one ``q_proj``.

The plain-RoPE θ is read as transformers 4 exposes it (``config.rope_theta``). Under transformers 5 the
attribute is gone (``rope_parameters`` holds it) and TorchSpec's ``getattr(config, "rope_theta", 10000)``
falls back to 10000 for every RoPE type; :func:`rope_theta_attribute` says which the installed one does.
What this reference cannot show: TorchSpec's flex-attention backend and its fused loss kernels (same
products, other order), and bf16 training numerics. Everything here runs in float32 on the CPU.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

#: The commit the arithmetic was read at.
TORCHSPEC_COMMIT = "6f21829cd0e333c3b54d9d2706a0b0c8dc10de9d"
#: The base TorchSpec's YaRN (and linear / dynamic) rotary falls back to: its constructors' default.
YARN_BASE = 10000.0
#: The keys TorchSpec's MLA drafter reads from the config (everything else in it is ignored).
READ_KEYS = ("hidden_size", "num_attention_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
             "qk_rope_head_dim", "v_head_dim", "max_position_embeddings", "rope_scaling", "rope_theta",
             "rms_norm_eps", "intermediate_size", "hidden_act", "vocab_size", "draft_vocab_size",
             "target_hidden_size", "pad_token_id", "pretraining_tp")


def q_lora_rank_of(cfg: dict[str, Any]) -> int | None:
    """The query's rank as TorchSpec reads it: transformers' ``DeepseekV3Config`` fills an absent key (1536)."""
    from transformers import DeepseekV3Config

    return cfg["q_lora_rank"] if "q_lora_rank" in cfg else DeepseekV3Config().q_lora_rank


def rope_theta_attribute(cfg: dict[str, Any]) -> float:
    """What ``getattr(DeepseekV3Config.from_dict(cfg), "rope_theta", 10000)`` gives with the installed transformers."""
    from transformers import DeepseekV3Config

    return getattr(DeepseekV3Config.from_dict(cfg), "rope_theta", 10000)


def _scaling(cfg: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    scaling = cfg.get("rope_scaling") or {}
    return scaling.get("rope_type", scaling.get("type")), scaling


def trained_theta(cfg: dict[str, Any]) -> float:
    """The RoPE base TorchSpec trains this config at (transformers 4's reading of ``rope_theta``)."""
    kind, _ = _scaling(cfg)
    if kind in (None, "default", "llama3"):
        return float(cfg.get("rope_theta", 10000))
    return YARN_BASE


def _yarn_mscale(scale: float, mscale: float) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rotary(cfg: dict[str, Any], seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """TorchSpec's cos / sin tables [seq_len, rope_dim] (half-split layout, YaRN's magnitude folded in)."""
    d = cfg["qk_rope_head_dim"]
    kind, s = _scaling(cfg)
    steps = torch.arange(0, d, 2, dtype=torch.float32) / d
    if kind in (None, "default"):
        inv_freq, magnitude = 1.0 / (trained_theta(cfg) ** steps), 1.0
    elif kind == "yarn":
        base, factor = YARN_BASE, s["factor"]

        def band_edge(rotations: float) -> float:  # the dim at which a pair turns ``rotations`` times
            return d * math.log(s["original_max_position_embeddings"] / (rotations * 2 * math.pi)) / (2 * math.log(base))

        low = max(math.floor(band_edge(s["beta_fast"])), 0)
        high = min(math.ceil(band_edge(s["beta_slow"])), d - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
        keep = 1.0 - ramp  # share of the unscaled frequency
        inv_freq = 1.0 / (factor * base ** steps) * (1 - keep) + 1.0 / (base ** steps) * keep
        magnitude = _yarn_mscale(factor, s["mscale"]) / _yarn_mscale(factor, s["mscale_all_dim"])
    else:
        raise NotImplementedError(f"RoPE type {kind!r}: not restated here")
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    both = torch.cat([angles, angles], dim=-1)
    return both.cos() * magnitude, both.sin() * magnitude


def softmax_scale(cfg: dict[str, Any]) -> float:
    """``qk_head_dim ** -0.5``, times YaRN's ``mscale(factor, mscale_all_dim)`` squared."""
    qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    kind, s = _scaling(cfg)
    if kind == "yarn":
        m = _yarn_mscale(s.get("factor", 1.0), s.get("mscale_all_dim", 0))
        return m * m / math.sqrt(qk)
    return 1.0 / math.sqrt(qk)


def tensor_shapes(cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every parameter of TorchSpec's ``Eagle3DeepseekV2ForCausalLM`` for ``cfg``, by name, with its shape."""
    H, nh, V = cfg["hidden_size"], cfg["num_attention_heads"], cfg["vocab_size"]
    Vd = cfg.get("draft_vocab_size") or V
    qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    kv, rope, inter = cfg["kv_lora_rank"], cfg["qk_rope_head_dim"], cfg["intermediate_size"]
    a = "midlayer.self_attn."
    q_rank = q_lora_rank_of(cfg)
    query = {f"{a}q_proj.weight": (nh * qk, 2 * H)} if q_rank is None else {
        f"{a}q_a_proj.weight": (q_rank, 2 * H), f"{a}q_a_layernorm.weight": (q_rank,),
        f"{a}q_b_proj.weight": (nh * qk, q_rank)}
    return {"embed_tokens.weight": (V, H), "fc.weight": (H, 3 * cfg.get("target_hidden_size", H)), **query,
            f"{a}kv_a_proj_with_mqa.weight": (kv + rope, 2 * H), f"{a}kv_a_layernorm.weight": (kv,),
            f"{a}kv_b_proj.weight": (nh * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]), kv),
            f"{a}o_proj.weight": (H, nh * cfg["v_head_dim"]),
            "midlayer.mlp.gate_proj.weight": (inter, H), "midlayer.mlp.up_proj.weight": (inter, H),
            "midlayer.mlp.down_proj.weight": (H, inter), "midlayer.hidden_norm.weight": (H,),
            "midlayer.input_layernorm.weight": (H,), "midlayer.post_attention_layernorm.weight": (H,),
            "norm.weight": (H,), "lm_head.weight": (Vd, H)}


def _shift(ids: torch.Tensor) -> torch.Tensor:
    """TorchSpec's ``padding(ids, left=False)``: one place left, a 0 at the end."""
    return torch.cat([ids[:, 1:], torch.zeros_like(ids[:, :1])], dim=1)


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _interleave(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (0, 1), (2, 3), ...: the half-split tables' first half, each angle repeated twice."""
    half = cos.shape[-1] // 2
    cos, sin = cos[..., :half].repeat_interleave(2, -1), sin[..., :half].repeat_interleave(2, -1)
    turned = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
    return x * cos + turned * sin


class TorchSpecMlaDrafter:
    """TorchSpec's MLA drafter on a drafter folder's ``config.json`` and ``model.safetensors``.

    Every tensor TorchSpec's module has must be in the file at its shape (:func:`tensor_shapes`); the
    layer may be spelled ``midlayer.`` or ``layers.0.``.
    """

    def __init__(self, cfg: dict[str, Any], weights: dict[str, torch.Tensor]):
        self.cfg = cfg
        layer = {k.replace("layers.0.", "midlayer.", 1): v for k, v in weights.items()}
        want = tensor_shapes(cfg)
        missing = sorted(n for n in want if n not in layer)
        wrong = sorted(n for n in want if n in layer and tuple(layer[n].shape) != want[n])
        if missing or wrong:
            raise ValueError(f"TorchSpec's module does not load this file: missing {missing}, other shapes {wrong}")
        self.w = {n: layer[n].float() for n in want}
        self.eps = cfg["rms_norm_eps"]
        self.nh, self.nope, self.rope, self.dv = (cfg["num_attention_heads"], cfg["qk_nope_head_dim"],
                                                  cfg["qk_rope_head_dim"], cfg["v_head_dim"])
        self.kv = cfg["kv_lora_rank"]
        self.scale = softmax_scale(cfg)

    @classmethod
    def from_folder(cls, folder: Path) -> TorchSpecMlaDrafter:
        from safetensors.torch import load_file

        return cls(json.loads((Path(folder) / "config.json").read_text()), load_file(str(Path(folder) / "model.safetensors")))

    def _lin(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w[f"{name}.weight"].T

    def _project(self, x: torch.Tensor):
        """q [B, nh, S, qk], k_nope [B, nh, S, nope], raw RoPE key [B, 1, S, rope], v [B, nh, S, dv]."""
        B, S, _ = x.shape
        a = "midlayer.self_attn."
        if f"{a}q_proj.weight" in self.w:
            q = self._lin(f"{a}q_proj", x)
        else:
            q = self._lin(f"{a}q_b_proj", _rms(self._lin(f"{a}q_a_proj", x), self.w[f"{a}q_a_layernorm.weight"], self.eps))
        q = q.view(B, S, self.nh, self.nope + self.rope).transpose(1, 2)
        latent, k_rope = self._lin(f"{a}kv_a_proj_with_mqa", x).split([self.kv, self.rope], dim=-1)
        kv = self._lin(f"{a}kv_b_proj", _rms(latent, self.w[f"{a}kv_a_layernorm.weight"], self.eps))
        k_nope, v = kv.view(B, S, self.nh, self.nope + self.dv).split([self.nope, self.dv], dim=-1)
        return q, k_nope.transpose(1, 2), k_rope[:, None], v.transpose(1, 2)

    def _attend(self, x: torch.Tensor, positions: torch.Tensor, cache: list) -> torch.Tensor:
        """One unroll step's attention: causal over step 0's keys, then one key per earlier step at the same t.

        ``cache`` holds (k, v) per step already taken; this step's RoPE positions are ``positions`` plus their count.
        """
        B, S, _ = x.shape
        q, k_nope, k_rope, v = self._project(x)
        cos, sin = rotary(self.cfg, S + len(cache))
        at = positions + len(cache)
        cos, sin = cos[at][:, None], sin[at][:, None]
        q_nope, q_rope = q.split([self.nope, self.rope], dim=-1)
        q = torch.cat([q_nope, _interleave(q_rope, cos, sin)], dim=-1)
        k = torch.cat([k_nope, _interleave(k_rope, cos, sin).expand(-1, self.nh, -1, -1)], dim=-1)
        cache.append((k, v))
        floor = torch.finfo(x.dtype).min
        causal = torch.full((S, S), floor).triu(1)  # the additive mask: 0 on and below the diagonal
        scores = [q @ cache[0][0].transpose(2, 3) * self.scale + causal]
        scores += [((q * kk).sum(-1) * self.scale)[..., None] for kk, _ in cache[1:]]
        probs = F.softmax(torch.cat(scores, dim=-1), dim=-1, dtype=torch.float32).to(q.dtype)
        out = probs[..., :S] @ cache[0][1]
        for i, (_, vv) in enumerate(cache[1:], start=1):
            out = out + probs[..., S + i - 1, None] * vv
        return self._lin("midlayer.self_attn.o_proj", out.transpose(1, 2).reshape(B, S, self.nh * self.dv))

    def _layer(self, token_ids, hidden, positions, cache) -> torch.Tensor:
        m = "midlayer."
        x = torch.cat([_rms(self.w["embed_tokens.weight"][token_ids], self.w[f"{m}input_layernorm.weight"], self.eps),
                       _rms(hidden, self.w[f"{m}hidden_norm.weight"], self.eps)], dim=-1)
        h = hidden + self._attend(x, positions, cache)
        inner = _rms(h, self.w[f"{m}post_attention_layernorm.weight"], self.eps)
        act = F.silu(self._lin(f"{m}mlp.gate_proj", inner)) * self._lin(f"{m}mlp.up_proj", inner)
        return h + self._lin(f"{m}mlp.down_proj", act)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Always ``lm_head(norm(h))``: TorchSpec reads no ``norm_output``."""
        return _rms(hidden, self.w["norm.weight"], self.eps) @ self.w["lm_head.weight"].T

    @torch.no_grad()
    def ttt(self, input_ids: torch.Tensor, aux: torch.Tensor, length: int) -> tuple[list, list]:
        """The training unroll: ``length`` steps of logits [B, S, Vd] and of the raw states fed on [B, S, H].

        The trainer shifts the ids by one (position t reads token t + 1), then every step shifts them once
        more, padding with 0; ``fc`` over the aux states only (no ``fc_norm``, no ``input_norm``); the raw
        layer output is the next step's hidden state.
        """
        ids = _shift(input_ids)
        hidden = aux.float() @ self.w["fc.weight"].T
        positions = torch.arange(ids.shape[1])[None].expand(ids.shape[0], -1)
        cache: list = []
        logits, states = [], []
        for step in range(length):
            hidden = self._layer(ids, hidden, positions, cache)
            logits.append(self.logits(hidden))
            states.append(hidden)
            if step < length - 1:
                ids = _shift(ids)
        return logits, states
