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
