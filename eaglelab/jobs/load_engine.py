"""The serving-cost model checked against a real engine on this machine: vLLM batched at several concurrencies
(:func:`engine_load_check`), and a cost table measured in vLLM at forced τ with the model fitted to it
(:func:`engine_cost_fit`). Notebook 01's closed loop calls both beside :func:`eaglelab.jobs.load.speculation_under_load`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from eaglelab.engines.vllm import engine_status
from eaglelab.engines.vllm_load import LoadRun, measure_costs_in_engine, measure_load_in_engine
from eaglelab.jobs.load import LoadSettings, cost_points, load_model_for, speculation_under_load
from eaglelab.jobs.load_report import LoadReport
from eaglelab.serving.cost_table import CostTable, write_cost_table
from eaglelab.serving.load import CPU, LoadModel
from eaglelab.serving.load_checks import residuals
from eaglelab.serving.load_fit import calibrate
from eaglelab.serving.target_shape import shape_from_config
from eaglelab.settings import DEFAULT_MEASURE_PROMPTS, DEFAULT_MEASURE_TOKENS, check_ranges, option
from eaglelab.views import Column, View


@dataclass(frozen=True)
class HereSettings:
    """What notebook 01 measures on this machine: the closed loop (the old pair decoded plain and speculatively, as
    notebooks 03-05 measure) and the old pair in vLLM batched at a few concurrencies (:func:`engine_load_check`,
    :func:`engine_cost_fit`).

    Attributes:
        measure_prompts, measure_tokens: the closed loop's prompts, and the tokens generated per prompt and run.
        load_batches: the concurrencies vLLM runs the old pair at.
        load_tokens: the tokens generated per request there.
    """

    measure_prompts: int = option(DEFAULT_MEASURE_PROMPTS, min=0)
    measure_tokens: int = option(DEFAULT_MEASURE_TOKENS, min=1)
    load_batches: tuple[int, ...] = option((1, 4, 16), min=1)
    load_tokens: int = option(32, min=1)

    SMOKE_SIZES: ClassVar[dict[str, Any]] = {"measure_prompts": 3, "measure_tokens": 24, "load_batches": (1, 2, 4),
                                             "load_tokens": 16}

    def __post_init__(self):
        check_ranges(self)


@dataclass(frozen=True)
class EngineLoadRow:
    """One concurrency measured in vLLM: τ, each side's tok/s (medians of the runs), the measured speedup with the runs'
    range, the model's, its error (model / measured - 1), whether that lies inside the range, whether held out."""

    concurrency: int
    tau: float
    alone_tps: float
    drafter_tps: float
    measured: float
    model: float
    error: float
    measured_low: float
    measured_high: float
    within_noise: bool
    held_out: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def words(self) -> str:
        held = " (held out" + (", inside the noise)" if self.within_noise else ")") if self.held_out else ""
        return (f"{self.concurrency}: τ {self.tau:.2f}, {self.measured:.2f}× measured ({self.measured_low:.2f}-"
                f"{self.measured_high:.2f} over the runs) vs {self.model:.2f}× modelled{held}")


@dataclass
class EngineLoadCheck:
    """The load model against a real engine: vLLM batched at several concurrencies, on this machine.

    The model (the target's serving cost on a CPU, :data:`eaglelab.serving.load.CPU`) is calibrated on the
    smallest and the largest concurrency measured; the ones between are held out, and every row
    says how far the model's speedup is from the measured one, and whether it lies inside the
    range the repeated runs allow (``within_noise``): a gap inside the noise is not the model's.
    """

    run: LoadRun | None
    model: LoadModel | None
    rows: list[EngineLoadRow]
    status: str = ""

    @classmethod
    def skipped(cls, why: str) -> EngineLoadCheck:
        """Nothing measured, and why (no engine, or the target does not load here)."""
        return cls(None, None, [], why)

    @property
    def worst_held_out(self) -> float | None:
        held = [abs(r.error) for r in self.rows if r.held_out]
        return max(held) if held else None

    @property
    def mean_tau(self) -> float | None:
        return sum(r.tau for r in self.rows) / len(self.rows) if self.rows else None

    def to_json(self) -> dict[str, Any]:
        return {"rows": [r.to_json() for r in self.rows], "status": self.status, "worst_held_out": self.worst_held_out,
                "model": self.model.to_json() if self.model is not None else None}

    def view(self) -> View:
        columns = [Column("concurrency"), Column("τ", "{:.2f}"), Column("alone tok/s", "{:.1f}"),
                   Column("drafter tok/s", "{:.1f}"), Column("measured", "{:.3f}x"), Column("runs low", "{:.2f}"),
                   Column("runs high", "{:.2f}"), Column("model", "{:.3f}x"), Column("error", lambda e: f"{100 * e:+.1f}%"),
                   Column("held out", lambda h: "held out" if h else "calibrated"), Column("inside the noise")]
        return View.of(columns, [[r.concurrency, r.tau, r.alone_tps, r.drafter_tps, r.measured, r.measured_low,
                                  r.measured_high, r.model, r.error, r.held_out, r.within_noise] for r in self.rows],
                       index="concurrency")

    def table(self):
        return self.view().frame()

    def findings(self, tag: str = "") -> dict[str, str]:
        """``engine_load``: each concurrency's measured speedup beside the model's, and the worst held-out error; or
        that nothing ran, and why. ``tag``: the checkpoints' evidence tag."""
        batches = ", ".join(str(r.concurrency) for r in self.rows) or "no"
        t = f" {tag}" if tag else ""
        if not self.rows:
            return {"engine_load": f"**Measured in vLLM{t}:** not run ({self.status})."}
        worst = self.worst_held_out
        held = (f"; the model, calibrated on the ends, is {100 * worst:.0f}% off where held out" if worst is not None
                else "")
        return {"engine_load": f"**Measured in vLLM at {batches} concurrent requests{t}:** "
                               f"{'; '.join(r.words() for r in self.rows)}{held}."}


def engine_load_check(target: str, drafter: str, prompts: list[list[int]], max_new_tokens: int, k: int,
                      concurrency: list[int], target_config: dict, engine: str | None = "vllm",
                      repeats: int = 3) -> EngineLoadCheck:
    """The target alone and with the drafter in vLLM at each concurrency, beside the load model for this machine.

    Returns:
        one :class:`EngineLoadRow` per concurrency; without the engine, no rows and the reason.
    """
    if engine is None:
        return EngineLoadCheck.skipped("SERVING_ENGINE = None")
    ok, line = engine_status()
    if not ok:
        return EngineLoadCheck.skipped(line)
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
        rows.append(EngineLoadRow(c, tau, alone, spec, measured, predicted, predicted / measured - 1.0, low, high,
                                  low <= predicted <= high, point not in ends))
    return EngineLoadCheck(run, model, rows, f"vLLM {run.version} on this machine")


@dataclass
class EngineCostFit:
    """The model fitted to a cost table measured in vLLM on this machine, τ forced, and held out.

    Attributes:
        measured: the measured cost table (:func:`eaglelab.engines.vllm_load.measure_costs_in_engine`), or None.
        report: the model fitted to every row (its residuals in ``report.residuals``).
        held_out: rows of the model fitted to the smallest and largest concurrency only, at the others:
            ``concurrency``, ``what``, ``accept_len``, ``measured_ms``, ``model_ms``, ``error``.
        path: where the table was written; status: the engine's, or why nothing was measured.
    """

    measured: CostTable | None
    report: LoadReport | None
    held_out: list[dict]
    path: str | None
    status: str
    forced: tuple[float, ...] = field(default_factory=tuple)

    @classmethod
    def skipped(cls, why: str) -> EngineCostFit:
        """Nothing measured, and why."""
        return cls(None, None, [], None, why)

    @property
    def worst_held_out(self) -> float | None:
        return max((abs(r["error"]) for r in self.held_out), default=None)

    @property
    def worst_fitted(self) -> float | None:
        """The largest relative residual of the model fitted to every row."""
        errors = [abs(r["error"]) for r in self.report.residuals if r["error"] is not None] if self.report else []
        return max(errors, default=None)

    def view(self) -> View:
        """Each measured step beside the model fitted to every row (its residuals)."""
        columns = [Column("concurrency"), Column("measured"), Column("k"), Column("context"),
                   Column("measured ms", "{:.2f}"), Column("model ms", "{:.2f}"),
                   Column("residual", lambda e: f"{100 * e:+.1f}%")]
        rows = self.report.residuals if self.report is not None else []
        return View.of(columns, [[r["concurrency"], r["what"], r["k"], r["context"], r["measured_ms"], r["model_ms"],
                                  r["error"]] for r in rows])

    def table(self):
        return self.view().frame()

    def findings(self, tag: str = "") -> dict[str, str]:
        """``engine_costs``: how many steps were measured at which forced τ, the fit to all of them, and how far the
        fit to the smallest and largest batch carries to the others; or that nothing was measured, and why."""
        t = f" {tag}" if tag else ""
        if self.measured is None or self.report is None:
            return {"engine_costs": f"**Cost table here{t}:** not measured ({self.status})."}
        head = (f"**Cost table here{t}:** {len(self.measured.rows)} steps measured in {self.status} at forced τ "
                f"{', '.join(f'{x:g}' for x in self.forced)} (`{Path(self.path).name}`)")
        fitted = self.worst_fitted
        if fitted is None or self.worst_held_out is None:
            return {"engine_costs": head + "."}
        return {"engine_costs": f"{head}; the model fitted to all of them is within {100 * fitted:.0f}% of every one; "
                                f"fitted to the smallest and largest batch alone, it is {100 * self.worst_held_out:.0f}% "
                                "off at the ones between."}

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
        return EngineCostFit.skipped("SERVING_ENGINE = None")
    ok, line = engine_status()
    if not ok:
        return EngineCostFit.skipped(line)
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
    return EngineCostFit(table, report, held, path, f"{version} on this machine", tuple(accept_lens))
