"""Controlled drifts of a target: the new checkpoints B' a team meets, built from the old target A.

Three families, each with a magnitude knob, and A itself as the zero point of all of them:

- ``path``: the weight path from A to B and beyond, ``A + α (B - A)`` (α = 1 is B);
- ``quant``: round-to-nearest symmetric quantization of A's decoder projections (int8 per output
  channel, int4 / int3 / int2 in groups along the input dimension), the drift of a quantized release;
- ``train``: A continued-trained with a LoRA (merged) on a domain other than B's, at several step counts.

"Projections" are every linear layer inside the decoder blocks (attention and MLP, experts
included). Embeddings, norms and ``lm_head`` are left as A's in ``quant`` and ``train`` (quantized
releases keep them in high precision; the LoRA touches the projections only).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class DriftPoint:
    """One drifted target: a family and where along it.

    Attributes:
        family: ``"path"``, ``"quant"``, ``"train"``, or ``"none"`` (A itself).
        magnitude: α (path), bits (quant), LoRA steps (train), 0 for A.
        group: quantization group size along the input dimension; 0 means per output channel.
    """

    family: str
    magnitude: float
    group: int = 0

    @property
    def label(self) -> str:
        if self.family == "path":
            return f"α = {self.magnitude:g}"
        if self.family == "quant":
            return f"int{self.magnitude:g} " + ("per channel" if self.group == 0 else f"g{self.group}")
        if self.family == "train":
            return f"{self.magnitude:g} steps"
        return "A itself"

    def to_json(self) -> dict:
        return {"family": self.family, "magnitude": self.magnitude, "group": self.group, "label": self.label}


ZERO = DriftPoint("none", 0.0)


def projection_weights(model) -> dict[str, nn.Linear]:
    """Every linear layer inside the decoder blocks, by module name (``model.layers.3.mlp.up_proj``), in order."""
    from eaglelab.model.targets import decoder_layers

    blocks = {id(m) for m in decoder_layers(model)}
    out = {}
    for name, block in model.named_modules():
        if id(block) in blocks:
            out.update({f"{name}.{sub}": lin for sub, lin in block.named_modules() if isinstance(lin, nn.Linear)})
    return out


def quantize_weight(w: torch.Tensor, bits: int, group: int = 0) -> torch.Tensor:
    """Round-to-nearest symmetric quantization, dequantized back to w's dtype.

    Args:
        w: [out, in] weight.
        bits: 2..8.
        group: consecutive input columns sharing one scale; 0 = one scale per output row. A width
            that is not a multiple of the group ends in a shorter group.

    Returns:
        [out, in], each group's values on the grid ``scale * {-(2^(b-1) - 1) .. 2^(b-1) - 1}``
        with ``scale = max|w| / (2^(b-1) - 1)``.
    """
    if not 2 <= bits <= 8:
        raise ValueError(f"bits must lie in 2..8, got {bits}")
    out_f, in_f = w.shape
    g = in_f if group == 0 else group
    pad = -in_f % g  # zero columns change no group's max|w|, and are cut off again
    x = torch.nn.functional.pad(w.float(), (0, pad)).reshape(out_f, -1, g)
    levels = 2 ** (bits - 1) - 1
    scale = x.abs().amax(-1, keepdim=True).clamp_min(1e-12) / levels
    q = (torch.round(x / scale).clamp(-levels, levels) * scale).reshape(out_f, -1)
    return q[:, :in_f].to(w.dtype)


class LoRASnapshots:
    """Continued training of a target with a LoRA on every decoder projection, snapshotted along the way.

    The adapters are kept as factors (a [r, in], b [out, r]); a snapshot at step s merges
    ``W + scale * b @ a`` on demand, so five snapshots cost five copies of the factors, not of the model.
    """

    def __init__(self, model, rank: int, scale: float = 2.0, seed: int = 0):
        torch.manual_seed(seed)
        self.scale = scale
        self.adapters = []  # (name, module, a, b)
        for name, base in projection_weights(model).items():
            dev = base.weight.device
            a = nn.Parameter(torch.randn(rank, base.in_features).to(dev) / math.sqrt(base.in_features))
            b = nn.Parameter(torch.zeros(base.out_features, rank, device=dev))
            self.adapters.append((name, base, a, b))
        self.snapshots: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}

    def train(self, model, sequences: torch.Tensor, steps: int, lr: float, batch: int, seed: int,
              snapshot_at: Sequence[int] = (), desc: str = "LoRA drift") -> None:
        """Next-token training of the adapters only (AdamW), snapshotting the factors after each step in ``snapshot_at``.

        Args:
            sequences: [N, S] token ids of the drift domain.
        """
        from eaglelab.progress import progress

        hooks = [base.register_forward_hook(lambda m, i, o, a=a, b=b: o + (i[0] @ a.T) @ b.T * self.scale)
                 for _, base, a, b in self.adapters]
        frozen = [p.requires_grad for p in model.parameters()]
        for p in model.parameters():
            p.requires_grad_(False)
        params = [p for *_, a, b in self.adapters for p in (a, b)]
        opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95))
        gen = torch.Generator().manual_seed(seed)
        dev = next(model.parameters()).device
        model.train()
        try:
            for step in progress(range(1, steps + 1), desc=desc):
                idx = torch.randint(0, len(sequences), (batch,), generator=gen)
                ids = sequences[idx].to(dev)
                loss = model(input_ids=ids, labels=ids).loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if step in snapshot_at:
                    self.snapshots[step] = [(a.detach().clone(), b.detach().clone()) for *_, a, b in self.adapters]
        finally:
            model.eval()
            for h in hooks:
                h.remove()
            for p, flag in zip(model.parameters(), frozen):
                p.requires_grad_(flag)

    @torch.no_grad()
    def merge(self, step: int | None = None) -> None:
        """Merge the adapters (the current ones, or snapshot ``step``) into their projections, in place."""
        factors = self.snapshots[step] if step is not None else [(a, b) for *_, a, b in self.adapters]
        for (_, base, _, _), (a, b) in zip(self.adapters, factors):
            base.weight += self.scale * b.to(base.weight) @ a.to(base.weight)

    def merged_weights(self, base_weights: dict[str, torch.Tensor], step: int) -> dict[str, torch.Tensor]:
        """The projections of snapshot ``step`` merged onto ``base_weights`` (A's), as a partial state dict."""
        out = {}
        for (name, _, _, _), (a, b) in zip(self.adapters, self.snapshots[step]):
            w = base_weights[f"{name}.weight"]
            out[f"{name}.weight"] = w + self.scale * b.to(w) @ a.to(w)
        return out


def interpolate(state_a: dict[str, torch.Tensor], state_b: dict[str, torch.Tensor], alpha: float) -> dict[str, torch.Tensor]:
    """``A + α (B - A)`` for every floating tensor that differs (a partial state dict)."""
    out = {}
    for k, a in state_a.items():
        b = state_b[k]
        if a.is_floating_point() and not torch.equal(a, b):
            out[k] = a + alpha * (b - a)
    return out


def quantized(state_a: dict[str, torch.Tensor], names: Sequence[str], bits: int, group: int) -> dict[str, torch.Tensor]:
    """A's projections quantized (a partial state dict); ``names`` are the projections' state-dict prefixes."""
    return {f"{n}.weight": quantize_weight(state_a[f"{n}.weight"], bits, group) for n in names}


def weight_distance(state_a: dict[str, torch.Tensor], changed: dict[str, torch.Tensor]) -> float:
    """Relative distance of the changed tensors from A's: ``||θ' - θ_A|| / ||θ_A||`` over those tensors."""
    num = sum(float((changed[k].double() - state_a[k].double()).pow(2).sum()) for k in changed)
    den = sum(float(state_a[k].double().pow(2).sum()) for k in changed)
    return math.sqrt(num / den) if den else 0.0
