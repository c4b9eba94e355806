"""How a drafter's acceptance grows with training data: a saturating law, its fit and its band.

The law is stated on the per-position acceptance α of a chain of k drafts, where data scaling is
a plain power law: the miss rate falls as a power of the training samples,

    1 - α(N) = c · (N + D)^(-b),      τ(N) = (1 - α^(k+1)) / (1 - α),

so τ rises from 1 and saturates at k + 1 (every draft accepted). On a measured sweep each start
gets its own law (D = 0); what the warm start is worth is the *effective data transferred*
(Hernandez et al. 2021, "Scaling laws for transfer"): the samples scratch would need for the warm
start's τ, minus the samples the warm start used (:meth:`ScalingFit.transferred`). In the user's
scenario, where one point is known, the warm start is the scratch law shifted by a constant D
(:func:`assumed_band`).

The law has no ceiling below k + 1 (a real drafter saturates earlier: the target's own entropy),
so the samples it says a τ needs are a lower bound, and the closer τ is to k + 1 the looser.

Pure numpy; no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from eaglelab.errors import ParameterError
from eaglelab.serving.perf import accept_len_constant_rate, rate_for_accept_len
from eaglelab.views import Column, View

#: Keeps τ off the ends of [1, k + 1], where the miss rate's logarithm is infinite.
_EDGE = 1e-3


@dataclass(frozen=True)
class DataLaw:
    """τ(N) for one start: ``1 - α = c (N + transfer)^(-b)`` on a chain of ``k`` drafts.

    Attributes:
        c: miss rate at one sample (scale).
        b: exponent (> 0): how fast the miss rate falls with data.
        k: draft tokens per cycle (the chain length τ is computed for).
        transfer: effective samples a warm start brings (0: from scratch).
    """

    c: float
    b: float
    k: int
    transfer: float = 0.0

    def miss(self, n) -> np.ndarray:
        """Per-position miss rate 1 - α after ``n`` new samples (array in, array out)."""
        total = np.asarray(n, dtype=float) + self.transfer
        with np.errstate(divide="ignore"):
            return np.clip(self.c * np.power(np.maximum(total, 1e-12), -self.b), 0.0, 1.0)

    def tau(self, n) -> np.ndarray:
        """Acceptance length (bonus included) after ``n`` new samples."""
        return accept_len_constant_rate(1.0 - self.miss(n), self.k)

    def samples_for(self, tau: float) -> float:
        """New samples needed to reach ``tau``: 0 if already there, ``inf`` if the law never gets there."""
        if tau >= self.k + 1:
            return math.inf
        if tau <= float(self.tau(0.0)):
            return 0.0
        miss = 1.0 - rate_for_accept_len(tau, self.k)
        log_total = math.log(self.c / miss) / self.b  # in logs: a flat law needs astronomically many samples
        return math.inf if log_total > 700 else max(math.exp(log_total) - self.transfer, 0.0)

    @classmethod
    def anchored(cls, samples: float, tau: float, b: float, k: int, transfer: float = 0.0) -> DataLaw:
        """The law with exponent ``b`` that passes through one measured point (``samples``, ``tau``)."""
        if not 1.0 < tau < k + 1:
            raise ParameterError("tau", f"{tau} must lie strictly between 1 and k + 1 = {k + 1} to anchor a law")
        if samples <= 0 or b <= 0:
            raise ParameterError("anchor", f"need samples > 0 and exponent > 0, got {samples}, {b}")
        miss = 1.0 - rate_for_accept_len(tau, k)
        return cls(c=miss * (samples + transfer) ** b, b=b, k=k, transfer=transfer)

    def to_json(self) -> dict:
        return {"c": self.c, "b": self.b, "k": self.k, "transfer": self.transfer}


@dataclass(frozen=True)
class LawBand:
    """A central law and the laws that span its uncertainty.

    Attributes:
        central: the best estimate.
        members: bootstrap refits, or the corners of an assumed range.
        kind: what the band is (``"bootstrap 90%"`` or ``"assumed range"``), said next to every band.
        quantiles: percentiles of ``members`` that bound the band ((5, 95) for bootstrap; (0, 100)
            for corners).
    """

    central: DataLaw
    members: list[DataLaw]
    kind: str
    quantiles: tuple[float, float] = (5.0, 95.0)

    def tau(self, n: float) -> tuple[float, float, float]:
        """τ after ``n`` new samples: (central, low, high)."""
        return _band([float(m.tau(n)) for m in self.members], float(self.central.tau(n)), self.quantiles)

    def samples_for(self, tau: float) -> tuple[float, float, float]:
        """New samples to reach ``tau``: (central, low, high); ``inf`` where a law never gets there."""
        return _band([m.samples_for(tau) for m in self.members], self.central.samples_for(tau), self.quantiles)

    def to_json(self) -> dict:
        return {"central": self.central.to_json(), "kind": self.kind, "members": len(self.members)}


def _fmt_bound(x: float) -> str:
    return f"{x:.0f}" if math.isfinite(x) else "∞"


#: Most samples a plan prints as a number: ten billion samples (about 5e12 tokens at 512 a sample) is past any
#: fine-tuning corpus by two orders of magnitude; a law asking for more is said to ask for what no data can give.
CORPUS_LIMIT = 1e10


def sample_count(n: float) -> str:
    """1,400,000 -> '1.4M'; 37,000 -> '37k'; past :data:`CORPUS_LIMIT` (or never) '> 10B (beyond any corpus)'."""
    if not math.isfinite(n) or n > CORPUS_LIMIT:
        return f"> {CORPUS_LIMIT / 1e9:.0f}B (beyond any corpus)"
    n = float(f"{n:.3g}")  # rounded first: 999,999 is '1M', not '1e+03k'
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.3g}{suffix}"
    return f"{n:.0f}"


#: A data ratio's band wider than this (high over low) pins no number: the finding says so instead of a centre.
RATIO_SPAN = 10.0


def ratio_bound(x: float) -> str:
    """A ratio's bound: '3.2×', or 'unbounded' where the law gives none (never 'inf')."""
    return f"{x:.1f}×" if math.isfinite(x) and x > 0 else "unbounded"


def _miss_points(samples: Sequence[float], taus: Sequence[float], k: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(samples, dtype=float)
    t = np.clip(np.asarray(taus, dtype=float), 1.0 + _EDGE, k + 1 - _EDGE)
    miss = np.array([1.0 - rate_for_accept_len(v, k) for v in t])
    return x, miss


def _ols(x: np.ndarray, miss: np.ndarray, k: int) -> DataLaw:
    """Least squares of log(1 - α) on log N: slope -b, intercept log c.

    b is kept in [1e-3, 5] (a flatter or steeper law is noise, not data scaling) and the intercept
    refitted for the kept slope.
    """
    lx, ly = np.log(x), np.log(miss)
    slope = np.polyfit(lx, ly, 1)[0] if np.ptp(lx) > 0 else 0.0
    b = float(np.clip(-slope, 1e-3, 5.0))
    return DataLaw(c=float(math.exp(ly.mean() + b * lx.mean())), b=b, k=k)


def _band(values, central: float, quantiles: tuple[float, float]) -> tuple[float, float, float]:
    """(central, low, high) from member values that may hold ``inf`` (a law that never gets there):
    the low quantile over the finite ones, the high one ``inf`` as soon as any member is."""
    vals = np.asarray(values, dtype=float)
    finite = vals[np.isfinite(vals)]
    lo = float(np.percentile(finite, quantiles[0])) if len(finite) else math.inf
    hi = float(np.percentile(vals, quantiles[1])) if len(finite) == len(vals) else math.inf
    return central, min(lo, central), max(hi, central)


@dataclass(frozen=True)
class ScalingFit:
    """Scratch and warm start fitted on one data-budget sweep, each with its own law and bootstrap band.

    Each start is a two-parameter power law in its new samples, 1 - α = c N^-b, fitted on the
    budgets > 0. The old drafter as is (budget 0) is kept apart, as the level a fine-tune must beat:
    on a handful of samples a warm start can fall below it (it forgets faster than it learns).

    Attributes:
        scratch, warm: the two laws with their bootstrap bands.
        plugin: held-out τ of the old drafter as is (mean of the budget-0 points), or None.
        points: the measured points, ``{"from scratch": [(N, τ), ...], "warm start": [...]}``.
        residual_rms: root-mean-square τ error of each fit on its own points.
    """

    scratch: LawBand
    warm: LawBand
    plugin: float | None
    points: dict[str, list[tuple[float, float]]]
    residual_rms: dict[str, float] = field(default_factory=dict)

    def beats_plugin(self) -> tuple[float, float, float] | None:
        """New samples from which the warm start's law passes the old drafter as is: (central, low, high)."""
        if self.plugin is None:
            return None
        return _band([m.samples_for(self.plugin) for m in self.warm.members], self.warm.central.samples_for(self.plugin),
                     self.warm.quantiles)

    def _pairs(self, f) -> tuple[float, float, float]:
        """f(scratch law, warm law) at the central fit and over the bootstrap: (central, low, high)."""
        return _band([f(s, w) for s, w in zip(self.scratch.members, self.warm.members)],
                     float(f(self.scratch.central, self.warm.central)), self.warm.quantiles)

    def transferred(self, n: float) -> tuple[float, float, float]:
        """Effective data transferred at ``n`` new samples (Hernandez et al. 2021): the samples scratch
        needs for the warm start's τ at ``n``, minus ``n``. (central, low, high)."""
        return self._pairs(lambda s, w: s.samples_for(float(w.tau(n))) - n)

    def data_ratio(self, tau: float) -> tuple[float, float, float]:
        """Scratch's samples over the warm start's at equal ``tau``: (central, low, high); inf once the
        warm start needs no new data."""
        def ratio(s: DataLaw, w: DataLaw) -> float:
            ns, nw = s.samples_for(tau), w.samples_for(tau)
            return math.inf if nw == 0 else ns / nw

        return self._pairs(ratio)

    def ratio_text(self, tau: float) -> str:
        """The data ratio at ``tau`` in words, its band first: a number only where the sweep pins one.

        A band wider than :data:`RATIO_SPAN` (high over low) is said to pin no number, with what would narrow it;
        an unbounded one (the warm start's law needs no new data for ``tau``, or scratch's never reaches it) is
        said to be unreadable from this sweep, never printed as infinity.
        """
        c, lo, hi = self.data_ratio(tau)
        if not all(math.isfinite(x) and x > 0 for x in (c, lo, hi)):
            return (f"the ratio of scratch's data to the warm start's at τ {tau:.2f} cannot be read from this sweep: "
                    "under a fitted law one start needs no new data for it or never reaches it (band "
                    f"{ratio_bound(lo)} to {ratio_bound(hi)}); more budgets, seeds or your own data would bound it")
        if hi / lo > RATIO_SPAN:
            return (f"scratch needs {lo:.1f}-{hi:.0f}× the warm start's data at τ {tau:.2f} (central {c:.1f}×): a band "
                    f"of {hi / lo:.0f}x pins no number; more budgets, seeds or your own data would narrow it")
        return f"**scratch needs {c:.1f}× ({lo:.1f}-{hi:.1f}) the warm start's data** at τ {tau:.2f}"

    def needs_text(self, tau: float, why: str) -> str:
        """The decision-maker's number: the new-target samples each start needs for ``tau``, each with its band.

        Args:
            tau: the τ asked (a goal's, break-even's, or the highest the sweep reached).
            why: what ``tau`` is, in words (``the goal's τ for 150 tok/s``).
        """
        measured = max(n for pts in self.points.values() for n, _ in pts)

        def need(label: str, band: LawBand) -> str:
            c, lo, hi = band.samples_for(tau)
            if c < 1:  # under one sample: it is there already
                return f"the {label} needs no new data (it is there already)"
            if not math.isfinite(c) or c > CORPUS_LIMIT:
                return f"the {label} never reaches it with any corpus under its fitted law ({sample_count(c)})"
            far = " (extrapolated beyond the data measured)" if c > measured else ""
            return f"the {label} at least **{sample_count(c)}** ({sample_count(lo)} to {sample_count(hi)}){far}"

        return (f"For τ {tau:.2f} ({why}): {need('warm start', self.warm)} and {need('scratch run', self.scratch)} "
                f"new-target samples ({self.warm.kind}; the law saturates below k + 1, so these are lower bounds)")

    def plugin_text(self) -> str:
        """Fine-tune or plug in, in words: from how many samples the warm start beats the old drafter as is."""
        if self.plugin is None:
            return "no point of the old drafter as is was measured"
        warm = [(n, t) for n, t in self.points["warm start"] if n > 0]
        budgets = sorted({n for n, _ in warm})
        worst = min(t for _, t in warm)
        c, lo, hi = self.beats_plugin()
        head = f"The old drafter as is reaches held-out τ {self.plugin:.2f}; the warm start "
        if worst >= self.plugin:
            return head + f"is above it at every budget measured (τ {worst:.2f} and up from {budgets[0]:g} samples)."
        if not math.isfinite(c):
            return head + "never passes it under the fitted law: plug the old drafter in."
        where = "beyond" if c > budgets[-1] else "within"
        return head + (f"passes it from about **{c:.0f} ({lo:.0f}-{_fmt_bound(hi)}) new-target samples** ({where} the "
                       f"{budgets[-1]:g} measured); with fewer it falls below it (τ {worst:.2f} at worst): a fine-tune "
                       "on a handful of samples forgets faster than it learns.")

    @property
    def exponent(self) -> tuple[float, float, float]:
        """The scratch data exponent b: (central, low, high) over the bootstrap."""
        return _band([m.b for m in self.scratch.members], self.scratch.central.b, self.scratch.quantiles)

    def equal_tau(self, taus: Sequence[float]) -> list[dict]:
        """For each τ: the samples scratch and the warm start need, and their ratio, each (central, low, high)."""
        return [{"tau": float(t), "scratch": self.scratch.samples_for(t), "warm start": self.warm.samples_for(t),
                 "ratio": self.data_ratio(t)} for t in taus]

    def to_json(self) -> dict:
        return {"scratch": self.scratch.to_json(), "warm": self.warm.to_json(), "exponent": list(self.exponent),
                "plugin": self.plugin, "beats_plugin": self.beats_plugin(),
                "points": {k: [list(p) for p in v] for k, v in self.points.items()},
                "residual_rms": self.residual_rms}


@dataclass(frozen=True)
class ScalingSweep:
    """A data-budget sweep and the laws fitted to it (notebook 04's section 4).

    Attributes:
        points: the held-out τ measured, ``{"from scratch": [(N, τ), ...], "warm start": [...]}``.
        fit: the two laws with their bands (:func:`fit_scaling`).
        budgets, seeds: the sweep's budgets (new-target sequences) and seeds; min_steps, epochs: each run's length.
    """

    points: dict[str, list[tuple[float, float]]]
    fit: ScalingFit
    budgets: tuple[int, ...]
    seeds: tuple[int, ...]
    min_steps: int
    epochs: float

    @property
    def levels(self) -> list[float]:
        """The τ scratch's law reached at the budgets > 0 (rounded): the τ at which both starts' needs are read."""
        return sorted({round(float(self.fit.scratch.central.tau(n)), 2) for n in self.budgets[1:]})

    def equal_view(self) -> View:
        """At each τ scratch reached: the samples each start needs and their ratio, with the ratio's band."""
        columns = [Column("τ", "{:.2f}"), Column("scratch needs", sample_count), Column("warm start needs", sample_count),
                   Column("ratio", ratio_bound), Column("ratio band")]
        return View.of(columns, [[r["tau"], r["scratch"][0], r["warm start"][0], r["ratio"][0],
                                  " to ".join(map(ratio_bound, r["ratio"][1:]))] for r in self.fit.equal_tau(self.levels)],
                       index="τ")

    def equal_table(self):
        return self.equal_view().frame()

    def points_table(self):
        """Held-out τ per budget and start: the mean and spread over the seeds."""
        import pandas as pd

        frame = pd.DataFrame([(label, n, t) for label, pts in self.points.items() for n, t in pts],
                             columns=["start", "sequences", "τ"])
        return frame.pivot_table(index="sequences", columns="start", values="τ", aggfunc=["mean", "std"])

    def findings(self, tag: str = "", goal: tuple[float, str] | None = None) -> dict[str, str]:
        """``scaling`` (the sweep, each start's exponent, the fit's error, the samples each start needs at the highest τ
        scratch reached and, with ``goal`` (τ, what it is), at the goal's) and ``plugin`` (fine-tune or plug in)."""
        t = f" {tag}" if tag else ""
        fit, b = self.fit, self.fit.exponent
        top = self.levels[-1]
        need = f" {fit.needs_text(goal[0], goal[1])}." if goal else ""
        return {"scaling": f"**Data scaling{t}** ({len(self.budgets)} budgets {self.budgets[0]}-{self.budgets[-1]} "
                           f"sequences x {len(self.seeds)} seed(s), at least {self.min_steps} steps or {self.epochs:g} "
                           f"epochs per run): the per-position miss rate falls as N^-b with b = {b[0]:.3f} "
                           f"({b[1]:.3f}-{b[2]:.3f}, {fit.scratch.kind}) from scratch and {fit.warm.central.b:.3f} "
                           f"warm-started; fit error {fit.residual_rms['from scratch']:.3f} / "
                           f"{fit.residual_rms['warm start']:.3f} τ. {fit.needs_text(top, 'the highest τ scratch reached')}; "
                           f"{fit.ratio_text(top)}.{need}",
                "plugin": f"**Fine-tune or plug in?{t}** {fit.plugin_text()}"}

    def to_json(self) -> dict:
        return {**self.fit.to_json(), "budgets": list(self.budgets), "seeds": list(self.seeds),
                "min_steps": self.min_steps, "epochs": self.epochs}


def fit_scaling(scratch: Sequence[tuple[float, float]], warm: Sequence[tuple[float, float]], k: int,
                n_boot: int = 300, seed: int = 0) -> ScalingFit:
    """Fit the scratch law and the warm start's law, each with a bootstrap band.

    Args:
        scratch: (samples, held-out τ) points trained from scratch, samples > 0; seeds may repeat a budget.
        warm: (samples, held-out τ) points warm-started from the old drafter; points at 0 samples
            are the old drafter as is (kept apart, see :class:`ScalingFit`).
        k: draft tokens per cycle of the τ measured.
        n_boot: bootstrap refits (each start's points resampled with replacement).
        seed: bootstrap seed (the fit is deterministic).

    Raises:
        ParameterError: fewer than three distinct positive budgets for a start, or a negative one.
    """
    s = np.asarray(scratch, dtype=float).reshape(-1, 2)
    w_all = np.asarray(warm, dtype=float).reshape(-1, 2)
    w = w_all[w_all[:, 0] > 0]
    for name, pts, given in (("scratch", s, s), ("warm", w, w_all)):
        if len(np.unique(pts[:, 0])) < 3 or (given[:, 0] < 0).any() or (name == "scratch" and (pts[:, 0] <= 0).any()):
            raise ParameterError(name, "need points at >= 3 distinct positive budgets to fit a scaling law")
    plugin = float(w_all[w_all[:, 0] == 0, 1].mean()) if (w_all[:, 0] == 0).any() else None

    def law(p: np.ndarray) -> DataLaw:
        return _ols(*_miss_points(p[:, 0], p[:, 1], k), k)

    rng = np.random.default_rng(seed)
    boot_s, boot_w = [], []
    while len(boot_s) < n_boot:
        sp, wp = s[rng.integers(0, len(s), len(s))], w[rng.integers(0, len(w), len(w))]
        if len(np.unique(sp[:, 0])) < 2 or len(np.unique(wp[:, 0])) < 2:  # a slope needs two budgets
            continue
        boot_s.append(law(sp))
        boot_w.append(law(wp))
    central_s, central_w = law(s), law(w)
    rms = {"from scratch": float(np.sqrt(np.mean((central_s.tau(s[:, 0]) - s[:, 1]) ** 2))),
           "warm start": float(np.sqrt(np.mean((central_w.tau(w[:, 0]) - w[:, 1]) ** 2)))}
    return ScalingFit(LawBand(central_s, boot_s, "bootstrap 90%"), LawBand(central_w, boot_w, "bootstrap 90%"), plugin,
                      {"from scratch": [tuple(p) for p in s.tolist()], "warm start": [tuple(p) for p in w_all.tolist()]},
                      rms)


def assumed_band(samples: float, tau: float, k: int, exponents: tuple[float, float],
                 transfers: tuple[float, float] = (0.0, 0.0)) -> LawBand:
    """Laws through one measured point over an assumed range of exponents and transfers (corners).

    The central law takes the geometric mean of each range (the ranges span factors).
    """
    (b_lo, b_hi), (d_lo, d_hi) = sorted(exponents), sorted(transfers)
    centre_d = math.sqrt(d_lo * d_hi) if d_lo > 0 else (d_lo + d_hi) / 2
    base = DataLaw.anchored(samples, tau, math.sqrt(b_lo * b_hi), k)
    corners = [DataLaw.anchored(samples, tau, b, k) for b in (b_lo, b_hi)]
    return LawBand(replace(base, transfer=centre_d),
                   [replace(c, transfer=d) for c in corners for d in (d_lo, d_hi)], "assumed range", (0.0, 100.0))
