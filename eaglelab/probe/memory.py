"""What the probes hold in memory, estimated from configs, headers and file sizes before anything is allocated.

A Kimi-sized pair (hidden 7,168, vocabulary 163,840) fills a workstation's memory from its heads and
drafter alone; a probe that would not fit says so in one :class:`~eaglelab.errors.ResourceError` line,
naming what it needs part by part and what is free, before it reads a byte
(:func:`eaglelab.checkpoints.targets.footprint.require_memory`). The estimates are upper bounds of the peak
(measured at Kimi width by ``benchmarks/bench_dump_memory.py``): the probe from dumps
(:func:`dump_probe_needs`: both targets' heads, the drafter in the probe's dtype with its embedding lent,
one batch) and the live probe (:func:`live_probe_needs`: both targets whole, the drafter, one batch).
"""

from __future__ import annotations

import torch

from eaglelab.checkpoints.drafters.spec import DrafterSpec, drafter_spec_from_config
from eaglelab.checkpoints.files.sources import TensorInfo, load_checkpoint
from eaglelab.checkpoints.targets.config import target_field
from eaglelab.checkpoints.targets.footprint import (
    available_memory,
    drafter_weight_bytes,
    dtype_bytes,
    parameter_count,
    require_memory,
)
from eaglelab.data.dumps import DumpPairs
from eaglelab.errors import is_whole
from eaglelab.model.drafter import ttt_pass_bytes
from eaglelab.model.heads import HeadsPlan

#: Positions per head product at most: [head_chunk, V] float32 logits at a time.
HEAD_CHUNK = 1024
#: Bytes of one [chunk, V] float32 logits block at most: fewer positions per product at a large vocabulary
#: (163,840 columns: 409 positions, 0.27 GB a block, three blocks alive at a time).
HEAD_CHUNK_BYTES = 1 << 28
#: Where the probe from dumps is named in its errors, and what to change when it does not fit.
DUMP_WHERE = "the probe from dumps"
DUMP_ADVICE = "lower --batch-size, probe with --dtype bfloat16, or run it where more memory is free"
#: The same for the live probe.
LIVE_WHERE = "the live probe"
LIVE_ADVICE = ("lower --batch-size or --seq-len, probe with --dtype bfloat16, or probe from the engines' dumps "
               "(--old-states / --new-states)")


def head_chunk_positions(vocab_size: int, head_chunk: int = HEAD_CHUNK) -> int:
    """Positions per head product: ``head_chunk``, fewer where a [chunk, V] float32 block passes the byte cap."""
    return max(1, min(head_chunk, HEAD_CHUNK_BYTES // (4 * max(1, vocab_size))))


def free_on(device: str | torch.device | None = None, device_map: str | None = None) -> tuple[int, str]:
    """Bytes free where a probe allocates, and where that is: every GPU's (``device_map="auto"``), a GPU's, or this
    machine's (:func:`eaglelab.checkpoints.targets.footprint.available_memory`)."""
    if device_map == "auto" and torch.cuda.is_available():
        n = torch.cuda.device_count()
        return sum(int(torch.cuda.mem_get_info(i)[0]) for i in range(n)), f"{n} GPUs"
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda":
        return int(torch.cuda.mem_get_info(dev)[0]), str(dev)
    return available_memory(), "this machine"


# --------------------------------------------------------------------------- the probe from dumps

def sample_tokens(pairs: DumpPairs, hidden_size: int) -> int:
    """The most tokens a probed sample may hold, from its file's size alone (an upper bound, nothing read).

    A sample holds four [S, H] layers: at two bytes a value (bf16, what engines write) S is at most the
    file's bytes over 8H; a ``.gz`` file is counted twice its size (gzip shrinks floats by under 2x).
    """
    most = 0
    for folder in (pairs.a, pairs.b):
        for i in pairs.indices:
            path = folder.files[i]
            try:
                size = path.stat().st_size
            except OSError:
                continue
            most = max(most, size * (2 if path.name.endswith(".gz") else 1))
    return max(1, most // (8 * hidden_size))


def batch_bytes(spec: DrafterSpec, vocab_size: int, positions: int, sample_bytes: int, batch: int,
                element: int, k: int, head_chunk: int = HEAD_CHUNK) -> int:
    """What one batch of the probe from dumps holds at its peak, bytes (an estimate from the shapes).

    Args:
        spec: the drafter's (its hidden size, MLP width, heads and draft vocabulary).
        vocab_size: the targets' V.
        positions: the batch's positions (samples times the longest sample's tokens).
        sample_bytes: one sample file's bytes, decompressed.
        batch: samples per batch.
        element: bytes per value in the probe's dtype.
        k: drafts per cycle.
        head_chunk: positions per head product at most.

    The parts: the samples read (their bytes, twice while unpickled) and stacked (four layers of each
    target); three [chunk, V] float32 blocks of the head pass; both targets' draft-vocabulary logits, kept
    for the drafter (float32, twice while concatenated); the drafter's pass (:func:`ttt_pass_bytes`); the
    similarity's float64 copies.
    """
    T, Ht, Vd = positions, spec.target_hidden_size, spec.draft_vocab_size
    chunk = min(head_chunk_positions(vocab_size, head_chunk), T)
    read = 2 * batch * sample_bytes * 2
    stacked = 2 * T * 4 * Ht * element
    heads = chunk * vocab_size * (element + 3 * 4) + 2 * T * Vd * 4 * 2
    return int(read + stacked + heads + ttt_pass_bytes(spec, T, batch, element, k) + 3 * T * Ht * 8)


def dump_probe_needs(pairs: DumpPairs, plans: tuple[HeadsPlan, HeadsPlan], drafter_tensors: dict[str, TensorInfo],
                     spec: DrafterSpec, dtype: torch.dtype, batch_size: int, k: int,
                     head_chunk: int = HEAD_CHUNK) -> dict[str, int]:
    """What the probe from dumps holds on the device it computes on, by part, bytes (headers and file sizes only).

    Args:
        pairs: the paired folders (their probed samples' file sizes).
        plans: both targets' heads as they will be read.
        drafter_tensors: the drafter file's tensors (name -> TensorInfo): what :func:`load_drafter` reads with
            the embedding left to the target, each float weight in ``dtype``.
        spec: the drafter's.
        dtype: the probe's.
        batch_size, k, head_chunk: as :func:`run_dump_probe` takes them.
    """
    element, name = dtype.itemsize, str(dtype).removeprefix("torch.")
    heads = sum(sum(plan.nbytes(dtype)) for plan in plans)
    weights = drafter_weight_bytes(drafter_tensors, name)
    batch = min(batch_size, len(pairs.indices))
    S = sample_tokens(pairs, plans[0].hidden_size)
    vocab = int(plans[0].infos["lm_head"].shape[0])
    return {"the heads of both targets": heads, f"the drafter in {name}": weights,
            f"a batch of {batch} x {S} positions": batch_bytes(spec, vocab, batch * S, S * 8 * plans[0].hidden_size,
                                                               batch, element, k, head_chunk)}


# --------------------------------------------------------------------------- the live probe

def live_probe_needs(old_target: str, new_target: str, old_drafter: str, dtype: str, batch_size: int, seq_len: int,
                     k: int) -> dict[str, int]:
    """What the live probe holds, by part, bytes, from configs and headers alone (nothing loaded).

    Both targets' weights in ``dtype`` (:func:`eaglelab.checkpoints.targets.footprint.parameter_count`), the old
    drafter's in ``dtype`` with each target's embedding lent (``load_drafter(..., embedding=False)``), and
    one batch: both targets' logits, their next-token distributions in float32 for the TV, a few layers'
    activations and the captured states, and the drafter's pass (:func:`eaglelab.model.drafter.ttt_pass_bytes`).
    """
    per = dtype_bytes(dtype)
    targets = [load_checkpoint(t, weights_optional=True) for t in (old_target, new_target)]
    drafter = load_checkpoint(old_drafter)
    spec = drafter_spec_from_config(drafter.config or {}, old_drafter, list(drafter.tensors))

    def field(name: str) -> int:
        return max((v for v in (target_field(ck.config, name) for ck in targets) if is_whole(v)), default=0)

    T, V, H = batch_size * seq_len, field("vocab_size"), field("hidden_size")
    batch = 2 * T * V * per + 3 * T * V * 4 + 16 * T * H * per + ttt_pass_bytes(spec, T, batch_size, per, k) \
        + 3 * T * H * 8
    return {f"both targets in {dtype}": sum(parameter_count(ck)[0] for ck in targets) * per,
            f"the drafter in {dtype}": drafter_weight_bytes(drafter.tensors, dtype),
            f"a batch of {batch_size} x {seq_len} positions": int(batch)}


def check_live_probe_memory(old_target: str, new_target: str, old_drafter: str, dtype: str, batch_size: int,
                            seq_len: int, k: int, device: str | None = None, device_map: str | None = None) -> int:
    """Refuse, before either target loads, a live probe the memory free cannot hold (:func:`live_probe_needs`).

    Returns:
        the bytes it needs.

    Raises:
        ResourceError: one line: what it needs, part by part, what is free, and what to change.
    """
    free, where = free_on(device, device_map)
    needs = live_probe_needs(old_target, new_target, old_drafter, dtype, batch_size, seq_len, k)
    return require_memory(LIVE_WHERE, needs, free, where, LIVE_ADVICE)
