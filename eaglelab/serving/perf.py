"""Performance model of speculative decoding: pure arithmetic, units in the names.

Conventions (``docs/EAGLE3_FORMAT.md``): the acceptance length ``tau`` counts the bonus
token, as SGLang and vLLM report it: tokens emitted per verify cycle, 1.0 meaning no gain.
One cycle = k sequential draft steps + one verify forward of the target + overhead, so

    effective tok/s = tau / T_cycle,   break-even tau* = T_cycle x baseline tok/s.

Per-position conditional acceptance p_i on a chain of k drafts gives
E[tau] = 1 + sum_i prod_{j<=i} p_j (Leviathan et al. 2023: (1 - a^(k+1)) / (1 - a) for a
constant a). All functions are vectorised over numpy arrays where that is natural.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from eaglelab.errors import ParameterError
from eaglelab.views import Column, View


def _positive(name: str, value) -> None:
    arr = np.asarray(value, dtype=float)
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ParameterError(name, f"must be a positive number, got {value!r}")


def effective_tps(accept_len, cycle_s):
    """Tokens per second with speculation: tau / T_cycle.

    Args:
        accept_len: tau, tokens emitted per cycle (bonus token included).
        cycle_s: seconds per cycle (draft + verify + overhead).
    """
    _positive("accept_len", accept_len)
    _positive("cycle_s", cycle_s)
    return np.asarray(accept_len, dtype=float) / np.asarray(cycle_s, dtype=float)


#: Physical bounds on what a user measures and enters (``perf``, ``plan``, ``predict``, cost tables): a decode step of
#: one request takes at least 10 µs (a forward launches tens of kernels of several µs each, and reads its weights),
#: at most an hour; a cycle likewise. Out of range is a mix-up, refused with the likely one (:func:`option`'s
#: ``mistake``): an aggregate tok/s given per request, milliseconds given as seconds.
MIN_STEP_S, MAX_STEP_S = 1e-5, 3600.0
#: Per-request tok/s those steps allow.
MIN_TPS, MAX_TPS = 1.0 / MAX_STEP_S, 1.0 / MIN_STEP_S
#: The most tokens per second a server's log may report over all its requests (a thousand times the largest published
#: aggregate decode rates, about 1e6 tok/s on a rack): a line above it is malformed, not a load.
MAX_SERVER_TPS = 1e9
#: The likely mix-up behind a per-request tok/s out of range.
TPS_MISTAKE = ("per request: a step faster than 10 µs is faster than any forward; an aggregate tok/s summed over the "
               "requests in flight is divided by them first")
#: The likely mix-up behind a cycle out of range.
CYCLE_MISTAKE = "milliseconds: a cycle takes from 0.01 ms to an hour"


def break_even_tau(cycle_s, baseline_tps):
    """The tau at which speculation only matches plain decoding: T_cycle x baseline tok/s."""
    _positive("cycle_s", cycle_s)
    _positive("baseline_tps", baseline_tps)
    return np.asarray(cycle_s, dtype=float) * np.asarray(baseline_tps, dtype=float)


def required_accept_len(goal_tps, cycle_s):
    """The tau a cycle of ``cycle_s`` seconds needs to reach ``goal_tps``: target x T_cycle."""
    _positive("goal_tps", goal_tps)
    _positive("cycle_s", cycle_s)
    return np.asarray(goal_tps, dtype=float) * np.asarray(cycle_s, dtype=float)


def accept_len_from_position_rates(rates: Sequence[float]) -> float:
    """Expected tau of a chain from per-position *conditional* acceptance rates.

    Args:
        rates: p_1..p_k, p_i = P(draft i accepted | drafts 1..i-1 accepted).

    Returns:
        1 + sum_i prod_{j<=i} p_j (the 1 is the bonus token).
    """
    p = np.asarray(rates, dtype=float)
    if p.ndim != 1 or np.any((p < 0) | (p > 1)):
        raise ParameterError("rates", f"need a list of probabilities in [0, 1], got {rates!r}")
    return float(1.0 + np.cumprod(p).sum())


def accept_len_constant_rate(alpha, k: int):
    """Closed form for a constant per-position rate alpha over k drafts: (1 - a^(k+1)) / (1 - a)."""
    a = np.asarray(alpha, dtype=float)
    if np.any((a < 0) | (a > 1)):
        raise ParameterError("alpha", f"must lie in [0, 1], got {alpha!r}")
    if k < 0:
        raise ParameterError("k", f"draft length must be >= 0, got {k}")
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (1 - a ** (k + 1)) / (1 - a)
    return np.where(np.isclose(a, 1.0), k + 1.0, out)


def require_reachable(accept_len: float, k: int, name: str = "accept_len") -> float:
    """``accept_len`` when a chain of ``k`` drafts can give it: the one check of τ against k.

    τ counts the bonus token, so it runs from 1 (every draft rejected) to k + 1 (every draft accepted);
    ``perf`` (plain and ``--concurrency``), ``plan`` and ``predict`` refuse through this one check.

    Raises:
        ParameterError: naming ``name``, when τ lies outside [1, k + 1] (or is not a number).
    """
    if not 1.0 <= accept_len <= k + 1:
        raise ParameterError(name, f"τ {accept_len:g} is not reachable with k = {k} drafts per cycle: it counts the "
                                   f"bonus token, so it lies in [1, k + 1 = {k + 1}]")
    return accept_len


def require_tree(k: int, topk: int, draft_tokens: int | None, name: str = "--draft-tokens") -> int:
    """The tokens a cycle verifies per request, when a drafter of ``k`` steps and branching ``topk`` can verify them:
    the one check of a tree's shape (``perf``, ``plan``, cost-table rows and ``recipe --job load`` refuse through it).

    A chain (``topk`` 1) verifies k + 1 tokens; a tree from k + 1 (one path) to ``topk * k + 1`` (every candidate of
    every step), as SGLang's ``--speculative-num-draft-tokens`` bounds it. ``draft_tokens`` None: k + 1.

    Raises:
        ParameterError: naming ``name``, with the range the shape allows.
    """
    verified = k + 1 if draft_tokens is None else draft_tokens
    if topk == 1 and verified != k + 1:
        raise ParameterError(name, f"a chain (topk 1) of k = {k} drafts verifies k + 1 = {k + 1} tokens per request, "
                                   f"got {verified}")
    if topk > 1 and not k + 1 <= verified <= topk * k + 1:
        raise ParameterError(name, f"a tree of topk {topk} and k = {k} verifies from k + 1 = {k + 1} to topk * k + 1 = "
                                   f"{topk * k + 1} tokens per request, got {verified}")
    return verified


def require_one_setup(cycle_ms: float, baseline_tps: float, where: str = "--cycle-ms") -> None:
    """Refuse a cycle shorter than one plain decoding step: the one check that two numbers are of one setup.

    A cycle holds a verify of the target, which costs at least a plain step, so its break-even τ
    (cycle x plain tok/s) is at least 1; ``perf`` (plain and ``--concurrency``) and ``plan`` refuse through it.

    Raises:
        ParameterError: naming ``where``, with both numbers.
    """
    if cycle_ms / 1000.0 * baseline_tps < 1.0:  # a cycle so short that its tok/s overflow is one too
        raise ParameterError(where, f"a {cycle_ms:g} ms cycle is shorter than one plain decoding step at "
                                    f"{baseline_tps:g} tok/s ({1000.0 / baseline_tps:.3g} ms): a cycle holds a verify "
                                    "of the target, which costs at least a step; are both numbers from one setup?")


def rate_for_accept_len(accept_len: float, k: int) -> float:
    """The constant per-position rate alpha that gives ``accept_len`` with k drafts (bisection).

    Raises:
        ParameterError: ``accept_len`` is not reachable (must lie in [1, k + 1]: :func:`require_reachable`).
    """
    require_reachable(accept_len, k)
    lo, hi = 0.0, 1.0
    for _ in range(80):  # plain floats: the planners call this thousands of times, numpy scalars cost 40x
        mid = (lo + hi) / 2
        near_one = abs(mid - 1.0) <= 1e-8 + 1e-5  # np.isclose(mid, 1.0), as accept_len_constant_rate decides it
        if (k + 1.0 if near_one else (1 - mid ** (k + 1)) / (1 - mid)) < accept_len:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def accept_len_tree(alpha: float, depth: int, top_k: int) -> float:
    """Expected tau of a full top-k tree of given depth, under stated, optimistic assumptions.

    Assumptions: at each depth the target's token is among the drafter's top-k with
    probability ``1 - (1 - alpha)^top_k`` (the k candidates fail independently, each with
    the chain's rate alpha) and acceptance events at different depths are independent. Real
    candidates are correlated, so this is an upper bound on what a tree adds over a chain;
    it costs ``sum_d top_k^d`` verified tokens.
    """
    if top_k < 1 or depth < 0:
        raise ParameterError("tree", f"need top_k >= 1 and depth >= 0, got {top_k}, {depth}")
    hit = 1 - (1 - alpha) ** top_k
    return float(accept_len_constant_rate(hit, depth))


@dataclass(frozen=True)
class Cycle:
    """One speculative cycle decomposed, in seconds.

    Attributes:
        verify_s: the target's verify forward of k + 1 tokens.
        draft_step_s: one drafter step.
        k: draft steps per cycle.
        overhead_s: sampling, bookkeeping, KV-cache moves, launches.
    """

    verify_s: float
    draft_step_s: float
    k: int
    overhead_s: float = 0.0

    @property
    def cycle_s(self) -> float:
        return self.verify_s + self.k * self.draft_step_s + self.overhead_s

    def shares(self) -> dict[str, float]:
        """Fractions of the cycle spent verifying, drafting and in overhead."""
        t = self.cycle_s
        return {"verify": self.verify_s / t, "draft": self.k * self.draft_step_s / t, "overhead": self.overhead_s / t}


def requirement_table(goal_tps: Sequence[float], cycle_s: float, k: int | None = None) -> list[dict]:
    """For each target tok/s: the tau it needs, and (given k) the constant per-step rate that gives it.

    Returns:
        rows with ``goal_tps``, ``required_accept_len``, ``reachable`` and, when k is
        given, ``required_rate`` (None where tau > k + 1).
    """
    rows = []
    for tps in goal_tps:
        tau = float(required_accept_len(tps, cycle_s))
        row = {"goal_tps": float(tps), "required_accept_len": tau}
        if k is not None:
            row["reachable"] = tau <= k + 1
            row["required_rate"] = rate_for_accept_len(max(tau, 1.0), k) if tau <= k + 1 else None
        rows.append(row)
    return rows


@dataclass(frozen=True)
class AcceptanceNeeds:
    """What per-draft acceptance each goal needs on a chain of ``k`` drafts, beside the τ a measured one gives.

    Attributes:
        rates: goal tok/s -> the constant per-draft acceptance that reaches it (None: beyond k + 1 drafts).
        alpha, alpha_k: a measured per-draft acceptance and the k it is read at; tau_at_alpha: the τ it gives there.
    """

    k: int
    rates: dict[float, float | None]
    alpha: float
    alpha_k: int
    tau_at_alpha: float

    def view(self) -> View:
        return View.of([Column("goal tok/s", "{:g}"), Column(f"α needed with k={self.k}", "{:.3f}")],
                       [[g, r] for g, r in self.rates.items()], index="goal tok/s")

    def table(self):
        return self.view().frame()

    def findings(self, tag: str = "") -> dict[str, str]:
        """``acceptance``: the per-draft acceptance each goal needs, and the τ the measured one gives.
        ``tag``: the measured acceptance's evidence tag."""
        t = f" {tag}" if tag else ""
        goals = ", ".join(f"{g:g}" for g in self.rates)
        needs = ", ".join(f"{r:.2f}" if r is not None else "unreachable" for r in self.rates.values())
        return {"acceptance": f"**Per-draft acceptance:** with k = {self.k} the goals ({goals} tok/s) need {needs}; a "
                              f"measured {self.alpha:g}{t} gives τ ≈ {self.tau_at_alpha:.2f} with k = {self.alpha_k} "
                              "[derived]."}


def acceptance_needs(goal_tps: Sequence[float], cycle_ms: float, k: int, alpha: float, alpha_k: int) -> AcceptanceNeeds:
    """The per-draft acceptance each goal needs with ``k`` drafts (:func:`requirement_table`), and the τ that a measured
    acceptance ``alpha`` gives with ``alpha_k`` drafts (:func:`accept_len_constant_rate`)."""
    rows = requirement_table(goal_tps, cycle_ms / 1e3, k=k)
    return AcceptanceNeeds(k, {r["goal_tps"]: r["required_rate"] for r in rows}, alpha, alpha_k,
                           float(accept_len_constant_rate(alpha, alpha_k)))


@dataclass(frozen=True)
class Diagnosis:
    """A measured point's arithmetic: effective tok/s and speedup, break-even τ, the longest cycle that still breaks
    even at this τ, the τ each goal needs (by its tok/s, as text), and the verdict in words."""

    baseline_tps: float
    cycle_ms: float
    accept_len: float
    effective_tps: float
    speedup: float
    break_even_tau: float
    max_cycle_ms_for_break_even: float
    required_accept_len: dict[str, float]
    verdict: str

    @property
    def pays(self) -> bool:
        return self.speedup > 1.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        """What ``eaglelab perf`` prints for a point."""
        return [f"effective tok/s        {self.effective_tps:.1f}  ({self.speedup:.2f}x baseline {self.baseline_tps})",
                f"break-even τ           {self.break_even_tau:.2f}",
                f"max cycle at break-even {self.max_cycle_ms_for_break_even:.1f} ms",
                *(f"{tps} tok/s needs accept len {tau:.2f}" for tps, tau in self.required_accept_len.items()),
                self.verdict]

    def findings(self, tags: Mapping[str, str] | None = None) -> dict[str, str]:
        """Named sentences (markdown): ``pays``, ``break_even``, ``goals``. ``tags``: each input's evidence tag by its
        name (``baseline_tps``, ``cycle_ms``, ``accept_len``: ``[entered]``, ``[default]``...)."""
        t = {name: f" {tag}" for name, tag in (tags or {}).items()}
        goals = ", ".join(f"{g} tok/s needs τ = {v:.2f}" for g, v in self.required_accept_len.items())
        return {
            "pays": f"**Speculation {'pays' if self.pays else 'loses'} here:** τ = {self.accept_len:g}"
                    f"{t.get('accept_len', '')} over a {self.cycle_ms:g} ms{t.get('cycle_ms', '')} cycle gives "
                    f"**{self.effective_tps:.1f} tok/s**, {self.speedup:.2f}× the {self.baseline_tps:g} tok/s"
                    f"{t.get('baseline_tps', '')} of plain decoding [derived].",
            "break_even": f"**Break-even** is τ = **{self.break_even_tau:.2f}** [derived]; at τ = {self.accept_len:g} "
                          f"the cycle would have to shrink to {self.max_cycle_ms_for_break_even:.1f} ms [derived].",
            "goals": f"**Goals:** {goals} [derived]." if goals else "",
        }


def diagnose(baseline_tps: float, cycle_ms: float, accept_len: float,
             goal_tps: Sequence[float] = (), strict: bool = True, k: int | None = None) -> Diagnosis:
    """The seed's whole hand calculation as one call (what ``eaglelab perf`` prints).

    Args:
        baseline_tps: plain decoding tok/s on the same hardware.
        cycle_ms: measured speculative cycle (draft + verify + overhead), milliseconds.
        accept_len: measured tau (bonus token included).
        goal_tps: throughputs to ask "what tau would that need?" for.
        strict: refuse a cycle shorter than one plain decoding step (break-even τ below 1: a cycle
            holds a verify, which costs at least a step, so the numbers are not of one setup,
            :func:`require_one_setup`); the explorer's sliders pass False and get the note in the verdict instead.
        k: drafts per cycle, when known: a τ no chain of k drafts gives is refused (:func:`require_reachable`).

    Raises:
        ParameterError: a result that is not a finite number (``--cycle-ms 1e-308``), a τ above k + 1, or,
            when ``strict``, a cycle shorter than a plain step.
    """
    if k is not None:
        require_reachable(accept_len, k, "--accept-len")
    cycle_s = cycle_ms / 1000.0
    with np.errstate(all="ignore"):  # an overflow is refused below in one line, not warned about
        eff = float(effective_tps(accept_len, cycle_s))
        be = float(break_even_tau(cycle_s, baseline_tps))
        required = {str(_fmt(t)): float(required_accept_len(t, cycle_s)) for t in goal_tps}
        numbers = [eff, be, eff / baseline_tps, 1000.0 * accept_len / baseline_tps, *required.values()]
    if not all(np.isfinite(numbers)):
        raise ParameterError("perf", f"{baseline_tps:g} tok/s, a {cycle_ms:g} ms cycle and τ {accept_len:g} give "
                                     "throughputs beyond a finite number: check the units (ms, tok/s)")
    step_ms = 1000.0 / baseline_tps
    short = be < 1.0
    if strict:
        require_one_setup(cycle_ms, baseline_tps)
    verdict = ("speculation pays" if eff > baseline_tps else "speculation loses") + \
        f": {eff:.1f} vs {baseline_tps:.1f} tok/s; break-even at accept length {be:.2f}"
    if short:
        verdict += f" (a {cycle_ms:g} ms cycle is shorter than a plain step of {step_ms:.3g} ms: not one setup's numbers)"
    return Diagnosis(baseline_tps, cycle_ms, accept_len, eff, eff / baseline_tps, be, 1000.0 * accept_len / baseline_tps,
                     required, verdict)


def _fmt(x: float):
    return int(x) if float(x).is_integer() else x


def tokens_per_s_grid(accept_lens: np.ndarray, cycle_ms: np.ndarray) -> np.ndarray:
    """tok/s over a grid: rows are cycle times (ms), columns acceptance lengths. Shape [C, A]."""
    return np.asarray(accept_lens)[None, :] / (np.asarray(cycle_ms)[:, None] / 1000.0)
