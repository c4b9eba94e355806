"""Does speculation pay at your load? One job: speedup and break-even τ against concurrency, model and logs.

``eaglelab perf --concurrency`` / ``--log``, ``eaglelab plan`` and notebook 01 call
:func:`speculation_under_load` on a :class:`LoadSettings`. The model is
:class:`eaglelab.serving.load.LoadModel`: a roofline of the target (its config, or the founding case's
Kimi-K2.5) on the machine, calibrated by what was measured — the plain tok/s and cycle at one
concurrency, and, from serving logs, every concurrency they hold. Numbers only: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eaglelab.errors import ParameterError, is_whole, require_whole
from eaglelab.inputs import printable
from eaglelab.serving.load_checks import calibration_of
from eaglelab.serving.perf import require_one_setup, require_reachable

DEFAULT_CONCURRENCY = (1, 8, 64, 128)


@dataclass(frozen=True)
class LoadSettings:
    """What the load question is asked of.

    Attributes:
        concurrency: the concurrencies to answer for (requests in flight).
        baseline_tps, cycle_ms, accept_len: the measured point: plain tok/s per request, the speculative
            cycle and τ at ``at_concurrency`` (None: from the logs only).
        at_concurrency: the concurrency the measured point was taken at.
        k: drafts per cycle.
        target_config: a target's config.json for its roofline (None: the founding case's Kimi-K2.5).
        gpu, gpus: the machine (``eaglelab.serving.load.GPUS``) for ``target_config``.
        context: mean context tokens per request (its KV cache is read every step).
        log: a speculative server's log (SGLang / vLLM): τ and tok/s per concurrency.
        plain_log: the same server's log without speculation: the measured speedup per concurrency.
    """

    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    baseline_tps: float | None = None
    cycle_ms: float | None = None
    accept_len: float | None = None
    at_concurrency: int = 1
    k: int = 3
    target_config: str | None = None
    gpu: str = "h100-pcie"
    gpus: int = 8
    context: int = 2048
    log: str | None = None
    plain_log: str | None = None

    def __post_init__(self):
        import math

        if not self.concurrency or not all(is_whole(c) for c in self.concurrency):
            raise ParameterError("--concurrency", f"must be whole numbers >= 1, got {list(self.concurrency)}")
        for name in ("at_concurrency", "k", "gpus", "context"):
            require_whole(f"--{name.replace('_', '-')}", getattr(self, name))
        for name in ("baseline_tps", "cycle_ms", "accept_len"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ParameterError(f"--{name.replace('_', '-')}", f"must be a positive finite number, got {value!r}")
        if self.accept_len is not None:
            require_reachable(self.accept_len, self.k, "--accept-len")
        if self.baseline_tps is not None and self.cycle_ms is not None:  # as plain perf and plan refuse it
            require_one_setup(self.cycle_ms, self.baseline_tps)


@dataclass
class LoadReport:
    """The answer per concurrency: the model's rows, the logs' rows, and up to which concurrency it pays.

    Attributes:
        rows: the calibrated model at each concurrency (:func:`eaglelab.serving.load.by_concurrency`).
        log_rows: the speculative log grouped by concurrency (:func:`eaglelab.serving.logs.by_concurrency`).
        tau: the τ the model's rows use (the entered one, else the logs' median).
        pays_up_to: from ``at_concurrency`` up, the largest concurrency (then powers of two to 1024) up to
            which speculation pays at ``tau``; None when it does not pay at ``at_concurrency`` itself.
        model: the calibrated model (its parameters), and ``calibrated_on``: the points that fixed it.
        calibration: how the model reproduces those points
            (:class:`~eaglelab.serving.load_checks.Calibration`); the table is called calibrated only where it does.
    """

    settings: LoadSettings
    rows: list[dict]
    log_rows: list[dict]
    tau: float | None
    pays_up_to: int | None
    model: Any = None
    calibrated_on: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    calibration: Any = None

    def to_json(self) -> dict[str, Any]:
        return {"by_concurrency": self.rows, "log_by_concurrency": self.log_rows, "accept_len": self.tau,
                "k": self.settings.k, "pays_up_to": self.pays_up_to,
                "model": self.model.to_json() if self.model is not None else None,
                "calibrated_on": self.calibrated_on, "notes": self.notes,
                "calibration": self.calibration.to_json() if self.calibration is not None else None}

    def crossover(self) -> str:
        """One line: up to which concurrency speculation pays, per the model at τ."""
        if self.model is None or self.tau is None:
            return "no model: give a measured point (--baseline-tps, --cycle-ms) or a plain log"
        at = self.settings.at_concurrency
        per = "" if self.calibration is None or self.calibration.calibrated else \
            " (per a model fitted to, not calibrated on, the points measured)"
        if self.pays_up_to is None:
            return f"at τ {self.tau:.2f} speculation does not pay even at {at} request{'s' if at != 1 else ''} in flight{per}"
        if self.pays_up_to >= 1024:
            return f"at τ {self.tau:.2f} speculation pays at every concurrency up to 1024{per}"
        return f"at τ {self.tau:.2f} speculation pays up to {self.pays_up_to} concurrent requests and loses beyond{per}"


def load_model_for(settings: LoadSettings):
    """The uncalibrated roofline: the target's config on ``gpus`` x ``gpu``, else the founding case's Kimi-K2.5."""
    from eaglelab.serving.load import LoadModel, kimi_k25_on_pcie, machine, shape_from_config

    if settings.target_config is None:
        return kimi_k25_on_pcie(settings.gpus, context=settings.context)
    from eaglelab.checkpoints.inspection import load_target_config
    from eaglelab.checkpoints.target_config import text_config

    cfg = load_target_config(settings.target_config)
    text = text_config(cfg)
    shape = shape_from_config(cfg, where=settings.target_config)
    m = machine(settings.gpu, settings.gpus, hidden_size=int(text.get("hidden_size") or 0),
                layers=int(text.get("num_hidden_layers") or 0))
    return LoadModel(shape, m, context=settings.context)


def speculation_under_load(settings: LoadSettings) -> LoadReport:
    """Speedup and break-even τ against concurrency: the model calibrated on what was measured, and the logs.

    Raises:
        ParameterError: neither a measured point nor a log; a point without its cycle.
        LogFormatError: a log that cannot be read.
    """
    from eaglelab.serving.load import Point, by_concurrency, calibrate
    from eaglelab.serving.logs import by_concurrency as log_groups
    from eaglelab.serving.logs import parse_log, parse_plain_log

    s = settings
    point = [s.baseline_tps, s.cycle_ms]
    if None in point and any(v is not None for v in point):
        raise ParameterError("perf", "a measured point needs both --baseline-tps and --cycle-ms (and --accept-len)")
    if s.log is None and None in point:
        raise ParameterError("perf", "give a measured point (--baseline-tps, --cycle-ms, --accept-len) or --log")
    spec = parse_log(s.log) if s.log else None
    plain = parse_plain_log(s.plain_log) if s.plain_log else None
    log_rows = log_groups(spec, plain) if spec is not None else []
    points, notes = [], []
    if s.baseline_tps is not None:
        points.append(Point(s.at_concurrency, decode_s=1.0 / s.baseline_tps,
                            cycle_s=s.cycle_ms / 1e3, k=s.k))
    for row in log_rows:
        c, tps = row["concurrency"], row["throughput"]
        if tps:
            cycle = row["accept_len"] * c / tps
            plain_tps = row.get("plain_throughput")
            decode = c / plain_tps if plain_tps else None
            if decode is not None and cycle < decode:  # a measured speedup above τ: not one setup's numbers
                notes.append(f"concurrency {c} left out of the calibration: the logs' speedup {row['speedup']:.2f}x is "
                             f"above their τ {row['accept_len']:.2f}, a cycle ({1e3 * cycle:.4g} ms) shorter than a plain "
                             f"step ({1e3 * decode:.4g} ms): are both logs from one server?")
                continue
            points.append(Point(c, decode_s=decode, cycle_s=cycle, k=s.k))
    tau = s.accept_len if s.accept_len is not None else (spec.summary()["median_accept_len"] if spec is not None else None)
    if tau is None:
        raise ParameterError("--accept-len", "the τ of the drafter served now is needed (or a --log that holds it)")
    require_reachable(tau, s.k, "--accept-len" if s.accept_len is not None else "--log")
    model = calibration = None
    if any(p.decode_s is not None for p in points):
        start = load_model_for(s)
        model = calibrate(start, points)
        calibration = calibration_of(start, model, points)
        if len(points) == 1 or calibration.broken:  # one point is reproduced, or refused; no table of non-times
            calibration.require(_source(s), None if s.baseline_tps is not None else "--log")
        notes += [n for n in [calibration.note()] if n]
    elif log_rows:
        notes.append("no plain decoding step measured (--baseline-tps or --plain-log): the logs' groups are shown, "
                     "the model is not calibrated")
    rows = by_concurrency(model, list(s.concurrency), s.k, tau) if model is not None else []
    pays = model.pays_up_to(s.k, tau, start=s.at_concurrency) if model is not None else None
    used = [{"concurrency": p.concurrency, "decode_ms": None if p.decode_s is None else 1e3 * p.decode_s,
             "cycle_ms": None if p.cycle_s is None else 1e3 * p.cycle_s} for p in points]
    return LoadReport(s, rows, log_rows, tau, pays, model, used, notes, calibration)


def _source(s: LoadSettings) -> str:
    """The uncalibrated model in words, for a refusal."""
    if s.target_config is None:
        return f"the roofline of Kimi-K2.5 on {s.gpus} PCIe GPUs [assumed]"
    return f"the roofline of {printable(s.target_config)} on {s.gpus} x {s.gpu}"


def lines(report: LoadReport) -> list[str]:
    """What ``eaglelab perf --concurrency`` prints after its own table: the crossover, and where another k pays."""
    other = [r for r in report.rows if not r["pays"] and r["best_speedup"] >= 1.0]
    hint = [f"with k = {r['best_k']} instead (the same per-draft acceptance) it would pay at {r['concurrency']} "
            f"request{'s' if r['concurrency'] != 1 else ''} in flight: {r['best_speedup']:.2f}x" for r in other[:1]]
    return [report.crossover(), *hint, *report.notes]


@dataclass
class EngineLoadCheck:
    """The load model against a real engine: vLLM batched at several concurrencies, on this machine.

    The model (the target's roofline on a CPU, :data:`eaglelab.serving.load.CPU`) is calibrated on the
    smallest and the largest concurrency measured; the ones between are held out, and every row
    says how far the model's speedup is from the measured one, and whether it lies inside the
    range the repeated runs allow (``within_noise``): a gap inside the noise is not the model's.
    """

    run: Any  # eaglelab.engines.vllm.LoadRun
    model: Any
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
    from eaglelab.engines.vllm import engine_status, measure_load_in_engine
    from eaglelab.serving.load import CPU, LoadModel, calibrate, shape_from_config

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
