"""``eaglelab predict`` as a function: the old drafter's τ on the new target from both targets' engine logprobs.

:func:`predict_from_files` reads the two JSONL files the engines return (vLLM's ``prompt_logprobs``, SGLang's
``return_logprob``), compares the targets position by position, and predicts the plug-in τ with its band
(:func:`eaglelab.drift.predictors.predict_plugin`, calibrated by a drift sweep or a probe when one is given); the
:class:`FilePrediction` it returns carries the projected tok/s and, with a baseline, break-even. No torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from eaglelab.drift.predictors import load_calibration, predict_plugin
from eaglelab.engines.logprob_files import compare_logprobs, read_logprob_file
from eaglelab.serving import perf


@dataclass(frozen=True)
class FilePrediction:
    """A predicted plug-in τ from engine files, with what it read and what it projects.

    Attributes:
        tau, low, high: the prediction and its band (:class:`eaglelab.drift.predictors.Prediction`).
        method, gamma, calibration_error: the predictor, its exponent, the held-out error that widened the band.
        measures: what it read of the two targets (agreement, TV through the returned top k).
        chain_a: the drafter's chain rates on the old target; tau_on_old: its τ there.
        calibration: where the calibration came from (None: uncalibrated).
        positions, sequences: how much of the files was compared.
        cycle_ms, tokens_per_s: the cycle on the new target and the projected tok/s (central, low, high).
        break_even_tau: break-even at the baseline given (None without one).
    """

    tau: float
    low: float
    high: float
    method: str
    gamma: float
    measures: dict[str, float]
    chain_a: list[float]
    calibration_error: float | None
    calibration: str | None
    positions: int
    sequences: int
    tau_on_old: float
    cycle_ms: float
    tokens_per_s: tuple[float, float, float]
    break_even_tau: float | None = None

    def to_json(self) -> dict[str, Any]:
        out = {**asdict(self), "tokens_per_s": list(self.tokens_per_s)}
        if self.break_even_tau is None:
            del out["break_even_tau"]
        return out


def predict_from_files(old, new, chains: Sequence[Sequence[float]], cycle_ms: float, baseline_tps: float | None = None,
                       method: str | None = None, calibration=None) -> FilePrediction:
    """Engine files of both targets and the drafter's chains on the old one -> the plug-in τ and the tok/s it projects.

    Args:
        old, new: JSONL files of the old / new target's responses on the same texts.
        chains: the drafter's chain rates on the old target (one list per log line, or one list).
        cycle_ms: the speculative cycle on the new target, for the projected tok/s.
        baseline_tps: plain decoding tok/s, for the break-even τ.
        method: an engine-computable predictor (default: the calibration's choice, else ``agreement``).
        calibration: a drift sweep's ``05_predictor.json`` or a probe's result: γ and held-out error of its predictor.
    """
    cal = load_calibration(calibration) if calibration else None
    method = method or (cal["method"] if cal else "agreement")
    fitted = cal is not None and cal["method"] == method
    comparison = compare_logprobs(read_logprob_file(old), read_logprob_file(new), f"{old} vs {new}")
    pred = predict_plugin(chains, comparison, method, cal["gamma"] if fitted else 1.0, cal["error"] if fitted else None)
    cycle_s = cycle_ms / 1e3
    tps = tuple(float(perf.effective_tps(t, cycle_s)) for t in (pred.tau, pred.low, pred.high))
    return FilePrediction(pred.tau, pred.low, pred.high, pred.method, pred.gamma, pred.measures, pred.chain_a,
                          pred.calibration_error, cal["source"] if cal else None, int(comparison.positions.sum()),
                          len(comparison.positions), 1.0 + sum(pred.chain_a), cycle_ms, tps,
                          float(perf.break_even_tau(cycle_s, baseline_tps)) if baseline_tps else None)
