"""Predict the old drafter's τ on a new target before running it there, and check the predictors held out.

Every predictor keeps the drafter's chain rates on the old target, ``c_i`` (the share of cycles
whose first i + 1 drafts are accepted), and discounts draft i by a per-token survival ``s`` read
from how far the targets moved: ``τ' = 1 + Σ_i c_i s^(i + 1)`` (draft i needs i + 1 tokens on which
the targets still agree). The survival is ``x^γ`` of a similarity x (top-1 agreement, 1 - TV,
cosine) or ``exp(-γ x)`` of a distance (KL); γ = 1 is parameter-free, otherwise γ is fitted.
Two more: ``unchanged`` (τ' = τ on A, the plug-in assumption) and ``conditional`` (the
per-token rule of :mod:`eaglelab.drift.measures`, which needs the drafter's run on A).

No torch here: ``eaglelab predict`` runs from engine files alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from eaglelab.drift.records import DrafterOn, PointId, SweepRecord
from eaglelab.errors import LogFormatError, ParameterError
from eaglelab.inputs import field_number, printable, read_json_object
from eaglelab.serving.logs import parse_log
from eaglelab.serving.perf import rate_for_accept_len


@dataclass(frozen=True)
class Predictor:
    """One way to predict the plug-in τ.

    Attributes:
        name: short name (table rows, ``--method``).
        measure: the measure it reads (``agreement``, ``tv``, ``kl``, ``cos_last``...), or
            ``conditional`` / ``none``.
        kind: ``power`` (survival x^γ of a similarity; a TV is read as 1 - TV) or ``exp`` (exp(-γ x)).
        fitted: γ is fitted on the training families (else 1).
        engine: computable from serving-engine logprobs alone (no hidden states, no drafter run on B').
    """

    name: str
    measure: str
    kind: str = "power"
    fitted: bool = False
    engine: bool = False

    def survival(self, measures: dict[str, float], gamma: float = 1.0) -> float:
        x = measures[self.measure]
        if self.kind == "exp":
            return float(np.exp(-gamma * x))
        x = 1.0 - x if self.measure.startswith("tv") else x
        return float(np.clip(x, 0.0, 1.0) ** gamma)

    def predict(self, chain_a: Sequence[float], measures: dict[str, float], gamma: float = 1.0,
                conditional_tau: float | None = None) -> float:
        """τ on the new target from the drafter's chain rates on the old one and the measures."""
        if self.measure == "none":
            return 1.0 + float(sum(chain_a))
        if self.measure == "conditional":
            return float(conditional_tau)
        s = self.survival(measures, gamma)
        return 1.0 + float(sum(c * s ** (i + 1) for i, c in enumerate(chain_a)))


PREDICTORS = (
    Predictor("unchanged", "none", engine=True),
    Predictor("agreement", "agreement", engine=True),
    Predictor("agreement^γ", "agreement", fitted=True, engine=True),
    Predictor("1 - TV(top-k)", "tv_topk", engine=True),
    Predictor("(1 - TV(top-k))^γ", "tv_topk", fitted=True, engine=True),
    Predictor("(1 - TV)^γ", "tv", fitted=True),
    Predictor("exp(-γ KL)", "kl", kind="exp", fitted=True),
    Predictor("cos(last)^γ", "cos_last", fitted=True),
    Predictor("conditional", "conditional"),
)


#: The predictors serving engines' logprobs alone can feed (``eaglelab predict --method``).
ENGINE_METHODS = tuple(p.name for p in PREDICTORS if p.engine and p.measure != "conditional")


def by_name(name: str) -> Predictor:
    for p in PREDICTORS:
        if p.name == name:
            return p
    raise KeyError(name)


def _predict_record(p: Predictor, r: SweepRecord, gamma: float) -> float:
    return p.predict(r.on_a.chain, r.measures, gamma, r.conditional_tau)


def fit_gamma(p: Predictor, records: Sequence[SweepRecord]) -> float:
    """The γ minimising the mean squared relative error of τ over ``records`` (1 for parameter-free predictors).

    Each record gives ``on_a.chain``, ``measures``, ``conditional_tau`` and the truth ``on_b.accept_len``.
    """
    if not p.fitted:
        return 1.0
    truth = np.array([r.on_b.accept_len for r in records])

    def loss(g: float) -> float:
        pred = np.array([_predict_record(p, r, g) for r in records])
        return float(np.mean((pred / truth - 1) ** 2))

    grid = np.exp(np.linspace(np.log(1e-3), np.log(1e3), 241))
    best = grid[int(np.argmin([loss(g) for g in grid]))]
    lo, hi = np.log(best) - 0.06, np.log(best) + 0.06  # golden-section refine inside one grid step
    phi = (np.sqrt(5) - 1) / 2
    for _ in range(40):
        a, b = hi - phi * (hi - lo), lo + phi * (hi - lo)
        if loss(np.exp(a)) < loss(np.exp(b)):
            hi = b
        else:
            lo = a
    return float(np.exp((lo + hi) / 2))


@dataclass
class HeldOut:
    """One predictor's error on one family it was not fitted on.

    Attributes:
        predictor, family: names.
        gamma: γ fitted without the family.
        errors: signed relative errors ``predicted / measured - 1`` of teacher-forced τ at the family's points.
        predicted: the predicted τ at those points.
        labels: the points' labels.
    """

    predictor: str
    family: str
    gamma: float
    errors: list[float]
    predicted: list[float]
    labels: list[str]

    @property
    def worst(self) -> float:
        return float(np.max(np.abs(self.errors)))

    def to_json(self) -> dict:
        return {"predictor": self.predictor, "family": self.family, "gamma": self.gamma, "errors": self.errors,
                "predicted": self.predicted, "labels": self.labels, "worst": self.worst,
                "mean_abs": float(np.mean(np.abs(self.errors)))}


def _held_out(p: Predictor, family: str, gamma: float, test: Sequence[SweepRecord]) -> HeldOut:
    pred = [_predict_record(p, r, gamma) for r in test]
    return HeldOut(p.name, family, gamma, [x / r.on_b.accept_len - 1 for x, r in zip(pred, test)], pred,
                   [r.label for r in test])


def leave_one_family_out(records: Sequence[SweepRecord], predictors: Sequence[Predictor] = PREDICTORS,
                         zero_family: str = "none", extra: Sequence[SweepRecord] = ()) -> list[HeldOut]:
    """Fit each predictor on all families but one and test it on the one left out; every family in turn.

    The zero point (A itself, family ``zero_family``) belongs to every training set and to no test.
    ``extra`` records (another model pair) are tested with γ fitted on all of ``records``, as family
    ``"pair"``.
    """
    families = sorted({r.family for r in records} - {zero_family})
    out = []
    for p in predictors:
        for fam in families:
            train = [r for r in records if r.family != fam]
            test = [r for r in records if r.family == fam]
            out.append(_held_out(p, fam, fit_gamma(p, train), test))
        if extra:
            out.append(_held_out(p, "pair", fit_gamma(p, records), extra))
    return out


#: Bootstrap resamples behind a held-out error's band, its coverage.
ERROR_BAND_REPS = 400
ERROR_BAND_LEVEL = 0.9


def _resampled(record: SweepRecord, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """A record's chain on A [reps, k] and τ on B [reps] under sequence weights [reps, N] (None without per-sequence data)."""
    a, b = record.on_a, record.on_b
    if a.seq_hits is None or a.seq_counted is None or b.seq_hits is None or b.seq_counted is None:
        return None
    ha, ca = np.asarray(a.seq_hits, float), np.asarray(a.seq_counted, float)
    hb, cb = np.asarray(b.seq_hits, float), np.asarray(b.seq_counted, float)
    if ha.ndim != 2 or ha.shape[0] != weights.shape[1] or not (ha.shape == ca.shape == hb.shape == cb.shape):
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        chain_a = np.nan_to_num((weights @ ha) / (weights @ ca))
        tau_b = 1 + np.nan_to_num((weights @ hb) / (weights @ cb)).sum(1)
    return chain_a, tau_b


def worst_draws(held_out: Sequence[HeldOut], records: Sequence[SweepRecord], extra: Sequence[SweepRecord],
                 reps: int, seed: int) -> dict[str, dict[str, np.ndarray]]:
    """Per predictor and left-out family, its worst |error| under each of ``reps`` draws of the probed sequences
    (predictors whose records lack per-sequence hits are left out): what :func:`held_out_bands` and
    :func:`selection_shares` read."""
    rng = np.random.default_rng(seed)
    draws = {}
    for group in (records, extra):
        if group:
            n = len(group[0].on_a.seq_hits or [])
            if n:
                w = rng.multinomial(n, np.full(n, 1.0 / n), size=reps).astype(float)
                for r in group:
                    draws[r.key] = _resampled(r, w)
    by_key = {r.key: r for r in [*records, *extra]}
    out: dict[str, dict[str, np.ndarray]] = {}
    for name in dict.fromkeys(h.predictor for h in held_out):
        p, families, ok = by_name(name), {}, True
        for h in (h for h in held_out if h.predictor == name):
            worst = np.zeros(reps)
            for label in h.labels:
                d = draws.get((h.family, label))
                if d is None:
                    ok = False
                    break
                r = by_key[(h.family, label)]
                pred = np.array([p.predict(d[0][i], r.measures, h.gamma, r.conditional_tau) for i in range(reps)])
                worst = np.maximum(worst, np.abs(pred / d[1] - 1))
            families[h.family] = worst
        if ok:
            out[name] = families
    return out


def held_out_bands(held_out: Sequence[HeldOut], records: Sequence[SweepRecord], extra: Sequence[SweepRecord] = (),
                   reps: int = ERROR_BAND_REPS, level: float = ERROR_BAND_LEVEL, seed: int = 0,
                   draws: dict[str, dict[str, np.ndarray]] | None = None) -> dict[str, tuple]:
    """A bootstrap band of each predictor's worst held-out error, resampling the probed sequences.

    Every point of a sweep is measured on the same sequences, so one draw of sequence weights serves
    all its points (the other pair's records get their own draw): what moves is the drafter's chain
    on A (the predictors' input) and its τ on B' (the truth), as another draw of conversations would
    move them. γ stays as fitted, and the similarity measures as measured.

    Returns:
        ``{predictor: (low, high)}`` of the worst |error|, for predictors whose records carry
        per-sequence hits (``on_a.seq_hits`` ...); others are left out.
    """
    q = (100 * (1 - level) / 2, 100 * (1 + level) / 2)
    out = {}
    draws = draws if draws is not None else worst_draws(held_out, records, extra, reps, seed)
    for name, families in draws.items():
        lo, hi = np.percentile(np.max(np.stack(list(families.values())), axis=0), q)
        out[name] = (float(lo), float(hi))
    return out


def selection_shares(held_out: Sequence[HeldOut], records: Sequence[SweepRecord], extra: Sequence[SweepRecord] = (),
                     engine_only: bool = False, reps: int = ERROR_BAND_REPS, seed: int = 0,
                     draws: dict[str, dict[str, np.ndarray]] | None = None) -> dict[str, float]:
    """How often each predictor would be chosen (the least worst held-out error) over resamples of both the probed
    sequences and the families left out (drawn with replacement): a choice made in most resamples is one the
    sweep supports, one made in half of them is the sweep's noise.

    Returns:
        ``{predictor: share of resamples it is chosen in}`` (summing to 1), among the engine-computable ones if
        asked; empty when no predictor has per-sequence data.
    """
    draws = draws if draws is not None else worst_draws(held_out, records, extra, reps, seed)
    worst = {n: f for n, f in draws.items() if by_name(n).engine or not engine_only}
    if not worst:
        return {}
    names, families = list(worst), list(next(iter(worst.values())))
    rng = np.random.default_rng(seed + 1)
    picks = rng.multinomial(len(families), np.full(len(families), 1.0 / len(families)), size=reps) > 0  # [reps, F]
    errors = np.stack([np.stack([worst[n][f] for f in families], axis=1) for n in names])  # [P, reps, F]
    chosen = np.argmin(np.where(picks[None], errors, -np.inf).max(axis=2), axis=0)  # [reps]
    return {n: float(np.mean(chosen == i)) for i, n in enumerate(names)}


def rank_predictors(held_out: Sequence[HeldOut], bands: dict[str, tuple] | None = None) -> list[dict]:
    """One row per predictor: worst and mean held-out error over all left-out families, and the worst's band.

    Ranked by the upper end of the band of the worst error where there is one (a predictor whose
    worst error is small only on these sequences does not win), then by the worst itself.
    """
    rows = []
    for name in dict.fromkeys(h.predictor for h in held_out):
        hs = [h for h in held_out if h.predictor == name]
        errs = np.abs(np.concatenate([h.errors for h in hs]))
        p = by_name(name)
        band = (bands or {}).get(name)
        rows.append({"predictor": name, "worst": float(errs.max()), "mean_abs": float(errs.mean()),
                     "worst_band": list(band) if band else None,
                     "per_family": {h.family: h.worst for h in hs}, "fitted": p.fitted, "engine": p.engine})
    return sorted(rows, key=lambda r: (r["worst_band"][1] if r["worst_band"] else r["worst"], r["worst"], r["mean_abs"]))


def choose(rows: Sequence[dict], engine_only: bool = False) -> dict:
    """The predictor ranked first by :func:`rank_predictors` (among the engine-computable ones if asked)."""
    pool = [r for r in rows if r["engine"] or not engine_only]
    return pool[0]


def chain_from_tau(tau: float, k: int) -> list[float]:
    """Chain rates of a constant per-draft acceptance α that gives τ with k drafts: c_i = α^(i + 1)."""
    a = rate_for_accept_len(tau, k)
    return [a ** (i + 1) for i in range(k)]


@dataclass
class Prediction:
    """A predicted plug-in τ with its band.

    Attributes:
        tau: predicted τ on the new target.
        low, high: 5% and 95% of the bootstrap (sequences of the engine files, records of the log),
            widened by the predictor's held-out error when a calibration is given.
        method, gamma: the predictor and its exponent.
        measures: what it read (agreement, tv) over all sequences.
        chain_a: the drafter's chain rates on the old target.
        calibration_error: the held-out worst-case relative error that widened the band (or None).
    """

    tau: float
    low: float
    high: float
    method: str
    gamma: float
    measures: dict
    chain_a: list
    calibration_error: float | None = None

    def to_json(self) -> dict:
        return asdict(self)


def predict_plugin(chains: Sequence[Sequence[float]], comparison, method: str = "agreement", gamma: float = 1.0,
                   calibration_error: float | None = None, draws: int = 2000, seed: int = 0) -> Prediction:
    """Predict the old drafter's τ on the new target from its chain rates on the old one and an engine comparison.

    Args:
        chains: one or more chain-rate lists of the drafter on the old target (e.g. one per log
            record); their per-position median is the point estimate, and they are resampled for the band.
        comparison: :class:`eaglelab.engines.logprob_files.TargetComparison` of the two targets.
        method: an engine-computable predictor's name.
        gamma: its exponent (1 unless fitted by a drift sweep).
        calibration_error: the predictor's held-out worst relative error, widening the band.
    """
    p = by_name(method)
    if not p.engine or p.measure == "conditional":
        raise ParameterError("--method", f"{method} needs more than engine logprobs (choose one of "
                                         f"{', '.join(ENGINE_METHODS)})")
    chains = np.asarray(chains, float)
    chain = np.median(chains, axis=0)
    tau = p.predict(chain, comparison.measures(), gamma)
    rng = np.random.default_rng(seed)
    n_seq = len(comparison.positions)
    sims = [p.predict(chains[rng.integers(len(chains), size=len(chains))].mean(0),
                      comparison.measures(rng.integers(n_seq, size=n_seq)), gamma) for _ in range(draws)]
    low, high = np.percentile(sims, [5, 95])
    if calibration_error:
        low, high = low * (1 - calibration_error), high * (1 + calibration_error)
    k = chains.shape[1]
    return Prediction(tau, float(max(low, 1.0)), float(min(high, k + 1.0)), method, gamma,
                      comparison.measures(), chain.tolist(), calibration_error)


def chains_from_log(path, k: int | None = None) -> list[list[float]]:
    """The drafter's chain rates on the old target, one list per metrics line of a SGLang / vLLM log.

    vLLM prints per-position acceptance rates, the share of drafts whose position i was accepted
    (a chain rate). SGLang prints τ only: with ``k`` drafts, a constant per-draft rate is assumed.
    """
    records = parse_log(path).records
    per_pos = [r.per_position for r in records if r.per_position]
    if per_pos:
        if len({len(c) for c in per_pos}) != 1:
            raise LogFormatError(path, "per-position acceptance lists of different lengths (one k per log)")
        return per_pos
    if k is None:
        raise ParameterError("--k", f"{path} logs τ only (SGLang): give the drafts per cycle, --k")
    try:
        return [chain_from_tau(r.accept_len, k) for r in records]
    except ParameterError as exc:
        raise LogFormatError(path, exc.problem) from None


def calibration_from_probe(probe: dict, where: str) -> dict:
    """``agreement^γ`` fitted on one plug-in probe (``eaglelab probe --json``, live or from dumps, or 03's findings).

    The probe measured, on the user's own pair, the drafter's chain on A, the next-token agreement of A
    and B and the τ the drafter keeps on B: one record, on which γ is solved. Its error is the
    relative half-width of the probe's bootstrap band of τ on B (how well that one point is known).

    Raises:
        ParameterError: the file holds no probe numbers of that shape.
    """
    plugin = probe.get("plugin")
    if not isinstance(plugin, dict):
        raise ParameterError(where, "not a probe result (no plugin numbers)")
    chain = plugin.get("chain_on_a")
    if not isinstance(chain, list) or not chain or not all(isinstance(c, (int, float)) and not isinstance(c, bool)
                                                           and 0 <= c <= 1 for c in chain):
        raise ParameterError(where, "its plugin.chain_on_a must be a list of rates in [0, 1]")
    agreement = field_number(probe, "argmax_agreement", where, ParameterError, low=0.0, low_open=False, high=1.0)
    tau_b = field_number(plugin, "accept_len_on_b", where, ParameterError, low=1.0, low_open=False)
    chain = [float(c) for c in chain]
    record = SweepRecord(PointId("probe", "the probe's pair"), {"agreement": agreement},
                         DrafterOn(chain, 1.0 + sum(chain)), DrafterOn([], tau_b), conditional_tau=tau_b)
    method = "agreement^γ"
    gamma = fit_gamma(by_name(method), [record])
    band = ((probe.get("verdict") or {}).get("bands") or {}).get("tau_b") or {}
    try:
        error = max(field_number(band, "high", where, ParameterError) - tau_b,
                    tau_b - field_number(band, "low", where, ParameterError)) / tau_b
    except ParameterError:
        error = 0.0
    checkpoints = probe.get("checkpoints") if isinstance(probe.get("checkpoints"), dict) else {}
    pair = " → ".join(str(checkpoints.get(k, checkpoints.get(before, "?")))  # before: a probe.json of an earlier release
                      for k, before in (("old_target", "target_a"), ("new_target", "target_b")))
    return {"method": method, "gamma": gamma, "error": min(max(error, 0.0), 0.999999),
            "source": f"the plug-in probe of {where} ({pair}: τ {tau_b:.2f} on B at agreement {agreement:.3f})"}


def load_calibration(path) -> dict:
    """A predictor calibration: a drift sweep's (notebook 05's ``05_predictor.json`` or ``05_findings.json``),
    or one plug-in probe's (``eaglelab probe --json`` output, live or from the engines' dumps, or notebook 03's
    ``03_findings.json``: :func:`calibration_from_probe`).

    Returns:
        ``{"method", "gamma", "error", "source"}`` of the chosen engine-computable predictor;
        ``source`` says which sweep or probe (whose checkpoints) it was fitted on.
    """
    where = printable(str(path))
    data = read_json_object(path, ParameterError)
    probe = data.get("numbers", data) if isinstance(data.get("numbers", data), dict) else {}
    if "plugin" in probe and "argmax_agreement" in probe:
        return calibration_from_probe(probe, where)
    try:
        numbers = data["numbers"]
        chosen = numbers["chosen_engine"]
        fit = numbers["predictors"][chosen]
        by_name(chosen)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ParameterError(where, f"not a drift-sweep findings file (no numbers.predictors entry for its "
                                    f"numbers.chosen_engine: {type(exc).__name__})") from None
    if not isinstance(fit, dict):
        raise ParameterError(where, "not a drift-sweep findings file (the chosen predictor's fit is not an object)")
    if not by_name(chosen).engine or by_name(chosen).measure == "conditional":
        raise ParameterError(where, f"its chosen_engine {printable(repr(chosen))} needs more than engine logprobs "
                                    f"(choose one of {', '.join(ENGINE_METHODS)})")
    source = data.get("source") or numbers.get("evidence") or where
    return {"method": chosen, "gamma": field_number(fit, "gamma", where, ParameterError),
            "error": field_number(fit, "worst_held_out", where, ParameterError, low=0.0, low_open=False, high=0.999999),
            "source": source if isinstance(source, str) else where}
