"""How far did the target move? Per-token and representation-level similarity, streaming.

Per token: cosine similarity, relative L2 ``||hA - hB|| / ||hA||`` and norm ratio. Per layer
pair: linear CKA with the unbiased HSIC estimator of Nguyen, Raghu & Kornblith (2021),
accumulated over minibatches so memory stays flat as the token count grows: each minibatch
of n tokens adds HSIC_1(K, L), HSIC_1(K, K), HSIC_1(L, L) with K = X Xᵀ, L = Y Yᵀ (n x n),
and CKA = mean HSIC(K, L) / sqrt(mean HSIC(K, K) · mean HSIC(L, L)).

HSIC_1 of linear kernels does not change when a constant is added to every row of X, so each
minibatch is centred on its own mean before its Gram matrix: with raw states a channel offset of
1e5 makes K's entries 1e10 and the estimator's terms cancel past float64's digits (CKA -6.6e34 on
identical states). Each layer is also scaled by one power of two, fixed by the first minibatch
(exact in floating point, and CKA does not change with scale), so tiny or huge states neither
underflow nor overflow.

Where the time goes at a target's width (H 7168, 256-token minibatches): the eight Gram products
of every minibatch. Centred and scaled, the states' Gram matrix is taken in float32 (its entries
are then of the size of the spread, which float32 holds to 7 digits) and every HSIC term is summed
in float64; float64 states are centred in float64 first. tests/test_similarity.py checks the result
against the float64 computation on hostile states (offsets, scales, widths, near-identical pairs).
"""

from __future__ import annotations

import functools
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


def _floating(x: torch.Tensor) -> torch.Tensor:
    """x in float32, or float64 when it is float64 (a view when no conversion is needed): bf16 or fp16 states are
    exact in float32, and float64 states keep their digits."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def _row_norms(x: torch.Tensor, y: torch.Tensor, scratch: torch.Tensor | None = None):
    """``|x|``, ``|y|`` and ``|x - y|`` per row of two float [n, D] matrices, each [n] in float64.

    Three norms (one pass each) and one difference: ``x · y`` follows as ``(|x|² + |y|² - |x - y|²) / 2``
    without cancelling digits where it matters (near-identical rows: there ``|x - y|`` is taken from the
    difference itself). ``scratch``: a buffer of x's dtype and shape for the difference, reused across calls.
    """
    na = torch.linalg.vector_norm(x, dim=-1).double()
    nb = torch.linalg.vector_norm(y, dim=-1).double()
    if x.dtype != torch.float64 and not (_squares_fit(na) and _squares_fit(nb)):
        return _row_norms(x.double(), y.double())  # squares past float32's range: the norms from float64
    diff = torch.sub(x, y, out=scratch) if scratch is not None else x - y
    return na, nb, torch.linalg.vector_norm(diff, dim=-1).double()


#: Row norms float32 takes without its squares leaving its range (a row's elements below ~1e-23 square to 0,
#: above ~1e19 to Inf): within them, what underflows in ``|x - y|`` is below 1e-5 of ``|x|``.
FLOAT32_NORMS = (1e-15, 1e15)


def _squares_fit(norms: torch.Tensor) -> bool:
    """Whether every norm lies in :data:`FLOAT32_NORMS` (NaN does not)."""
    lo, hi = FLOAT32_NORMS
    return bool(((norms >= lo) & (norms <= hi)).all())


def _take(buf: list[torch.Tensor], n: int) -> list[torch.Tensor]:
    """The first ``n`` rows of a list of [*, D] pieces, removed from it, as the pieces (views) that hold them."""
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
    return parts


def _owned(piece: torch.Tensor, borrowed: set[int]) -> torch.Tensor:
    """``piece`` with storage of its own: a view into a larger tensor is copied, so it keeps no batch alive, and so
    is anything in a caller's storage (``borrowed``: its data pointers), which the caller may write over next."""
    storage = piece.untyped_storage()
    own = storage.data_ptr() not in borrowed and storage.nbytes() <= piece.numel() * piece.element_size()
    return piece if own else piece.clone()


def _zero_diag_stats(G: torch.Tensor):
    """A Gram matrix with its diagonal zeroed, its row sums and total: what every HSIC pair reuses."""
    G = G.double().clone()
    G.fill_diagonal_(0)
    g1 = G.sum(1)
    return G, g1, g1.sum()


def _gram_stats(x: torch.Tensor, scale: float = 1.0):
    """:func:`_zero_diag_stats` of the linear Gram matrix of x [n, D], centred on its mean and divided by ``scale``,
    all in float64 (the reference; the streaming CKA's fallback when float32 overflows).

    Centring leaves HSIC_1 unchanged (it is shift invariant) and keeps the Gram matrix's entries at
    the size of the states' spread, not of their offset.
    """
    x = x.double()
    x = (x - x.mean(0)) / scale
    return _zero_diag_stats(x @ x.T)


def _binary_scale(pieces: Sequence[torch.Tensor]) -> float:
    """A power of two near the largest centred magnitude of a minibatch's rows (1.0 when they do not vary): an exact
    divisor. ``pieces``: the rows, [*, D] each (float32 arithmetic, float64 for float64 states)."""
    pieces = [_floating(p) for p in pieces]
    if any(p.dtype == torch.float64 for p in pieces):
        pieces = [p.double() for p in pieces]
    n = sum(p.shape[0] for p in pieces)
    if not n or not pieces[0].shape[1]:
        return 1.0
    mean = sum(p.sum(0) for p in pieces) / n
    top = max(float((p - mean).abs().max()) for p in pieces if p.shape[0])
    return 2.0 ** math.floor(math.log2(top)) if top > 0 and math.isfinite(top) else 1.0


def _centred_scaled(pieces: Sequence[torch.Tensor], scale: float, twice: bool = False) -> torch.Tensor:
    """The rows of ``pieces`` (one minibatch, [*, D] each) minus their mean, divided by ``scale`` (a power of
    two), as one contiguous float32 [n, D] matrix.

    States of 32 bits or fewer are centred in float32, each piece in one pass straight into the matrix
    (``x / scale - mean / scale``: dividing by a power of two is exact, and any shift leaves HSIC_1 unchanged,
    so the mean's own rounding costs little: see ``twice``); float64 states are centred in float64 first, so
    an offset far above their spread keeps its digits.

    Args:
        twice: centre the result once more on its own mean (:data:`OFFSET_LEFT`).
    """
    if any(p.dtype == torch.float64 for p in pieces):
        x = torch.cat([p.double() for p in pieces])
        return ((x - x.mean(0)) / scale).float()
    n = sum(p.shape[0] for p in pieces)
    inv = 1.0 / scale
    shift = sum(_floating(p).sum(0) for p in pieces).div_(n).mul_(-inv)
    out = torch.empty(n, pieces[0].shape[1], dtype=torch.float32, device=pieces[0].device)
    row = 0
    for p in pieces:
        torch.add(shift, p, alpha=inv, out=out[row: row + p.shape[0]])
        row += p.shape[0]
    if twice:  # what the float32 mean's rounding left of the offset, taken off in a second pass
        out.sub_(out.mean(0))
    return out


#: A minibatch's Gram matrix is taken again, centred twice, when the offset left after the first centring holds
#: more than this share of its trace (``sum(G) / (n trace(G))``): float32's mean of a channel far above the
#: spread misses it by up to its size x 1e-7, which for a constant channel of 1e5 beside states of 1e-6 is
#: far above the spread (tests/test_similarity.py has one).
OFFSET_LEFT = 1e-3


def _offset_left(G: torch.Tensor) -> torch.Tensor:
    """[L] whether the centred Gram matrices G [L, n, n] keep more than :data:`OFFSET_LEFT` of an offset."""
    n = G.shape[-1]
    trace = G.diagonal(dim1=1, dim2=2).sum(1)
    return G.sum((1, 2)) > OFFSET_LEFT * n * trace


#: Row strips of a Gram product: strip i is multiplied by rows i.. only (the rest is its transpose), 10/16 of
#: the full product's work at 4 strips.
GRAM_STRIPS = 4


@functools.cache
def _onednn_gram():
    """oneDNN's float32 ``X Wᵀ`` (``torch.ops.mkldnn._linear_pointwise``), checked once against ``x @ x.T``, or None.

    On x86 CPUs torch's ``mm`` runs MKL, which takes its AVX2 path on AMD processors; oneDNN's runs AVX-512 where
    the CPU has it: over 2x the float32 Gram products on the project's machines, same digits. A private operator,
    so it is used only when present and agreeing with ``mm`` on a small product (float32 rounding apart).
    """
    try:
        op = torch.ops.mkldnn._linear_pointwise
        x = torch.arange(-12, 12, dtype=torch.float32).reshape(4, 6) / 7
        ok = torch.backends.mkldnn.is_available() and torch.allclose(op(x, x, None, "none", [], ""), x @ x.T,
                                                                     rtol=1e-5, atol=1e-5)
    except (AttributeError, RuntimeError):
        return None
    return op if ok else None


def _gram(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``x xᵀ`` of a contiguous float32 x [n, D], [n, n] float32 (into ``out`` when given): by row strips, each
    strip times the rows from it on (the blocks below the diagonal are transposes), oneDNN's product on the CPU
    where it checks out."""
    op = _onednn_gram() if x.device.type == "cpu" else None

    def mm(u, v):
        return op(u, v, None, "none", [], "") if op is not None else u @ v.T

    n = x.shape[0]
    G = torch.empty(n, n, dtype=x.dtype, device=x.device) if out is None else out
    if n < 2 * GRAM_STRIPS:
        G.copy_(mm(x, x))
        return G
    step = -(-n // GRAM_STRIPS)
    for i in range(0, n, step):
        strip = mm(x[i: i + step], x[i:])
        G[i: i + step, i:] = strip
        G[i + step:, i: i + step] = strip[:, step:].T
    return G


def _hsic_all(G: torch.Tensor, n: int) -> torch.Tensor:
    """Unbiased HSIC of every pair of a stack of Gram matrices G [L, n, n] (float64, diagonals zeroed in place):
    [L, L], each entry :func:`_hsic_from_stats`'s, as two products over the stack (a handful of operations for
    all the layers of both targets, not a dozen per pair)."""
    G.diagonal(dim1=1, dim2=2).zero_()
    g1 = G.sum(2)
    gs = g1.sum(1)
    flat = G.reshape(G.shape[0], -1)
    term = flat @ flat.T + gs[:, None] * gs[None, :] / ((n - 1) * (n - 2)) - 2 * (g1 @ g1.T) / (n - 2)
    return term / (n * (n - 3))


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


#: The floor under a norm (or product of norms) divided by: guards 0 / 0 only, so states of 1e-30 keep their
#: cosine, relative L2 and norm ratio (float64 sums).
NO_NORM = 1e-300

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
        """Add one minibatch of the same n tokens: xs[i] [n, D] from A, ys[j] [n, D] from B (n >= 4).

        Each of xs, ys may also be a list of [*, D] pieces that together hold the n rows (no copy to join them).
        """
        xs = [x if isinstance(x, (list, tuple)) else [x] for x in xs]
        ys = [y if isinstance(y, (list, tuple)) else [y] for y in ys]
        n = sum(p.shape[0] for p in xs[0])
        if not self.batches:  # one exact power-of-two scale per layer, for every minibatch after
            self._scale_x = [_binary_scale(x) for x in xs]
            self._scale_y = [_binary_scale(y) for y in ys]
        layers, scales = [*xs, *ys], [*self._scale_x, *self._scale_y]
        G = torch.empty(len(layers), n, n, dtype=torch.float32, device=xs[0][0].device)
        for k, (pieces, scale) in enumerate(zip(layers, scales)):
            _gram(_centred_scaled(pieces, scale), out=G[k])
        for k in torch.nonzero(_offset_left(G)).flatten().tolist():
            _gram(_centred_scaled(layers[k], scales[k], twice=True), out=G[k])
        G = G.double()
        for k in torch.nonzero(~torch.isfinite(G).flatten(1).all(1)).flatten().tolist():
            G[k] = _gram_stats(torch.cat([p.double() for p in layers[k]]), scales[k])[0]  # float32 overflowed
        H = _hsic_all(G, n).cpu()
        a = len(xs)
        self._xy += H[:a, a:]
        self._xx += H.diagonal()[:a]
        self._yy += H.diagonal()[a:]
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
    _scratch: torch.Tensor | None = field(default=None, init=False)
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

        States are read once into float32 (float64 stays float64) and buffered; every ``cka_batch`` tokens they
        are measured per token (:meth:`_per_token`) and fed to the CKA while they are in the CPU's cache.
        """
        n = states_a[0].shape[0]
        self.tokens += n
        borrowed = set()  # the caller's storage: what is still buffered after this update is copied out of it
        for i, (a, b) in enumerate(zip(states_a, states_b)):
            a, b = a.detach().cpu(), b.detach().cpu()
            borrowed |= {a.untyped_storage().data_ptr(), b.untyped_storage().data_ptr()}
            x, y = _floating(a), _floating(b)
            if x.dtype != y.dtype:
                x, y = x.double(), y.double()
            self._buf_a[i].append(x)
            self._buf_b[i].append(y)
        if argmax_a is not None and argmax_b is not None:
            self.agree += int((argmax_a.cpu() == argmax_b.cpu()).sum())
            self.compared += int(argmax_a.numel())
        if tv is not None:
            self.tv_sum += float(tv.double().sum())
            self.tv_count += int(tv.numel())
        self._flush(final=False, borrowed=borrowed)

    def _per_token(self, i: int, xs: Sequence[torch.Tensor], ys: Sequence[torch.Tensor]) -> None:
        """Add the rows of layer i (pieces xs, ys, paired) to the per-token sums and the cosine sample.

        Three row norms serve cosine, relative L2 and both norms (|a|, |b|, and |a - b| taken from the
        difference itself, so that near-identical states lose no digits; a·b = (|a|² + |b|² - |a - b|²) / 2).
        """
        for x, y in zip(xs, ys):
            na, nb, nd = _row_norms(x, y, self._scratch_for(x))
            ab = (na * na + nb * nb - nd * nd) / 2
            cos = (ab / (na * nb).clamp_min(NO_NORM)).float()
            self._sums["cos"][i] += cos.double().sum()
            self._sums["rel"][i] += (nd / na.clamp_min(NO_NORM)).sum()
            self._sums["na"][i] += na.sum()
            self._sums["nb"][i] += nb.sum()
            room = self.keep_cosines - sum(len(c) for c in self._cos[i])
            if room > 0:
                self._cos[i].append(cos[:room])

    def _scratch_for(self, x: torch.Tensor) -> torch.Tensor:
        """A reusable [n, D] buffer of x's dtype for the per-token difference (no fresh allocation per layer)."""
        if self._scratch is None or self._scratch.dtype != x.dtype or self._scratch.numel() < x.numel():
            self._scratch = torch.empty(x.numel(), dtype=x.dtype)
        return self._scratch[: x.numel()].view(x.shape)

    def _flush(self, final: bool, borrowed: set[int] = frozenset()) -> None:
        """Measure and feed the CKA every whole minibatch of ``cka_batch`` buffered tokens (and, at the end, the
        rest: per token always, to the CKA if >= 4).

        A minibatch is a list of views of the updates' tensors (nothing joined); the remainder (under
        ``cka_batch`` rows) is copied once, so no view keeps a caller's batch alive.
        """
        while True:
            have = sum(x.shape[0] for x in self._buf_a[0])
            if not have or (have < self.cka_batch and not final):
                break
            take = min(self.cka_batch, have)
            xs = [_take(buf, take) for buf in self._buf_a]
            ys = [_take(buf, take) for buf in self._buf_b]
            for i, (x, y) in enumerate(zip(xs, ys)):
                self._per_token(i, x, y)
            if take >= 4:  # fewer tokens are too few for an unbiased HSIC
                self._cka.update(xs, ys)
        if not final:
            self._buf_a = [[_owned(b, borrowed) for b in buf] for buf in self._buf_a]
            self._buf_b = [[_owned(b, borrowed) for b in buf] for buf in self._buf_b]

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
                norm_ratio=float(self._sums["nb"][i] / self._sums["na"][i].clamp_min(NO_NORM)),
                cka=float(cka[i, i]),
            ))
        raw, below = self._cka.estimate(), self._cka.below_zero()
        notes = [f"CKA at {label}: the unbiased estimate is {float(raw[i, i]):.4f}, below 0 (no linear similarity "
                 "beyond the estimator's noise); shown as 0" for i, label in enumerate(self.labels) if below[i, i]]
        return {"layers": layers, "cka_map": cka.numpy(), "cosines": cosines, "tokens": self.tokens,
                "argmax_agreement": self.agree / self.compared if self.compared else float("nan"),
                "tv": self.tv_sum / self.tv_count if self.tv_count else float("nan"), "notes": notes}
