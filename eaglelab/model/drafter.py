"""The EAGLE-3 drafter in PyTorch, with SpecForge / SGLang parameter names, computing every variant
SpecForge and speculators compute, and SGLang's MLA drafter (``docs/EAGLE3_FORMAT.md`` §1.1-1.3).

Data flow of the one decoder layer::

    g      = fc(concat(low, mid, high))                 # [B, S, H]   fc_norm / input_norm first if set
    e      = input_layernorm(embed(token))              # [B, S, H]
    h      = attention(concat(e, hidden_norm(g))) + r   # q/k/v (or MLA's paths) read 2H; r = g
                                                        #   (hidden_norm(g) when norm_before_residual)
    h      = mlp(post_attention_layernorm(h)) + h
    logits = lm_head(norm(h))                           # [B, S, Vd]; draft id -> target id via d2t
                                                        #   (lm_head(h) for SpecForge norm_output: false,
                                                        #   Llama drafters only)

In training-time test (TTT) and in drafting, ``h`` is fed back as the next step's hidden state
(``norm(h)`` for speculators' ``norm_output: true`` and an MLA drafter's, EAGLE-3.1). An MLA drafter's
flags are read as SGLang's MLA class reads them (:func:`eaglelab.checkpoints.drafters.spec.mla_flags`).
Position ``t`` of the drafter pairs the target's state at ``t`` with the token at ``t + 1`` and predicts
the token at ``t + 2``.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import torch
from torch import nn

from eaglelab.checkpoints.drafters.implied_config import drafter_config_for_target
from eaglelab.checkpoints.drafters.spec import DrafterSpec, drafter_spec_from_config
from eaglelab.checkpoints.drafters.tensor_table import check_vocab_maps
from eaglelab.checkpoints.drafters.variants import Rope, check_computed, layer_body, rope_of
from eaglelab.errors import CheckpointMismatchError, ConfigError
from eaglelab.model.attention import DrafterAttention, DrafterKV, MlaAttention, RMSNorm, rope_inv_freq
from eaglelab.model.vocab import identity_vocab_map


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
    """The ``midlayer``: hidden_norm / input_layernorm -> attention(2H) -> MLP, with residuals (Llama or MLA attention)."""

    def __init__(self, spec: DrafterSpec, rope: Rope):
        super().__init__()
        H, eps = spec.hidden_size, spec.rms_norm_eps
        self.norm_before_residual = spec.norm_before_residual
        self.hidden_norm = RMSNorm(H, eps)
        self.input_layernorm = RMSNorm(H, eps)
        self.self_attn = DrafterAttention(spec, rope) if spec.mla is None else MlaAttention(spec, rope)
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
            read in its own format's meaning (:mod:`eaglelab.checkpoints.drafters.variants`).
        seed: seed of the weight initialisation.
        where: the file named in errors.
        tensor_names: the names of the tensors the file holds, when loading one: a TorchSpec vLLM export's
            aux ids are read (and saved) as the layer outputs they were trained on, and an absent
            ``q_lora_rank`` beside a ``q_proj`` is refused (:func:`drafter_spec_from_config`).
        initialise: False leaves the weights and the vocabulary map as created, for a checkpoint to fill
            (:meth:`unallocated`); a fresh drafter (True) is initialised from ``seed``.

    Attributes:
        spec: the parsed DrafterSpec.
        config: a copy of the config dict, written back on save (in its own format).
        has_embedding: False until the embedding is loaded or taken from the target (until then a loaded
            drafter holds a placeholder, no [V, H] tensor: :meth:`holds`).
        has_head: False for a full-vocabulary drafter whose file holds no ``lm_head``: it serves the
            target's (lent by :meth:`serving_embedding`, or copied by :meth:`set_embedding`).
        has_vocab_map: whether ``d2t`` / ``t2d`` are part of the drafter's files (always for a reduced
            draft vocabulary; a full-vocabulary drafter keeps what its file had).

    Raises:
        UnsupportedDrafterError: a family or flag eaglelab does not compute exactly (one line naming it).
    """

    def __init__(self, config: dict[str, Any], seed: int = 0, where: str = "config.json", tensor_names=None,
                 initialise: bool = True):
        super().__init__()
        self.config = copy.deepcopy(config)
        check_computed(config, where)
        self.spec = spec = drafter_spec_from_config(config, where, tensor_names)
        if spec.torchspec_vllm_export:
            self.config = native_aux_ids(self.config)
        H, Ht, eps = spec.hidden_size, spec.target_hidden_size, spec.rms_norm_eps
        self.embed_tokens = nn.Embedding(spec.vocab_size, H)
        self.embed_tokens.weight.requires_grad_(False)
        if spec.norm_before_fc or spec.input_norm_kept:  # kept, never applied, in an MLA drafter (as SGLang)
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
        self.has_head = True
        self.has_vocab_map = not spec.full_vocab
        if initialise:
            self.reset_parameters(seed=seed)
            self.set_vocab_map(*identity_vocab_map(spec.vocab_size, spec.draft_vocab_size))

    @classmethod
    def unallocated(cls, config: dict[str, Any], where: str = "config.json", tensor_names=None,
                    dtype: torch.dtype = torch.float32) -> Eagle3Drafter:
        """The drafter's modules with no weight allocated or initialised: meta tensors of ``dtype`` (no data).

        What a checkpoint is read into (:func:`eaglelab.model.drafter_files.load_drafter` assigns each tensor as
        it is read, in the dtype asked for): a Kimi-sized drafter is never first built and randomly initialised
        in float32 (9.4 GB) only to be overwritten. RoPE's inverse frequencies, computed and never stored, are
        computed for real, in float32. A weight the checkpoint does not hold stays a placeholder (:meth:`holds`).
        """
        with torch.device("meta"):
            model = cls(config, where=where, tensor_names=tensor_names, initialise=False).to(dtype)
        attn = model.midlayer.self_attn
        attn.inv_freq = rope_inv_freq(attn.rope_dims if isinstance(attn, MlaAttention) else attn.d,
                                      rope_of(layer_body(config), where))
        return model

    def holds(self, name: str) -> bool:
        """Whether the drafter holds the weight ``name`` (``embed_tokens.weight``, ``lm_head.weight``).

        One it does not hold is a placeholder, a meta tensor of its shape and dtype: an embedding (or a
        full-vocabulary head) the target lends when the drafter serves (:meth:`serving_embedding`), or that
        :meth:`set_embedding` copies in. No [V, H] tensor is allocated for it.
        """
        return not self.get_parameter(name).is_meta

    def _placeholders(self) -> list[tuple[nn.Module, str, nn.Parameter]]:
        return [(m, "weight", m.weight) for m in (self.embed_tokens, self.lm_head) if m.weight.is_meta]

    def _apply(self, fn, recurse=True):
        """:meth:`torch.nn.Module._apply` (``.to``, ``.half``, ``.cuda``), placeholders left placeholders.

        A placeholder holds no data to move: it stays a meta tensor, in the dtype ``fn`` gives its dtype.
        """
        held = self._placeholders()
        for module, name, _ in held:
            del module._parameters[name]
        try:
            return super()._apply(fn, recurse)
        finally:
            for module, name, p in held:
                dtype = fn(torch.empty(0, dtype=p.dtype)).dtype
                module._parameters[name] = nn.Parameter(torch.empty(p.shape, dtype=dtype, device="meta"),
                                                        requires_grad=p.requires_grad)

    def _hold(self, module: nn.Module) -> torch.Tensor:
        """``module.weight``, allocated (uninitialised, on the drafter's device) first when it is a placeholder."""
        if module.weight.is_meta:
            p = module.weight
            module.weight = nn.Parameter(torch.empty(p.shape, dtype=p.dtype, device=self.fc.weight.device),
                                         requires_grad=p.requires_grad)
        return module.weight

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

    def set_embedding(self, weight: torch.Tensor, head: torch.Tensor | None = None) -> None:
        """Copy the target's input embedding [V, H] (what SGLang injects at run time).

        Args:
            weight: the target's embedding [V, H].
            head: the target's ``lm_head`` [V, H], copied as this drafter's head when it has none of
                its own (a full-vocabulary file without ``lm_head``); ignored otherwise.
        """
        self._check_lent(weight, head)
        with torch.no_grad():
            self._hold(self.embed_tokens).copy_(weight)
        self.has_embedding = True
        if not self.has_head:
            self.init_head_from_target(head)
            self.has_head = True

    def _check_lent(self, weight: torch.Tensor, head: torch.Tensor | None) -> None:
        if tuple(weight.shape) != tuple(self.embed_tokens.weight.shape):
            raise CheckpointMismatchError(
                "embed_tokens", f"target embedding {list(weight.shape)} vs drafter "
                                f"{list(self.embed_tokens.weight.shape)}")
        if not self.has_head:
            if head is None:
                raise CheckpointMismatchError("lm_head", "the drafter has no lm_head of its own and serves the "
                                                         "target's: pass the target's head too")
            if tuple(head.shape) != tuple(self.lm_head.weight.shape):
                raise CheckpointMismatchError("lm_head", f"target lm_head {list(head.shape)} vs the drafter's full "
                                                         f"vocabulary {list(self.lm_head.weight.shape)}")

    @contextlib.contextmanager
    def serving_embedding(self, weight: torch.Tensor, head: torch.Tensor | None = None):
        """Read ``weight`` [V, H] as the embedding inside the block, without copying it.

        SGLang serves a drafter with the serving target's embedding; this lets one drafter be
        evaluated on two targets in turn at no memory cost (a copy of a 163840 x 7168 embedding
        is 4.7 GB). A drafter without a head of its own reads the target's ``head`` [V, H] the
        same way (vLLM shares it; SGLang when ``draft_vocab_size`` is absent). The drafter's own
        tensors are back in place afterwards.
        """
        self._check_lent(weight, head)
        own, had = self.embed_tokens.weight, self.has_embedding
        own_head, had_head = self.lm_head.weight, self.has_head
        self.embed_tokens.weight = nn.Parameter(weight.detach(), requires_grad=False)
        self.has_embedding = True
        if not had_head:
            self.lm_head.weight = nn.Parameter(head.detach().to(own_head.dtype), requires_grad=False)
            self.has_head = True
        try:
            yield self
        finally:
            self.embed_tokens.weight, self.has_embedding = own, had
            self.lm_head.weight, self.has_head = own_head, had_head

    def serving_target(self, model: nn.Module):
        """:meth:`serving_embedding` with a transformers model's input embedding (and its ``lm_head``,
        for a drafter without one of its own)."""
        head = None if self.has_head else model.get_output_embeddings().weight.detach()
        return self.serving_embedding(model.get_input_embeddings().weight.detach().to(self.fc.weight.dtype), head)

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
            self._hold(self.lm_head).copy_(lm_head_weight[self.t2d].to(self.lm_head.weight.dtype))
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
        if self.embed_tokens.weight.is_meta:
            head = "" if self.has_head else " and no lm_head"
            raise CheckpointMismatchError("embed_tokens", f"the drafter has no embedding{head} of its own: it drafts "
                                                          f"with the target's (serving_embedding(embedding"
                                                          f"{', head' if head else ''}), or set_embedding)")
        emb = self.embed_tokens(token_ids).to(hidden.dtype)
        return self.midlayer(emb, hidden, positions, cache=cache, step_kv=step_kv)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """A step's output [B, S, H] -> draft-vocabulary logits [B, S, Vd]."""
        if not self.has_head:
            raise CheckpointMismatchError("lm_head", "the drafter has no lm_head of its own: it drafts with the "
                                                     "target's (serving_embedding(embedding, head))")
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


def ttt_pass_bytes(spec: DrafterSpec, positions: int, batch: int, element: int, k: int) -> int:
    """What one teacher-forced pass of ``k`` steps over a batch holds at its peak, bytes (an estimate from the shapes).

    For the probes' memory pre-flights: the target's draft-vocabulary probabilities and their padded copy,
    a step's log-probabilities and shifted targets (float32), ``k`` steps of logits, the MLP's three
    [T, I], each step's [S, S + k] attention scores with their float32 softmax, the projected states.

    Args:
        spec: the drafter's.
        positions: the batch's positions T (rows times the longest row).
        batch: its rows.
        element: bytes per value in the drafter's dtype.
        k: the steps.
    """
    T, Vd, S = positions, spec.draft_vocab_size, max(1, positions // max(1, batch))
    return int(T * Vd * (5 * 4 + k * element) + 3 * T * spec.intermediate_size * element
               + batch * spec.num_attention_heads * S * (S + k) * (2 * element + 8)
               + 4 * T * (3 * spec.target_hidden_size + spec.hidden_size) * element)


def native_aux_ids(config: dict[str, Any]) -> dict[str, Any]:
    """A TorchSpec vLLM export's config with its nested aux ids as the layer outputs SGLang reads (each id - 1).

    eaglelab saves a drafter in the SGLang layout (``midlayer.*``), where nested ids are layer outputs; the
    export's ids are layer inputs (TorchSpec's exporter added 1), so they are written back as trained.
    """
    out = copy.deepcopy(config)
    nested = out.get("eagle_config")
    key = "eagle_aux_hidden_state_layer_ids"
    if isinstance(nested, dict) and isinstance(nested.get(key), list):
        nested[key] = [i - 1 for i in nested[key]]
    return out


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


