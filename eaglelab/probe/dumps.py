"""The plug-in probe from the engines' hidden-state dumps: neither target is loaded.

At the seed's scale (two 1T-parameter MoE targets on 8 GPUs each) the states come from the serving
engine (:mod:`eaglelab.data.dumps`), and of each target only its head and embedding are read
(:func:`eaglelab.model.heads.read_target_heads`). Sample i of A is paired with sample i of B, their
tokens checked equal, and batches of pairs stream through three passes that are the live probe's
(:func:`eaglelab.probe.plugin.run_probe`), so the numbers are the same on the same sequences:

1. similarity at the drafter's three layers and the last (cosine, relative L2, streaming CKA);
2. the heads: ``norm(last) @ lm_head.T`` once per position and target, shared by next-token
   agreement, total variation and the drafter's targets (greedy token, draft-vocabulary logits);
3. the old drafter teacher-forced on A's and on B's states, reading each target's embedding.

Memory is bounded by the batch (``batch_size`` sequences; the head products by ``head_chunk``
positions at a time, and by :data:`HEAD_CHUNK_BYTES`), never by the number of tokens. Before anything
is allocated, :func:`load_dump_probe` estimates what the probe holds (both heads, the drafter in the
dtype asked for, with the target's embedding lent, and one batch) from headers and file sizes, and
refuses in one :class:`~eaglelab.errors.ResourceError` line what this machine cannot hold; an
allocation that fails all the same is that line too, never the allocator's traceback. Dumps that count
no position (loss masks of 0, one-token samples), too few samples for the verdict's band, or numbers
that are not finite get no verdict: one :class:`~eaglelab.errors.DumpError` naming the folders and what
is missing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from eaglelab.checkpoints.drafters.spec import DrafterSpec
from eaglelab.checkpoints.files.sources import load_checkpoint
from eaglelab.checkpoints.targets.footprint import out_of_memory_as_error, require_memory
from eaglelab.data.dumps import DumpPairs, DumpSample
from eaglelab.data.states import HiddenStates
from eaglelab.decisions import NO_VERDICT, Decision
from eaglelab.errors import CheckpointMismatchError, DumpError
from eaglelab.inputs import printable
from eaglelab.model.drafter import Eagle3Drafter
from eaglelab.model.drafter_files import load_drafter
from eaglelab.model.heads import TargetHeads, plan_target_heads
from eaglelab.probe.memory import (
    DUMP_ADVICE,
    DUMP_WHERE,
    HEAD_CHUNK,
    dump_probe_needs,
    free_on,
    head_chunk_positions,
)
from eaglelab.probe.plugin import ProbeSource, finish_probe, layer_labels, update_similarity
from eaglelab.probe.similarity import SimilarityAccumulator
from eaglelab.settings import DEFAULT_K
from eaglelab.train.ttt import AcceptanceTally, TargetTokens, evaluate_batch


@dataclass
class HeadPass:
    """What the two heads say at every position of a batch (each product computed once).

    Attributes:
        a, b: the drafter's targets on A and on B (greedy token [B, S], draft logits [B, S, Vd]).
        tv: [B, S] total variation of A's and B's next-token distributions.
        peak_a, peak_b: the largest next-token probability each head gives at any position of the batch.
    """

    a: TargetTokens
    b: TargetTokens
    tv: torch.Tensor
    peak_a: float = 1.0
    peak_b: float = 1.0


#: A head whose largest next-token probability, anywhere in the probe, stays under this many times uniform (1 / V)
#: spreads its mass evenly: it tells no token from another (a real head puts 10-100% on its first choice).
UNIFORM_PEAK = 2.0


@dataclass
class HeadSpread:
    """What one target's head did over the whole probe, to tell a head without weights by what it does.

    A header-only or sparse sample reads as zeros; a placeholder head of ones, or of zeros with a stray element,
    is no better: each gives every position the same greedy token, or a next-token distribution flat to within
    :data:`UNIFORM_PEAK` of uniform, and a τ measured against such a target measures no target.
    """

    vocab: int
    first: int | None = None
    varied: bool = False
    peak: float = 0.0

    def update(self, greedy: torch.Tensor, peak: float) -> None:
        flat = greedy.reshape(-1)
        if flat.numel():
            if self.first is None:
                self.first = int(flat[0])
            self.varied = self.varied or bool((flat != self.first).any())
        self.peak = max(self.peak, peak)

    def blank(self) -> str | None:
        """Why this head measures no target, in words, or None when it tells tokens apart."""
        if self.first is not None and not self.varied:
            return f"gives every position the same greedy token (id {self.first})"
        if self.peak < UNIFORM_PEAK / self.vocab:
            return (f"spreads its probability evenly (at most {self.peak:.2e} on any token, under {UNIFORM_PEAK:g}x "
                    f"uniform over {self.vocab:,} tokens)")
        return None


@torch.no_grad()
def head_pass(last_a: torch.Tensor, last_b: torch.Tensor, head_a: torch.Tensor, head_b: torch.Tensor,
              draft_ids: torch.Tensor, chunk: int = HEAD_CHUNK) -> HeadPass:
    """Both targets' logits from their normed last states, chunk by chunk: greedy, draft logits, TV.

    Args:
        last_a, last_b: [B, S, H] final-norm outputs.
        head_a, head_b: [V, H] the two ``lm_head`` weights (the products run in their dtype).
        draft_ids: [Vd] the target id of each draft id.
        chunk: positions per product.
    """
    B, S, _ = last_a.shape
    xa, xb = last_a.reshape(B * S, -1), last_b.reshape(B * S, -1)
    draft_ids = draft_ids.to(head_a.device)
    chunk = head_chunk_positions(int(head_a.shape[0]), chunk)
    greedy_a, greedy_b, draft_a, draft_b, tv = [], [], [], [], []
    peak_a = peak_b = 0.0
    for i in range(0, B * S, chunk):
        # each [chunk, V] block is let go as soon as its softmax is taken: three alive at a time, not six
        la = (xa[i: i + chunk].to(head_a.device, head_a.dtype) @ head_a.T).float()
        greedy_a.append(la.argmax(-1))
        draft_a.append(la[:, draft_ids])
        pa = torch.softmax(la, -1)
        peak_a = max(peak_a, float(pa.max()) if pa.numel() else 0.0)
        del la
        lb = (xb[i: i + chunk].to(head_b.device, head_b.dtype) @ head_b.T).float()
        greedy_b.append(lb.argmax(-1))
        draft_b.append(lb[:, draft_ids])
        pb = torch.softmax(lb, -1)
        peak_b = max(peak_b, float(pb.max()) if pb.numel() else 0.0)
        del lb
        tv.append(pa.sub_(pb).abs_().sum(-1).mul_(0.5))
        del pa, pb

    def cat(xs, *shape):
        return torch.cat(xs).reshape(B, S, *shape)

    vd = int(draft_ids.numel())
    return HeadPass(TargetTokens(cat(greedy_a), cat(draft_a, vd)), TargetTokens(cat(greedy_b), cat(draft_b, vd)),
                    cat(tv), peak_a, peak_b)


@dataclass
class StackBuffers:
    """Storage :func:`stack_batch` reuses from batch to batch (one per target).

    A batch's stack is hundreds of MB at a target's width: allocated afresh, every page of it faults in again
    before the copy can write it, which on the project's machines costs as much as the copy itself.
    """

    storage: dict = field(default_factory=dict)

    def take(self, name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """An uninitialised tensor of ``shape``, a view of the storage kept under ``name`` (grown when too small)."""
        n = math.prod(shape)
        held = self.storage.get(name)
        if held is None or held.numel() < n or held.dtype != dtype or held.device != torch.device(device):
            self.storage.pop(name, None)  # let the old storage go before the new one is allocated
            held = self.storage[name] = torch.empty(n, dtype=dtype, device=device)
        return held[:n].view(shape)


def stack_batch(samples: list[DumpSample], heads: TargetHeads, device: torch.device,
                dtype: torch.dtype, buffers: StackBuffers | None = None) -> HiddenStates:
    """Right-pad a batch of samples to its longest into HiddenStates on ``device`` (padding not counted).

    The last layer is normed with the target's final norm where the producer stored it before the norm. Each
    sample's states are cast as they are copied in (one pass), and only the padding is zeroed. With ``buffers``
    the states are written into its storage (the previous batch's stack from the same buffers is overwritten).
    """
    S = max(len(s) for s in samples)
    B, H = len(samples), int(samples[0].last.shape[-1])
    ids = torch.zeros(B, S, dtype=torch.long)
    mask = torch.zeros(B, S, dtype=torch.bool)
    buffers = buffers or StackBuffers()
    aux = buffers.take("aux", (B, S, 3 * H), dtype, device)
    last = buffers.take("last", (B, S, H), dtype, device)
    for i, s in enumerate(samples):
        n = len(s)
        ids[i, :n], mask[i, :n] = s.input_ids, s.loss_mask
        aux[i, :n].copy_(s.aux)
        last[i, :n].copy_(s.last if s.last_normed else heads.norm(s.last.to(device)))
        aux[i, n:].zero_()
        last[i, n:].zero_()
    return HiddenStates(ids, mask, aux, last)


@torch.no_grad()
def run_dump_probe(pairs: DumpPairs, heads_a: TargetHeads, heads_b: TargetHeads, drafter: Eagle3Drafter,
                   aux_layer_outputs: tuple[int, ...], k: int = DEFAULT_K, batch_size: int = 8, head_chunk: int = HEAD_CHUNK,
                   on_batch: Callable[[], None] | None = None):
    """The plug-in probe on paired dumps: similarity, agreement and TV, τ on A and B, the verdict.

    Args:
        pairs: the two folders paired (:func:`eaglelab.data.dumps.pair_dumps`).
        heads_a, heads_b: each target's norm, ``lm_head`` and embedding, on the device to compute on.
        drafter: the old drafter, on that device (its aux layers are the dumps' three).
        aux_layer_outputs: those layers as 0-based decoder-layer outputs (the labels of the result).
        k: drafts per cycle of the teacher-forced acceptance.
        batch_size: sample pairs per batch.
        head_chunk: positions per head product.
        on_batch: called after each batch (a progress bar's update).

    Returns:
        :class:`eaglelab.probe.plugin.ProbeResult`, as the live probe's.

    Raises:
        DumpError: a sample that does not read or pair, or no verdict can be drawn from the dumps
            (:func:`eaglelab.probe.plugin.finish_probe`).
    """

    labels = layer_labels(aux_layer_outputs)
    sim = SimilarityAccumulator(labels)
    tally_a, tally_b = AcceptanceTally(k), AcceptanceTally(k)
    dev, dtype = drafter.fc.weight.device, heads_a.lm_head.dtype
    draft_ids = drafter.draft_target_ids()
    embed_a, embed_b = heads_a.embedding.to(dev), heads_b.embedding.to(dev)  # rows are cast as they are looked up
    stacks_a, stacks_b = StackBuffers(), StackBuffers()  # each batch's stacks are written over the last one's
    spread_a, spread_b = HeadSpread(int(heads_a.lm_head.shape[0])), HeadSpread(int(heads_b.lm_head.shape[0]))
    for start in range(0, len(pairs.indices), batch_size):
        with out_of_memory_as_error(DUMP_WHERE, DUMP_ADVICE):
            read = [pairs.read(i) for i in pairs.indices[start: start + batch_size]]
            sa = stack_batch([p[0] for p in read], heads_a, dev, dtype, stacks_a)
            sb = stack_batch([p[1] for p in read], heads_b, dev, dtype, stacks_b)
            del read
            heads = head_pass(sa.last_hidden, sb.last_hidden, heads_a.lm_head, heads_b.lm_head, draft_ids, head_chunk)
            update_similarity(sim, sa, sb, argmax_a=heads.a.greedy, argmax_b=heads.b.greedy, tv=heads.tv)
            spread_a.update(heads.a.greedy, heads.peak_a)
            spread_b.update(heads.b.greedy, heads.peak_b)
            with drafter.serving_embedding(embed_a, heads_a.lm_head):
                evaluate_batch(drafter, sa, None, k, tally_a, target=heads.a)
            with drafter.serving_embedding(embed_b, heads_b.lm_head):
                evaluate_batch(drafter, sb, None, k, tally_b, target=heads.b)
            del sa, sb, heads
        if on_batch is not None:
            on_batch()
    source = ProbeSource(f"{printable(str(pairs.a.root))} (A) and {printable(str(pairs.b.root))} (B)", DumpError,
                         "paired samples", "positions counted (a position counts when the next token's loss mask "
                                           "is 1; a one-token sample counts none)")
    result = finish_probe(sim, labels, tally_a, tally_b, source)
    blank = [(h.source, why) for h, spread in ((heads_a, spread_a), (heads_b, spread_b))
             if (why := "is all zeros" if _all_zeros(h.lm_head) else spread.blank()) is not None]
    return replace(result, decision=blank_heads_decision(result.decision, blank)) if blank else result


def _all_zeros(head: torch.Tensor) -> bool:
    """Whether a (finite, checked when read) head holds only zeros: its two ends, 10x faster than ``any`` on bf16."""
    if not head.numel():
        return True
    low, high = torch.aminmax(head.reshape(-1))
    return bool(low == 0) and bool(high == 0)


def blank_heads_decision(decision: Decision, blank: list[tuple[str, str]]) -> Decision:
    """No verdict from heads that tell no token apart (:class:`HeadSpread`): ``blank`` names each and what it did.

    A header-only or sparse sample (the Kimi-shaped one: terabyte shapes as holes) reads as zeros, and a
    placeholder head of ones or of a stray element is no better: the target's next token is then a tie, or one
    token, everywhere, and whatever τ the drafter gets against it measures nothing.
    """
    said = "; ".join(f"the lm_head of {printable(str(source))} {why}" for source, why in blank)
    reasons = [f"{said} (a header-only, sparse or placeholder head, not the target's weights): the τ above measures "
               "no target", *decision.reasons]
    bands = {k: v for k, v in (decision.bands or {}).items() if k != "kept"} or None
    return Decision(NO_VERDICT, reasons, None, (), bands, "the targets' heads hold no weights: probe the real ones")


# --------------------------------------------------------------------------- before anything is allocated

def load_dump_probe(pairs: DumpPairs, old_target: str, new_target: str, old_drafter: str, spec: DrafterSpec,
                    dtype: torch.dtype, device: torch.device, batch_size: int, k: int,
                    head_chunk: int = HEAD_CHUNK) -> tuple[TargetHeads, TargetHeads, Eagle3Drafter]:
    """Size, check, then read what the probe from dumps computes with: both targets' heads and the old drafter.

    From headers and file sizes alone, what the probe will hold (:func:`dump_probe_needs`) is compared with
    the memory free where it computes; then each target's norm, ``lm_head`` and embedding are read
    (the heads in ``dtype``, the embeddings as stored), and the drafter with its weights created in
    ``dtype`` as they are read and no embedding of its own (it serves with each target's, lent).

    Args:
        pairs: the two dump folders, paired.
        old_target, new_target, old_drafter: as the user named them.
        spec: the drafter's (checked against the old target already).
        dtype, device: the probe's.
        batch_size, k, head_chunk: as :func:`run_dump_probe` will take them.

    Returns:
        ``(heads of the old target, heads of the new target, the drafter)``, on ``device``.

    Raises:
        ResourceError: the estimate exceeds the memory free, or an allocation fails (one line each).
        CheckpointMismatchError: a target's head is not as wide as the states the drafter reads.
        SourceError, HubError, HeaderError, ConfigError: a file cannot be read.
    """

    plans = (plan_target_heads(old_target), plan_target_heads(new_target))
    for plan in plans:
        if plan.hidden_size != spec.target_hidden_size:
            raise CheckpointMismatchError(plan.checkpoint.source, f"lm_head is {plan.hidden_size} wide, the drafter "
                                                                  f"reads {spec.target_hidden_size}")
    drafter_tensors = load_checkpoint(old_drafter).tensors
    needs = dump_probe_needs(pairs, plans, drafter_tensors, spec, dtype, batch_size, k, head_chunk)
    free, where = free_on(device)
    require_memory(DUMP_WHERE, needs, free, where, DUMP_ADVICE)
    if device.type != "cpu":  # each target's heads pass through this machine's memory on their way
        require_memory(DUMP_WHERE, {"one target's heads as read": max(plan.nbytes()[0] for plan in plans)},
                       advice=DUMP_ADVICE)
    with out_of_memory_as_error(DUMP_WHERE, DUMP_ADVICE):
        heads_a = plans[0].read().to(device, dtype)
        heads_b = plans[1].read().to(device, dtype)
        drafter = load_drafter(old_drafter, dtype, device, embedding=False)
    return heads_a, heads_b, drafter
