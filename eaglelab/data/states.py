"""Captured target states as a dataset (the engines' dump folders are read by :mod:`eaglelab.data.dumps`).

A sample pairs token ids with what the target computed on them: the aux hidden states the
drafter reads and the last hidden state (from which the target's logits are recomputed with
its lm_head, as SpecForge's offline pipeline does, so no [S, V] logits are stored). Captures
made here also keep the target's greedy token at each position, so training needs only the
logits of the draft vocabulary (``H x Vd`` per token, not ``H x V``). Knows nothing of the drafter.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from eaglelab.atomic import atomic_path
from eaglelab.errors import ConfigError, SourceError
from eaglelab.model.targets import Target
from eaglelab.progress import progress as bar


@dataclass
class HiddenStates:
    """Target states over N sequences of S tokens (kept on CPU).

    Attributes:
        input_ids: [N, S] int64.
        loss_mask: [N, S] bool: positions that count (e.g. assistant turns).
        aux: [N, S, 3H] concat(low, mid, high).
        last_hidden: [N, S, H] final-norm output (lm_head input).
        target_ids: [N, S] int64, the target's greedy token after each position, or None
            (SpecForge files lack it; it is then recomputed from ``last_hidden``).
        aux_layers: the target's decoder-layer outputs ``aux`` holds (low, mid, high), when known.
    """

    input_ids: torch.Tensor
    loss_mask: torch.Tensor
    aux: torch.Tensor
    last_hidden: torch.Tensor
    target_ids: torch.Tensor | None = None
    aux_layers: tuple[int, ...] | None = None

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def batch(self, idx: torch.Tensor | Sequence[int]) -> HiddenStates:
        idx = torch.as_tensor(idx)
        tids = None if self.target_ids is None else self.target_ids[idx]
        return HiddenStates(self.input_ids[idx], self.loss_mask[idx], self.aux[idx], self.last_hidden[idx], tids,
                            self.aux_layers)

    def save(self, path: str | Path) -> Path:
        """Write as one safetensors file, atomically."""
        with atomic_path(path) as tmp:
            tensors = {"input_ids": self.input_ids.contiguous(), "loss_mask": self.loss_mask.contiguous(),
                       "aux_hidden_state": self.aux.contiguous(), "hidden_state": self.last_hidden.contiguous()}
            if self.target_ids is not None:
                tensors["target_ids"] = self.target_ids.contiguous()
            meta = {"aux_layers": json.dumps(list(self.aux_layers))} if self.aux_layers is not None else None
            save_file(tensors, str(tmp), metadata=meta)
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> HiddenStates:
        try:
            d = load_file(str(path))
            with safe_open(str(path), "pt") as fh:
                meta = fh.metadata() or {}
            aux_layers = tuple(json.loads(meta["aux_layers"])) if "aux_layers" in meta else None
        except Exception as exc:
            raise SourceError(path, f"not a readable hidden-state file ({exc})") from None
        missing = {"input_ids", "loss_mask", "aux_hidden_state", "hidden_state"} - set(d)
        if missing:
            raise SourceError(path, f"hidden-state file lacks {sorted(missing)}")
        return cls(d["input_ids"], d["loss_mask"].bool(), d["aux_hidden_state"], d["hidden_state"], d.get("target_ids"),
                   aux_layers)


@torch.no_grad()
def capture_hidden_states(target: Target, sequences: torch.Tensor, loss_mask: torch.Tensor | None = None,
                          batch_size: int = 8, dtype: torch.dtype = torch.float32,
                          progress: bool = True) -> HiddenStates:
    """Run the target over token sequences and keep what drafter training needs.

    Args:
        target: the target with aux capture.
        sequences: [N, S] token ids.
        loss_mask: [N, S] (default all ones).
        batch_size: sequences per forward.
        dtype: storage dtype of the states.
    """
    aux, last, greedy = [], [], []
    for i in bar(range(0, len(sequences), batch_size), desc="capture", disable=not progress):
        out = target.forward(sequences[i: i + batch_size].to(target.device))
        aux.append(out.aux.to("cpu", dtype))
        last.append(out.last_hidden.to("cpu", dtype))
        greedy.append(out.logits.argmax(-1).cpu())
    mask = loss_mask if loss_mask is not None else torch.ones_like(sequences, dtype=torch.bool)
    return HiddenStates(sequences.cpu(), mask.bool().cpu(), torch.cat(aux), torch.cat(last), torch.cat(greedy),
                        tuple(target.aux_layer_outputs))


@dataclass
class FinetuneData:
    """Captured states of the new target, training and held-out, and the layers they come from (a fine-tune's data)."""

    train: HiddenStates
    held_out: HiddenStates
    aux_layer_outputs: tuple[int, ...]

    @classmethod
    def from_files(cls, train: str | Path, held_out: str | Path) -> FinetuneData:
        """States saved by :meth:`HiddenStates.save` (e.g. a world's ``replies-b/*-states.safetensors``)."""
        tr, ho = HiddenStates.load(train), HiddenStates.load(held_out)
        if tr.aux_layers is None or tr.aux_layers != ho.aux_layers:
            raise ConfigError(str(train), f"training and held-out states must name the same aux layers "
                                          f"(got {tr.aux_layers} and {ho.aux_layers})")
        return cls(tr, ho, tr.aux_layers)

    def subset(self, n: int) -> FinetuneData:
        """The first ``n`` training sequences (same held-out set), for data-budget sweeps."""
        return FinetuneData(self.train.batch(range(min(n, len(self.train)))), self.held_out, self.aux_layer_outputs)


def capture_data(model, aux_spec, train_ids: torch.Tensor, eval_ids: torch.Tensor, progress: bool = True) -> FinetuneData:
    """Run the new target once over training and held-out tokens (states cached in memory)."""
    target = Target.for_drafter(model, aux_spec)
    try:
        return FinetuneData(capture_hidden_states(target, train_ids, progress=progress),
                            capture_hidden_states(target, eval_ids, progress=progress), target.aux_layer_outputs)
    finally:
        target.close()
