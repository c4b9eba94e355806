"""What a checkpoint needs in memory, what this machine has free, and one line saying whether it loads here.

A Kimi-sized target (a trillion parameters, two TB in bf16) never loads on the machine the workbook
runs on; a tiny one always does. Notebooks 04 and 05 ask :func:`fits_here` before they train or sweep
(which load the target), and the probes compare their own estimate with :func:`available_memory` before
they allocate (:func:`require_memory`), so that a model that does not fit says so in one line instead
of a traceback from the allocator (:func:`out_of_memory_as_error` turns one that slips through into
the same line).

Parameters are counted from the safetensors headers (packed integer weights unpacked, quantization
scales left out) or from the config (:func:`language_model_parameters`), whichever is larger: a
header-only sample (``eaglelab.worlds.kimi_shapes``) or a partial download holds fewer tensors
than the model has. Configs and headers only: no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglelab.checkpoints.files.headers import DTYPE_BITS, TensorInfo
from eaglelab.checkpoints.files.sources import Checkpoint, is_hub_id, load_checkpoint
from eaglelab.checkpoints.targets.config import is_target_config, text_config, tied_embeddings
from eaglelab.errors import ConfigError, EaglelabError, ParameterError, ResourceError, is_whole
from eaglelab.inputs import is_ascii_digits, printable

#: Bytes per parameter of the dtypes a model is loaded in.
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
#: Tensors that are quantization bookkeeping, not parameters (scales, zero points, packed shapes, group indices).
QUANT_SUFFIXES = ("weight_scale", "weight_scale_inv", "weight_shape", "weight_zero_point", "weight_global_scale",
                  "input_scale", "input_global_scale", ".scales", ".qzeros", ".g_idx")
#: Tensors holding several integer weights per stored element (compressed-tensors' and GPTQ / AWQ's packing).
PACKED_SUFFIXES = ("weight_packed", ".qweight")
#: A cgroup limit at or above this is "no limit" (cgroup v1 writes 2^63 rounded down to a page).
_NO_LIMIT = 1 << 62


# --------------------------------------------------------------------------- counting parameters

def _whole(cfg: dict[str, Any], key: str, default: int | None = None) -> int | None:
    value = cfg.get(key)
    return value if is_whole(value, 0) else default


def _attention_parameters(text: dict[str, Any], H: int) -> int | None:
    """One decoder layer's attention: multi-head latent (DeepSeek-V3, Kimi) or Llama-style grouped-query."""
    heads = _whole(text, "num_attention_heads")
    if not heads:
        return None
    kv_rank = _whole(text, "kv_lora_rank")
    if kv_rank:
        q_rank = _whole(text, "q_lora_rank", 0)
        rope, nope, v = (_whole(text, k, d) for k, d in (("qk_rope_head_dim", 64), ("qk_nope_head_dim", 128),
                                                        ("v_head_dim", 128)))
        q = H * q_rank + q_rank + q_rank * heads * (nope + rope) if q_rank else H * heads * (nope + rope)
        return q + H * (kv_rank + rope) + kv_rank + kv_rank * heads * (nope + v) + heads * v * H
    d = _whole(text, "head_dim") or H // heads
    kv = _whole(text, "num_key_value_heads") or heads
    out = 2 * H * heads * d + 2 * H * kv * d
    if text.get("attention_bias") is True:
        out += heads * d + 2 * kv * d + H
    elif str(text.get("model_type", "")).startswith("qwen2"):  # Qwen2's q / k / v biases, which no flag names
        out += heads * d + 2 * kv * d
    if str(text.get("model_type", "")).startswith("qwen3"):  # per-head q / k RMSNorms
        out += 2 * d
    return out


def moe_layer_count(text: dict[str, Any], layers: int) -> int:
    """How many of ``layers`` decoder layers route to experts (DeepSeek's first dense layers and frequency, Qwen's
    step and dense list), counted without walking the layers: a config's counts are bounded
    (:data:`~eaglelab.checkpoints.files.config_types.MAX_LAYERS`), and a count costs no more for a deep model."""
    dense = min(_whole(text, "first_k_dense_replace", 0), layers)
    freq = _whole(text, "moe_layer_freq") or 1
    step = _whole(text, "decoder_sparse_step") or 1

    def routed(i: int) -> bool:
        return i >= dense and i % freq == 0 and (i + 1) % step == 0

    # layers i >= dense with i = 0 (mod freq) and i = step - 1 (mod step): one residue r modulo lcm(freq, step), or none
    period = math.lcm(freq, step)
    first = next((r for r in range(step - 1, period, step) if r % freq == 0), None) if period <= 1 << 20 else None
    if first is None and period <= 1 << 20:
        count = 0
    elif first is None:  # residues too many to search: the layers are few enough to count one by one
        count = sum(routed(i) for i in range(dense, layers))
    else:
        start = first + max(0, -(-(dense - first) // period)) * period
        count = 0 if start >= layers else (layers - 1 - start) // period + 1
    only = {i for i in (text.get("mlp_only_layers") or []) if isinstance(i, int) and 0 <= i < layers}
    return count - sum(routed(i) for i in only)


def _mlp_parameters(text: dict[str, Any], H: int, moe: bool) -> int:
    """One decoder layer's MLP: gated dense, or routed experts with their router and shared experts."""
    inter = _whole(text, "intermediate_size") or 4 * H
    experts = _whole(text, "n_routed_experts") or _whole(text, "num_experts") or _whole(text, "num_local_experts") or 0
    if not (moe and experts):
        return 3 * H * inter
    width = _whole(text, "moe_intermediate_size") or inter
    out = experts * 3 * H * width + experts * H  # the experts and the router
    out += _whole(text, "n_shared_experts", 0) * 3 * H * width  # DeepSeek's shared experts
    shared = _whole(text, "shared_expert_intermediate_size", 0)  # Qwen-MoE's shared expert and its gate
    out += 3 * H * shared + H if shared else 0
    if text.get("topk_method") == "noaux_tc" or text.get("model_type") in ("deepseek_v3", "kimi_k2"):
        out += experts  # the router's e_score_correction_bias
    return out


def language_model_parameters(config: dict[str, Any] | None) -> int | None:
    """Parameters of a decoder-only language model from its config (a multimodal config's text config).

    Embedding, decoder layers (Llama-style grouped-query or multi-head latent attention; gated MLPs or
    routed experts with a router and shared experts, DeepSeek's first dense layers), final norm, and the
    head unless it is tied. A vision tower or projector is not counted (their headers are).

    Returns:
        the count, or None when the config lacks ``hidden_size``, ``num_hidden_layers``, ``vocab_size`` or
        ``num_attention_heads`` as whole numbers.
    """
    text = text_config(config)
    H, L, V = (_whole(text, k) for k in ("hidden_size", "num_hidden_layers", "vocab_size"))
    if not (H and L and V):
        return None
    attention = _attention_parameters(text, H)
    if attention is None:
        return None
    moe = moe_layer_count(text, L)
    layers = L * (attention + 2 * H) + moe * _mlp_parameters(text, H, True) + (L - moe) * _mlp_parameters(text, H, False)
    tied, _ = tied_embeddings(config)
    return V * H + layers + H + (0 if tied else V * H)


def _quantized_bits(config: dict[str, Any] | None) -> int:
    """Bits per packed weight in a compressed-tensors / GPTQ / AWQ config (4 when it does not say)."""
    q = (config or {}).get("quantization_config")
    q = q if isinstance(q, dict) else {}
    if is_whole(q.get("bits")):
        return q["bits"]
    for group in (q.get("config_groups") or {}).values() if isinstance(q.get("config_groups"), dict) else ():
        weights = group.get("weights") if isinstance(group, dict) else None
        if isinstance(weights, dict) and is_whole(weights.get("num_bits")):
            return weights["num_bits"]
    return 4


def header_parameters(tensors: dict[str, TensorInfo], config: dict[str, Any] | None = None) -> int:
    """Parameters the safetensors headers hold: packed integer weights counted unpacked, quantization scales out."""
    bits = _quantized_bits(config)
    total = 0
    for name, info in tensors.items():
        if name.endswith(QUANT_SUFFIXES):
            continue
        total += info.numel * (DTYPE_BITS[info.dtype] // bits if name.endswith(PACKED_SUFFIXES) else 1)
    return total


#: The safetensors dtypes of floating-point weights (what a loader casts to the dtype it is asked for).
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")


def drafter_weight_bytes(tensors: dict[str, TensorInfo], dtype: str, embedding: bool = False) -> int:
    """Bytes a drafter file's tensors take once loaded with their float weights in ``dtype``.

    Its ``embed_tokens`` is left out unless ``embedding`` (a probe lends each target's); the vocabulary
    maps keep their stored size.
    """
    per = dtype_bytes(dtype)
    return sum(info.numel * per if info.dtype in FLOAT_DTYPES else info.nbytes for name, info in tensors.items()
               if embedding or not name.endswith("embed_tokens.weight"))


# --------------------------------------------------------------------------- memory free

def _meminfo(key: str, path: str = "/proc/meminfo") -> int | None:
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if is_ascii_digits(text) else None  # str.isdigit takes '²', which int() refuses


def _inactive_file(folder: Path) -> int:
    """Page cache the kernel reclaims before it refuses an allocation (``memory.stat``'s inactive file pages)."""
    try:
        for line in (folder / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key in ("inactive_file", "total_inactive_file") and is_ascii_digits(value.strip()):
                return int(value)
    except OSError:
        pass
    return 0


def _cgroup_room(cgroup_file: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> int | None:
    """What this process's memory cgroup (v2 or v1) and its ancestors still allow, or None when none limits it."""
    try:
        lines = Path(cgroup_file).read_text().splitlines()
    except OSError:
        return None
    room = None
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":
            base, limit_name, usage_name = Path(root), "memory.max", "memory.current"
        elif "memory" in controllers.split(","):
            base, limit_name, usage_name = Path(root) / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        folder = base / path.lstrip("/")
        while True:
            limit, usage = _read_int(folder / limit_name), _read_int(folder / usage_name)
            if limit is not None and usage is not None and limit < _NO_LIMIT:
                here = max(0, limit - max(0, usage - _inactive_file(folder)))
                room = here if room is None else min(room, here)
            if folder == base or base not in folder.parents:
                break
            folder = folder.parent
    return room


def _address_space_room() -> int | None:
    """What this process's address-space limit (``ulimit -v``, a batch system's) still allows it to map, or None."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    return max(0, soft - (_meminfo("VmSize", "/proc/self/status") or 0))


def available_memory() -> int:
    """Bytes this process can still be given: ``MemAvailable``, or less where its memory cgroup or its
    address-space limit leaves less."""
    free = _meminfo("MemAvailable") or _meminfo("MemFree") or 0
    for room in (_cgroup_room(), _address_space_room()):
        free = free if room is None else min(free, room)
    return free


def human_bytes(n: float) -> str:
    """``2.1 TB``, ``21 GB``, ``4.7 MB``: decimal units, two significant figures (an estimate, not a receipt)."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            value = n / size
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{n:.0f} B"


def human_count(n: int) -> str:
    """``1.03 T``, ``7.62 B``, ``1.2 M``: three significant figures."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return str(n)


# --------------------------------------------------------------------------- a target on this machine

def parameter_count(ck: Checkpoint) -> tuple[int, str]:
    """A checkpoint's parameters and where they were counted: ``(count, "headers" | "config")``, the larger.

    A target's config counts the whole language model (:func:`language_model_parameters`) where a header-only
    sample or a partial download holds less; its headers count what the config does not describe (a vision
    tower). A drafter's config is no language model's (one layer reading 3H): its headers alone count it.

    Raises:
        ConfigError: neither the config nor the headers say.
    """
    from_config = (language_model_parameters(ck.config) or 0) if is_target_config(ck.config or {}) else 0
    from_headers = header_parameters(ck.tensors, ck.config) if ck.tensors else 0
    if not (from_config or from_headers):
        raise ConfigError(ck.source, "neither its config (hidden_size, num_hidden_layers, vocab_size, "
                                     "num_attention_heads) nor safetensors headers say how many parameters it has")
    return (from_headers, "headers") if from_headers >= from_config else (from_config, "config")


@dataclass(frozen=True)
class Fit:
    """Whether a target's weights fit this machine's free memory, and the one sentence that says so.

    Attributes:
        target: the target as given.
        dtype: the dtype it would load in.
        parameters: its parameter count.
        counted_from: ``headers`` or ``config`` (the larger count: a header-only sample holds less than the model).
        needed_bytes: its weights in ``dtype``.
        available_bytes: what this machine has free (or what the caller said it has).
        loads: ``needed_bytes <= available_bytes``.
        line: one sentence for a notebook or the command line.
    """

    target: str
    dtype: str
    parameters: int
    counted_from: str
    needed_bytes: int
    available_bytes: int
    loads: bool
    line: str


def _name(target: str) -> str:
    return printable(target if is_hub_id(target) else (Path(target).name or target))


def fits_here(target: str, dtype: str = "bfloat16", available: int | None = None, revision: str | None = None) -> Fit:
    """Whether ``target`` loads on this machine in ``dtype``, from its config and headers only (nothing is read else).

    Notebooks 04 and 05 call it before they train or sweep (both load the target): a target that does not
    fit is answered with ``line`` ("too large to load here") and the engines' dumps and recipes, instead of
    a load that runs out of memory. The weights alone are counted (parameters times the dtype's bytes);
    a target that fits only just may still run short once its activations are added.

    Args:
        target: a folder, shard index, safetensors file or hub id (its headers are read by range).
        dtype: ``float32``, ``bfloat16`` or ``float16``.
        available: bytes to compare with (a GPU's free memory, say); None: this machine's
            (:func:`available_memory`).
        revision: hub revision.

    Returns:
        :class:`Fit`; e.g. ``line`` "k25-target: 1.03 T parameters, about 2.1 TB in bfloat16, this machine
        has 21 GB free: it does not load here" (the caller says what to run instead).

    Raises:
        ParameterError: an unknown dtype. SourceError / HubError / ConfigError: the target cannot be read,
            or neither its config nor its headers say how many parameters it has.
    """
    per = dtype_bytes(dtype)
    parameters, counted_from = parameter_count(load_checkpoint(target, revision, weights_optional=True))
    needed = parameters * per
    free = available_memory() if available is None else int(available)
    loads = needed <= free
    verdict = "it loads here" if loads else "it does not load here"  # what to run instead: the caller's to say
    line = (f"{_name(str(target))}: {human_count(parameters)} parameters, about {human_bytes(needed)} in {dtype}, "
            f"this machine has {human_bytes(free)} free: {verdict}")
    return Fit(str(target), dtype, parameters, counted_from, needed, free, loads, line)


# --------------------------------------------------------------------------- before and while allocating

def require_memory(where: str, needs: dict[str, int], available: int | None = None, free_on: str = "this machine",
                   advice: str = "") -> int:
    """Refuse, before anything is allocated, a step whose estimate exceeds the memory free.

    Args:
        where: the step, as the error names it (``the probe from dumps``).
        needs: what it allocates, by part (``{"the heads of both targets": 9.4e9, ...}``), bytes.
        available: bytes free; None: :func:`available_memory`.
        free_on: where ``available`` is (``this machine``, ``cuda:0``).
        advice: what to change, appended to the line.

    Returns:
        the bytes needed in all.

    Raises:
        ResourceError: one line with what it needs, part by part, and what is free.
    """
    total = int(sum(needs.values()))
    free = available_memory() if available is None else int(available)
    if total > free:
        parts = ", ".join(f"{part} {human_bytes(n)}" for part, n in needs.items() if n)
        raise ResourceError(where, f"needs about {human_bytes(total)} ({parts}), {free_on} has {human_bytes(free)} "
                                   f"free" + (f": {advice}" if advice else ""))
    return total


#: What the allocators say when they run out (torch's CPU and CUDA allocators, safetensors' mmap, the kernel).
_OUT_OF_MEMORY = ("out of memory", "can't allocate memory", "cannot allocate memory", "failed to allocate")


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation that failed (a MemoryError, or torch's RuntimeError / OutOfMemoryError)."""
    if isinstance(exc, MemoryError):
        return True
    return isinstance(exc, RuntimeError) and any(sign in str(exc).lower() for sign in _OUT_OF_MEMORY)


class OutOfMemoryAsError:
    """Inside the block, running out of memory is one :class:`~eaglelab.errors.ResourceError` line, not a traceback.

    The allocator's own words (their first line) are kept; the failed step's exception is not chained, so
    neither its traceback nor the frames and tensors it holds outlive the error.

    Args:
        where: the step, as the error names it.
        advice: what to change, appended to the line.
    """

    def __init__(self, where: str, advice: str = ""):
        self.where, self.advice = where, advice

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None or isinstance(exc, EaglelabError) or not is_out_of_memory(exc):
            return False
        text = str(exc).strip()
        said = printable(text.splitlines()[0] if text else type(exc).__name__)[:240]
        exc.__traceback__ = None  # the frames, and what they allocated, are let go
        err = ResourceError(self.where, f"ran out of memory ({said}); this machine has "
                                        f"{human_bytes(available_memory())} free now"
                                        + (f": {self.advice}" if self.advice else ""))
        try:
            raise err from None
        finally:
            err.__context__ = None


def out_of_memory_as_error(where: str, advice: str = "") -> OutOfMemoryAsError:
    """``with out_of_memory_as_error("the probe from dumps", "lower --batch-size"):`` (:class:`OutOfMemoryAsError`)."""
    return OutOfMemoryAsError(where, advice)


def dtype_bytes(dtype: str, where: str = "dtype") -> int:
    """Bytes per element of a dtype by name (``bfloat16`` -> 2), refusing any other name."""
    if dtype not in DTYPE_BYTES:
        raise ParameterError(where, f"must be one of {', '.join(DTYPE_BYTES)}, got {printable(repr(dtype))}")
    return DTYPE_BYTES[dtype]

