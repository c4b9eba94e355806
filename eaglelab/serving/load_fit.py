"""The serving-cost model fitted to what was measured: one point reproduced, several fitted term by term.

One plain step and one cycle at one concurrency (what a user has) move each term of the model by as much as
its prior allows (:func:`calibrate`); a cost table or logs at several concurrencies fit every term's
multiplier by non-negative least squares, held near the datasheet where the points do not decide
(:func:`fit`). Only numpy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from eaglelab.errors import ParameterError, is_whole, require_whole
from eaglelab.serving.load import TERMS, LoadModel, Scales


@dataclass(frozen=True)
class Point:
    """A measured point: at ``concurrency`` requests, plain decoding's step and (optionally) a cycle with ``k`` drafts.

    Attributes:
        concurrency: requests in flight.
        decode_s: one plain decoding step (1 / per-request plain tok/s), or None.
        cycle_s: one speculative cycle (τ / per-request speculative tok/s), or None.
        k: drafts per cycle of ``cycle_s``.
        context: the mean context it was measured at (None: the model's).
    """

    concurrency: int
    decode_s: float | None = None
    cycle_s: float | None = None
    k: int | None = None
    context: int | None = None

    def context_in(self, model) -> int:
        """The context this point was measured at: its own (0 included: short prompts), else ``model``'s."""
        return model.context if self.context is None else self.context


def _check(points: list[Point]) -> None:
    for p in points:
        for value in (p.decode_s, p.cycle_s):
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ParameterError("calibration", f"a measured step must be a positive time, got {value!r}")
        require_whole("concurrency", p.concurrency)
        if p.cycle_s is not None and not is_whole(p.k):
            raise ParameterError("k", f"a measured cycle needs its drafts per cycle (>= 1), got {p.k!r}")
    if not any(p.decode_s is not None for p in points):
        raise ParameterError("calibration", "needs at least one measured plain decoding step")


#: How far each term's multiplier is known before anything is measured: the width of its prior in log units.
#: A datasheet's bandwidth is reached within about 20%; a kernel's share of the peak, an engine's overheads and a
#: link's achieved all-reduce speed vary by factors (quantized MoE kernels, custom all-reduces, schedulers).
PRIOR_WIDTH = {"overhead": 1.0, "launch": 1.0, "memory": 0.2, "compute": 0.7, "comm": 0.7, "draft": 1.0, "cycle": 1.0}


def _spread(terms: dict[str, float], measured: float) -> dict[str, float]:
    """Multipliers that make ``terms`` sum to ``measured``, each moved in proportion to its prior width and share.

    The most probable correction under the priors (:data:`PRIOR_WIDTH`) to first order: ``log s_i = μ σ_i² t_i /
    total``, with ``μ`` found by bisection so that the terms, scaled, add up to what was measured.
    """
    names = [n for n, v in terms.items() if v > 0]
    t = np.array([terms[n] for n in names])
    w = np.array([PRIOR_WIDTH[n] ** 2 for n in names]) * t / t.sum()

    def total(mu: float) -> float:
        return float(np.sum(t * np.exp(np.clip(mu * w, -50, 50))))

    lo, hi = -1.0, 1.0
    while total(lo) > measured and lo > -1e6:
        lo *= 2
    while total(hi) < measured and hi < 1e6:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if total(mid) < measured else (lo, mid)
    scales = np.exp(np.clip((lo + hi) / 2 * w, -50, 50))
    return {n: float(v) for n, v in zip(names, scales)}


def calibrate(model: LoadModel, points: Iterable[Point]) -> LoadModel:
    """The model reproducing what was measured: one point exactly, several by a fit (:func:`fit`).

    One plain step (and one cycle) at one concurrency: the forward's terms are moved so the model's plain step
    equals the measured one, each by as much as its prior allows (:func:`_spread`: a step far above its weights'
    read time moves the overheads and the links, not the bandwidth), and the drafter's steps so the cycle does.
    A cycle shorter than the calibrated verify, or more points, go to :func:`fit`.

    Raises:
        ParameterError: a point that is not positive and finite, or no plain step to scale the machine by.
    """
    points = list(points)
    _check(points)
    decode = [p for p in points if p.decode_s is not None]
    cycles = [p for p in points if p.cycle_s is not None]
    if len({p.concurrency for p in points}) > 1 or len(decode) > 1 or len(cycles) > 1 \
            or any(p.context not in (None, model.context) for p in points):
        return fit(model, points)
    p = decode[0]
    parts = {n: float(v) for n, v in model.forward_parts(p.concurrency, p.concurrency, "decode").items()}
    moved = _spread(parts, p.decode_s)
    scaled = replace(model, scales=model.scales.times(moved))
    if not cycles:
        return scaled
    c = cycles[0]
    b = float(c.concurrency)
    verify = {n: float(v) for n, v in scaled.forward_parts(b * scaled.verify_tokens(c.k), b, "verify").items()}
    decode = {n: float(v) for n, v in scaled.forward_parts(b, b, "decode").items()}
    # the cycle's own terms: the drafter, the cycle's bookkeeping, and a verify term the plain step does not have
    # (its launches, when only the plain step is a CUDA graph); the rest of the verify is fixed by the plain step
    own = {"draft": float(scaled.draft_s(b, c.k)), "cycle": float(scaled.cycle_overhead_s(b))}
    own |= {n: v for n, v in verify.items() if v > 0 and decode[n] == 0}
    rest = c.cycle_s - sum(v for n, v in verify.items() if n not in own)
    if rest <= 0:  # the verify alone outlasts the measured cycle: let the fit move the shape
        return fit(model, points)
    moved = _spread(own, rest)
    return replace(scaled, scales=scaled.scales.times(moved))


#: How firmly a fit holds a term the points do not decide at its prior: the weight of a multiplier's relative
#: distance from its prior (over its :data:`PRIOR_WIDTH`) against the points' squared relative errors. Small: the
#: points decide wherever they can; the prior only breaks ties.
PRIOR_WEIGHT = 1e-6


def _term_columns(model: LoadModel, p: Point, cycle: bool) -> np.ndarray:
    """The model's terms at ``p`` with every multiplier 1: a fit's design row."""
    bare = replace(model, scales=Scales(), context=p.context_in(model))
    b = float(p.concurrency)
    if not cycle:
        parts = bare.forward_parts(b, b, "decode")
        return np.array([float(parts[t]) for t in TERMS[:5]] + [0.0, 0.0])
    parts = bare.forward_parts(b * bare.verify_tokens(p.k), b, "verify")
    return np.array([float(parts[t]) for t in TERMS[:5]] + [float(bare.draft_s(b, p.k)), float(bare.cycle_overhead_s(b))])


def _nnls(a: np.ndarray, y: np.ndarray, iterations: int = 200) -> np.ndarray:
    """Non-negative least squares (Lawson and Hanson's active set): argmin |a x - y| with x >= 0."""
    n = a.shape[1]
    x, passive = np.zeros(n), np.zeros(n, dtype=bool)
    for _ in range(iterations):
        w = a.T @ (y - a @ x)
        if passive.all() or w[~passive].max(initial=-np.inf) <= 1e-12:
            break
        passive[np.argmax(np.where(passive, -np.inf, w))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], y, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > 1e-15
    return x


def fit(model: LoadModel, points: Iterable[Point]) -> LoadModel:
    """Each term's multiplier fitted to measured plain steps and cycles, held near the datasheet where undecided.

    Minimises the squared relative error of every measured step plus :data:`PRIOR_WEIGHT` times the squared
    distance of each multiplier from its one-point value (the forward scaled so the smallest concurrency's plain
    step is reproduced), with every multiplier >= 0 (:func:`_nnls`).
    """
    points = list(points)
    _check(points)
    rows, y = [], []
    for p in points:
        for cycle, value in ((False, p.decode_s), (True, p.cycle_s)):
            if value is not None:
                rows.append(_term_columns(model, p, cycle) / value)
                y.append(1.0)
    first = min((p for p in points if p.decode_s is not None), key=lambda p: p.concurrency)
    s0 = first.decode_s / float(replace(model, context=first.context_in(model)).decode_s(first.concurrency))
    prior = np.array([s0] * 5 + [s0, 1.0])
    widths = np.array([PRIOR_WIDTH[t] for t in TERMS])
    a = np.vstack([np.array(rows), math.sqrt(PRIOR_WEIGHT) * np.diag(1.0 / (prior * widths))])
    rhs = np.concatenate([np.array(y), math.sqrt(PRIOR_WEIGHT) / widths])
    present = np.abs(a[: len(rows)]).sum(axis=0) > 0  # a term that is zero at every point stays where it was
    x = prior.copy()
    x[present] = _nnls(a[:, present], rhs - a[:, ~present] @ prior[~present])
    return replace(model, scales=Scales(**dict(zip(TERMS, (float(v) for v in x)))))
