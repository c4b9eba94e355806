"""Does speculation pay at your load? One job: speedup and break-even τ against concurrency, model and measurements.

``eaglelab perf --concurrency`` / ``--log`` / ``--costs``, ``eaglelab plan`` and notebook 01 call
:func:`speculation_under_load` on a :class:`LoadSettings`. The model is the one serving-cost model,
:class:`eaglelab.serving.load.LoadModel` (the target's config, or the founding case's Kimi-K2.5, on the
GPUs), calibrated by what was measured: the plain tok/s and cycle at one concurrency, the serving logs'
groups per concurrency, or an engine's cost table (:mod:`eaglelab.serving.cost_table`, measured by
``eaglelab recipe --job load``). Numbers only: no torch.
"""

from __future__ import annotations

from dataclasses import replace

from eaglelab.checkpoints.targets.reading import load_serving_config
from eaglelab.errors import ParameterError
from eaglelab.inputs import printable
from eaglelab.jobs.load_report import LoadReport
from eaglelab.jobs.load_settings import DEFAULT_GPU, LoadSettings
from eaglelab.serving.cost_table import CostTable, read_cost_table
from eaglelab.serving.gpus import gpu as gpu_named
from eaglelab.serving.load import (
    CPU,
    FOUNDING_GPU,
    FOUNDING_GPUS,
    FOUNDING_GRAPHS,
    KIMI_K25_CONFIG,
    MEMORY_FRACTION,
    STEP_KINDS,
    LoadModel,
    machine,
)
from eaglelab.serving.load_band import ALPHA_ASSUMED, band_contexts, load_band, unstated_taus
from eaglelab.serving.load_checks import calibration_of, dtype_bits, residuals, stated_bits
from eaglelab.serving.load_fit import Point, calibrate
from eaglelab.serving.load_tables import by_concurrency
from eaglelab.serving.logs import log_by_concurrency, parse_log, parse_plain_log
from eaglelab.serving.perf import (
    require_reachable,
)
from eaglelab.serving.target_shape import (
    TargetShape,
    kept_unquantized,
    shape_from_config,
)


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
    deployment = dict(context=s.context_tokens, topk=s.topk, draft_tokens=s.draft_tokens, verify_kv=s.verify_kv, dcp=s.dcp)
    if gpu == "cpu":  # the workbook's own engine runs: vLLM's CPU build on this machine
        if s.dcp > 1:
            raise ParameterError("--dcp", "decode context parallelism splits the KV cache over GPUs; --gpu cpu has none")
        return LoadModel(shape, CPU, **deployment), f"the serving-cost model of {what} on this machine's CPU"
    gpus = s.gpus or gpus or _gpus_for(shape, gpu)
    if gpus % s.dcp:
        raise ParameterError("--dcp", f"{s.dcp} must divide the {gpus} GPUs of the tensor-parallel group (--gpus), as "
                                      "vLLM requires")
    m = machine(gpu, gpus, link=s.link, graphs=graphs, link_bytes_s=None if s.link_gbps is None else s.link_gbps * 1e9)
    assumed = [] if s.gpu else [f"--gpu {gpu} [assumed]"]
    assumed += [] if s.gpus else [f"--gpus {gpus} [{'assumed' if s.target_config is None else 'the fewest that hold it'}]"]
    dcp = f", the KV cache split {s.dcp} ways by decode context parallelism" if s.dcp > 1 else ""
    source = f"the serving-cost model of {what} on {m.name}{dcp}" + (f" ({', '.join(assumed)})" if assumed else "")
    return LoadModel(shape, m, **deployment), source


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


def _measured_point(s: LoadSettings, start: LoadModel, tau: float) -> list[Point]:
    """The point measured at ``at_concurrency`` at τ (the cycle of tok/s or a speedup depends on it), or none."""
    if s.baseline_tps is None and s.speedup is None:
        return []
    decode = 1.0 / s.baseline_tps if s.baseline_tps is not None else float(start.decode_s(s.at_concurrency))
    cycle = s.cycle_ms / 1e3 if s.cycle_ms is not None else tau / s.spec_tps if s.spec_tps is not None \
        else tau * decode / s.speedup
    return [Point(s.at_concurrency, decode_s=decode, cycle_s=cycle, k=s.k)]


def speculation_under_load(settings: LoadSettings) -> LoadReport:
    """Speedup and break-even τ against concurrency: the model calibrated on what was measured, and the logs.

    Raises:
        ParameterError: no measured point, log or cost table; a point without its cycle.
        LogFormatError: a log that cannot be read; CostTableError: a cost table that cannot be read.
    """
    s = settings
    cycle_given = s.cycle_ms is not None or s.spec_tps is not None
    if (s.baseline_tps is not None) != cycle_given and s.speedup is None:
        raise ParameterError("perf", "a measured point needs --baseline-tps and its cycle (--cycle-ms or --spec-tps), or "
                                     "--speedup alone")
    measured = s.baseline_tps is not None or s.speedup is not None
    datasheet = s.log is None and s.costs is None and not measured  # nothing measured: the datasheets' answer
    if datasheet and s.accept_len is None and s.accept_lens is None:
        raise ParameterError("perf", "give a measured point (--baseline-tps, --cycle-ms, --accept-len), --log or --costs; "
                                     "or --accept-len alone for the datasheets' answer")
    spec = parse_log(s.log) if s.log else None
    plain = parse_plain_log(s.plain_log) if s.plain_log else None
    log_rows = log_by_concurrency(spec, plain) if spec is not None else []
    points, notes = [], []
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
    start, source = load_model_for(s)
    corners = [tau]  # τ at the measured load: as given, or its range's ends and middle
    if tau is None and s.cycle_ms is None and measured:  # tok/s or a speedup without τ: τ spans its range
        low, tau, high = unstated_taus(s.k, floor=s.measured_speedup or 1.0)
        corners = [low, tau, high]
        notes.append(f"τ not given: the table is at τ {tau:.2f} (a per-draft acceptance of {ALPHA_ASSUMED} over k = {s.k} "
                     f"drafts), the band spans τ {low:.2f}-{high:.2f}; give --accept-len as your server logs it")
    if tau is None:
        raise ParameterError("--accept-len", "the τ of the drafter served now is needed (or a --log that holds it)")
    require_reachable(tau, s.k, "--accept-len" if s.accept_len is not None else "--log")
    model = calibration = None
    if s.baseline_tps is not None and start.weights_fit():  # else the machine is not the one measured: said below
        require_readable_step(start, s.baseline_tps, s.at_concurrency)
    by_tau = {t: [*_measured_point(s, start, t), *points] for t in corners}
    points = by_tau[tau]
    if not start.weights_fit():
        notes.append(f"the weights ({start.target.total_bytes / 1e9:.0f} GB) do not fit in {start.machine.name} with "
                     f"room for a KV cache: give --gpus or --gpu as deployed")
    if any(p.decode_s is not None for p in points):
        model = calibrate(start, points)
        calibration = calibration_of(start, model, points)
        if len(points) == 1 or calibration.broken:  # one point is reproduced, or refused; no table of non-times
            calibration.require(source, None if s.baseline_tps is not None else "--speedup" if s.speedup is not None
                                else "--log" if s.log else "--costs")
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
        beyond = next((r.concurrency for r in rows if not r.pays), None)
        if beyond is not None and not bool(model.kv_fits(beyond, s.k)):
            tokens = s.context_tokens + model.verify_tokens(s.k)
            why.append(f"at {beyond} requests the KV cache ({beyond} x {tokens} tokens) does not "
                       f"fit beside the weights: {model.kv_capacity_tokens():,.0f} tokens fit")
        elif beyond is not None:
            why += _why(model, beyond, s.k)
    band = None
    if rows:  # the answer at the unstated inputs' ends: each corner's model calibrated on its points
        contexts = band_contexts(s.context_tokens, s.context is not None or bool(s.costs))
        models = {(c, t): model if (c, t) == (s.context_tokens, tau) else calibrate(replace(start, context=c), by_tau[t])
                  if calibration else replace(model, context=c) for c in contexts for t in corners}
        band = load_band(models, s.context_tokens, list(s.concurrencies), s.k, s.at_concurrency,
                         s.accept_lens is not None or bool(log_rows))
    used = [{"concurrency": p.concurrency, "decode_ms": None if p.decode_s is None else 1e3 * p.decode_s,
             "cycle_ms": None if p.cycle_s is None else 1e3 * p.cycle_s, "context": p.context} for p in points]
    measured = residuals(model, points) if model is not None else []
    return LoadReport(s, rows, log_rows, tau, pays, model, used, notes, calibration, source, measured, why, band)
