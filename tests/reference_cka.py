"""Linear CKA computed directly from the paper (Song et al. 2012's unbiased HSIC), the tests' reference for the
streaming accumulator: written apart from the package, in float64, with no streaming state and no scaling."""

from __future__ import annotations

import math

import torch


def direct_cka(batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """Unbiased minibatch CKA computed directly in float64: each batch's HSIC from its centred Gram matrices
    (Song et al. 2012, eq. 5), summed, then the ratio: no streaming state, no scaling."""
    def hsic(K, L, n):
        K, L = K.clone(), L.clone()
        K.fill_diagonal_(0)
        L.fill_diagonal_(0)
        one = torch.ones(n, dtype=torch.float64)
        return float((torch.trace(K @ L) + (one @ K @ one) * (one @ L @ one) / ((n - 1) * (n - 2))
                      - 2 / (n - 2) * (one @ K @ L @ one)) / (n * (n - 3)))

    xy = xx = yy = 0.0
    for x, y in batches:
        x, y = x.double() - x.double().mean(0), y.double() - y.double().mean(0)
        K, L, n = x @ x.T, y @ y.T, x.shape[0]
        xy, xx, yy = xy + hsic(K, L, n), xx + hsic(K, K, n), yy + hsic(L, L, n)
    return xy / math.sqrt(xx * yy) if xx > 0 and yy > 0 else float("nan")  # states that do not vary: undefined
