"""The old drafter's τ on a new target, predicted from the engines' logprobs: ``eaglelab predict`` as one job.

:func:`predict_plugin_tau` takes a :class:`PredictSettings` (the command's flags are generated from it) and
returns a :class:`PredictionReport` that prints, serialises and decides (whether plugging in pays, from
:func:`eaglelab.decisions.plug_in_against_break_even`) by itself. No torch: engine files and arithmetic only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eaglelab.decisions import plug_in_against_break_even
from eaglelab.drift.file_prediction import FilePrediction, predict_from_files
from eaglelab.drift.predictors import ENGINE_METHODS, chain_from_tau, chains_from_log
from eaglelab.errors import ParameterError
from eaglelab.serving.perf import CYCLE_MISTAKE, MAX_STEP_S, MAX_TPS, MIN_STEP_S, MIN_TPS, TPS_MISTAKE
from eaglelab.settings import check_ranges, option


@dataclass(frozen=True)
class PredictSettings:
    """What the prediction reads: both targets' logprobs, and the old drafter's acceptance on the old target.

    Attributes:
        old_logprobs: JSONL of the old target's prompt logprobs from its engine (vLLM's ``prompt_logprobs`` or
            SGLang's ``return_logprob``, one response per line).
        new_logprobs: JSONL of the new target's, on the same texts in the same order.
        log: SGLang / vLLM server log of the old drafter on the old target (its chain rates per metrics line).
        chain: the old drafter's chain rates on the old target (share of cycles accepting drafts 1..i).
        accept_len: the old drafter's τ on the old target (with ``k``).
        k: drafts per cycle (for ``accept_len``, or a SGLang log).
        method: the predictor (default: the calibration's choice, else agreement).
        calibration: a drift sweep's calibration (notebook 05's figures/05_predictor.json: the chosen predictor,
            its fitted γ and held-out error), or one probe's result (``eaglelab probe --json``, live or from dumps,
            or figures/03_findings.json): agreement^γ solved on your own pair.
        cycle_ms: the speculative cycle on the new target, ms (for the projected tok/s).
        baseline_tps: plain decoding tok/s, for the break-even τ.
    """

    old_logprobs: str
    new_logprobs: str
    log: str | None = None
    chain: tuple[float, ...] | None = option(None, min=0, max=1, comma=True)
    accept_len: float | None = option(None, min=1)
    k: int | None = option(None, min=1)
    method: str | None = option(None, choices=ENGINE_METHODS)
    calibration: str | None = None
    cycle_ms: float = option(30.0, min=1e3 * MIN_STEP_S, max=1e3 * MAX_STEP_S, mistake=CYCLE_MISTAKE)
    baseline_tps: float | None = option(None, min=MIN_TPS, max=MAX_TPS, mistake=TPS_MISTAKE)

    def __post_init__(self):
        check_ranges(self)  # flags, notebooks and the API: one rule

    def chains(self) -> list[list[float]]:
        """The old drafter's chain rates on the old target, from the one source given.

        Raises:
            ParameterError: none or several of ``log``, ``chain``, ``accept_len``; ``accept_len`` without ``k``;
                rates outside [0, 1] or rising with the position.
        """
        given = [n for n in ("log", "chain", "accept_len") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ParameterError("predict", "give the old drafter's acceptance on the old target once: --log, --chain "
                                            "or --accept-len (with --k)")
        if self.log is not None:
            chains = chains_from_log(self.log, self.k)
        elif self.chain is not None:
            chains = [list(self.chain)]
        elif self.k is None:
            raise ParameterError("--k", "--accept-len needs the drafts per cycle, --k")
        else:
            chains = [chain_from_tau(self.accept_len, self.k)]
        first = chains[0]
        if any(not 0 <= c <= 1 for c in first) or any(b > a + 1e-9 for a, b in zip(first, first[1:])):
            raise ParameterError("--chain", f"chain rates must lie in [0, 1] and not increase, got {first}")
        return chains


@dataclass
class PredictionReport:
    """The predicted plug-in τ with its band, the projected tok/s, and whether plugging in pays."""

    settings: PredictSettings
    prediction: FilePrediction

    @property
    def plug_in(self) -> str | None:
        """Whether plugging in pays against break-even (None without a baseline tok/s)."""
        p = self.prediction
        return plug_in_against_break_even(p.low, p.high, p.break_even_tau) if p.break_even_tau is not None else None

    def to_json(self) -> dict[str, Any]:
        return {**self.prediction.to_json(), **({"plug_in": self.plug_in} if self.plug_in else {})}

    def findings(self, tag: str = "") -> dict[str, str]:
        """``predicted``: the plug-in τ with its band and method, what it read, the projected tok/s and, with a
        baseline, whether plugging in pays."""
        p, t = self.prediction, f" {tag}" if tag else ""
        pays = f"; against break-even τ {p.break_even_tau:.2f}, plugging in {self.plug_in}" if self.plug_in else ""
        return {"predicted": f"**Predicted plug-in τ{t}:** **{p.tau:.2f}** [{p.low:.2f}–{p.high:.2f}] by {p.method} "
                             f"(γ = {p.gamma:.3g}) from top-1 agreement {p.measures['agreement']:.3f} over {p.positions} "
                             f"positions; {p.tokens_per_s[0]:.1f} tok/s at a {p.cycle_ms:g} ms cycle [derived]{pays}."}

    def lines(self) -> list[str]:
        p, s = self.prediction, self.settings
        error = p.calibration_error
        band = "sampling only" if error is None else f"sampling, widened by the method's held-out error {100 * error:.0f}%"
        out = [f"old vs new target: top-1 agreement {p.measures['agreement']:.3f}, TV through the returned top k "
               f"{p.measures['tv_topk']:.3f} over {p.positions} positions of {p.sequences} sequences",
               f"old drafter on the old target: τ {p.tau_on_old:.2f} (chain {', '.join(f'{c:.3f}' for c in p.chain_a)})",
               f"predicted plug-in τ on the new target: {p.tau:.2f}  [90% band {p.low:.2f}-{p.high:.2f}: "
               f"{band}] ({p.method}, γ = {p.gamma:.3g})"]
        if p.calibration:
            out.append(f"calibration: {p.calibration}")
        tps = p.tokens_per_s
        out.append(f"projected at a {s.cycle_ms:g} ms cycle: {tps[0]:.1f} tok/s [{tps[1]:.1f}-{tps[2]:.1f}]")
        if self.plug_in:
            out.append(f"break-even τ at {s.baseline_tps:g} tok/s plain decoding: {p.break_even_tau:.2f}: "
                       f"plugging in {self.plug_in}")
        return out


def predict_plugin_tau(settings: PredictSettings) -> PredictionReport:
    """The old drafter's plug-in τ on the new target, before running it there."""
    prediction = predict_from_files(settings.old_logprobs, settings.new_logprobs, settings.chains(), settings.cycle_ms,
                                    settings.baseline_tps, settings.method, settings.calibration)
    return PredictionReport(settings, prediction)
