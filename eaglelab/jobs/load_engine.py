"""The serving-cost model checked against a real engine on this machine: vLLM batched at several concurrencies
(:func:`engine_load_check`), and a cost table measured in vLLM at forced τ with the model fitted to it
(:func:`engine_cost_fit`). Notebook 01's closed loop calls both beside :func:`eaglelab.jobs.load.speculation_under_load`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eaglelab.engines.vllm import engine_status
from eaglelab.engines.vllm_load import LoadRun, measure_costs_in_engine, measure_load_in_engine
from eaglelab.jobs.load import LoadSettings, cost_points, load_model_for, speculation_under_load
from eaglelab.jobs.load_report import LoadReport
from eaglelab.serving.cost_table import CostTable, write_cost_table
from eaglelab.serving.load import CPU, LoadModel
from eaglelab.serving.load_checks import residuals
from eaglelab.serving.load_fit import calibrate
from eaglelab.serving.target_shape import shape_from_config


@dataclass
class EngineLoadCheck:
    """The load model against a real engine: vLLM batched at several concurrencies, on this machine.

    The model (the target's serving cost on a CPU, :data:`eaglelab.serving.load.CPU`) is calibrated on the
    smallest and the largest concurrency measured; the ones between are held out, and every row
    says how far the model's speedup is from the measured one, and whether it lies inside the
    range the repeated runs allow (``within_noise``): a gap inside the noise is not the model's.
    """

    run: LoadRun
    model: LoadModel
    rows: list[dict]
    status: str = ""

    @property
    def worst_held_out(self) -> float | None:
        held = [abs(r["error"]) for r in self.rows if r["held_out"]]
        return max(held) if held else None

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows, "status": self.status, "worst_held_out": self.worst_held_out,
                "model": self.model.to_json() if self.model is not None else None}


def engine_load_check(target: str, drafter: str, prompts: list[list[int]], max_new_tokens: int, k: int,
                      concurrency: list[int], target_config: dict, engine: str | None = "vllm",
                      repeats: int = 3) -> EngineLoadCheck:
    """The target alone and with the drafter in vLLM at each concurrency, beside the load model for this machine.

    Returns:
        rows with ``concurrency``, ``tau``, ``alone_tps``, ``drafter_tps`` (medians of ``repeats`` runs),
        ``measured`` and ``model`` speedups, ``error`` (model / measured - 1), ``measured_low`` /
        ``measured_high`` (the runs' range), ``within_noise`` and ``held_out``; without the engine, no
        rows and the reason.
    """
    if engine is None:
        return EngineLoadCheck(None, None, [], "SERVING_ENGINE = None")
    ok, line = engine_status()
    if not ok:
        return EngineLoadCheck(None, None, [], line)
    run = measure_load_in_engine(target, drafter, prompts, max_new_tokens, k=k, concurrency=concurrency,
                                 repeats=repeats)
    context = int(sum(len(p) for p in prompts) / len(prompts) + max_new_tokens / 2)
    points = run.points()
    ends = [points[0], points[-1]] if len(points) > 1 else points
    model = calibrate(LoadModel(shape_from_config(target_config), CPU, context=context), ends)
    rows = []
    for point, tau, alone, spec, (low, high) in zip(points, run.tau, run.alone_tps, run.drafter_tps, run.speedup_range):
        c = point.concurrency
        predicted = float(model.speedup(c, k, tau))
        measured = spec / alone
        rows.append({"concurrency": c, "tau": tau, "alone_tps": alone, "drafter_tps": spec, "measured": measured,
                     "model": predicted, "error": predicted / measured - 1.0, "measured_low": low,
                     "measured_high": high, "within_noise": low <= predicted <= high, "held_out": point not in ends})
    return EngineLoadCheck(run, model, rows, f"vLLM {run.version} on this machine")


@dataclass
class EngineCostFit:
    """The model fitted to a cost table measured in vLLM on this machine, τ forced, and held out.

    Attributes:
        table: the measured cost table (:func:`eaglelab.engines.vllm_load.measure_costs_in_engine`), or None.
        report: the model fitted to every row (its residuals in ``report.residuals``).
        held_out: rows of the model fitted to the smallest and largest concurrency only, at the others:
            ``concurrency``, ``what``, ``accept_len``, ``measured_ms``, ``model_ms``, ``error``.
        path: where the table was written; status: the engine's, or why nothing was measured.
    """

    table: CostTable | None
    report: LoadReport | None
    held_out: list[dict]
    path: str | None
    status: str

    @property
    def worst_held_out(self) -> float | None:
        return max((abs(r["error"]) for r in self.held_out), default=None)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "status": self.status, "held_out": self.held_out,
                "worst_held_out": self.worst_held_out, "fit": self.report.to_json() if self.report else None}


def engine_cost_fit(target: str, drafter: str, prompts: list[list[int]], max_new_tokens: int, k: int,
                    concurrency: list[int], accept_lens: list[float], out: str, engine: str | None = "vllm",
                    repeats: int = 2) -> EngineCostFit:
    """Measure the cost table in vLLM (τ forced), write it to ``out``, fit the model on this machine's CPU to it.

    The fit to every row says how well the model's shape holds the measurements (its residuals); the fit to
    the smallest and largest concurrency alone, predicting the ones between, says how far it carries.
    """
    if engine is None:
        return EngineCostFit(None, None, [], None, "SERVING_ENGINE = None")
    ok, line = engine_status()
    if not ok:
        return EngineCostFit(None, None, [], None, line)
    table = measure_costs_in_engine(target, drafter, prompts, max_new_tokens, k, concurrency, accept_lens,
                                    repeats=repeats)
    path = str(write_cost_table(out, table.rows, table.comments))
    settings = LoadSettings(concurrency=tuple(concurrency), accept_len=float(max(accept_lens)), k=k, gpu="cpu",
                            target_config=target, costs=(path,), context=table.rows[0].context)
    report = speculation_under_load(settings)
    ends = {min(concurrency), max(concurrency)}
    outer = CostTable(tuple(r for r in table.rows if r.concurrency in ends))
    inner = tuple(r for r in table.rows if r.concurrency not in ends)
    start, _ = load_model_for(settings)
    held = residuals(calibrate(start, cost_points(outer, settings)), cost_points(CostTable(inner), settings))
    for row, measurement in zip(held, inner):  # one row per measurement, in order
        row["accept_len"] = measurement.accept_len
    version = table.provenance().get("engine", "vLLM")
    return EngineCostFit(table, report, held, path, f"{version} on this machine")
