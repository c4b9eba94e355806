"""Speculation under load: decode and verify step times against concurrency, from a roofline of the target.

At small batch a step is bound by the bytes it reads (the weights, the KV cache), so a verify of
k + 1 tokens per request costs about what a decode step costs; as the batch grows the step becomes
compute-bound (and a MoE touches more of its experts), so the verify's ``B (k + 1)`` tokens cost up
to ``k + 1`` decode steps while τ stays what it was. Speculation that pays with one request in
flight can lose at 128.

One forward of ``t`` tokens for ``B`` requests costs (:meth:`LoadModel.forward_s`)::

    overhead + max(bytes(t, B) / bandwidth, flops(t) / peak) + comm(t)

(on a CPU, whose step streams the weights and then computes, the sum of the two instead of the larger:
:attr:`Machine.overlap`)

with ``bytes`` the weights a forward touches (dense weights, plus each MoE layer's expected distinct
experts, :func:`eaglelab.serving.perf.distinct_experts_touched`) and the requests' KV caches, ``flops``
two per active parameter per token, ``comm`` the tensor-parallel all-reduces. A decode step is a
forward of ``B`` tokens; a verify, of ``B (k + 1)`` tokens over the same KV; a cycle, a verify plus
``k`` drafter steps plus an overhead. Speedup at ``B`` is ``τ · decode(B) / cycle(B)``; the τ at
which it only breaks even, ``cycle(B) / decode(B)``.

The inputs of a roofline are order-of-magnitude; what the user measured fixes the rest
(:func:`calibrate`): one point (the founding case's 82 tok/s and 30 ms cycle) scales the machine so
the model reproduces it exactly there; points at several concurrencies (per-concurrency groups of
serving logs, or engine runs at several batch sizes) fit the roofline's bandwidth and peak, the step's
fixed and per-request overheads and the drafter's step, decode steps and cycles together. For a MoE
target the speedup need not fall monotonically: a verify's extra tokens wake experts a small batch's
decode step does not read, until the batch's decode already reads nearly all of them. Only numpy:
``eaglelab perf`` and ``plan`` stay metadata commands.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

from eaglelab.errors import ParameterError, is_whole, require_whole
from eaglelab.serving.load_checks import SCALE_LIMIT, check_target_config, config_bits
from eaglelab.serving.perf import accept_len_constant_rate, distinct_experts_touched, rate_for_accept_len

#: Concurrencies scanned for "up to which concurrency does it pay" (the answer is the largest that pays).
CONCURRENCY_GRID = tuple(2 ** i for i in range(11))  # 1 .. 1024
#: Drafts per cycle considered for the best k at each concurrency.
K_RANGE = range(1, 9)


@dataclass(frozen=True)
class Machine:
    """What one step of the target runs on: every GPU of the tensor-parallel group together.

    Attributes:
        name: a label for tables.
        bandwidth_bytes_s: memory bandwidth, all GPUs together (bytes/s).
        flops_s: dense peak at the compute dtype, all GPUs together (FLOP/s).
        step_overhead_s: fixed cost of one forward (launches, scheduling).
        request_overhead_s: what each request in the batch adds to a forward (its scheduling, sampling,
            attention launch): on a GPU small, on a CPU engine often what grows a step with the batch.
        comm_latency_s: fixed cost of the all-reduces of one forward (0 on one device).
        comm_s_per_token: the all-reduces' cost per token in the forward.
        overlap: whether a step's memory traffic and its compute overlap (a GPU kernel's pipeline: the step
            costs the larger of the two) or run one after the other (a CPU engine: their sum).
    """

    name: str
    bandwidth_bytes_s: float
    flops_s: float
    step_overhead_s: float = 0.0
    request_overhead_s: float = 0.0
    comm_latency_s: float = 0.0
    comm_s_per_token: float = 0.0
    overlap: bool = True

    def __post_init__(self):
        """A positive finite bandwidth and peak, every overhead finite and >= 0: no step costs less than nothing."""
        rates = (self.bandwidth_bytes_s, self.flops_s)
        costs = (self.step_overhead_s, self.request_overhead_s, self.comm_latency_s, self.comm_s_per_token)
        if not (all(0 < v < math.inf for v in rates) and all(0 <= v < math.inf for v in costs)):
            raise ParameterError(f"machine {self.name}", "needs a positive finite bandwidth and peak and overheads >= 0, "
                                                         f"got {rates} and {costs}")

    def scaled(self, bandwidth: float = 1.0, flops: float = 1.0) -> Machine:
        return replace(self, bandwidth_bytes_s=self.bandwidth_bytes_s * bandwidth, flops_s=self.flops_s * flops)


#: Per-GPU figures of common accelerators: (HBM bytes/s, dense bf16 FLOP/s, interconnect all-reduce bytes/s).
GPUS = {
    "h100-pcie": (2.0e12, 756e12, 12e9),
    "h100-sxm": (3.35e12, 989e12, 300e9),
    "h200": (4.8e12, 989e12, 300e9),
    "a100-80g": (2.0e12, 312e12, 200e9),
    "l40s": (0.86e12, 362e12, 12e9),
}


def machine(gpu: str, gpus: int = 1, efficiency: float = 0.6, step_overhead_s: float = 0.0,
            hidden_size: int = 0, layers: int = 0) -> Machine:
    """A :class:`Machine` of ``gpus`` x ``gpu`` at ``efficiency`` of the datasheet's bandwidth and peak.

    With ``hidden_size`` and ``layers``, the tensor-parallel all-reduces (two per layer, ring) are costed too.
    """
    if gpu not in GPUS:
        raise ParameterError("--gpu", f"unknown GPU {gpu!r}; choose one of {', '.join(GPUS)}")
    if gpus < 1:
        raise ParameterError("--gpus", f"must be at least 1, got {gpus}")
    bw, peak, link = GPUS[gpu]
    comm_lat = comm_tok = 0.0
    if gpus > 1 and hidden_size and layers:
        comm_lat = layers * 2 * 15e-6
        comm_tok = layers * 2 * hidden_size * 2 * 2 * (gpus - 1) / gpus / link
    return Machine(f"{gpus} x {gpu}", bw * gpus * efficiency, peak * gpus * efficiency, step_overhead_s,
                   comm_latency_s=comm_lat, comm_s_per_token=comm_tok)


#: A CPU as the workbook's engine sees it (one thread of torch under vLLM's CPU build): a starting
#: point that :func:`calibrate` moves to what the machine measures. Its steps stream the weights and
#: then compute (no overlap): on the demo world's vLLM runs the additive step's worst held-out error
#: was 9.4%, the larger-of-the-two's 15.6% (docs/MEASURED.md).
CPU = Machine("cpu", bandwidth_bytes_s=10e9, flops_s=30e9, step_overhead_s=5e-3, request_overhead_s=0.5e-3,
              overlap=False)


@dataclass(frozen=True)
class TargetShape:
    """What one forward of the target reads and computes.

    Attributes:
        dense_bytes: weights every token reads (attention, embeddings, dense MLPs, shared experts).
        active_params: parameters a token computes with (two FLOPs each).
        kv_bytes_per_token: KV-cache bytes of one context token, all layers.
        moe_layers, experts_total, experts_per_token, expert_bytes: the routed experts (0 for a dense model).
    """

    dense_bytes: float
    active_params: float
    kv_bytes_per_token: float = 0.0
    moe_layers: int = 0
    experts_total: int = 0
    experts_per_token: int = 0
    expert_bytes: float = 0.0

    def __post_init__(self):
        """Every byte and FLOP term finite and >= 0, and a token's experts among the layer's: else a forward could
        read negative bytes, or a verify cost less than a decode step."""
        bad = [f"{k} {v!r}" for k, v in asdict(self).items() if not (isinstance(v, (int, float)) and 0 <= v < math.inf)]
        if self.moe_layers and not 1 <= self.experts_per_token <= self.experts_total:
            bad.append(f"experts_per_token {self.experts_per_token!r} of experts_total {self.experts_total!r}")
        if bad:
            raise ParameterError("target shape", "every byte and FLOP term must be a finite number >= 0: " + ", ".join(bad))

    def weight_bytes(self, tokens) -> np.ndarray:
        t = np.asarray(tokens, dtype=float)
        if not self.moe_layers:
            return np.zeros_like(t) + self.dense_bytes
        experts = distinct_experts_touched(t, self.experts_total, self.experts_per_token)
        return self.dense_bytes + self.moe_layers * experts * self.expert_bytes


def shape_from_config(cfg: dict, weight_bits: float | None = None, where: str = "config.json") -> TargetShape:
    """A :class:`TargetShape` from a transformers config (dense, GQA / MLA attention, routed experts).

    ``weight_bits``: bits per weight (default: from ``quantization_config`` when it names them, else the
    ``torch_dtype``'s). Embeddings are counted once (read by the tokens' rows only, so they are left out of
    the per-token bytes), ``lm_head`` fully.
    """
    from eaglelab.checkpoints.config_types import check_config_types
    from eaglelab.checkpoints.target_config import text_config

    text = text_config(cfg)
    check_config_types(text, where)
    check_target_config(text, where)
    try:
        H, L, V = int(text["hidden_size"]), int(text["num_hidden_layers"]), int(text["vocab_size"])
    except (KeyError, TypeError, ValueError):
        raise ParameterError(where, "a target config needs hidden_size, num_hidden_layers and vocab_size") from None
    heads = int(text.get("num_attention_heads") or 1)
    bits = weight_bits or config_bits(cfg, where)
    per = bits / 8
    if text.get("kv_lora_rank"):  # MLA (DeepSeek-V3, Kimi-K2): a compressed latent per token and layer
        q_rank, kv_rank = int(text.get("q_lora_rank") or 0), int(text["kv_lora_rank"])
        rope, nope = int(text.get("qk_rope_head_dim") or 64), int(text.get("qk_nope_head_dim") or 128)
        v_dim = int(text.get("v_head_dim") or 128)
        attn = (H * q_rank + q_rank * heads * (nope + rope) if q_rank else H * heads * (nope + rope)) \
            + H * (kv_rank + rope) + kv_rank * heads * (nope + v_dim) + heads * v_dim * H
        kv = L * (kv_rank + rope) * 2
    else:
        head_dim = int(text.get("head_dim") or H // heads)
        kv_heads = int(text.get("num_key_value_heads") or heads)
        attn = H * heads * head_dim * 2 + H * kv_heads * head_dim * 2
        kv = L * 2 * kv_heads * head_dim * 2
    inter = int(text.get("intermediate_size") or 4 * H)
    experts = int(text.get("n_routed_experts") or text.get("num_experts") or text.get("num_local_experts") or 0)
    if experts:
        top = int(text.get("num_experts_per_tok") or 1)
        moe_inter = int(text.get("moe_intermediate_size") or inter)
        dense_layers = int(text.get("first_k_dense_replace") or 0)
        shared = int(text.get("n_shared_experts") or 0) * 3 * H * moe_inter
        moe_layers = L - dense_layers
        dense_params = L * attn + dense_layers * 3 * H * inter + moe_layers * shared + V * H
        expert = 3 * H * moe_inter
        active = dense_params + moe_layers * top * expert
        return TargetShape(dense_params * per, active, kv, moe_layers, experts, top, expert * per)
    dense_params = L * (attn + 3 * H * inter) + V * H
    return TargetShape(dense_params * per, dense_params, kv)


@dataclass(frozen=True)
class LoadModel:
    """The roofline of a target on a machine, with a drafter and the requests' context.

    Attributes:
        target: what a target forward reads and computes.
        machine: what it runs on.
        context: mean context tokens per request (its KV cache is read every step).
        draft_step_s: one drafter step at one request (its weights are small: a fixed latency).
        draft_s_per_request: what each more request adds to a drafter step.
        cycle_overhead_s: a cycle's fixed cost beyond verify and drafts (sampling, acceptance, KV moves).
    """

    target: TargetShape
    machine: Machine
    context: int = 2048
    draft_step_s: float = 1e-3
    draft_s_per_request: float = 0.0
    cycle_overhead_s: float = 0.0

    def roofline_s(self, tokens, requests) -> tuple[np.ndarray, np.ndarray]:
        """The memory and compute times of one forward over ``tokens`` tokens of ``requests`` requests, seconds."""
        t, b = np.asarray(tokens, dtype=float), np.asarray(requests, dtype=float)
        m = self.machine
        bytes_read = self.target.weight_bytes(t) + b * self.context * self.target.kv_bytes_per_token
        return bytes_read / m.bandwidth_bytes_s, 2.0 * self.target.active_params * t / m.flops_s

    def forward_s(self, tokens, requests) -> np.ndarray:
        """One target forward over ``tokens`` tokens of ``requests`` requests, seconds."""
        t, b = np.asarray(tokens, dtype=float), np.asarray(requests, dtype=float)
        m = self.machine
        memory, compute = self.roofline_s(t, b)
        roof = np.maximum(memory, compute) if m.overlap else memory + compute
        return m.step_overhead_s + b * m.request_overhead_s + roof + m.comm_latency_s + t * m.comm_s_per_token

    def decode_s(self, concurrency) -> np.ndarray:
        """A plain decoding step with ``concurrency`` requests in flight (one token each)."""
        return self.forward_s(concurrency, concurrency)

    def verify_s(self, concurrency, k: int) -> np.ndarray:
        """The verify of ``k + 1`` tokens per request over the same KV caches."""
        b = np.asarray(concurrency, dtype=float)
        return self.forward_s(b * (k + 1), b)

    def draft_s(self, concurrency) -> np.ndarray:
        b = np.asarray(concurrency, dtype=float)
        return self.draft_step_s + self.draft_s_per_request * (b - 1)

    def cycle_s(self, concurrency, k: int) -> np.ndarray:
        return self.verify_s(concurrency, k) + k * self.draft_s(concurrency) + self.cycle_overhead_s

    def speedup(self, concurrency, k: int, tau: float) -> np.ndarray:
        """Speculative over plain tok/s per request: ``τ · decode / cycle``."""
        return tau * self.decode_s(concurrency) / self.cycle_s(concurrency, k)

    def break_even_tau(self, concurrency, k: int) -> np.ndarray:
        return self.cycle_s(concurrency, k) / self.decode_s(concurrency)

    def pays_up_to(self, k: int, tau: float, start: int = 1, grid: Sequence[int] = CONCURRENCY_GRID) -> int | None:
        """How far the load can grow from ``start`` requests with speculation still paying.

        Returns:
            the largest concurrency, of ``start`` and the larger ones of ``grid``, up to which the speedup stays
            at least 1 at every one; None when it does not pay at ``start`` itself.
        """
        best = None
        for b in [start, *(g for g in grid if g > start)]:
            if float(self.speedup(b, k, tau)) < 1.0:
                break
            best = b
        return best

    def best_k(self, concurrency: int, tau: float, k: int) -> tuple[int, float]:
        """The k that maximises the speedup at ``concurrency``, the drafter's per-draft rate kept (from τ at ``k``)."""
        alpha = rate_for_accept_len(tau, k)
        scores = {kk: float(self.speedup(concurrency, kk, accept_len_constant_rate(alpha, kk))) for kk in K_RANGE}
        kk = max(scores, key=scores.get)
        return kk, scores[kk]

    def to_json(self) -> dict:
        return {"target": asdict(self.target), "machine": asdict(self.machine), "context": self.context,
                "draft_step_s": self.draft_step_s, "draft_s_per_request": self.draft_s_per_request,
                "cycle_overhead_s": self.cycle_overhead_s}


def kimi_k25_on_pcie(gpus: int = 8, context: int = 2048, cuda_graphs: bool = False) -> LoadModel:
    """The founding case's target (Kimi-K2.5: DeepSeek-V3 shape, INT4 experts) on ``gpus`` H100-PCIe-class GPUs.

    61 layers (58 MoE), 384 routed experts, 8 per token, MLA attention, weights at 4.5 bits; PCIe all-reduces;
    without CUDA graphs about 150 µs of launches per layer. Order-of-magnitude inputs for :func:`calibrate`.
    """
    cfg = {"hidden_size": 7168, "num_hidden_layers": 61, "vocab_size": 163840, "num_attention_heads": 64,
           "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
           "v_head_dim": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 384,
           "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 3}
    shape = shape_from_config(cfg, weight_bits=4.5, where="Kimi-K2.5")
    m = machine("h100-pcie", gpus, step_overhead_s=0.0 if cuda_graphs else 61 * 150e-6, hidden_size=7168, layers=61)
    return LoadModel(shape, m, context=context, draft_step_s=1.5e-3)


@dataclass(frozen=True)
class Point:
    """A measured point: at ``concurrency`` requests, plain decoding's step and (optionally) a cycle with ``k`` drafts.

    Attributes:
        concurrency: requests in flight.
        decode_s: one plain decoding step (1 / per-request plain tok/s), or None.
        cycle_s: one speculative cycle (τ / per-request speculative tok/s), or None.
        k: drafts per cycle of ``cycle_s``.
    """

    concurrency: int
    decode_s: float | None = None
    cycle_s: float | None = None
    k: int | None = None


def calibrate(model: LoadModel, points: Iterable[Point]) -> LoadModel:
    """The model fitted to what was measured: it reproduces one point exactly, and fits several by least squares.

    One decode point (and one cycle) at one concurrency: the decode point scales bandwidth and peak
    alike so the model's decode step equals the measured one there (the roofline's shape carries it to
    other concurrencies), and the cycle gives the drafter's step exactly (what the cycle holds beyond
    the verify, over k). More points, or a cycle shorter than the scaled roofline's verify, are fitted
    jointly, decode steps and cycles together (:func:`_fit_jointly`): the roofline's bandwidth and peak
    scales on a grid, and for each, the step's fixed and per-request overheads and the drafter's step
    and its growth per request by non-negative least squares on relative errors; a tie (as many points
    as unknowns) goes to the scales nearest the machine's datasheet.

    Raises:
        ParameterError: a point that is not positive and finite, or no decode point to scale the machine by.
    """
    points = list(points)
    for p in points:
        for value in (p.decode_s, p.cycle_s):
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ParameterError("calibration", f"a measured step must be a positive time, got {value!r}")
        require_whole("concurrency", p.concurrency)
        if p.cycle_s is not None and not is_whole(p.k):
            raise ParameterError("k", f"a measured cycle needs its drafts per cycle (>= 1), got {p.k!r}")
    decode = [p for p in points if p.decode_s is not None]
    if not decode:
        raise ParameterError("calibration", "needs at least one measured plain decoding step")
    cycles = [p for p in points if p.cycle_s is not None]
    if len({p.concurrency for p in points}) > 1 or len(decode) > 1 or len(cycles) > 1:
        return _fit_jointly(model, points)
    scaled = _scale_machine(model, decode[0])
    if not cycles:
        return scaled
    p = cycles[0]
    rest = p.cycle_s - float(scaled.verify_s(p.concurrency, p.k)) - scaled.cycle_overhead_s
    if rest < 0:  # the roofline's verify alone outlasts the measured cycle: let the fit move its shape
        return _fit_jointly(model, points)
    growth = scaled.draft_s_per_request * (p.concurrency - 1)
    if growth > rest / p.k:
        return replace(scaled, draft_step_s=0.0, draft_s_per_request=rest / p.k / (p.concurrency - 1))
    return replace(scaled, draft_step_s=rest / p.k - growth)


def _fixed(model: LoadModel, b: float) -> float:
    m = model.machine
    return m.step_overhead_s + b * m.request_overhead_s + m.comm_latency_s + b * m.comm_s_per_token


def _scale_machine(model: LoadModel, p: Point) -> LoadModel:
    """Bandwidth and peak scaled alike so the decode step at ``p`` is the measured one."""
    fixed = _fixed(model, p.concurrency)
    if fixed >= p.decode_s:  # the assumed fixed costs alone exceed the measurement: give them half of it
        m = model.machine
        shrink = 0.5 * p.decode_s / fixed
        model = replace(model, machine=replace(m, step_overhead_s=m.step_overhead_s * shrink,
                                               request_overhead_s=m.request_overhead_s * shrink,
                                               comm_latency_s=m.comm_latency_s * shrink,
                                               comm_s_per_token=m.comm_s_per_token * shrink))
        fixed = _fixed(model, p.concurrency)
    roof = float(model.decode_s(p.concurrency)) - fixed  # the bytes-or-FLOPs part, at the datasheet
    scale = roof / max(p.decode_s - fixed, 1e-12)
    return replace(model, machine=model.machine.scaled(scale, scale))


#: The roofline's bandwidth and peak scales a joint fit searches (times the machine's datasheet), coarse then fine.
_SCALES = np.geomspace(1 / SCALE_LIMIT, SCALE_LIMIT, 49)
#: How much a fit prefers the datasheet: a tie-break (squared relative error per squared log of the scale),
#: so that two points, which any scale fits exactly, keep the roofline's own shape.
_PRIOR_WEIGHT = 1e-4


def _fit_jointly(model: LoadModel, points: list[Point]) -> LoadModel:
    """Decode steps and cycles at several concurrencies fitted together.

    Each measured decode step is ``a + r B + roof(B, B)`` and each cycle ``a + r B + roof(B (k+1), B) +
    k (d + g (B - 1))``: the roofline's memory and compute times at bandwidth and peak scales ``(sb, sf)``
    (a grid, then a finer one about the best), and for each pair the step's fixed and per-request
    overheads ``a, r`` and the drafter's step and growth ``d, g`` by non-negative least squares on
    relative errors (exact: the best unconstrained solution over every subset of them that comes out
    non-negative).
    """
    bare = replace(model, machine=replace(model.machine, step_overhead_s=0.0, request_overhead_s=0.0),
                   draft_step_s=0.0, draft_s_per_request=0.0, cycle_overhead_s=0.0)
    rows, measured, tokens, requests = [], [], [], []
    for p in points:
        b = p.concurrency
        if p.decode_s is not None:
            rows.append([1.0, b, 0.0, 0.0])
            measured.append(p.decode_s)
            tokens.append(b)
            requests.append(b)
        if p.cycle_s is not None:
            rows.append([1.0, b, p.k, p.k * (b - 1.0)])
            measured.append(p.cycle_s)
            tokens.append(b * (p.k + 1))
            requests.append(b)
    y = np.array(measured)
    weighted = np.array(rows) / y[:, None]  # relative errors: a 128-request step counts as much as a 1-request one
    memory, compute = bare.roofline_s(tokens, requests)
    m = bare.machine
    comm = m.comm_latency_s + np.asarray(tokens, dtype=float) * m.comm_s_per_token
    cycles = [p for p in points if p.cycle_s is not None]
    several = len({p.concurrency for p in points}) > 1  # else the per-request terms are the fixed ones again
    columns = [0] + ([1] if several else []) + ([2] if cycles else []) \
        + ([3] if len({p.concurrency for p in cycles}) > 1 else [])
    subsets = [list(c) for n in range(len(columns) + 1) for c in itertools.combinations(columns, n)]

    def search(sb: np.ndarray, sf: np.ndarray) -> tuple[float, float, float, np.ndarray]:
        sb, sf = np.meshgrid(sb, sf, indexing="ij")
        sb, sf = sb.ravel(), sf.ravel()
        mem, comp = memory[None, :] / sb[:, None], compute[None, :] / sf[:, None]
        roof = np.maximum(mem, comp) if m.overlap else mem + comp
        z = (y - comm - roof) / y  # (grid, points): what the overheads and the drafter must explain
        best_err, best_beta = np.full(len(sb), np.inf), np.zeros((len(sb), 4))
        for subset in subsets:
            beta = np.zeros((len(sb), 4))
            if subset:
                beta[:, subset] = z @ np.linalg.pinv(weighted[:, subset]).T
            ok = np.all(beta >= 0.0, axis=1)
            err = np.where(ok, np.sum((beta @ weighted.T - z) ** 2, axis=1), np.inf)
            better = err < best_err - 1e-15
            best_err, best_beta = np.where(better, err, best_err), np.where(better[:, None], beta, best_beta)
        score = best_err + _PRIOR_WEIGHT * (np.log(sb) ** 2 + np.log(sf) ** 2)
        i = int(np.argmin(score))
        return float(score[i]), float(sb[i]), float(sf[i]), best_beta[i]

    _, sb, sf, _ = search(_SCALES, _SCALES)
    step = _SCALES[1] / _SCALES[0]
    _, sb, sf, (a, r, d, g) = search(sb * np.geomspace(1 / step, step, 17), sf * np.geomspace(1 / step, step, 17))
    fitted = replace(m.scaled(sb, sf), step_overhead_s=float(a), request_overhead_s=float(r))
    return replace(bare, machine=fitted, draft_step_s=float(d), draft_s_per_request=float(g))


def by_concurrency(model: LoadModel, concurrency: Sequence[int], k: int, tau: float) -> list[dict]:
    """The model's table: at each concurrency the steps, the speedup and break-even τ, and the best k.

    Returns:
        rows with ``concurrency``, ``decode_ms``, ``verify_ms``, ``cycle_ms``, ``speedup``,
        ``break_even_accept_len``, ``pays``, ``best_k`` and ``best_speedup``.
    """
    rows = []
    for b in concurrency:
        if not is_whole(b):
            raise ParameterError("--concurrency", f"must be whole numbers >= 1, got {b!r}")
        speedup = float(model.speedup(b, k, tau))
        kk, best = model.best_k(b, tau, k)
        rows.append({"concurrency": b, "decode_ms": 1e3 * float(model.decode_s(b)),
                     "verify_ms": 1e3 * float(model.verify_s(b, k)), "cycle_ms": 1e3 * float(model.cycle_s(b, k)),
                     "speedup": speedup, "break_even_accept_len": float(model.break_even_tau(b, k)),
                     "pays": speedup >= 1.0, "best_k": kk, "best_speedup": best})
    return rows


def load_curve(model: LoadModel, k: int, tau: float, grid: Sequence[float] | None = None) -> dict[str, np.ndarray]:
    """The model's speedup and break-even τ over a dense grid of concurrencies (for a figure)."""
    b = np.asarray(grid if grid is not None else np.geomspace(1, 1024, 64))
    return {"concurrency": b, "speedup": model.speedup(b, k, tau), "break_even_accept_len": model.break_even_tau(b, k)}
