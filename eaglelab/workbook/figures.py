"""Each report's figure: a job's result in, its figure out, so a notebook section reads job, table, figure.

The reports live in the layers below (``jobs/``, ``serving/``, ``planning/``) and the plots here above them, so a
report does not draw itself: each function takes one report and what the figure marks beside it, picks the report's
numbers and calls one :mod:`eaglelab.workbook.plots` function (which only draws).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from eaglelab.jobs.finetune import FinetuneReport
from eaglelab.jobs.load_engine import EngineCostFit, EngineLoadCheck
from eaglelab.jobs.load_report import LoadReport
from eaglelab.planning.scaling import ScalingSweep
from eaglelab.serving.load_tables import load_curve
from eaglelab.serving.speculation import Speculation
from eaglelab.workbook import plots


def scaling_figure(sweep: ScalingSweep, lines: Mapping[str, float], tag: str):
    """Notebook 04's data-scaling sweep: held-out τ per budget (every seed a dot), each start's law with its band to 8x
    the largest budget (beyond the data there is, the band is the story), the old drafter as is and ``lines``."""
    fit = sweep.fit
    grid = np.geomspace(min(sweep.budgets) / 2, 8 * max(sweep.budgets), 100)
    curves = {label: (grid, *np.array([band.tau(n) for n in grid]).T)
              for label, band in (("warm start", fit.warm), ("from scratch", fit.scratch))}
    marks = {f"old drafter as is (τ {fit.plugin:.2f})": fit.plugin, **lines}
    return plots.plot_scaling(sweep.points, curves, marks, title=f"Held-out τ against new-target data {tag}")


def load_figure(load: LoadReport, measured: Mapping[str, tuple[Sequence[float], Sequence[float]]] = ()):
    """Notebook 01's speculation under load: the model's speedup and break-even τ per concurrency at the report's τ,
    the last concurrency that pays, and ``measured`` speedups (label -> concurrencies, speedups)."""
    k = load.settings.k
    return plots.plot_concurrency({"model at your point": load_curve(load.model, k, load.tau)}, load.tau, measured,
                                  load.pays_up_to, title=f"Speculation under load: τ {load.tau:.2f}, k = {k}")


def engine_load_figure(check: EngineLoadCheck, k: int, tag: str, title: str):
    """Notebook 01's check in vLLM: the model at the runs' mean τ (calibrated at the smallest and largest batch),
    each batch's measured speedup with its runs' range, and the model at each batch's own τ."""
    held = [r.concurrency for r in check.rows]
    model = load_curve(check.model, k, check.mean_tau, np.geomspace(1, max(held), 48))
    return plots.plot_concurrency({"model at the runs' mean τ, calibrated at the ends": model}, check.mean_tau,
                                  {f"measured in vLLM {tag}": (held, [r.measured for r in check.rows],
                                                               [(r.measured_low, r.measured_high) for r in check.rows]),
                                   "model at each point's own τ": (held, [r.model for r in check.rows])},
                                  title=title)


def closed_loop_figure(loop: Speculation):
    """Notebook 01's closed loop: plain and speculative decoding's measured tok/s beside the model's (τ / cycle)."""
    return plots.plot_closed_loop(["greedy", f"EAGLE-3 k={loop.k}"], [loop.greedy_tokens_per_s, loop.tokens_per_s],
                                  [loop.greedy_tokens_per_s, loop.predicted_tokens_per_s])


def cost_fit_figure(costs: EngineCostFit, k: int, tag: str, title: str):
    """Notebook 01's cost table measured in vLLM: each step's time per concurrency as measured (plain steps, and cycles
    at forced τ) beside the model fitted to every row."""
    rows, fitted = costs.measured.rows, costs.report.model
    batches = [r.concurrency for r in rows]
    grid = np.geomspace(min(batches), max(batches), 32)
    steps = {"plain step": [r for r in rows if r.plain], "cycle": [r for r in rows if not r.plain]}
    return plots.plot_cost_fit(
        {f"{name} measured {tag}": ([r.concurrency for r in kind], [1e3 * r.step_s for r in kind])
         for name, kind in steps.items()},
        {"plain step, fitted": (grid, 1e3 * fitted.decode_s(grid)), "cycle, fitted": (grid, 1e3 * fitted.cycle_s(grid, k))},
        title=title)


def learning_curve_figure(finetuned: FinetuneReport, key: str, label: str):
    """Notebook 04's learning curves: the metric ``key`` each run logs, per step, for each start."""
    return plots.plot_learning_curves({name: run.metrics for name, run in finetuned.runs.items()}, key, label)
