"""How far did the target move? Per-token and representation-level similarity, streaming.

Per token: cosine similarity, relative L2 ``||hA - hB|| / ||hA||`` and norm ratio. Per layer
pair: linear CKA with the unbiased HSIC estimator of Nguyen, Raghu & Kornblith (2021),
accumulated over minibatches so memory stays flat as the token count grows: each minibatch
of n tokens adds HSIC_1(K, L), HSIC_1(K, K), HSIC_1(L, L) with K = X Xᵀ, L = Y Yᵀ (n x n),
and CKA = mean HSIC(K, L) / sqrt(mean HSIC(K, K) · mean HSIC(L, L)).

HSIC_1 of linear kernels does not change when a constant is added to every row of X, so each
minibatch is centred on its own mean (in float64) before its Gram matrix: with raw states a channel
offset of 1e5 makes K's entries 1e10 and the estimator's terms cancel past float64's digits (CKA
-6.6e34 on identical states). Each layer is also scaled by one power of two, fixed by the first
minibatch (exact in floating point, and CKA does not change with scale), so tiny or huge states
neither underflow nor overflow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


def cosine_per_token(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosine similarity per row. a, b: [N, D] -> [N]."""
    return torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=-1).float()


def relative_l2_per_token(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``||a - b|| / ||a||`` per row. [N, D] -> [N]."""
    a, b = a.double(), b.double()
    return ((a - b).norm(dim=-1) / a.norm(dim=-1).clamp_min(1e-12)).float()


def _row_dots(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Per-row dot products of u, v [N, D] -> [N], as one batched BLAS product (no [N, D] temporary)."""
    return torch.bmm(u.unsqueeze(1), v.unsqueeze(2)).reshape(-1)


def _take(buf: list[torch.Tensor], n: int) -> torch.Tensor:
    """The first ``n`` rows of a list of [*, D] pieces, removed from it (a view when one piece holds them)."""
    if buf[0].shape[0] >= n:
        head, buf[0] = buf[0][:n], buf[0][n:]
        if buf[0].shape[0] == 0:
            buf.pop(0)
        return head
    parts, got = [], 0
    while got < n:
        piece = buf[0]
        want = n - got
        if piece.shape[0] <= want:
            parts.append(buf.pop(0))
            got += piece.shape[0]
        else:
            parts.append(piece[:want])
            buf[0] = piece[want:]
            got += want
    return torch.cat(parts)


def _zero_diag_stats(G: torch.Tensor):
    """A Gram matrix with its diagonal zeroed, its row sums and total: what every HSIC pair reuses."""
    G = G.double().clone()
    G.fill_diagonal_(0)
    g1 = G.sum(1)
    return G, g1, g1.sum()


def _gram_stats(x: torch.Tensor, scale: float = 1.0):
    """:func:`_zero_diag_stats` of the linear Gram matrix of x [n, D], centred on its mean and divided by ``scale``.

    Centring leaves HSIC_1 unchanged (it is shift invariant) and keeps the Gram matrix's entries at
    the size of the states' spread, not of their offset.
    """
    x = x.double()
    x = (x - x.mean(0)) / scale
    return _zero_diag_stats(x @ x.T)


def _binary_scale(x: torch.Tensor) -> float:
    """A power of two near the largest centred magnitude of x (1.0 when x does not vary): an exact divisor."""
    x = x.double()
    top = float((x - x.mean(0)).abs().max()) if x.numel() else 0.0
    return 2.0 ** math.floor(math.log2(top)) if top > 0 and math.isfinite(top) else 1.0


def _hsic_from_stats(a, b, n: int) -> torch.Tensor:
    K, k1, ks = a
    L, l1, ls = b
    term = (K * L).sum() + ks * ls / ((n - 1) * (n - 2)) - 2 * (k1 @ l1) / (n - 2)
    return term / (n * (n - 3))


def hsic_unbiased(K: torch.Tensor, L: torch.Tensor) -> torch.Tensor:
    """Unbiased HSIC estimator (Song et al. 2012) of two n x n Gram matrices, n >= 4."""
    return _hsic_from_stats(_zero_diag_stats(K), _zero_diag_stats(L), K.shape[0])


def linear_cka_full(x: torch.Tensor, y: torch.Tensor) -> float:
    """Linear CKA on all tokens at once (biased HSIC, centred Gram matrices), for reference.

    x: [N, Dx], y: [N, Dy].
    """
    x = x.double() - x.double().mean(0)
    y = y.double() - y.double().mean(0)
    xy = (x.T @ y).norm() ** 2
    return float(xy / ((x.T @ x).norm() * (y.T @ y).norm()))


#: How far past [0, 1] a CKA may fall by rounding alone, and be clipped back.
CKA_ROUNDING = 1e-6


@dataclass
class StreamingCKA:
    """Minibatch linear CKA between several layers of A and of B (unbiased HSIC, flat memory, centred minibatches).

    Attributes:
        n_a: number of A layers (rows of the map).
        n_b: number of B layers (columns).
    """

    n_a: int
    n_b: int
    _xy: torch.Tensor = field(init=False)
    _xx: torch.Tensor = field(init=False)
    _yy: torch.Tensor = field(init=False)
    _scale_x: list = field(init=False)
    _scale_y: list = field(init=False)
    batches: int = field(default=0, init=False)

    def __post_init__(self):
        self._xy = torch.zeros(self.n_a, self.n_b, dtype=torch.float64)
        self._xx = torch.zeros(self.n_a, dtype=torch.float64)
        self._yy = torch.zeros(self.n_b, dtype=torch.float64)
        self._scale_x, self._scale_y = [], []

    def update(self, xs: Sequence[torch.Tensor], ys: Sequence[torch.Tensor]) -> None:
        """Add one minibatch of the same n tokens: xs[i] [n, D] from A, ys[j] [n, D] from B (n >= 4)."""
        n = xs[0].shape[0]
        if not self.batches:  # one exact power-of-two scale per layer, for every minibatch after
            self._scale_x = [_binary_scale(x) for x in xs]
            self._scale_y = [_binary_scale(y) for y in ys]
        sx = [_gram_stats(x, c) for x, c in zip(xs, self._scale_x)]
        sy = [_gram_stats(y, c) for y, c in zip(ys, self._scale_y)]
        for i, a in enumerate(sx):
            self._xx[i] += _hsic_from_stats(a, a, n).cpu()
            for j, b in enumerate(sy):
                self._xy[i, j] += _hsic_from_stats(a, b, n).cpu()
        for j, b in enumerate(sy):
            self._yy[j] += _hsic_from_stats(b, b, n).cpu()
        self.batches += 1

    def estimate(self) -> torch.Tensor:
        """The raw CKA estimates [n_a, n_b] in float64: NaN where undefined (no minibatch, or states that do not vary).

        The unbiased HSIC is an inner product (of U-centred Gram matrices, Székely & Rizzo 2014), summed
        over minibatches, so by Cauchy-Schwarz the estimate lies in [-1, 1]; below 0 it is the estimator's
        noise around no linear similarity.
        """
        xx, yy = self._xx[:, None], self._yy[None, :]
        ok = (xx > 0) & (yy > 0)
        denom = (xx.clamp_min(0).sqrt() * yy.clamp_min(0).sqrt()).clamp_min(1e-300)
        return torch.where(ok, self._xy / denom, torch.full_like(self._xy, float("nan")))

    def value(self) -> torch.Tensor:
        """CKA map [n_a, n_b] in [0, 1]: an estimate below 0 is shown as 0 (:meth:`below_zero` names it);
        NaN where undefined, or where the estimate is outside [-1, 1] by more than :data:`CKA_ROUNDING`
        (an arithmetic failure, never a number)."""
        raw = self.estimate()
        broken = (raw > 1 + CKA_ROUNDING) | (raw < -1 - CKA_ROUNDING)
        return torch.where(broken, torch.full_like(raw, float("nan")), raw.clamp(0.0, 1.0)).float()

    def below_zero(self) -> torch.Tensor:
        """[n_a, n_b] where the estimate fell below 0 by more than rounding (shown as 0 by :meth:`value`)."""
        raw = self.estimate()
        return (raw < -CKA_ROUNDING) & (raw >= -1 - CKA_ROUNDING)


@dataclass
class LayerSimilarity:
    """Summary of one layer: A vs B on the same tokens."""

    layer: str
    cosine_mean: float
    cosine_p05: float
    rel_l2: float
    norm_ratio: float
    cka: float


@dataclass
class SimilarityAccumulator:
    """Streaming per-layer statistics of paired states (A and B on the same tokens).

    Keeps running sums for the means, a bounded random sample of per-token cosines for the
    distribution plot, and a :class:`StreamingCKA` over all layer pairs.

    Attributes:
        labels: layer names, e.g. ``["low (1)", "mid (3)", "high (4)", "last"]``.
        cka_batch: tokens per CKA minibatch.
        keep_cosines: per-layer cap on stored cosine samples.
    """

    labels: list[str]
    cka_batch: int = 256
    keep_cosines: int = 20000
    _cka: StreamingCKA = field(init=False)
    _sums: dict = field(init=False)
    _cos: list = field(init=False)
    _buf_a: list = field(init=False)
    _buf_b: list = field(init=False)
    tokens: int = field(default=0, init=False)
    agree: int = field(default=0, init=False)
    compared: int = field(default=0, init=False)
    tv_sum: float = field(default=0.0, init=False)
    tv_count: int = field(default=0, init=False)

    def __post_init__(self):
        n = len(self.labels)
        self._cka = StreamingCKA(n, n)
        self._sums = {k: torch.zeros(n, dtype=torch.float64) for k in ("cos", "rel", "na", "nb")}
        self._cos = [[] for _ in range(n)]
        self._buf_a = [[] for _ in range(n)]
        self._buf_b = [[] for _ in range(n)]

    def update(self, states_a: Sequence[torch.Tensor], states_b: Sequence[torch.Tensor],
               argmax_a: torch.Tensor | None = None, argmax_b: torch.Tensor | None = None,
               tv: torch.Tensor | None = None) -> None:
        """Add paired per-token states, each [N, D] (one tensor per layer), optional next-token argmaxes [N]
        and the total variation of the two next-token distributions [N].

        Per token, three row sums serve cosine, relative L2 and both norms (a·b, |a|², |b|², and
        |a - b|² taken from the difference itself, so that near-identical states lose no digits).
        """
        n = states_a[0].shape[0]
        self.tokens += n
        for i, (a, b) in enumerate(zip(states_a, states_b)):
            a, b = a.detach().cpu(), b.detach().cpu()
            x, y = a.float(), b.float()
            aa, bb, ab, dd = (_row_dots(u, v).double() for u, v in ((x, x), (y, y), (x, y), (x - y, x - y)))
            na, nb = aa.sqrt(), bb.sqrt()
            cos = (ab / (na * nb).clamp_min(1e-12)).float()
            self._sums["cos"][i] += cos.double().sum()
            self._sums["rel"][i] += (dd.sqrt() / na.clamp_min(1e-12)).sum()
            self._sums["na"][i] += na.sum()
            self._sums["nb"][i] += nb.sum()
            room = self.keep_cosines - sum(len(c) for c in self._cos[i])
            if room > 0:
                self._cos[i].append(cos[:room])
            self._buf_a[i].append(a)
            self._buf_b[i].append(b)
        if argmax_a is not None and argmax_b is not None:
            self.agree += int((argmax_a.cpu() == argmax_b.cpu()).sum())
            self.compared += int(argmax_a.numel())
        if tv is not None:
            self.tv_sum += float(tv.double().sum())
            self.tv_count += int(tv.numel())
        self._flush(final=False)

    def _flush(self, final: bool) -> None:
        """Feed the CKA every whole minibatch of ``cka_batch`` buffered tokens (and, at the end, the rest if >= 4).

        A minibatch inside one update's tensor is a view of it; only one straddling two updates is
        copied, and the remainder (under ``cka_batch`` rows) is cloned, so no view keeps a batch alive.
        """
        while True:
            have = sum(x.shape[0] for x in self._buf_a[0])
            if have < self.cka_batch and not (final and have >= 4):
                break
            take = min(self.cka_batch, have)
            xs = [_take(buf, take) for buf in self._buf_a]
            ys = [_take(buf, take) for buf in self._buf_b]
            self._cka.update(xs, ys)
        if final:  # fewer than 4 tokens left: too few for an unbiased HSIC
            self._buf_a = [[] for _ in self.labels]
            self._buf_b = [[] for _ in self.labels]
        else:
            self._buf_a = [[b.clone() for b in buf] for buf in self._buf_a]
            self._buf_b = [[b.clone() for b in buf] for buf in self._buf_b]

    def result(self) -> dict:
        """Per-layer summaries, the CKA map, argmax agreement and per-layer cosine samples."""
        self._flush(final=True)
        cka = self._cka.value()
        n = max(self.tokens, 1)
        layers = []
        cosines = {}
        for i, label in enumerate(self.labels):
            cs = torch.cat(self._cos[i]) if self._cos[i] else torch.zeros(0)
            cosines[label] = cs.numpy()
            layers.append(LayerSimilarity(
                layer=label,
                cosine_mean=float(self._sums["cos"][i] / n),
                cosine_p05=float(torch.quantile(cs, 0.05)) if len(cs) else float("nan"),
                rel_l2=float(self._sums["rel"][i] / n),
                norm_ratio=float(self._sums["nb"][i] / self._sums["na"][i].clamp_min(1e-30)),
                cka=float(cka[i, i]),
            ))
        raw, below = self._cka.estimate(), self._cka.below_zero()
        notes = [f"CKA at {label}: the unbiased estimate is {float(raw[i, i]):.4f}, below 0 (no linear similarity "
                 "beyond the estimator's noise); shown as 0" for i, label in enumerate(self.labels) if below[i, i]]
        return {"layers": layers, "cka_map": cka.numpy(), "cosines": cosines, "tokens": self.tokens,
                "argmax_agreement": self.agree / self.compared if self.compared else float("nan"),
                "tv": self.tv_sum / self.tv_count if self.tv_count else float("nan"), "notes": notes}
