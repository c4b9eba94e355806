"""One serving-cost model: the step time of the target and the drafter, decode and speculative cycle, at any load.

Every question about speed under load (``eaglelab perf``, ``plan``, notebook 01, the game plan) is
answered by this one model of a forward over ``t`` new tokens of ``B`` requests, each with ``context``
tokens of KV cache, on a tensor-parallel group of ``g`` GPUs (:meth:`LoadModel.forward_parts`)::

    overhead  = step_overhead + B · request_overhead            scheduling, sampling
    launch    = kernels · launch_s, unless the step kind runs as a CUDA graph
    memory    = (weights(t) / g + B · context · kv_bytes / kv_ways) / bandwidth
    compute   = t · (2 · active_params + attention_flops · context) / g / peak
    comm      = 2 · layers · (link_latency + t · hidden · 2 B · 2 (g-1)/g / link_bandwidth)     (g > 1)

    step = overhead + launch + memory + compute + comm          (summed: measured engines do not overlap them)

The sum, not the larger of memory and compute, is what measured engines do: calibrated at one point, it
predicts the published batch sweeps of docs/MEASURED.md within 2-17% (median held-out error) where the
larger-of-the-two roofline it replaced missed them by 7-54%; every verify token costs time from the first
request on. The efficiencies (:data:`MEMORY_EFFICIENCY` 0.8 of the HBM bandwidth, :data:`COMPUTE_EFFICIENCY`
0.75 of the dense peak) are priors a measurement moves; they are how a fit of SGLang's step for
Llama-3.1-8B on an H100 quoted to this project reads (about 5.9 ms + 21 µs per token + 39 ns per KV token;
its publication was not located). The KV term counts one read per request, or one per verified token
where the attention backend takes each as its own query (:attr:`LoadModel.verify_kv`). ``weights(t)`` is
the dense weights plus, per MoE layer, the experts its tokens route to
(:func:`~eaglelab.serving.target_shape.distinct_experts_touched`, a verify's drafts counted at
:data:`EXPERT_NOVELTY` of a fresh token each); their bytes follow the quantization and its ignore list
(:func:`~eaglelab.serving.target_shape.shape_from_config`: a Kimi checkpoint's attention, shared experts,
dense MLP and ``lm_head`` stay bf16, only the routed experts are int4).

A plain decoding step is a forward of ``B`` tokens; a speculative cycle is a verify of ``B · v`` tokens
(``v = k + 1`` for a chain, ``draft_tokens`` for a tree), ``k`` drafter steps (the first over the
verified tokens, the rest over ``B · topk``: the drafter's cost grows with the batch) and a cycle
overhead. Speedup at ``B`` is ``τ(B) · decode(B) / cycle(B)``, with ``τ`` per concurrency where it was
measured so. A concurrency whose KV cache does not fit beside the weights (:meth:`LoadModel.kv_fits`)
is marked so and never said to pay.

What the user measured fixes what a datasheet cannot: one point (plain tok/s, cycle and τ at one
concurrency) moves the forward's terms, each within its prior, so the model reproduces it
(:func:`eaglelab.serving.load_fit.calibrate`); a cost
table (:mod:`eaglelab.serving.cost_table`) or logs at several concurrencies fit each term's multiplier
by non-negative least squares, held near the datasheet where the points do not decide
(:func:`eaglelab.serving.load_fit.fit`), and say how far they land from each point. Only numpy: ``perf`` and
``plan`` stay metadata commands.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from eaglelab.errors import ParameterError, is_whole, require_whole
from eaglelab.serving.gpus import LINK_SOURCES, LINKS, link_key
from eaglelab.serving.gpus import gpu as gpu_named
from eaglelab.serving.perf import accept_len_constant_rate, rate_for_accept_len
from eaglelab.serving.target_shape import KERNELS_PER_LAYER, TargetShape, shape_from_config

#: Concurrencies scanned for "up to which concurrency does it pay" (the answer is the largest that pays).
CONCURRENCY_GRID = tuple(2 ** i for i in range(11))  # 1 .. 1024
#: Drafts per cycle considered for the best k at each concurrency.
K_RANGE = range(1, 9)
#: How a verify's attention reads the KV cache (:attr:`LoadModel.verify_kv`).
VERIFY_KV = ("once", "per-token")
#: Step kinds; a deployment runs each as a CUDA graph or not (the founding case: decode yes, verify no).
STEP_KINDS = ("decode", "verify", "draft")


def require_step_kinds(kinds) -> tuple[str, ...]:
    """``kinds`` when each is one of :data:`STEP_KINDS`; else ParameterError naming ``--cuda-graphs``."""
    unknown = set(kinds) - set(STEP_KINDS)
    if unknown:
        raise ParameterError("--cuda-graphs", f"unknown step kinds {sorted(unknown)}; choose from {', '.join(STEP_KINDS)}")
    return tuple(kinds)


def require_verify_kv(verify_kv: str) -> str:
    """``verify_kv`` when it is one of :data:`VERIFY_KV`; else ParameterError naming ``--verify-kv``."""
    if verify_kv not in VERIFY_KV:
        raise ParameterError("--verify-kv", f"must be one of {', '.join(VERIFY_KV)}, got {verify_kv!r}")
    return verify_kv


#: Of the datasheet's memory bandwidth a step's weight and KV reads reach, before a measurement moves it (the
#: SGLang fit quoted above: 16 GB of Llama-3.1-8B weights in 5.9 ms on 3.35 TB/s).
MEMORY_EFFICIENCY = 0.8
#: Of the datasheet's dense peak a forward's GEMMs reach at serving batch sizes, before a measurement moves it
#: (the same fit: 16 GFLOP per token in 21 µs on 989 TFLOP/s).
COMPUTE_EFFICIENCY = 0.75
#: One kernel launch from the host, when a step is not a CUDA graph (a few µs each).
LAUNCH_S = 5e-6
#: A step's fixed scheduling cost and what each request adds to it (sampling, bookkeeping), on a GPU engine.
STEP_OVERHEAD_S = 3e-4
REQUEST_OVERHEAD_S = 2e-6
#: One all-reduce's latency by link (small messages; an engine's custom all-reduce over NVLink is near the
#: low end, NCCL over PCIe near the high one). Order of magnitude; a calibration rescales it.
LINK_LATENCY_S = {"nvlink": 10e-6, "nvlink-c2c": 10e-6, "xgmi": 15e-6, "pcie": 40e-6}
#: Of each GPU's memory an engine gives the weights and the KV cache (SGLang's mem_fraction_static,
#: vLLM's gpu_memory_utilization are about 0.85-0.9); the rest holds activations and graphs.
MEMORY_FRACTION = 0.88
#: Of a request's further tokens in one forward (a verify's drafts), the share whose experts count as independent
#: draws: consecutive tokens of one text route to overlapping experts, so a verify wakes fewer new experts than
#: as many unrelated tokens would. A round value set on the published MoE sweeps (docs/MEASURED.md: with 1, every
#: draft an independent draw, the Kimi sweep's median error is 13% and the model loses at 8 requests where the
#: sweep pays; with 0.5, 10% and the crossover within one step); sweeps held back will test it.
EXPERT_NOVELTY = 0.5


# --------------------------------------------------------------------------- what it runs on


@dataclass(frozen=True)
class Machine:
    """One tensor-parallel group of GPUs (or a CPU) as a step sees it: per-device rates, achievable ones.

    Attributes:
        name: a label for tables.
        gpus: devices of the tensor-parallel group.
        memory_bytes: memory of one device.
        bandwidth_bytes_s: memory bandwidth of one device a step reaches (datasheet x :data:`MEMORY_EFFICIENCY`).
        flops_s: dense peak of one device a forward reaches (datasheet x :data:`COMPUTE_EFFICIENCY`).
        link: the interconnect (``nvlink``, ``pcie``, ``xgmi``) the all-reduces cross.
        link_bytes_s: the all-reduce's bus bandwidth per device.
        link_latency_s: one all-reduce's latency.
        launch_s: one kernel launch from the host (paid per kernel by a step that is not a CUDA graph).
        step_overhead_s, request_overhead_s: a step's fixed scheduling cost, and what each request adds.
        graphs: the step kinds (:data:`STEP_KINDS`) that run as CUDA graphs.
        overlap: whether memory and compute overlap (the larger of the two) instead of adding up.
        source: where the figures come from, in words.
    """

    name: str
    bandwidth_bytes_s: float
    flops_s: float
    gpus: int = 1
    memory_bytes: float = math.inf
    link: str = "none"
    link_bytes_s: float = math.inf
    link_latency_s: float = 0.0
    launch_s: float = 0.0
    step_overhead_s: float = 0.0
    request_overhead_s: float = 0.0
    graphs: tuple[str, ...] = STEP_KINDS
    overlap: bool = False
    source: str = ""

    def __post_init__(self):
        """Positive finite rates, overheads finite and >= 0, known step kinds: no step costs less than nothing."""
        rates = (self.bandwidth_bytes_s, self.flops_s)
        costs = (self.link_latency_s, self.launch_s, self.step_overhead_s, self.request_overhead_s)
        if not (all(0 < v < math.inf for v in rates) and all(0 <= v < math.inf for v in costs)
                and self.link_bytes_s > 0 and self.memory_bytes > 0 and is_whole(self.gpus)):
            raise ParameterError(f"machine {self.name}", "needs positive finite rates, memory and GPUs, and overheads "
                                                         f">= 0, got {rates}, {costs}")
        require_step_kinds(self.graphs)


#: A link's all-reduce bus bandwidth when ``--link`` names another interconnect than the GPU's usual one.
LINK_DEFAULT = {"nvlink": "nvlink-450", "nvlink-c2c": "nvlink-900", "pcie": "pcie-64", "xgmi": "xgmi-448"}


def machine(gpu: str, gpus: int = 1, link: str | None = None, graphs: Sequence[str] = STEP_KINDS,
            link_bytes_s: float | None = None) -> Machine:
    """``gpus`` x ``gpu`` from the GPU table (:mod:`eaglelab.serving.gpus`), at the achievable efficiencies.

    Args:
        link: the interconnect, when not the GPU's usual one (an H100 PCIe pair over an NVLink bridge, say).
        graphs: the step kinds that run as CUDA graphs.
        link_bytes_s: the all-reduce bus bandwidth measured on the user's machine (nccl-tests busbw), if known.
    """
    require_whole("--gpus", gpus)
    g = gpu_named(gpu)
    kind = link or g.link
    if kind not in LINK_LATENCY_S:
        raise ParameterError("--link", f"unknown link {kind!r}; choose one of {', '.join(LINK_LATENCY_S)}")
    key = link_key(g) if kind == g.link else LINK_DEFAULT[kind]
    bus = link_bytes_s if link_bytes_s is not None else LINKS[key]
    if not 0 < bus < math.inf:
        raise ParameterError("--link-gbps", f"must be a positive finite bandwidth, got {bus!r}")
    return Machine(f"{gpus} x {g.name}" + (f" over {kind}" if link else ""), g.bandwidth_bytes_s * MEMORY_EFFICIENCY,
                   g.bf16_flops_s * COMPUTE_EFFICIENCY, gpus=gpus, memory_bytes=g.memory_bytes, link=kind,
                   link_bytes_s=bus, link_latency_s=LINK_LATENCY_S[kind], launch_s=LAUNCH_S,
                   step_overhead_s=STEP_OVERHEAD_S, request_overhead_s=REQUEST_OVERHEAD_S, graphs=tuple(graphs),
                   source=f"{g.name} datasheet at {MEMORY_EFFICIENCY:g} of its bandwidth and {COMPUTE_EFFICIENCY:g} "
                          f"of its dense bf16 peak; {kind} all-reduce {bus / 1e9:.0f} GB/s "
                          f"({'measured' if link_bytes_s is not None else LINK_SOURCES.get(key, key)[:60]})")


#: A CPU as the workbook's engine sees it (one thread of torch under vLLM's CPU build): a starting point that
#: :func:`calibrate` moves to what the machine measures. Its steps stream the weights and then compute.
CPU = Machine("cpu", bandwidth_bytes_s=10e9, flops_s=30e9, step_overhead_s=5e-3, request_overhead_s=0.5e-3,
              source="a CPU core, order of magnitude")


# --------------------------------------------------------------------------- the model


#: The model's terms; each carries a multiplier a calibration or a fit sets (1: the datasheet's value).
TERMS = ("overhead", "launch", "memory", "compute", "comm", "draft", "cycle")
#: What each term is, in words (tables, the closing of a fit).
TERM_MEANING = {
    "overhead": "a step's scheduling and per-request cost",
    "launch": "kernel launches of steps that are not CUDA graphs",
    "memory": "weights and KV cache read at the achievable bandwidth",
    "compute": "FLOPs per token at the achievable peak (every verify token)",
    "comm": "tensor-parallel all-reduces",
    "draft": "the drafter's steps",
    "cycle": "a cycle's own cost per request (acceptance, KV and tree bookkeeping)",
}
#: A cycle's own cost per request beyond verify and drafts, before calibration: acceptance, the drafts' and
#: the accepted tokens' bookkeeping, much of it on the host and not overlapped with the GPU in the engines'
#: speculative paths (tens of µs per request per cycle; the EAGLE-3 paper's SGLang batch sweep implies 50-90).
CYCLE_S_PER_REQUEST = 40e-6


@dataclass(frozen=True)
class Scales:
    """Each term's multiplier: measured over the datasheet's. 1 everywhere is the uncalibrated model."""

    overhead: float = 1.0
    launch: float = 1.0
    memory: float = 1.0
    compute: float = 1.0
    comm: float = 1.0
    draft: float = 1.0
    cycle: float = 1.0

    def times(self, factors: dict[str, float]) -> Scales:
        """These multipliers with each term named in ``factors`` multiplied by its factor."""
        return replace(self, **{t: getattr(self, t) * f for t, f in factors.items()})


@dataclass(frozen=True)
class LoadModel:
    """The serving cost of a target and its drafter on a machine, at a mean context, with a deployment's settings.

    Attributes:
        target: what a forward reads and computes.
        machine: what it runs on.
        context: mean context tokens per request (its KV cache is read every step).
        topk: the drafter's branching per step (1: a chain).
        draft_tokens: tokens verified per request per cycle (None: ``k + 1``, a chain).
        verify_kv: how the verify's attention reads each request's KV cache: ``once`` for its k + 1 queries
            together (FlashAttention, FlashInfer, FlashMLA), or ``per-token``, as decode kernels that take each
            verified token as a query of its own do: vLLM 0.32's Triton MLA backend (``triton_mla.py``: "forward_mqa
            flattens a uniform multi-token block to one decode row per query token"), the published Kimi-on-PCIe
            sweep's.
        dcp: decode context parallelism (vLLM's ``--decode-context-parallel-size``): the KV cache and its reads split
            over this many of the GPUs, and each layer's attention merging its parts over them (one more exchange).
        scales: each term's multiplier (:class:`Scales`), set by :func:`calibrate` or :func:`fit`.
    """

    target: TargetShape
    machine: Machine
    context: int = 2048
    topk: int = 1
    draft_tokens: int | None = None
    verify_kv: str = "once"
    dcp: int = 1
    scales: Scales = field(default_factory=Scales)

    def __post_init__(self):
        require_verify_kv(self.verify_kv)

    @property
    def kv_ways(self) -> int:
        """How many ways the KV cache is split over the GPUs: its heads under tensor parallelism, times ``dcp``."""
        return max(1, min(self.machine.gpus, self.target.kv_ways * self.dcp))

    # ---- one forward

    def forward_parts(self, tokens, requests, kind: str = "decode") -> dict[str, np.ndarray]:
        """The target's forward over ``tokens`` tokens of ``requests`` requests, term by term (seconds, scaled)."""
        t, b = np.asarray(tokens, dtype=float), np.asarray(requests, dtype=float)
        m, x, s = self.machine, self.target, self.scales
        g, kv_ways = m.gpus, self.kv_ways
        routed = b + (t - b) * EXPERT_NOVELTY  # a request's later tokens route much like its first
        kv_reads = t if kind == "verify" and self.verify_kv == "per-token" else b  # each query its own read, or one each
        memory = (x.weight_bytes(routed) / g + kv_reads * x.kv_read_bytes(self.context) / kv_ways) / m.bandwidth_bytes_s
        compute = t * (2.0 * x.active_params + x.attention_flops(self.context)) / g / m.flops_s
        if m.overlap:
            memory, compute = np.maximum(memory, compute), np.zeros_like(compute)
        comm = np.zeros_like(t)
        if g > 1:
            comm = comm + (2 + (self.dcp > 1)) * x.layers * m.link_latency_s \
                + 2 * x.layers * t * x.hidden_size * 2.0 * 2 * (g - 1) / g / m.link_bytes_s
        launch = np.zeros_like(t) + (0.0 if kind in m.graphs else x.kernels * m.launch_s)
        overhead = m.step_overhead_s + b * m.request_overhead_s
        parts = np.broadcast_arrays(s.overhead * overhead, s.launch * launch, s.memory * memory, s.compute * compute,
                                    s.comm * comm)
        return dict(zip(TERMS[:5], (np.array(p, dtype=float) for p in parts)))

    def forward_s(self, tokens, requests, kind: str = "decode") -> np.ndarray:
        """One target forward, seconds."""
        return sum(self.forward_parts(tokens, requests, kind).values())

    def draft_forward_s(self, tokens) -> np.ndarray:
        """One drafter forward over ``tokens`` tokens (its weights are read once; every token computes)."""
        t = np.asarray(tokens, dtype=float)
        m, x = self.machine, self.target
        g = m.gpus
        launch = 0.0 if "draft" in m.graphs else KERNELS_PER_LAYER["dense"] * m.launch_s
        comm = 0.0
        if g > 1:  # the layer's two all-reduces and the logits' all-gather
            per_token = (2 * x.hidden_size * 2.0 * 2 + x.draft_vocab * 2.0) * (g - 1) / g
            comm = 3 * m.link_latency_s + t * per_token / m.link_bytes_s
        raw = m.step_overhead_s + launch + comm + x.draft_bytes / g / m.bandwidth_bytes_s \
            + t * 2.0 * x.draft_params / g / m.flops_s
        return self.scales.draft * raw

    # ---- decode, verify, cycle

    def verify_tokens(self, k: int) -> int:
        return self.draft_tokens if self.draft_tokens is not None else k + 1

    def decode_s(self, concurrency) -> np.ndarray:
        """A plain decoding step with ``concurrency`` requests in flight (one token each)."""
        return self.forward_s(concurrency, concurrency, "decode")

    def verify_s(self, concurrency, k: int) -> np.ndarray:
        """The verify of ``k + 1`` tokens (or ``draft_tokens``) per request over the same KV caches."""
        b = np.asarray(concurrency, dtype=float)
        return self.forward_s(b * self.verify_tokens(k), b, "verify")

    def draft_s(self, concurrency, k: int) -> np.ndarray:
        """The ``k`` drafter steps of a cycle: the first over the verified tokens, the rest over ``topk`` per request."""
        b = np.asarray(concurrency, dtype=float)
        return self.draft_forward_s(b * self.verify_tokens(k)) + (k - 1) * self.draft_forward_s(b * self.topk)

    def cycle_overhead_s(self, concurrency) -> np.ndarray:
        return self.scales.cycle * CYCLE_S_PER_REQUEST * np.asarray(concurrency, dtype=float)

    def cycle_s(self, concurrency, k: int) -> np.ndarray:
        return self.verify_s(concurrency, k) + self.draft_s(concurrency, k) + self.cycle_overhead_s(concurrency)

    def speedup(self, concurrency, k: int, tau) -> np.ndarray:
        """Speculative over plain tok/s per request: ``τ · decode / cycle`` (``tau`` one value or one per concurrency)."""
        return np.asarray(tau, dtype=float) * self.decode_s(concurrency) / self.cycle_s(concurrency, k)

    def break_even_tau(self, concurrency, k: int) -> np.ndarray:
        return self.cycle_s(concurrency, k) / self.decode_s(concurrency)

    # ---- memory

    def kv_room_bytes(self) -> float:
        """KV-cache bytes a GPU holds beside its share of the weights (inf on a machine of unknown memory)."""
        return max(self.machine.memory_bytes * MEMORY_FRACTION - self.target.total_bytes / self.machine.gpus, 0.0)

    def kv_capacity_tokens(self) -> float:
        """Context tokens the KV cache holds beside the weights, at this context's bytes a token (inf: unknown)."""
        per_token = float(self.target.kv_read_bytes(max(self.context, 1))) / max(self.context, 1) / self.kv_ways
        return self.kv_room_bytes() / per_token if per_token else math.inf

    def kv_fits(self, concurrency, k: int = 0) -> np.ndarray:
        """Whether ``concurrency`` requests' KV caches (context plus a cycle's tokens) fit beside the weights."""
        b = np.asarray(concurrency, dtype=float)
        return b * self.target.kv_read_bytes(self.context + self.verify_tokens(k)) / self.kv_ways <= self.kv_room_bytes()

    def weights_fit(self) -> bool:
        m = self.machine
        return self.target.total_bytes / m.gpus <= m.memory_bytes * MEMORY_FRACTION

    # ---- answers

    def pays_up_to(self, k: int, tau, start: int = 1, grid: Sequence[int] = CONCURRENCY_GRID) -> int | None:
        """How far the load can grow from ``start`` requests with speculation still paying (and the KV fitting).

        Args:
            tau: one τ, or a callable giving τ at a concurrency.

        Returns:
            the largest concurrency, of ``start`` and the larger ones of ``grid``, up to which the speedup stays at
            least 1 and the KV cache fits at every one; None when it does not pay at ``start`` itself.
        """
        best = None
        for b in [start, *(g for g in grid if g > start)]:
            t = tau(b) if callable(tau) else tau
            if not bool(self.kv_fits(b, k)) or float(self.speedup(b, k, t)) < 1.0:
                break
            best = b
        return best

    def best_k(self, concurrency: int, tau: float, k: int) -> tuple[int, float]:
        """The k that maximises the speedup at ``concurrency``, the drafter's per-draft rate kept (from τ at ``k``),
        among the k whose KV cache fits there (``k`` itself when none does: no k is better where none serves).

        A tree (``draft_tokens`` set) keeps its k: its verify size is the deployment's, not k's.
        """
        if self.draft_tokens is not None:
            return k, float(self.speedup(concurrency, k, tau))
        alpha = rate_for_accept_len(tau, k)
        fitting = [kk for kk in K_RANGE if bool(self.kv_fits(concurrency, kk))]
        if not fitting:
            return k, float(self.speedup(concurrency, k, tau))
        scores = {kk: float(self.speedup(concurrency, kk, accept_len_constant_rate(alpha, kk))) for kk in fitting}
        kk = max(scores, key=scores.get)
        return kk, scores[kk]

    def parts(self, concurrency: int, k: int) -> list[dict]:
        """A cycle at ``concurrency`` term by term, largest first: ``part``, ``ms``, ``share``, ``lever``."""
        b = float(concurrency)
        verify = self.forward_parts(b * self.verify_tokens(k), b, "verify")
        ms = {f"verify: {TERM_MEANING[name]}": 1e3 * float(v) for name, v in verify.items()}
        ms["drafter steps"] = 1e3 * float(self.draft_s(b, k))
        ms["cycle bookkeeping"] = 1e3 * float(self.cycle_overhead_s(b))
        total = sum(ms.values())
        rows = [{"part": name, "ms": v, "share": v / total if total else 0.0, "lever": LEVERS[name.split(": ")[-1]]}
                for name, v in ms.items() if v > 0]
        return sorted(rows, key=lambda r: -r["ms"])

    def parameters(self) -> list[dict]:
        """The model's parameters: name, value, unit, what it is and where it comes from."""
        m, x, s = self.machine, self.target, self.scales
        src = m.source or "given"
        fitted = {t: getattr(s, t) for t in TERMS if getattr(s, t) != 1.0}
        rows = [
            ("GPUs (tensor parallel)", m.gpus, "", "the group one step runs on", "--gpus"),
            ("memory bandwidth", m.bandwidth_bytes_s / 1e12, "TB/s per GPU", "weights and KV reads", src),
            ("dense peak", m.flops_s / 1e12, "TFLOP/s per GPU", "per-token compute", src),
            ("all-reduce bandwidth", m.link_bytes_s / 1e9, "GB/s", f"{m.link} bus bandwidth", "the link table"),
            ("all-reduce latency", m.link_latency_s * 1e6, "µs", "per all-reduce, two per layer", "assumed by link"),
            ("kernel launch", m.launch_s * 1e6, "µs", f"per kernel of steps not in {', '.join(m.graphs) or 'no'} graphs",
             "assumed"),
            ("dense weights", x.dense_bytes / 1e9, "GB", "read by every forward", "the config and its quantization"),
            ("expert", x.expert_bytes / 1e6, "MB", f"{x.experts_total} per MoE layer, {x.experts_per_token} per token",
             "the config"),
            ("KV per token", x.kv_bytes_per_token / 1e3, "KB", "the layers that keep every token", "the config and --kv-dtype"),
            ("context", self.context, "tokens", "mean per request", "--context"),
        ]
        out = [{"parameter": n, "value": v, "unit": u, "what": w, "source": so} for n, v, u, w, so in rows]
        out += [{"parameter": f"{t} multiplier", "value": v, "unit": "x", "what": TERM_MEANING[t],
                 "source": "fitted to what was measured"} for t, v in fitted.items()]
        return out

    def to_json(self) -> dict:
        return {"target": asdict(self.target), "machine": asdict(self.machine), "context": self.context,
                "topk": self.topk, "draft_tokens": self.draft_tokens, "verify_kv": self.verify_kv,
                "scales": asdict(self.scales),
                "kv_capacity_tokens": self.kv_capacity_tokens()}


#: What shrinks each part of a cycle.
LEVERS = {
    TERM_MEANING["overhead"]: "an overlapping scheduler, fewer requests per step",
    TERM_MEANING["launch"]: "CUDA graphs for the verify (and draft) step",
    TERM_MEANING["memory"]: "fewer weight bytes per step (lower-bit weights, more GPUs), an fp8 KV cache",
    TERM_MEANING["compute"]: "fewer verified tokens (a smaller k or tree) at high load",
    TERM_MEANING["comm"]: "a faster interconnect (NVLink) or fewer all-reduces per layer",
    "drafter steps": "a smaller k, CUDA graphs for the drafter",
    "cycle bookkeeping": "the engine's speculative path (overlap scheduling)",
}


# --------------------------------------------------------------------------- the founding case


#: Kimi-K2.5's config (moonshotai/Kimi-K2.5: DeepSeek-V3 shape; compressed-tensors int4 routed experts in
#: groups of 32; attention, shared experts, the dense first layer and lm_head in bf16).
KIMI_K25_CONFIG = {
    "hidden_size": 7168, "num_hidden_layers": 61, "vocab_size": 163840, "num_attention_heads": 64,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 384, "num_experts_per_tok": 8,
    "n_shared_experts": 1, "first_k_dense_replace": 1, "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized",
                            "config_groups": {"group_0": {"targets": ["Linear"],
                                                          "weights": {"num_bits": 4, "group_size": 32}}},
                            "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                                       "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"]},
}


#: The founding case's machine: the published Kimi-on-PCIe deployment's GPU (8 x RTX PRO 6000, 96 GB each: the
#: int4 weights, 594 GB, leave room for the KV cache; on 80 GB GPUs they do not) and its CUDA graphs (decode and
#: draft captured, the verify not: the seed's own diagnosis).
FOUNDING_GPU, FOUNDING_GPUS, FOUNDING_GRAPHS = "rtx-pro-6000", 8, ("decode", "draft")
#: The founding case in words.
FOUNDING_DEPLOYMENT = f"Kimi-K2.5 on {FOUNDING_GPUS} PCIe GPUs ({FOUNDING_GPU}, the verify without CUDA graphs)"


def kimi_k25_on_pcie(gpus: int = FOUNDING_GPUS, context: int = 2048, graphs: Sequence[str] = FOUNDING_GRAPHS,
                     gpu: str = FOUNDING_GPU) -> LoadModel:
    """The founding case: Kimi-K2.5 on ``gpus`` PCIe GPUs, CUDA graphs for decode and draft but not the verify."""
    shape = shape_from_config(KIMI_K25_CONFIG, where="Kimi-K2.5")
    return LoadModel(shape, machine(gpu, gpus, graphs=graphs), context=context)
