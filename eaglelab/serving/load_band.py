"""The load answer's band: the speedup per concurrency and "pays up to" over the inputs nobody gave.

A published sweep or a team states some of what moves the answer and not the rest. Three unstated inputs move the
crossover by more than a step on the published sweeps (issue #55): the mean context per request (its KV cache is
read every step; the tool assumes :data:`DEFAULT_CONTEXT`), τ at the loads where it was not measured (τ moves with
load in published sweeps by about :data:`TAU_SPREAD`), and τ itself when only tok/s or a speedup were measured
(:func:`unstated_taus`: the τ of a chain of k drafts at the per-draft acceptance of published EAGLE-3 chains,
:data:`ALPHA_RANGE`). The band is the model's answer at the ends of their ranges, every corner; what was given
stays as given. Only numpy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from eaglelab.serving.load import LoadModel
from eaglelab.serving.perf import accept_len_constant_rate

#: Mean context tokens per request assumed when none is given, and the range the band spans then.
DEFAULT_CONTEXT = 2048
CONTEXT_RANGE = (512, 8192)
#: How far τ may sit from the measured one at a load where it was not measured (the published sweeps' spread,
#: and the ± the fixtures' own sensitivity column uses).
TAU_SPREAD = 0.3
#: The per-draft acceptance of a chain when τ was not given (tok/s or a speedup measured without it): the published
#: EAGLE-3 chains at k = 7 run from τ 2.77 (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B on MT-bench, α about 0.6) to 4.81
#: (nebius/EAGLE3-Llama-3.3-70B-Instruct, α about 0.83), as nebius's model card measures both; the middle is assumed.
ALPHA_RANGE = (0.55, 0.85)
ALPHA_ASSUMED = 0.7


def unstated_taus(k: int, floor: float = 1.0) -> tuple[float, float, float]:
    """τ's low end, assumed value and high end for a chain of ``k`` drafts when τ was not given.

    Args:
        k: drafts per cycle.
        floor: the measured speedup, when one was: a cycle costs at least a plain step, so τ is at least the speedup.
    """
    low, mid, high = (float(accept_len_constant_rate(a, k)) for a in (ALPHA_RANGE[0], ALPHA_ASSUMED, ALPHA_RANGE[1]))
    return max(low, floor), max(mid, floor), max(high, floor)


@dataclass(frozen=True)
class LoadBand:
    """The speedup per concurrency and the crossover at every corner of the unstated inputs' ranges.

    Attributes:
        unstated: each input the band spans, in words (its range and why).
        low, high: concurrency -> the lowest / highest speedup over the corners (0.0 where the KV does not fit:
            "KV full" in the table).
        pays: the lowest and highest "pays up to" over the corners (None: it does not pay at the measured load).
    """

    unstated: tuple[str, ...]
    low: dict[int, float]
    high: dict[int, float]
    pays: tuple[int | None, int | None]

    def cell(self, concurrency: int) -> str:
        """The band at one concurrency, as the table shows it: ``0.92-1.31x``."""
        low = "KV full" if self.low[concurrency] == 0 else f"{self.low[concurrency]:.2f}"
        return f"{low}-{self.high[concurrency]:.2f}x" if self.high[concurrency] else "KV full"

    def undecided(self) -> list[int]:
        """The concurrencies whose band straddles 1: one point cannot say whether speculation pays there."""
        return [b for b in self.low if self.low[b] < 1.0 <= self.high[b]]

    def pays_words(self) -> str:
        """``16-64``, ``64``, ``nowhere-8``: the crossover's range."""
        lo, hi = (str(p) if p is not None else "nowhere" for p in self.pays)
        return lo if lo == hi else f"{lo}-{hi}"

    def lines(self) -> list[str]:
        """The band's sentences: the crossover's range over what was not given, and where one point cannot decide."""
        lo, hi = self.pays
        reach = ("it pays at no concurrency" if hi is None else
                 f"it pays up to {hi} concurrent requests at best and nowhere at worst" if lo is None else
                 f"it pays up to {self.pays_words()} concurrent requests")
        out = [f"over what was not given ({'; '.join(self.unstated)}) {reach} (the table's band column)"]
        undecided = self.undecided()
        if undecided:
            where = ", ".join(f"{b} ({self.cell(b)})" for b in undecided[:6])
            out.append(f"one point cannot decide at {where}: the band straddles 1 there; a cost table at those loads "
                       "(eaglelab recipe --job load), or a log with their τ and the context served, would")
        return out

    def to_json(self) -> dict:
        return {"unstated": list(self.unstated), "low": self.low, "high": self.high, "pays_up_to": list(self.pays)}


def band_contexts(context: int, given: bool) -> list[int]:
    """The contexts the band is evaluated at: the one given, else the range's ends beside the assumed one."""
    return [context] if given else [CONTEXT_RANGE[0], context, CONTEXT_RANGE[1]]


def load_band(models: Mapping[tuple[int, float], LoadModel], assumed: int, concurrencies: list[int], k: int, at: int,
              taus_given: bool) -> LoadBand | None:
    """The model's answer at every corner of the unstated inputs' ranges, or None when everything that moves it
    was given.

    Args:
        models: (context, τ at ``at``) -> the model calibrated there: the contexts of :func:`band_contexts` (one when
            it was given), τ as measured or the ends and middle of :func:`unstated_taus` when it was not.
        assumed: the context assumed when none was given (one of ``models``' contexts).
        concurrencies: the loads answered for.
        k: drafts per cycle.
        at: the concurrency τ (and the point) was measured at: τ stays as measured there.
        taus_given: τ was given per concurrency (or read from logs at each).
    """
    contexts, taus = sorted({c for c, _ in models}), sorted({t for _, t in models})
    spreads = [0.0] if taus_given or set(concurrencies) <= {at} else [-TAU_SPREAD, 0.0, TAU_SPREAD]
    if len(models) == 1 and len(spreads) == 1:
        return None
    unstated = []
    if len(contexts) > 1:
        unstated.append(f"context {CONTEXT_RANGE[0]}-{CONTEXT_RANGE[1]} tokens, {assumed} assumed: give --context")
    if len(taus) > 1:
        unstated.append(f"τ {taus[0]:.2f}-{taus[-1]:.2f} (a per-draft acceptance of {ALPHA_RANGE[0]}-{ALPHA_RANGE[1]} over "
                        f"k = {k} drafts, {ALPHA_ASSUMED} assumed), at every load: give --accept-len")
    if len(spreads) > 1:
        unstated.append(f"τ ± {TAU_SPREAD} at the loads it was not {'given' if len(taus) > 1 else 'measured'} at: give "
                        "--accept-lens or a log")
    low = {b: float("inf") for b in concurrencies}
    high = {b: 0.0 for b in concurrencies}
    pays: list[int | None] = []
    for (_, tau), m in models.items():
        for spread in spreads:
            def tau_at(b, spread=spread, tau=tau):
                return tau if b == at else min(max(tau + spread, 1.0), k + 1.0)
            for b in concurrencies:
                s = float(m.speedup(b, k, tau_at(b))) if bool(m.kv_fits(b, k)) else 0.0
                low[b], high[b] = min(low[b], s), max(high[b], s)
            pays.append(m.pays_up_to(k, tau_at, start=at))
    return LoadBand(tuple(unstated), low, high, pays_range(pays))


def pays_range(pays: list[int | None]) -> tuple[int | None, int | None]:
    """The lowest and highest of several "pays up to" (None, not paying at all, the lowest)."""
    ordered = sorted(pays, key=lambda p: -1 if p is None else p)
    return ordered[0], ordered[-1]
