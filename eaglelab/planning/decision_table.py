"""The decision table: for the user's serving scenario, what each option needs and what it gives.

Options: keep the drafter served now, plug the old drafter in, warm-start it on N new samples, or
train from scratch on N. For each: projected τ and tok/s with a band, the samples still to
generate and how long that takes at the user's generation speed; then a recommendation that
follows from the table, including "none reaches the goal: the cycle must shrink to X ms".

τ in the user's scenario comes from the user's own evidence (what they entered, their logs, the
workbook run on their checkpoints); how τ grows with data is a law anchored at their point
(:mod:`eaglelab.planning.scaling`) whose exponent, unless measured, is an assumed range.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from eaglelab.decisions import Option
from eaglelab.errors import ParameterError, is_whole, require_whole
from eaglelab.planning import provenance as pv
from eaglelab.planning.scaling import LawBand, assumed_band, sample_count
from eaglelab.serving import perf
from eaglelab.serving.load import FOUNDING_DEPLOYMENT, kimi_k25_on_pcie
from eaglelab.serving.load_band import CONTEXT_RANGE, band_contexts, pays_range
from eaglelab.serving.load_checks import calibration_of
from eaglelab.serving.load_fit import Point, calibrate
from eaglelab.settings import DEFAULT_K

#: Default range of the data exponent b (the per-position miss rate falls as N^-b) when the user
#: has not measured it: an assumption, wide on purpose; a warm-start sweep on their data narrows it.
DEFAULT_EXPONENTS = (0.1, 0.3)
#: Default range of the fraction of the old drafter's training samples a warm start carries over
#: to the new target, when its plug-in τ has not been measured: an assumption.
DEFAULT_TRANSFER = (0.1, 0.5)
#: Largest data exponent accepted: a miss rate ∝ N^-b with b above this would vanish after a handful of samples.
MAX_EXPONENT = 5.0
#: Smallest fitted data exponent a projection takes: below it τ barely moved with data in the sweep, and the law
#: extrapolated asks for astronomically many samples (measured laws give 0.1-0.3; b 0.001 gave 6.72e+150B samples).
MIN_FITTED_EXPONENT = 0.05
#: Most samples a scenario counts (a thousand trillion: beyond any dataset, and the law stays finite below it).
MAX_SAMPLES = 1e15
#: Longest time a plan prints as a number (a thousand years): past it, the time is said to be out of reach.
DURATION_LIMIT_H = 1000 * 24 * 365
#: Tokens per generated training sample when the user gives none: an assumption.
DEFAULT_TOKENS_PER_SAMPLE = 512
#: The founding case: Kimi-K2.5 on 8 PCIe GPUs served at 82 tok/s plain and τ 2.0 over a 30 ms cycle
#: by a drafter trained on 37k samples; 150 tok/s wanted; data generated at 82 tok/s; a community
#: drafter for the previous target trained on 1.4M samples.
FOUNDING_CASE = {"baseline_tps": 82.0, "cycle_ms": 30.0, "accept_len": 2.0, "goal_tps": 150.0, "samples": 37_000,
                 "gen_tps": 82.0, "k": 3, "old_samples": 1_400_000, "tokens_per_sample": DEFAULT_TOKENS_PER_SAMPLE,
                 "exponents": DEFAULT_EXPONENTS, "transfer_fraction": DEFAULT_TRANSFER, "at_concurrency": 1}
#: Fields whose defaults are assumptions of the model rather than the founding case's numbers.
ASSUMPTIONS = ("tokens_per_sample", "exponents", "transfer_fraction")
#: Option kinds, cheapest first: the order that breaks ties.
KINDS = tuple(Option)


@dataclass(frozen=True)
class Scenario:
    """The user's serving scenario and evidence; ``sources`` labels each field (see :mod:`provenance`).

    Attributes:
        baseline_tps: plain decoding tok/s.
        cycle_ms: one speculative cycle (draft + verify + overhead), ms.
        accept_len: τ of the drafter served now (bonus included).
        goal_tps: the throughput the team wants.
        samples: samples of the new target's data the drafter served now was trained on (from
            scratch); they count towards every budget.
        gen_tps: tok/s at which the team can generate new training data (all streams together).
        tokens_per_sample: tokens per generated sample.
        k: draft tokens per cycle.
        plugin_tau: τ of the old drafter as is on the new target (notebook 03), if measured.
        old_samples: samples the old drafter was trained on (for the assumed transfer).
        exponents: range of the data exponent b.
        transfer_fraction: range of the fraction of ``old_samples`` a warm start carries over.
        at_concurrency: the requests in flight when ``baseline_tps`` and ``cycle_ms`` were measured.
        sources: field name -> source key.
    """

    baseline_tps: float
    cycle_ms: float
    accept_len: float
    goal_tps: float
    samples: float
    gen_tps: float
    tokens_per_sample: float = DEFAULT_TOKENS_PER_SAMPLE
    k: int = DEFAULT_K
    plugin_tau: float | None = None
    old_samples: float | None = None
    exponents: tuple[float, float] = DEFAULT_EXPONENTS
    transfer_fraction: tuple[float, float] = DEFAULT_TRANSFER
    at_concurrency: int = 1
    sources: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        for name in ("baseline_tps", "cycle_ms", "goal_tps", "samples", "gen_tps", "tokens_per_sample"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ParameterError(name, f"must be a positive number, got {v!r}")
        require_whole("at_concurrency", self.at_concurrency)
        if not is_whole(self.k):
            raise ParameterError("k", f"draft tokens per cycle must be a whole number >= 1, got {self.k!r}")
        perf.require_one_setup(self.cycle_ms, self.baseline_tps, "cycle_ms")
        perf.require_reachable(self.accept_len, self.k, "accept_len")
        if self.accept_len in (1.0, self.k + 1):  # the law is anchored inside: at either end its miss rate's log is infinite
            raise ParameterError("accept_len", f"τ {self.accept_len:g} must lie strictly between 1 and k + 1 = {self.k + 1}")
        if self.plugin_tau is not None:
            perf.require_reachable(self.plugin_tau, self.k, "plugin_tau")
        lo, hi = sorted(self.exponents)
        if not (math.isfinite(hi) and 0 < lo and hi <= MAX_EXPONENT):
            raise ParameterError("exponents", f"the data exponent b must lie in (0, {MAX_EXPONENT:g}] (measured "
                                              f"laws give 0.1-0.3), got {self.exponents}")
        lo, hi = sorted(self.transfer_fraction)
        if not (0 <= lo and hi <= 1):
            raise ParameterError("transfer_fraction", f"a share of the old samples lies in [0, 1], got "
                                                      f"{self.transfer_fraction}")
        for name in ("samples", "old_samples"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and 0 < v <= MAX_SAMPLES):
                raise ParameterError(name, f"must be a number of samples in (0, {MAX_SAMPLES:.0e}], got {v!r}")

    @classmethod
    def founding_case(cls, **entered) -> Scenario:
        """The founding case (:data:`FOUNDING_CASE`) with the fields in ``entered`` replaced.

        Fields left out are labelled ``default`` (assumptions ``assumed``); every field given is
        ``entered``, even when it equals the default (the command line: the user typed it).
        """
        sources = {f: _default_source(f) for f in FOUNDING_CASE} | {name: pv.ENTERED for name in entered}
        return cls(**{**FOUNDING_CASE, **entered}, sources=sources)

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, Any]) -> Scenario:
        """A scenario from a notebook's parameters (notebook 01 passes ``globals()``): each field whose name in
        capitals is one (``BASELINE_TPS``). A field equal to the founding case's is labelled ``default`` (or
        ``assumed``), any other ``entered``."""
        values = {f.name: parameters[f.name.upper()] for f in fields(cls)
                  if f.name != "sources" and f.name.upper() in parameters}
        s = cls.founding_case(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})
        same = {n: _default_source(n) for n, v in values.items() if n in FOUNDING_CASE and _same(v, FOUNDING_CASE[n])}
        return replace(s, sources=s.sources | same)

    def with_logged_tau(self, tau: float) -> Scenario:
        """τ from the user's serving logs, unless the user entered one (an entered τ wins over a default)."""
        if self.source("accept_len") != pv.DEFAULT:
            return self
        return replace(self, accept_len=float(tau), sources=self.sources | {"accept_len": pv.LOGS})

    def source(self, name: str) -> str:
        return self.sources.get(name, pv.ENTERED)

    def tag(self, name: str) -> str:
        return pv.LABELS[self.source(name)][0]

    @property
    def break_even_tau(self) -> float:
        return float(perf.break_even_tau(self.cycle_ms / 1e3, self.baseline_tps))

    @property
    def goal_tau(self) -> float:
        return float(perf.required_accept_len(self.goal_tps, self.cycle_ms / 1e3))

    def tps(self, tau: float) -> float:
        return tau / (self.cycle_ms / 1e3)

    def generation_hours(self, samples: float) -> float:
        return samples * self.tokens_per_sample / self.gen_tps / 3600.0


def _default_source(name: str) -> str:
    return pv.ASSUMED if name in ASSUMPTIONS else pv.DEFAULT


def _same(a, b) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def default_budgets(samples: float) -> list[int]:
    """Total-sample budgets to tabulate: the 1-2-5 values above ``samples`` up to 40x it."""
    out, decade = [], 10 ** math.floor(math.log10(samples))
    while len(out) < 8:
        for m in (1, 2, 5):
            v = m * decade
            if samples < v <= 40 * samples:
                out.append(int(v))
        decade *= 10
        if decade > 40 * samples:
            break
    return out


@dataclass(frozen=True)
class Row:
    """One option of the table.

    Attributes:
        option: what to do, in words.
        kind: one of :data:`KINDS`.
        total_samples: new-target samples the drafter is trained on (None: not trained on new data).
        to_generate: samples still to generate.
        generation_h: hours of generation for them.
        tau, tau_lo, tau_hi: projected τ and its band.
        tps, tps_lo, tps_hi: projected tok/s and its band.
        evidence: where τ comes from, in words with source tags.
        pays_up_to: from the concurrency the scenario was measured at, the largest (then powers of two up
            to 1024) up to which the option's central τ pays, per the load model (None: not even there;
            see :attr:`Plan.load`).
        pays_range: the lowest and highest ``pays_up_to`` over the option's τ band and, where no context was
            given, the contexts of :func:`eaglelab.serving.load_band.band_contexts` (the model calibrated again at
            each): what "pays up to" is when the inputs nobody gave span their ranges.
    """

    option: str
    kind: str
    total_samples: float | None
    to_generate: float
    generation_h: float
    tau: float
    tau_lo: float
    tau_hi: float
    tps: float
    tps_lo: float
    tps_hi: float
    evidence: str
    pays_up_to: int | None = None
    pays_range: tuple[int | None, int | None] | None = None

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Need:
    """The new-target samples a start needs to reach a τ (central, low, high) and the hours to generate them."""

    start: str
    goal: str
    tau: float
    samples: tuple[float, float, float]
    generation_h: tuple[float, float, float]

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Plan:
    """The decision table, what each start needs, and the recommendation that follows.

    Attributes:
        scenario: the inputs.
        rows: one per option and budget.
        needs: samples each start needs for break-even and for the goal (the throughput wanted).
        action: the recommended option (a row's ``option``), or ``"shrink the cycle"``.
        text: the recommendation in words, numbers formatted in.
        cycle_needed_ms: the cycle at which the best option reaches the goal.
        lever: what shrinks the cycle (from a verify cost model), if one was given.
        bands: start -> what its τ band is (``assumed range`` or ``bootstrap 90%``).
        load: what the rows' ``pays_up_to`` come from: the load model and where its roofline is from.
    """

    scenario: Scenario
    rows: list[Row]
    needs: list[Need]
    action: str
    text: str
    cycle_needed_ms: float
    lever: str | None = None
    bands: dict[str, str] = field(default_factory=dict)
    load: dict | None = None

    def to_json(self) -> dict:
        s = asdict(self.scenario)
        return {"scenario": {k: v for k, v in s.items() if k != "sources"}, "sources": self.scenario.sources,
                "break_even_tau": self.scenario.break_even_tau, "goal_tau": self.scenario.goal_tau,
                "max_tau": self.scenario.k + 1, "rows": [r.to_json() for r in self.rows],
                "needs": [n.to_json() for n in self.needs], "action": self.action, "text": self.text,
                "cycle_needed_ms": self.cycle_needed_ms, "lever": self.lever, "bands": self.bands, "load": self.load}


def scratch_band(s: Scenario) -> LawBand:
    """Scratch on the new target's data: the law through the served drafter's point (samples, τ)."""
    return assumed_band(s.samples, s.accept_len, s.k, s.exponents)


def warm_band(s: Scenario, scratch: LawBand) -> tuple[LawBand | None, str]:
    """The warm start: the scratch law plus the old drafter's effective data transferred.

    From the measured plug-in τ when there is one (the old drafter as is sits at the point where
    scratch reaches that τ), else from an assumed fraction of the old drafter's training samples.
    """
    if s.plugin_tau is not None:
        def moved(law):
            return replace(law, transfer=law.samples_for(s.plugin_tau) if s.plugin_tau > 1 else 0.0)

        return (LawBand(moved(scratch.central), [moved(m) for m in scratch.members], scratch.kind, scratch.quantiles),
                f"plug-in τ {s.plugin_tau:.2f} [{s.tag('plugin_tau')}]")
    if s.old_samples is not None:
        lo, hi = sorted(s.transfer_fraction)
        band = assumed_band(s.samples, s.accept_len, s.k, s.exponents, (lo * s.old_samples, hi * s.old_samples))
        return band, (f"{100 * lo:.0f}-{100 * hi:.0f}% of the old drafter's {sample_count(s.old_samples)} samples carried "
                      f"over [{s.tag('transfer_fraction')}]")
    return None, "no plug-in τ and no sample count of the old drafter: give one to project the warm start"


def plan(s: Scenario, budgets: Sequence[float] | None = None, lever: str | None = None, load=None,
         load_source: str | None = None, name_lever: bool = True, context_given: bool = False) -> Plan:
    """Build the decision table for scenario ``s``.

    Args:
        s: the scenario and the evidence.
        budgets: total new-target samples per trained option (default :func:`default_budgets`).
        lever: what would shrink the cycle (quoted when no option reaches the goal); None: the largest part of the
            calibrated load model's cycle at the scenario's concurrency names it, unless ``name_lever`` is False.
        load: an uncalibrated :class:`eaglelab.serving.load.LoadModel` of the user's target and machine
            (default: the founding case's Kimi-K2.5 on 8 PCIe GPUs, an assumption), calibrated here at the
            scenario's point; it says up to which concurrency each option pays.
        load_source: what ``load`` is, in words, for the table.
        context_given: the context was stated (else "pays up to" spans the band's contexts as well).
    """
    budgets = sorted(float(b) for b in (budgets or default_budgets(s.samples)))
    if not budgets or budgets[0] <= 0 or budgets[-1] > MAX_SAMPLES:
        raise ParameterError("budgets", f"need sample budgets in (0, {MAX_SAMPLES:.0e}], got {budgets}")
    scratch = scratch_band(s)
    warm, warm_from = warm_band(s, scratch)
    law_from = (f"{_whose(s, 'accept_len', 'samples')} τ {s.accept_len:.2f} at {sample_count(s.samples)} samples "
                f"[{s.tag('accept_len')}], "
                f"exponent {s.exponents[0]:g}-{s.exponents[1]:g} [{s.tag('exponents')}]")

    def row(option, kind, total, tau3, evidence) -> Row:
        gen = max((total or 0) - s.samples, 0.0) if total is not None else 0.0
        c, lo, hi = tau3
        return Row(option, kind, total, gen, s.generation_hours(gen), c, lo, hi, s.tps(c), s.tps(lo), s.tps(hi), evidence)

    rows = [row("serve as now", "serve as now", None, (s.accept_len,) * 3, f"[{s.tag('accept_len')}]")]
    if s.plugin_tau is not None:
        rows.append(row("plug in the old drafter", "plug in", None, (s.plugin_tau,) * 3, f"[{s.tag('plugin_tau')}]"))
    if warm is not None:  # the warm start on the data the team already has: nothing to generate
        # the samples the served drafter was trained on, labelled by whose number that is (entered, default...)
        rows.append(row(f"warm start, {sample_count(s.samples)} samples ({s.tag('samples')})", "warm start", s.samples,
                        warm.tau(s.samples), f"{law_from}; {warm_from}"))
    for n in budgets:
        if warm is not None:
            rows.append(row(f"warm start, {sample_count(n)} samples", "warm start", n, warm.tau(n), f"{law_from}; {warm_from}"))
        rows.append(row(f"from scratch, {sample_count(n)} samples", "from scratch", n, scratch.tau(n), law_from))

    needs = []
    for start, band in (("warm start", warm), ("from scratch", scratch)):
        if band is None:
            continue
        for goal, tau in (("break-even", s.break_even_tau), ("goal", s.goal_tau)):
            got = band.samples_for(tau)
            to_gen = tuple(max(v - s.samples, 0.0) for v in got)
            needs.append(Need(start, goal, tau, got, tuple(s.generation_hours(v) for v in to_gen)))
    model, source = _load_model(s, load, load_source)
    if lever is None and name_lever:
        lever = model.parts(s.at_concurrency, s.k)[0]["lever"]
    action, text, cycle_needed = _decide(s, rows, lever)
    bands = {"scratch": scratch.kind, **({"warm start": warm.kind} if warm is not None else {})}
    corners = [model] if context_given else [model, *_other_contexts(s, load, load_source, model.context)]
    rows = [replace(r, pays_up_to=model.pays_up_to(s.k, r.tau, start=s.at_concurrency),
                    pays_range=pays_range([m.pays_up_to(s.k, t, start=s.at_concurrency) for m in corners
                                            for t in (r.tau_lo, r.tau, r.tau_hi)])) for r in rows]
    chosen = next((r for r in rows if r.option == action), None)
    text += _load_words(chosen, s.at_concurrency, context_given) if chosen is not None else ""
    return Plan(s, rows, needs, action, text, cycle_needed, lever, bands,
                {"source": source, "at_concurrency": s.at_concurrency, "model": model.to_json()})


def _load_words(r: Row, at: int, context_given: bool) -> str:
    """The decision's load sentence: up to which concurrency the chosen option pays, and its range over what was not
    given (the option's τ band, and the context where none was), as the table's last column says it."""
    def words(c):
        return "nowhere" if c is None else "every load up to 1024" if c >= 1024 else str(c)

    over = "its τ band" + ("" if context_given else f" and the contexts not given, {CONTEXT_RANGE[0]}-{CONTEXT_RANGE[1]} tokens")
    spread = "" if r.pays_range is None or r.pays_range == (r.pays_up_to, r.pays_up_to) else \
        f" ({words(r.pays_range[0])} to {words(r.pays_range[1])} over {over})"
    if r.pays_up_to is None:
        return f" Under load, per the load model measured at {at} in flight, it does not pay there{spread}."
    return f" Under load it pays up to {words(r.pays_up_to)} requests in flight{spread}: eaglelab perf --concurrency " \
           "gives the table."


def _other_contexts(s: Scenario, load, source: str | None, context: int) -> list:
    """The load model calibrated at the scenario's point at the band's other contexts (those it can reproduce)."""
    base = load if load is not None else kimi_k25_on_pcie()
    out = []
    for c in band_contexts(context, False):
        if c != context:
            try:
                out.append(_load_model(s, replace(base, context=c), source)[0])
            except ParameterError:  # the point cannot be one of this context's: that corner is not a setup
                continue
    return out


def _load_model(s: Scenario, load, source: str | None):
    """The load model calibrated at the scenario's point: plain tok/s and the cycle at ``s.at_concurrency``.

    Raises:
        ParameterError: the model cannot reproduce that point (:meth:`~eaglelab.serving.load_checks.Calibration.require`).
    """
    if load is None:
        load, source = kimi_k25_on_pcie(), f"the serving-cost model of {FOUNDING_DEPLOYMENT} [assumed]"
    point = Point(s.at_concurrency, decode_s=1.0 / s.baseline_tps, cycle_s=s.cycle_ms / 1e3, k=s.k)
    model = calibrate(load, [point])
    calibration = calibration_of(load, model, [point])
    calibration.require(source or "the load model of your target")
    note = calibration.note()
    return model, (f"{source or 'your target'}, calibrated at {_whose(s, 'baseline_tps', 'cycle_ms')} point"
                   + (f" ({note})" if note else ""))


def _whose(s: Scenario, *names: str) -> str:
    """Whose numbers ``names`` are, for a label: ``your``, ``the founding case's`` (all left at their
    defaults), or ``the scenario's`` (some of each): a default is never called the user's."""
    defaults = [s.source(n) == pv.DEFAULT for n in names]
    return "the founding case's" if all(defaults) else "your" if not any(defaults) else "the scenario's"


def _decide(s: Scenario, rows: list[Row], lever: str | None) -> tuple[str, str, float]:
    """The cheapest option (fewest samples to generate, then :data:`KINDS` order) that reaches the
    goal; else the cheapest that pays, with the cycle the goal needs."""
    def cost(r: Row):
        return (r.to_generate, KINDS.index(r.kind))

    reach = sorted((r for r in rows if r.tau >= s.goal_tau), key=cost)
    best = max(rows, key=lambda r: (r.tau, -cost(r)[0]))
    cycle_needed = 1e3 * best.tau / s.goal_tps
    if reach:
        r = reach[0]
        return r.option, (f"{r.option.capitalize()}: {_tau_text(r)} reaches the "
                          f"goal's τ {s.goal_tau:.2f}, {r.tps:.0f} tok/s; {_gen_text(s, r)}."), cycle_needed
    lines = []
    if s.goal_tau > s.k + 1:
        lines.append(f"No drafter reaches {s.goal_tps:g} tok/s at a {s.cycle_ms:g} ms cycle: it needs τ {s.goal_tau:.2f}, "
                     f"above the {s.k + 1} that {s.k} drafts give with every draft accepted.")
    else:
        lines.append(f"No option in the table reaches {s.goal_tps:g} tok/s (τ {s.goal_tau:.2f}); the best, "
                     f"{best.option}, projects τ {best.tau:.2f} ({best.tps:.0f} tok/s).")
    lines.append(f"The goal needs the cycle to shrink from {s.cycle_ms:g} ms to {cycle_needed:.1f} ms at τ {best.tau:.2f}"
                 + (f" (or to {1e3 * (s.k + 1) / s.goal_tps:.1f} ms if every draft were accepted, τ {s.k + 1})"
                    if s.goal_tau > s.k + 1 else "")
                 + (f"; the load model's largest lever at this load: {lever} [assumed]." if lever else "."))
    pays = sorted((r for r in rows if r.tau >= s.break_even_tau), key=cost)
    if pays:
        r = pays[0]
        lines.append(f"To pay at all (τ ≥ {s.break_even_tau:.2f}, break-even at {s.baseline_tps:g} tok/s): {r.option}, "
                     f"{_tau_text(r)}, {r.tps:.0f} tok/s; {_gen_text(s, r)}"
                     + (" (the band's low end is below break-even: measure the plug-in τ and a small sweep on "
                        "your data before committing)." if r.tau_lo < s.break_even_tau else "."))
        return r.option, " ".join(lines), cycle_needed
    lines.append(f"No option pays within the budgets considered (break-even τ {s.break_even_tau:.2f}): serve without "
                 f"speculation until the cycle is at most {1e3 * best.tau / s.baseline_tps:.1f} ms.")
    return "shrink the cycle", " ".join(lines), cycle_needed


def _tau_text(r: Row) -> str:
    """'τ 2.40' for a τ the user has (served now, plug-in), 'projected τ 2.51 (2.22-3.02)' for a trained option."""
    if r.kind in ("serve as now", "plug in"):
        return f"τ {r.tau:.2f}"
    return f"projected τ {r.tau:.2f} ({r.tau_lo:.2f}-{r.tau_hi:.2f})"


def _gen_text(s: Scenario, r: Row) -> str:
    if r.to_generate <= 0:
        return "no new data to generate"
    return f"{sample_count(r.to_generate)} new samples to generate, {_duration(r.generation_h)} at {s.gen_tps:g} tok/s"


def _duration(hours: float) -> str:
    """'45 min', '3.2 h', '12.5 days', '7.1 years'; past :data:`DURATION_LIMIT_H` 'never (> 1,000 years)'."""
    if not math.isfinite(hours) or hours > DURATION_LIMIT_H:
        return f"never (> {DURATION_LIMIT_H / 24 / 365:,.0f} years)"
    if hours < 1:
        return f"{60 * hours:.0f} min"
    if hours < 48:
        return f"{hours:.1f} h"
    if hours < 24 * 365:
        return f"{hours / 24:.1f} days"
    return f"{hours / 24 / 365:.1f} years"
