"""The small-batch CPU linear path: same numbers as F.linear, only where it applies, and undone cleanly."""

from __future__ import annotations

import torch

from eaglelab.model.cpu_kernels import restore_default_kernels, small_batch_kernels, use_small_batch_kernels
from tests.conftest import make_tiny_llama


def test_small_batch_path_matches_linear_and_restores():
    model = make_tiny_llama()
    ids = torch.randint(0, 256, (1, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref_verify = model(ids[:, :5]).logits  # 5 rows: the path applies
        ref_long = model(ids).logits  # 20 rows > max_rows: plain F.linear
    assert use_small_batch_kernels(model, max_rows=16) == 8 * 7 + 1  # 7 projections per layer + lm_head
    linear = model.model.layers[0].mlp.up_proj
    assert "forward" in linear.__dict__
    with torch.no_grad():
        assert torch.allclose(model(ids[:, :5]).logits, ref_verify, atol=1e-5)
        assert torch.equal(model(ids).logits, ref_long)
    x = torch.randn(3, 64, requires_grad=True)  # with gradients the default path runs
    linear(x).sum().backward()
    assert x.grad is not None
    restore_default_kernels(model)
    assert "forward" not in linear.__dict__


def test_context_manager_switches_on_and_off():
    model = make_tiny_llama(layers=2)
    proj = model.model.layers[0].self_attn.q_proj
    with small_batch_kernels(model, enabled=False):
        assert "forward" not in proj.__dict__
    with small_batch_kernels(model):
        assert "forward" in proj.__dict__
    assert "forward" not in proj.__dict__
