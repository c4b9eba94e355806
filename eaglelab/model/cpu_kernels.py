"""A CPU kernel choice that makes verifying k + 1 tokens cost about what decoding one token costs.

Batch-1 decoding on a CPU is bound by reading the weights. PyTorch's ``F.linear`` reads them at
full speed for one row (a GEMV), but for 2 to ~16 rows (a speculative verify of k + 1 tokens)
MKL's GEMM path reads ``W`` [N, K] at about half that rate (measured on the project's 2-core
machine: 4-5 GB/s against 8), so verifying 4 tokens took 1.8x one decode step. Computing the
same product as ``(W @ x^T)^T`` streams ``W`` the way the one-row path does: verify of 4 tokens
then costs about 1.1x one step, as on a GPU. Serving engines make this kind of choice in their
own kernels; ``benchmarks/bench_speculation.py --cpu-kernels`` measures the effect.

The results equal ``F.linear``'s up to float summation order. Nothing changes for one row,
for more than ``max_rows`` rows, off the CPU, or when gradients are needed.
"""

from __future__ import annotations

import contextlib
import types

import torch
from torch import nn


def _small_batch_linear(self: nn.Linear, x: torch.Tensor, max_rows: int) -> torch.Tensor:
    rows = x.numel() // x.shape[-1] if x.numel() else 0
    if 1 < rows <= max_rows and x.device.type == "cpu" and not torch.is_grad_enabled():
        y = torch.mm(self.weight, x.reshape(rows, x.shape[-1]).t()).t()
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.weight.shape[0])
    return nn.functional.linear(x, self.weight, self.bias)


def use_small_batch_kernels(model: nn.Module, max_rows: int = 16) -> int:
    """Route every ``nn.Linear`` of ``model`` through the small-batch CPU path (in place).

    Args:
        model: any module (a transformers target, a drafter).
        max_rows: largest row count (batch x new tokens) that takes the path.

    Returns:
        The number of linear layers changed.
    """
    n = 0
    for mod in model.modules():
        if isinstance(mod, nn.Linear) and "forward" not in mod.__dict__:
            mod.forward = types.MethodType(lambda self, x: _small_batch_linear(self, x, max_rows), mod)
            n += 1
    return n


def restore_default_kernels(model: nn.Module) -> None:
    """Undo :func:`use_small_batch_kernels`."""
    for mod in model.modules():
        if isinstance(mod, nn.Linear):
            mod.__dict__.pop("forward", None)


@contextlib.contextmanager
def small_batch_kernels(model: nn.Module, enabled: bool = True, max_rows: int = 16):
    """Context manager form: the path is on inside the block (when ``enabled``) and off after it."""
    if not enabled:
        yield model
        return
    use_small_batch_kernels(model, max_rows)
    try:
        yield model
    finally:
        restore_default_kernels(model)
