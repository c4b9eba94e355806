"""What the load model refuses: a target config whose fields contradict each other, and a calibration that does
not reproduce what was measured.

The serving-cost model (:mod:`eaglelab.serving.load`) counts a target's bytes and FLOPs from its config. Fields that
contradict each other (more dense layers than layers, more experts per token than experts) would count
negative expert bytes and a verify cheaper than a decode step, so :func:`check_target_config` refuses them
first, in one line naming the file and the fields.

A calibrated model is called calibrated only where it reproduces the points it was calibrated on
(:func:`calibration_of`: each measured plain step and cycle within :data:`TOLERANCE`, as finite positive
times). One point is reproduced exactly unless the model cannot hold it (a fit that would move the
machine beyond :data:`SCALE_LIMIT` of its datasheet); then :meth:`Calibration.require` refuses it in one
line saying which number and why. Several points are fitted by least squares and may miss: the table
then says by how much, never "calibrated".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from eaglelab.checkpoints.targets.config import text_config
from eaglelab.errors import ConfigError, ParameterError
from eaglelab.inputs import MAX_FIELD_INT, printable, shown

#: How far (relative) a calibrated model's plain step or cycle may sit from the measured one for the model to
#: count as calibrated on it (one point is reproduced to rounding; the joint fit of two, within about 1%).
TOLERANCE = 0.02
#: How far a fit moves the model's bandwidth and peak from the datasheet's, either way: the joint fit's
#: grid ends there, and a single point that puts the machine beyond it gets a note.
SCALE_LIMIT = 1e3
#: The routed-expert count's fields, in the order the load model reads them (DeepSeek / Kimi, Qwen / OLMoE, Mixtral).
EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_FIELD_INT


def check_target_config(text: dict[str, Any], where: str) -> None:
    """Refuse a target's (text) config whose fields contradict each other, before the load model counts with it.

    The fields' types and ranges are checked already (:mod:`eaglelab.checkpoints.files.config_types`); here, their
    relations: experts per token at most the routed experts, dense layers at most the layers, a DeepSeek-style
    MoE's expert width given, KV heads at most the attention heads, and a head width (``head_dim``, or a
    hidden size at least the heads). ``num_local_experts`` (Mixtral), read only here, must be a whole number.

    Raises:
        ConfigError: naming ``where`` and every contradicting field, in one line.
    """
    local = text.get("num_local_experts")
    if local is not None and not _whole(local):
        raise ConfigError(where, f"field 'num_local_experts' must be a positive integer, got {shown(local)}")
    problems = []
    layers, hidden, heads = (text.get(k) for k in ("num_hidden_layers", "hidden_size", "num_attention_heads"))
    key = next((k for k in EXPERT_KEYS if text.get(k)), None)
    if key is not None:
        experts, top, dense = text[key], text.get("num_experts_per_tok"), text.get("first_k_dense_replace")
        if top is not None and top > experts:
            problems.append(f"num_experts_per_tok {top} is above {key} {experts} (a token routes to at most every expert)")
        if dense is not None and layers is not None and dense > layers:
            problems.append(f"first_k_dense_replace {dense} is above num_hidden_layers {layers} (more dense layers "
                            "than layers)")
        if key == "n_routed_experts" and text.get("moe_intermediate_size") is None:
            problems.append("n_routed_experts without moe_intermediate_size (the experts' width)")
    kv = text.get("num_key_value_heads")
    if kv is not None and heads is not None and kv > heads:
        problems.append(f"num_key_value_heads {kv} is above num_attention_heads {heads}")
    if not text.get("head_dim") and not text.get("kv_lora_rank") and heads and hidden and heads > hidden:
        problems.append(f"num_attention_heads {heads} is above hidden_size {hidden} and no head_dim is given (a head "
                        "of no width)")
    if problems:
        raise ConfigError(where, "the target config contradicts itself: " + "; ".join(problems))


#: Bits per weight of the 4-bit microscaled formats, scales included: MXFP4 (OCP Microscaling: E2M1 values in blocks of
#: 32 sharing one 8-bit E8M0 scale, 4 + 8/32; gpt-oss's ``quant_method: mxfp4``) and NVFP4 (E2M1 in blocks of 16
#: sharing an FP8 E4M3 scale, 4 + 8/16, plus one FP32 scale a tensor; ModelOpt's ``quant_algo: NVFP4``).
MICROSCALED_BITS = {"mxfp4": 4.25, "nvfp4": 4.5}


def config_bits(cfg: dict[str, Any], where: str) -> float:
    """Bits per weight a target's config states (:func:`stated_bits`'s number)."""
    return stated_bits(cfg, where)[0]


#: ModelOpt's integer algorithms (``quant_algo``) by the words in their names: bits with half a bit of scales.
MODELOPT_INT_BITS = (("w4a", 4.5), ("int4", 4.5), ("w8a", 8.5), ("int8", 8.5))
#: Bits of each float dtype a config may name.
DTYPE_BITS = {"float32": 32.0, "float16": 16.0, "bfloat16": 16.0, "float8_e4m3fn": 8.0}


def dtype_bits(cfg: dict[str, Any], where: str) -> float:
    """Bits per weight of a config's ``torch_dtype`` (its text config's; bf16 when it names none): what the modules a
    quantization's ignore list keeps are stored at."""
    return config_bits({"torch_dtype": cfg.get("torch_dtype") or text_config(cfg).get("torch_dtype") or "bfloat16"},
                       where)


def stated_bits(cfg: dict[str, Any], where: str) -> tuple[float, str]:
    """Bits per weight a target's config states, and where they were read, in words.

    Its quantization's: a bit width plus half a bit of scales (``bits``, ``w_bit``, compressed-tensors'
    ``config_groups.*.weights.num_bits``), a microscaled format's own (:data:`MICROSCALED_BITS`), FP8's 8,
    ModelOpt's integer algorithms (:data:`MODELOPT_INT_BITS`); else its dtype's (bf16 when it names none).

    Raises:
        ConfigError: a quantization's bit width that is not a whole number from 1 to 32 (a bool, 0 or -4
            would count no or negative bytes).
    """
    q = cfg.get("quantization_config") or text_config(cfg).get("quantization_config") or {}
    if isinstance(q, dict):
        found = [(f"quantization_config.{key}", q[key]) for key in ("bits", "w_bit", "num_bits") if isinstance(q.get(key), int)]
        groups = q.get("config_groups")
        for name, g in (groups.items() if isinstance(groups, dict) else ()):
            w = g.get("weights") if isinstance(g, dict) else None
            if isinstance(w, dict) and isinstance(w.get("num_bits"), int):
                found.append((f"quantization_config.config_groups.{name}.weights.num_bits", w["num_bits"]))
        if found:
            name, bits = found[0]
            if isinstance(bits, bool) or not 1 <= bits <= 32:
                raise ConfigError(where, f"field {printable(repr(name))} must be a bit width from 1 to 32, got {shown(bits)}")
            return float(bits) + 0.5, f"{printable(name)} {bits}, half a bit of scales added"
        named = {key: str(q.get(key, "")).lower()[:60] for key in ("quant_method", "quant_algo")}
        for key, value in named.items():
            for fmt, bits in MICROSCALED_BITS.items():
                if fmt in value:
                    return bits, f"quantization_config.{key} {printable(value)}: {bits:g} bits with its block scales"
            for word, bits in MODELOPT_INT_BITS:
                if word in value:
                    return bits, f"quantization_config.{key} {printable(value)}: {bits - 0.5:g}-bit integers, half a " \
                                 "bit of scales added"
            if "fp8" in value:
                return 8.0, f"quantization_config.{key} {printable(value)}: 8-bit floats"
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or text_config(cfg).get("torch_dtype") or "bfloat16")
    if dtype in DTYPE_BITS:
        return DTYPE_BITS[dtype], f"torch_dtype {dtype}"
    return 16.0, f"torch_dtype {printable(dtype[:40])} read as 16 bits"


@dataclass(frozen=True)
class Calibration:
    """A calibrated load model against the points it was calibrated on.

    Attributes:
        concurrencies: the concurrencies measured, ascending.
        misses: each measured number the model does not reproduce within :data:`TOLERANCE`, worst first:
            ``concurrency``, ``what`` (``plain step`` / ``cycle``), ``measured_ms``, ``model_ms``, ``error``
            (model / measured - 1; None where the model's time is not a finite positive number).
        bandwidth_scale, flops_scale: the calibrated machine's bandwidth and peak over the uncalibrated one's.
        impossible: why no model can hold the points, in words: a cycle shorter than its plain step, or repeats of one
            setup that scatter beyond the tolerance.
    """

    concurrencies: list[int]
    misses: list[dict] = field(default_factory=list)
    bandwidth_scale: float = 1.0
    flops_scale: float = 1.0
    impossible: str | None = None

    @property
    def calibrated(self) -> bool:
        return not self.misses

    @property
    def far(self) -> bool:
        """Whether the fit moved the machine to the edge of what it searches, or beyond (the config far from it)."""
        scales = (self.bandwidth_scale, self.flops_scale)
        return not all(0 < s < math.inf for s in scales) or max(abs(math.log10(s)) for s in scales) \
            >= math.log10(SCALE_LIMIT) - 1e-3

    def worst(self) -> str:
        """The worst miss in words: ``the plain step at concurrency 1 comes out 101.7 ms against the 12.2 ms measured``."""
        m = self.misses[0]
        got = f"{m['model_ms']:.4g} ms" if m["error"] is not None else f"{m['model_ms']!r} ms, not a finite time"
        off = f" ({100 * abs(m['error']):.0f}% off)" if m["error"] is not None else ""
        return f"the {m['what']} at concurrency {m['concurrency']} comes out {got} against the {m['measured_ms']:.4g} " \
               f"ms measured{off}"

    def reason(self) -> str:
        """Why the model cannot reproduce the points, in words."""
        if self.impossible:
            return self.impossible
        if self.far:
            return (f"the fit would need the machine's bandwidth and peak beyond {SCALE_LIMIT:g}x (or 1/{SCALE_LIMIT:g}) "
                    "of its datasheet's: is the config the target that was measured, on this machine?")
        return "the model's shape cannot hold these numbers together"

    @property
    def broken(self) -> bool:
        """Whether the model's step at a measured point is not a finite positive time (no table to show)."""
        return any(m["error"] is None for m in self.misses)

    def require(self, source: str, where: str | None = None) -> None:
        """Refuse a model that does not reproduce its point, in one line naming the measured number and why.

        Raises:
            ParameterError: naming ``where``, by default ``--baseline-tps`` (a plain step missed) or
                ``--cycle-ms`` (a cycle).
        """
        if self.calibrated:
            return
        flag = where or ("--baseline-tps" if self.misses[0]["what"] == "plain step" else "--cycle-ms")
        points = "point" if len(self.concurrencies) == 1 else "points"
        raise ParameterError(flag, f"{source} cannot reproduce the {points} measured: {self.worst()}; {self.reason()}")

    def line(self) -> str:
        """What the model's table is: ``calibrated on the point measured at concurrency 1``, or what it misses."""
        at = ", ".join(str(c) for c in self.concurrencies)
        plural = "s" if len(self.concurrencies) > 1 else ""
        if self.calibrated:
            return f"calibrated on the point{plural} measured at concurrency {at}"
        why = f"; {self.reason()}" if self.far or self.impossible else ""
        return f"fitted to the points measured at concurrency {at} but not calibrated on them: {self.worst()}{why}"

    def note(self) -> str | None:
        """A note when the measured point(s) put the machine far from its datasheet (None: not far)."""
        if not self.far or not self.calibrated:
            return None
        return (f"the measured point{'s' if len(self.concurrencies) > 1 else ''} put the machine at "
                f"{self.bandwidth_scale:.2g}x its datasheet's bandwidth and {self.flops_scale:.2g}x its peak: is the "
                "config the target that was measured, on this machine?")

    def to_json(self) -> dict[str, Any]:
        return {"calibrated": self.calibrated, "misses": self.misses, "bandwidth_scale": self.bandwidth_scale,
                "flops_scale": self.flops_scale, "tolerance": TOLERANCE}


def residuals(model: Any, points: list[Any]) -> list[dict]:
    """Each measured plain step and cycle beside the model's at its concurrency, k and context.

    Returns:
        rows with ``concurrency``, ``what`` (``plain step`` / ``cycle``), ``k``, ``context``, ``measured_ms``,
        ``model_ms`` and ``error`` (model / measured - 1; None where the model's time is not a finite positive number).
    """
    rows = []
    for p in points:
        at = replace(model, context=p.context_in(model))
        for what, value in (("plain step", p.decode_s), ("cycle", p.cycle_s)):
            if value is None:
                continue
            got = float(at.decode_s(p.concurrency) if what == "plain step" else at.cycle_s(p.concurrency, p.k))
            ok = math.isfinite(got) and got > 0
            rows.append({"concurrency": p.concurrency, "what": what, "k": p.k if what == "cycle" else None,
                         "context": p.context, "measured_ms": 1e3 * value, "model_ms": 1e3 * got,
                         "error": got / value - 1.0 if ok else None})
    return rows


def calibration_of(start: Any, model: Any, points: list[Any]) -> Calibration:
    """How ``model`` (``start`` calibrated on ``points``, :func:`eaglelab.serving.load.calibrate`) reproduces them.

    Each point's plain step and cycle are compared with the model's at the point's concurrency and k; a
    number off by more than :data:`TOLERANCE`, or not a finite positive time, is a miss.
    """
    rows = residuals(model, points)
    misses = [r for r in rows if r["error"] is None or abs(r["error"]) > TOLERANCE]
    impossible = next((f"at concurrency {p.concurrency} the cycle ({1e3 * p.cycle_s:.4g} ms) is shorter than the plain "
                       f"step ({1e3 * p.decode_s:.4g} ms): a cycle holds a verify, which costs at least a step"
                       for p in points if p.decode_s is not None and p.cycle_s is not None and p.cycle_s < p.decode_s),
                      None)
    misses.sort(key=lambda m: -math.inf if m["error"] is None else -abs(m["error"]))
    repeats: dict[tuple, list[float]] = {}  # the same setup measured more than once
    for r in rows:
        repeats.setdefault((r["concurrency"], r["what"], r["k"], r["context"]), []).append(r["measured_ms"])
    spread = max((max(v) / min(v) - 1.0 for v in repeats.values() if len(v) > 1), default=0.0)
    if impossible is None and misses and spread > 2 * TOLERANCE:
        impossible = (f"the repeats of one setup differ by up to {100 * spread:.0f}% among themselves: no model "
                      f"reproduces each within {100 * TOLERANCE:.0f}%, the fit goes through their middle")
    s0, s1 = start.scales, model.scales
    return Calibration(sorted({p.concurrency for p in points}), misses, s0.memory / s1.memory if s1.memory else math.inf,
                       s0.compute / s1.compute if s1.compute else math.inf, impossible)
