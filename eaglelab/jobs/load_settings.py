"""What the load question is asked of: the target, the machine and the measurements (``perf``, ``plan``, notebook 01).

:class:`MachineSettings` describes the target and the machine, :class:`LoadSettings` adds what was measured; the
flags of ``perf`` and ``plan`` are generated from them; the constants their help texts name (``{NAME}``) are
imported under their own names (``X as X``), as the docstrings read them. Numbers only: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from eaglelab.errors import ParameterError
from eaglelab.serving.cost_table import MAX_CONCURRENCY, MAX_WHOLE
from eaglelab.serving.gpus import GPUS
from eaglelab.serving.load import FOUNDING_GPU as FOUNDING_GPU
from eaglelab.serving.load import FOUNDING_GPUS as FOUNDING_GPUS
from eaglelab.serving.load import (
    LINK_LATENCY_S,
    STEP_KINDS,
    VERIFY_KV,
    require_step_kinds,
    require_verify_kv,
)
from eaglelab.serving.load_band import CONTEXT_RANGE as CONTEXT_RANGE
from eaglelab.serving.load_band import DEFAULT_CONTEXT
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
    require_kv_dtype,
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
        dcp: decode context parallelism, as vLLM's --decode-context-parallel-size: the KV cache and its reads split over
            this many of the tensor-parallel GPUs (it must divide --gpus), each layer's attention merging its parts over
            them. Data-parallel attention and expert parallelism are not modelled: give the tensor-parallel group
            that serves one request.
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
    dcp: int = option(1, min=1, max=64)

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
        speedup: the speedup over plain decoding measured at ``at_concurrency``, when only the ratio is known (a
            paper's table): the cycle is then τ x the plain step / speedup, the plain step ``baseline_tps``'s or,
            without it, the model's from the datasheets.
        accept_len: acceptance length τ of the drafter served now (bonus token included; None with ``spec_tps`` or
            ``speedup``: τ spans what published chains of k drafts accept, the answer banded over it).
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
    speedup: float | None = option(None, min=0.01, max=65.0)
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
        given = [name for name, v in (("--cycle-ms", self.cycle_ms), ("--spec-tps", self.spec_tps),
                                      ("--speedup", self.speedup)) if v is not None]
        if len(given) > 1:
            raise ParameterError(given[1], f"give one of --cycle-ms, --spec-tps and --speedup, not {' and '.join(given)}: "
                                           "each says what the cycle costs")
        measured = self.measured_speedup
        if measured is not None and measured > self.k + 1:
            flag = "--speedup" if self.speedup is not None else "--spec-tps"
            raise ParameterError(flag, f"a {measured:g}x speedup is more than the k + 1 = {self.k + 1} tokens a cycle can "
                                       "give: is it tok/s, or a speedup over another baseline (or all requests' tok/s "
                                       "against one's)?")
        if self.spec_tps is not None and self.accept_len is not None:
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
    def measured_speedup(self) -> float | None:
        """The speedup the measured point states: ``speedup``, or the speculative over the plain tok/s (None: neither)."""
        if self.speedup is not None:
            return self.speedup
        return self.spec_tps / self.baseline_tps if None not in (self.spec_tps, self.baseline_tps) else None

    @property
    def concurrencies(self) -> tuple[int, ...]:
        """The concurrencies answered for: ``concurrency``, else :data:`DEFAULT_CONCURRENCY`."""
        return tuple(self.concurrency) if self.concurrency else DEFAULT_CONCURRENCY
