"""Does speculation pay at your load? One job: speedup and break-even τ against concurrency, model and measurements.

``eaglelab perf --concurrency`` / ``--log`` / ``--costs``, ``eaglelab plan`` and notebook 01 call
:func:`speculation_under_load` on a :class:`LoadSettings`. The model is the one serving-cost model,
:class:`eaglelab.serving.load.LoadModel` (the target's config, or the founding case's Kimi-K2.5, on the
GPUs), calibrated by what was measured: the plain tok/s and cycle at one concurrency, the serving logs'
groups per concurrency, or an engine's cost table (:mod:`eaglelab.serving.cost_table`, measured by
``eaglelab recipe --job load``). Numbers only: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from eaglelab.checkpoints.targets.reading import load_serving_config
from eaglelab.errors import ParameterError
from eaglelab.inputs import printable
from eaglelab.outputs import table
from eaglelab.serving.cost_table import MAX_CONCURRENCY, MAX_WHOLE, CostTable, read_cost_table
from eaglelab.serving.gpus import GPUS
from eaglelab.serving.gpus import gpu as gpu_named
from eaglelab.serving.load import (
    CONCURRENCY_GRID,
    CPU,
    FOUNDING_GPU,
    FOUNDING_GPUS,
    FOUNDING_GRAPHS,
    KIMI_K25_CONFIG,
    LINK_LATENCY_S,
    MEMORY_FRACTION,
    STEP_KINDS,
    VERIFY_KV,
    LoadModel,
    by_concurrency,
    machine,
    require_step_kinds,
    require_verify_kv,
    scales_table,
)
from eaglelab.serving.load_band import DEFAULT_CONTEXT, LoadBand, band_contexts, load_band
from eaglelab.serving.load_checks import Calibration, calibration_of, dtype_bits, residuals, stated_bits
from eaglelab.serving.load_fit import Point, calibrate
from eaglelab.serving.logs import log_by_concurrency, parse_log, parse_plain_log
from eaglelab.serving.perf import (
    CYCLE_MISTAKE,
    MAX_STEP_S,
    MAX_TPS,
    MIN_STEP_S,
    MIN_TPS,
    TPS_MISTAKE,
    require_one_setup,
    require_reachable,
    require_tree,
)
from eaglelab.serving.target_shape import (
    KV_DTYPE_BYTES,
    TargetShape,
    kept_unquantized,
    require_kv_dtype,
    shape_from_config,
)
from eaglelab.settings import DEFAULT_K, check_ranges, option

DEFAULT_CONCURRENCY = (1, 8, 64, 128)
#: The GPU a user's target config is costed on when ``--gpu`` is not given (said so in the output).
DEFAULT_GPU = "h100-sxm"


@dataclass(frozen=True)
class MachineSettings:
    """The target and the machine the serving-cost model describes (``perf``, ``plan`` and notebook 01 share them).

    Attributes:
        target_config: the target's config.json (or folder, hub id) for the serving-cost model (None: the founding
            case's Kimi-K2.5, assumed).
        gpu: the GPU, or cpu: this machine as the workbook's engine runs it (None: the founding case's {FOUNDING_GPU},
            or {DEFAULT_GPU} for a target config; the output says which).
        gpus: GPUs of the tensor-parallel group (None: the founding case's {FOUNDING_GPUS}, or the fewest that hold the
            config's weights).
        link: the interconnect, when not the GPU's usual one.
        link_gbps: the all-reduce bus bandwidth measured on your GPUs (nccl-tests busbw, GB/s).
        kv_dtype: the KV cache's dtype.
        cuda_graphs: the step kinds that run as CUDA graphs: decode, verify, draft (the bare flag: all; None: all, or
            the founding case's decode and draft).
        verify_kv: how the verify's attention reads the KV cache: once per request (FlashAttention, FlashInfer,
            FlashMLA) or per-token (decode kernels, e.g. vLLM's TRITON_MLA).
        context: mean context tokens per request (its KV cache is read every step; 0: short prompts, as sweeps
            publish "ctx 0"; None: not given, {DEFAULT_CONTEXT} assumed and the answer banded over the contexts
            {CONTEXT_RANGE}).
        weight_bits: bits per weight, scales included, every weight at them, when the config does not say how the
            served weights are stored (None: the config's quantization, ModelOpt's hf_quant_config.json beside it,
            else its dtype; the output says which).
    """

    target_config: str | None = None
    gpu: str | None = option(None, choices=(*sorted(GPUS), "cpu"))
    gpus: int | None = option(None, min=1, max=4096)
    link: str | None = option(None, choices=tuple(sorted(LINK_LATENCY_S)))
    link_gbps: float | None = option(None, min=0.01, max=10_000.0,
                                     mistake="GB/s (bytes, as nccl-tests' busbw prints it), not Gb/s or bytes/s")
    kv_dtype: str = option("bf16", choices=tuple(sorted(KV_DTYPE_BYTES)))
    cuda_graphs: tuple[str, ...] | None = option(None, choices=STEP_KINDS, count="*")
    verify_kv: str = option("once", choices=VERIFY_KV)
    context: int | None = option(None, min=0, max=MAX_WHOLE)
    weight_bits: float | None = option(None, min=1.0, max=32.0)

    def __post_init__(self):
        if self.cuda_graphs == ():  # the bare flag: every step kind
            object.__setattr__(self, "cuda_graphs", STEP_KINDS)
        check_ranges(self)  # every field's declared range, for flags, notebooks and the API alike
        require_kv_dtype(self.kv_dtype)
        require_verify_kv(self.verify_kv)
        if self.cuda_graphs is not None:
            require_step_kinds(self.cuda_graphs)

    @property
    def context_tokens(self) -> int:
        """The context the model is evaluated at: the one given, else :data:`DEFAULT_CONTEXT`."""
        return DEFAULT_CONTEXT if self.context is None else self.context

    def machine_settings(self) -> MachineSettings:
        """These settings' machine fields alone."""
        return MachineSettings(**{f.name: getattr(self, f.name) for f in fields(MachineSettings)})


@dataclass(frozen=True)
class LoadSettings(MachineSettings):
    """What the load question is asked of: the measurements, and the target and machine (:class:`MachineSettings`).

    Attributes:
        concurrency: requests in flight to answer for: speedup, break-even τ and the best k at each (None:
            {DEFAULT_CONCURRENCY}).
        baseline_tps: plain decoding tok/s per request, measured at ``at_concurrency``.
        cycle_ms: the speculative cycle in ms (draft + verify + overhead), measured at ``at_concurrency``.
        spec_tps: speculative decoding tok/s per request measured at ``at_concurrency``, instead of ``cycle_ms``
            (the cycle is then τ / spec_tps: what an engine's benchmark prints, no division by hand).
        accept_len: acceptance length τ of the drafter served now (bonus token included).
        accept_lens: τ at each ``concurrency``, one per value (τ moves with load in published sweeps; None:
            ``accept_len`` at every one).
        at_concurrency: the concurrency ``baseline_tps`` and ``cycle_ms`` were measured at.
        k: drafts per cycle.
        topk: the drafter's branching per step (1: a chain).
        draft_tokens: tokens verified per request per cycle (a tree; None: k + 1).
        log: a speculative SGLang or vLLM server log: τ and tok/s per concurrency.
        plain_log: the same server's log without speculation: the measured speedup per concurrency, and the model's
            calibration.
        costs: engines' cost tables (plain steps and cycles at forced τ, as `eaglelab recipe --job load` measures;
            two at different prompt lengths or k tell the model's terms apart): the model is fitted to them and
            every point's residual printed.
    """

    concurrency: tuple[int, ...] | None = option(None, min=1, max=MAX_CONCURRENCY)
    baseline_tps: float | None = option(None, min=MIN_TPS, max=MAX_TPS, mistake=TPS_MISTAKE)
    cycle_ms: float | None = option(None, min=1e3 * MIN_STEP_S, max=1e3 * MAX_STEP_S, mistake=CYCLE_MISTAKE)
    spec_tps: float | None = option(None, min=MIN_TPS, max=MAX_TPS, mistake=TPS_MISTAKE)
    accept_len: float | None = option(None, min=1)
    accept_lens: tuple[float, ...] | None = option(None, min=1)
    at_concurrency: int = option(1, min=1, max=MAX_CONCURRENCY)
    k: int = option(DEFAULT_K, min=1, max=64)
    topk: int = option(1, min=1, max=64)
    draft_tokens: int | None = option(None, min=1, max=64 * 64 + 1)
    log: str | None = None
    plain_log: str | None = None
    costs: tuple[str, ...] | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.spec_tps is not None:
            if self.cycle_ms is not None:
                raise ParameterError("--spec-tps", "give the speculative tok/s or --cycle-ms, not both: the cycle is τ / "
                                                   "the speculative tok/s")
            if self.accept_len is None:
                raise ParameterError("--spec-tps", "needs --accept-len: the cycle is τ / the speculative tok/s")
            object.__setattr__(self, "cycle_ms", 1e3 * self.accept_len / self.spec_tps)
            check_ranges(self)
        if self.concurrency is not None and not self.concurrency:
            raise ParameterError("--concurrency", "must name at least one concurrency")
        if isinstance(self.costs, str):  # one table, as a notebook gives it
            object.__setattr__(self, "costs", (self.costs,))
        if self.accept_len is not None:
            require_reachable(self.accept_len, self.k, "--accept-len")
        points = self.concurrencies
        if self.accept_lens is not None:
            if len(self.accept_lens) != len(points):
                raise ParameterError("--accept-lens", f"needs one τ per --concurrency ({len(points)}), got "
                                                      f"{len(self.accept_lens)}")
            for tau in self.accept_lens:
                require_reachable(tau, self.k, "--accept-lens")
        if self.accept_lens is not None and self.accept_len is not None and self.at_concurrency in points:
            at = self.accept_lens[points.index(self.at_concurrency)]
            if abs(at - self.accept_len) > 1e-9:
                raise ParameterError("--accept-lens", f"gives τ {at:g} at --at-concurrency {self.at_concurrency}, where the "
                                                      f"measured point's τ is {self.accept_len:g} (--accept-len): one τ there")
        require_tree(self.k, self.topk, self.draft_tokens)
        if self.baseline_tps is not None and self.cycle_ms is not None:  # as plain perf and plan refuse it
            require_one_setup(self.cycle_ms, self.baseline_tps)

    @property
    def concurrencies(self) -> tuple[int, ...]:
        """The concurrencies answered for: ``concurrency``, else :data:`DEFAULT_CONCURRENCY`."""
        return tuple(self.concurrency) if self.concurrency else DEFAULT_CONCURRENCY


@dataclass
class LoadReport:
    """The answer per concurrency: the model's rows, the measurements' rows, and up to which concurrency it pays.

    Attributes:
        rows: the calibrated model at each concurrency (:func:`eaglelab.serving.load.by_concurrency`).
        log_rows: the speculative log grouped by concurrency (:func:`eaglelab.serving.logs.log_by_concurrency`).
        tau: the τ the model's rows use (the entered one, else the logs' median).
        pays_up_to: from ``at_concurrency`` up, the largest concurrency (then powers of two to 1024) up to
            which speculation pays at ``tau`` with the KV cache fitting; None when it does not pay at
            ``at_concurrency`` itself.
        model: the calibrated model, ``source``: what it is of, in words, ``calibrated_on``: the points that fixed it.
        calibration: how the model reproduces those points
            (:class:`~eaglelab.serving.load_checks.Calibration`); the table is called calibrated only where it does.
        residuals: each measured step beside the model's (measured and model ms, relative error).
        why: the reasons at the crossover, in words (the cycle's largest parts there).
    """

    settings: LoadSettings
    rows: list[dict]
    log_rows: list[dict]
    tau: float | None
    pays_up_to: int | None
    model: LoadModel | None = None
    calibrated_on: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    calibration: Calibration | None = None
    source: str = ""
    residuals: list[dict] = field(default_factory=list)
    why: list[str] = field(default_factory=list)
    band: LoadBand | None = None

    def to_json(self) -> dict[str, Any]:
        return {"by_concurrency": self.rows, "log_by_concurrency": self.log_rows, "accept_len": self.tau,
                "k": self.settings.k, "pays_up_to": self.pays_up_to, "source": self.source,
                "model": self.model.to_json() if self.model is not None else None,
                "parameters": self.model.parameters() if self.model is not None else [],
                "calibrated_on": self.calibrated_on, "residuals": self.residuals, "notes": self.notes, "why": self.why,
                "calibration": self.calibration.to_json() if self.calibration is not None else None,
                "band": self.band.to_json() if self.band is not None else None}

    def lines(self) -> list[str]:
        """What ``eaglelab perf --concurrency`` prints: the logs' groups, the model's table, its residuals, the crossover."""
        out = []
        if self.log_rows:
            out += table([[r["concurrency"], r["n"], f"{r['accept_len']:.2f}", tps_cell(r["throughput"]),
                           tps_cell(r.get("plain_throughput")), "-" if r.get("speedup") is None else f"{r['speedup']:.2f}x"]
                          for r in self.log_rows],
                         ["concurrency", "n (log)", "accept len", "tok/s", "plain tok/s", "measured"]).splitlines() + [""]
        if self.rows:
            band = [] if self.band is None else ["band"]
            out += table([[r["concurrency"], f"{r['decode_ms']:.1f}", f"{r['verify_ms']:.1f}", f"{r['cycle_ms']:.1f}",
                           f"{r['speedup']:.2f}x", *([self.band.cell(r["concurrency"])] if self.band else []),
                           f"{r['break_even_tau']:.2f}", r["best_k"], f"{r['best_speedup']:.2f}x"] for r in self.rows],
                         ["concurrency", "decode ms", "verify ms", "cycle ms", f"speedup (τ {self.tau:.2f})", *band,
                          "break-even τ", "best k", "at best k"]).splitlines()
            out.append(f"({self.source}" + (f", {self.calibration.line()})" if self.calibration is not None else ")"))
        if len(self.residuals) > 2 and self.model is not None:
            out += [""] + table([[r["concurrency"], r["what"], r["k"] or "-", "-" if r["context"] is None else r["context"],
                                  f"{r['measured_ms']:.2f}", f"{r['model_ms']:.2f}", f"{100 * r['error']:+.1f}%"]
                                 for r in self.residuals],
                                ["concurrency", "measured", "k", "context", "measured ms", "model ms", "residual"]).splitlines()
            out.append("each term, measured over its datasheet value: " + ", ".join(
                f"{r['term']} {r['multiplier']:.2f}x" for r in scales_table(self.model)))
        return out + [self.crossover(), *(self.band.lines() if self.band else []), *self.why, *self.k_hint(), *self.notes]

    def k_hint(self) -> list[str]:
        """At most one line: the first concurrency of the table where speculation does not pay at ``k`` but would at
        another k whose KV cache fits there (the table's own ``best_k`` and ``best_speedup``)."""
        k = self.settings.k
        other = [r for r in self.rows if not r["pays"] and r["best_k"] != k and r["best_speedup"] >= 1.0
                 and self.model is not None and bool(self.model.kv_fits(r["concurrency"], r["best_k"]))]
        return [f"with k = {r['best_k']} instead (the same per-draft acceptance) it would pay at {r['concurrency']} "
                f"request{'s' if r['concurrency'] != 1 else ''} in flight: {r['best_speedup']:.2f}x" for r in other[:1]]

    def crossover(self) -> str:
        """One line: up to which concurrency speculation pays, per the model at τ."""
        if self.model is None or self.tau is None:
            return "no model: give a measured point (--baseline-tps, --cycle-ms), a plain log or a cost table"
        at = self.settings.at_concurrency
        per = "" if self.calibration is None or self.calibration.calibrated else \
            " (per a model fitted to, not calibrated on, the points measured)"
        if self.pays_up_to is None:
            line = f"at τ {self.tau:.2f} speculation does not pay at {at} request{'s' if at != 1 else ''} in flight"
        elif self.pays_up_to >= 1024:
            line = f"at τ {self.tau:.2f} speculation pays at every concurrency up to 1024"
        else:
            beyond = next(b for b in CONCURRENCY_GRID if b > self.pays_up_to)
            line = (f"at τ {self.tau:.2f} speculation pays up to {self.pays_up_to} concurrent requests; at {beyond} their "
                    "KV cache does not fit beside the weights" if not bool(self.model.kv_fits(beyond, self.settings.k))
                    else f"at τ {self.tau:.2f} speculation pays up to {self.pays_up_to} concurrent requests and loses "
                         "beyond")
        return line + self._rows_beside() + per

    def _rows_beside(self) -> str:
        """What the table's rows add to the crossover: where it pays beyond it (the rows not monotone), or that it
        pays at no concurrency answered."""
        upto = self.pays_up_to or 0
        again = [r for r in self.rows if r["pays"] and r["concurrency"] > upto]
        if again:
            where = ", ".join(f"{r['concurrency']} ({r['speedup']:.2f}x)" for r in again[:4])
            return (f", yet by the table it pays at {where}: the speedup is not monotone in the load here, so read "
                    "the rows, not one crossover")
        if self.pays_up_to is None and self.rows:
            return f" nor at any concurrency of the table ({', '.join(str(r['concurrency']) for r in self.rows)})"
        return ""


def tps_cell(x: float | None) -> str:
    """A tok/s in a table cell: one decimal, ``-`` when not measured."""
    return "-" if x is None else f"{x:.1f}"


def _gpus_for(shape, gpu: str) -> int:
    """The fewest GPUs (a power of two, at most 64) whose memory holds the weights with room to spare."""
    per_gpu = gpu_named(gpu).memory_bytes * MEMORY_FRACTION
    g = 1
    while g < 64 and shape.total_bytes / g > 0.8 * per_gpu:
        g *= 2
    return g


def weights_words(shape: TargetShape, config: dict, weight_bits: float | None, where: str) -> str:
    """The weights' bytes and the bits a weight they were counted at, with where the bits were read."""
    bits, why = (weight_bits, "--weight-bits") if weight_bits else stated_bits(config, where)
    stored = dtype_bits(config, where)
    kept = sorted(kept_unquantized(config)) if why.startswith("quantization_config") and bits != stored else []
    kept_words = f"; {', '.join(k.replace('_', ' ') for k in kept)} kept at {stored:g}" if kept else ""
    return f"weights {shape.total_bytes / 1e9:.1f} GB at {bits:g} bits a weight ({why}{kept_words})"


def load_model_for(settings: LoadSettings) -> tuple[LoadModel, str]:
    """The uncalibrated model and what it is of, in words: the target's config on the GPUs, else the founding case."""
    s = settings
    if s.target_config is None:
        config, where, what = KIMI_K25_CONFIG, "Kimi-K2.5", "Kimi-K2.5 (the founding case) [assumed]"
        gpu, gpus = s.gpu or FOUNDING_GPU, s.gpus or FOUNDING_GPUS
        graphs = s.cuda_graphs if s.cuda_graphs is not None else FOUNDING_GRAPHS
    else:
        config, where, what = load_serving_config(s.target_config), s.target_config, printable(s.target_config)
        gpu = s.gpu or DEFAULT_GPU
        graphs = s.cuda_graphs if s.cuda_graphs is not None else STEP_KINDS
        gpus = None
    shape = shape_from_config(config, weight_bits=s.weight_bits, kv_dtype=s.kv_dtype, where=where)
    what = f"{what}, {weights_words(shape, config, s.weight_bits, where)}"
    if gpu == "cpu":  # the workbook's own engine runs: vLLM's CPU build on this machine
        model = LoadModel(shape, CPU, context=s.context_tokens, topk=s.topk, draft_tokens=s.draft_tokens, verify_kv=s.verify_kv)
        return model, f"the serving-cost model of {what} on this machine's CPU"
    gpus = s.gpus or gpus or _gpus_for(shape, gpu)
    m = machine(gpu, gpus, link=s.link, graphs=graphs, link_bytes_s=None if s.link_gbps is None else s.link_gbps * 1e9)
    assumed = [] if s.gpu else [f"--gpu {gpu} [assumed]"]
    assumed += [] if s.gpus else [f"--gpus {gpus} [{'assumed' if s.target_config is None else 'the fewest that hold it'}]"]
    source = f"the serving-cost model of {what} on {m.name}" + (f" ({', '.join(assumed)})" if assumed else "")
    return LoadModel(shape, m, context=s.context_tokens, topk=s.topk, draft_tokens=s.draft_tokens, verify_kv=s.verify_kv), source


#: A measured plain step this many times shorter than reading the weights at the datasheet bandwidth is refused.
STEP_FLOOR_MARGIN = 2.0


def require_readable_step(model: LoadModel, baseline_tps: float, concurrency: int) -> None:
    """Refuse a ``--baseline-tps`` whose plain step is shorter than reading the weights once on the machine described
    (beyond :data:`STEP_FLOOR_MARGIN`): the likely mix-up is aggregate tok/s given as per request, or another machine.

    Raises:
        ParameterError: naming ``--baseline-tps``, the step it implies, the read it cannot beat, and what to check.
    """
    step = 1.0 / baseline_tps
    floor = float(model.forward_parts(concurrency, concurrency)["memory"])
    if not step * STEP_FLOOR_MARGIN < floor:
        return
    aggregate = f"; if {baseline_tps:g} tok/s is all {concurrency} requests' together, give {baseline_tps / concurrency:.4g}" \
        if concurrency > 1 else "; if it is several requests' tok/s together, give one request's and --at-concurrency " \
                                "as measured"
    raise ParameterError("--baseline-tps", f"the model cannot reproduce the point measured: {baseline_tps:g} tok/s per "
                                           f"request means a plain step of {1e3 * step:.3g} ms at "
                                           f"{concurrency} in flight, under the {1e3 * floor:.3g} ms that reading the "
                                           f"weights and KV cache once takes on {model.machine.name} at its datasheet "
                                           f"bandwidth{aggregate}; else name the machine (--gpu, --gpus, --weight-bits)")


def cost_points(table: CostTable, s: LoadSettings) -> list[Point]:
    """A cost table's rows as measured points (plain steps and cycles at their own context)."""
    for r in table.cycles:
        if r.topk != s.topk or r.draft_tokens != (s.draft_tokens or r.k + 1):
            raise ParameterError("--costs", f"{table.path}: a row measured with topk {r.topk} and {r.draft_tokens} draft "
                                            f"tokens, but the question is asked for topk {s.topk} and "
                                            f"{s.draft_tokens or 'k + 1'}: give --topk / --draft-tokens as measured")
    return [Point(r.concurrency, decode_s=r.step_s, context=r.context) if r.plain else
            Point(r.concurrency, cycle_s=r.step_s, k=r.k, context=r.context) for r in table.rows]


def _why(model: LoadModel, b: int, k: int) -> list[str]:
    """What a cycle at ``b`` requests is made of, its two largest parts, with their levers."""
    parts = model.parts(b, k)
    cycle = sum(p["ms"] for p in parts)
    requests = f"{b} request{'s' if b != 1 else ''}"
    return [f"at {requests} the cycle is {cycle:.1f} ms against a plain step of {1e3 * float(model.decode_s(b)):.1f} ms; "
            "its largest parts: " + "; ".join(f"{p['part']} {p['ms']:.1f} ms ({100 * p['share']:.0f}%; lever: {p['lever']})"
                                              for p in parts[:2])]


def speculation_under_load(settings: LoadSettings) -> LoadReport:
    """Speedup and break-even τ against concurrency: the model calibrated on what was measured, and the logs.

    Raises:
        ParameterError: no measured point, log or cost table; a point without its cycle.
        LogFormatError: a log that cannot be read; CostTableError: a cost table that cannot be read.
    """
    s = settings
    point = [s.baseline_tps, s.cycle_ms]
    if None in point and any(v is not None for v in point):
        raise ParameterError("perf", "a measured point needs both --baseline-tps and --cycle-ms (and --accept-len)")
    datasheet = s.log is None and s.costs is None and None in point  # nothing measured: the datasheets' answer
    if datasheet and s.accept_len is None and s.accept_lens is None:
        raise ParameterError("perf", "give a measured point (--baseline-tps, --cycle-ms, --accept-len), --log or --costs; "
                                     "or --accept-len alone for the datasheets' answer")
    spec = parse_log(s.log) if s.log else None
    plain = parse_plain_log(s.plain_log) if s.plain_log else None
    log_rows = log_by_concurrency(spec, plain) if spec is not None else []
    points, notes = [], []
    if s.baseline_tps is not None:
        points.append(Point(s.at_concurrency, decode_s=1.0 / s.baseline_tps, cycle_s=s.cycle_ms / 1e3, k=s.k))
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
    for path in s.costs or ():
        points += cost_points(read_cost_table(path), s)
    tau = s.accept_len if s.accept_len is not None else (spec.summary()["median_accept_len"] if spec is not None else None)
    if tau is None and s.accept_lens is not None:
        tau = s.accept_lens[0]
    if tau is None:
        raise ParameterError("--accept-len", "the τ of the drafter served now is needed (or a --log that holds it)")
    require_reachable(tau, s.k, "--accept-len" if s.accept_len is not None else "--log")
    model = calibration = None
    start, source = load_model_for(s)
    if s.baseline_tps is not None and start.weights_fit():  # else the machine is not the one measured: said below
        require_readable_step(start, s.baseline_tps, s.at_concurrency)
    if not start.weights_fit():
        notes.append(f"the weights ({start.target.total_bytes / 1e9:.0f} GB) do not fit in {start.machine.name} with "
                     f"room for a KV cache: give --gpus or --gpu as deployed")
    if any(p.decode_s is not None for p in points):
        model = calibrate(start, points)
        calibration = calibration_of(start, model, points)
        if len(points) == 1 or calibration.broken:  # one point is reproduced, or refused; no table of non-times
            calibration.require(source, None if s.baseline_tps is not None else "--log" if s.log else "--costs")
        notes += [n for n in [calibration.note()] if n]
        if len(points) == 1:
            notes.append(f"calibrated on one point (concurrency {points[0].concurrency}): the other concurrencies are the "
                         "model's shape; a cost table (eaglelab recipe --job load) measures them")
    elif log_rows:
        notes.append("no plain decoding step measured (--baseline-tps, --plain-log or --costs): the logs' groups are shown, "
                     "the model is not calibrated")
    elif datasheet:
        model, source = start, f"{source} [datasheet only: nothing measured]"
        notes.append("nothing measured: the answer is the datasheets' and the model's assumed efficiencies, often 20-50% "
                     "off; measure one point (--baseline-tps, --cycle-ms) or a cost table (eaglelab recipe --job load)")
    taus = dict(zip(s.concurrencies, s.accept_lens)) if s.accept_lens is not None else {}
    rows = by_concurrency(model, list(s.concurrencies), s.k, tau, s.accept_lens) if model is not None else []
    pays = model.pays_up_to(s.k, lambda b: taus.get(b, tau), start=s.at_concurrency) if model is not None else None
    why = []
    if model is not None:
        beyond = next((r["concurrency"] for r in rows if not r["pays"]), None)
        if beyond is not None and not bool(model.kv_fits(beyond, s.k)):
            tokens = s.context_tokens + model.verify_tokens(s.k)
            why.append(f"at {beyond} requests the KV cache ({beyond} x {tokens} tokens) does not "
                       f"fit beside the weights: {model.kv_capacity_tokens():,.0f} tokens fit")
        elif beyond is not None:
            why += _why(model, beyond, s.k)
    band = None
    if rows:  # the answer at the unstated inputs' ends: each context's model calibrated on the same points
        contexts = band_contexts(s.context_tokens, s.context is not None or bool(s.costs))
        models = {c: model if c == s.context_tokens else calibrate(replace(start, context=c), points) if calibration
                  else replace(model, context=c) for c in contexts}
        band = load_band(models, s.context_tokens, list(s.concurrencies), s.k, tau, s.at_concurrency,
                         s.accept_lens is not None or bool(log_rows))
    used = [{"concurrency": p.concurrency, "decode_ms": None if p.decode_s is None else 1e3 * p.decode_s,
             "cycle_ms": None if p.cycle_s is None else 1e3 * p.cycle_s, "context": p.context} for p in points]
    measured = residuals(model, points) if model is not None else []
    return LoadReport(s, rows, log_rows, tau, pays, model, used, notes, calibration, source, measured, why, band)
