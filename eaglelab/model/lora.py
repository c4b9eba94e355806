"""A LoRA on every decoder projection of a target: continued training, snapshots, exact merges.

The drift that a fine-tuned release is (the demo world's target B, notebook 05's ``train`` family),
built here below both the world builders and the drift sweep.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from eaglelab.model.targets import decoder_layers
from eaglelab.progress import progress


def projection_weights(model) -> dict[str, nn.Linear]:
    """Every linear layer inside the decoder blocks, by module name (``model.layers.3.mlp.up_proj``), in order."""
    blocks = {id(m) for m in decoder_layers(model)}
    out = {}
    for name, block in model.named_modules():
        if id(block) in blocks:
            out.update({f"{name}.{sub}": lin for sub, lin in block.named_modules() if isinstance(lin, nn.Linear)})
    return out


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
