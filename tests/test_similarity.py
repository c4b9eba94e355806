"""Streaming CKA against direct computations; invariances; A vs A."""

from __future__ import annotations

import itertools

import pytest
import torch

from eaglelab.probe.similarity import (
    SimilarityAccumulator,
    StreamingCKA,
    cosine_per_token,
    hsic_unbiased,
    linear_cka_full,
    relative_l2_per_token,
)


def hsic_u_statistic(K: torch.Tensor, L: torch.Tensor) -> float:
    """Song et al. (2012) unbiased HSIC as the literal U-statistic over ordered 4-tuples (tiny n only)."""
    n = K.shape[0]
    total = 0.0
    for i, j, q, r in itertools.permutations(range(n), 4):
        total += K[i, j] * L[i, j] + K[i, j] * L[q, r] - 2 * K[i, j] * L[i, q]
    return float(total) / (n * (n - 1) * (n - 2) * (n - 3))


def test_unbiased_hsic_equals_the_u_statistic():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(7, 3, generator=g, dtype=torch.float64), torch.randn(7, 4, generator=g, dtype=torch.float64)
    K, L = x @ x.T, y @ y.T
    assert float(hsic_unbiased(K, L)) == pytest.approx(hsic_u_statistic(K, L), rel=1e-9)


def test_streaming_cka_equals_full_matrix_cka():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3000, 16, generator=g)
    y = x @ torch.randn(16, 12, generator=g) + 0.5 * torch.randn(3000, 12, generator=g)
    single = StreamingCKA(1, 1)
    single.update([x], [y])
    streamed = StreamingCKA(1, 1)
    for i in range(0, 3000, 500):
        streamed.update([x[i:i + 500]], [y[i:i + 500]])
    full = linear_cka_full(x, y)
    assert float(single.value()) == pytest.approx(full, abs=0.01)  # unbiased vs biased estimator, large n
    assert float(streamed.value()) == pytest.approx(full, abs=0.02)


def test_cka_invariances():
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(600, 10, generator=g), torch.randn(600, 10, generator=g)
    y = y + x
    q, _ = torch.linalg.qr(torch.randn(10, 10, generator=g))

    def cka(a, b):
        s = StreamingCKA(1, 1)
        for i in range(0, 600, 200):
            s.update([a[i:i + 200]], [b[i:i + 200]])
        return float(s.value())

    base = cka(x, y)
    assert cka(x @ q, y) == pytest.approx(base, abs=1e-5)
    assert cka(x, 7.5 * y) == pytest.approx(base, abs=1e-5)
    assert cka(x, x) == pytest.approx(1.0, abs=1e-6)


def test_per_token_measures_and_accumulator_for_identical_inputs():
    g = torch.Generator().manual_seed(3)
    states = [torch.randn(300, 8, generator=g) for _ in range(2)]
    assert torch.allclose(cosine_per_token(states[0], states[0]), torch.ones(300))
    assert torch.allclose(relative_l2_per_token(states[0], 2 * states[0]), torch.ones(300))
    acc = SimilarityAccumulator(["x", "y"], cka_batch=128)
    for i in range(0, 300, 100):
        arg = torch.arange(100)
        acc.update([s[i:i + 100] for s in states], [s[i:i + 100] for s in states], arg, arg)
    res = acc.result()
    for layer in res["layers"]:
        assert layer.cosine_mean == pytest.approx(1.0) and layer.cka == pytest.approx(1.0, abs=1e-6)
        assert layer.rel_l2 == pytest.approx(0.0, abs=1e-6) and layer.norm_ratio == pytest.approx(1.0)
    assert res["argmax_agreement"] == 1.0 and res["tokens"] == 300
