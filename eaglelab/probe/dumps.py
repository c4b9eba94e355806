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
positions at a time), never by the number of tokens. Dumps that count no position (loss masks of 0,
one-token samples), too few samples for the verdict's band, or numbers that are not finite get no
verdict: one :class:`~eaglelab.errors.DumpError` naming the folders and what is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from eaglelab.data.dumps import DumpPairs, DumpSample
from eaglelab.data.states import HiddenStates
from eaglelab.errors import DumpError
from eaglelab.inputs import printable
from eaglelab.model.drafter import Eagle3Drafter
from eaglelab.model.heads import TargetHeads
from eaglelab.train.ttt import TargetTokens

#: Positions per head product: [head_chunk, V] float32 logits at a time (163,840 columns: 0.7 GB at 1024).
HEAD_CHUNK = 1024


@dataclass
class HeadPass:
    """What the two heads say at every position of a batch (each product computed once).

    Attributes:
        a, b: the drafter's targets on A and on B (greedy token [B, S], draft logits [B, S, Vd]).
        tv: [B, S] total variation of A's and B's next-token distributions.
    """

    a: TargetTokens
    b: TargetTokens
    tv: torch.Tensor


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
    greedy_a, greedy_b, draft_a, draft_b, tv = [], [], [], [], []
    for i in range(0, B * S, chunk):
        la = (xa[i: i + chunk].to(head_a.device, head_a.dtype) @ head_a.T).float()
        lb = (xb[i: i + chunk].to(head_b.device, head_b.dtype) @ head_b.T).float()
        greedy_a.append(la.argmax(-1))
        greedy_b.append(lb.argmax(-1))
        draft_a.append(la[:, draft_ids])
        draft_b.append(lb[:, draft_ids])
        tv.append(0.5 * (torch.softmax(la, -1) - torch.softmax(lb, -1)).abs().sum(-1))
    def cat(xs, *shape):
        return torch.cat(xs).reshape(B, S, *shape)

    vd = int(draft_ids.numel())
    return HeadPass(TargetTokens(cat(greedy_a), cat(draft_a, vd)), TargetTokens(cat(greedy_b), cat(draft_b, vd)),
                    cat(tv))


def stack_batch(samples: list[DumpSample], heads: TargetHeads, device: torch.device,
                dtype: torch.dtype) -> HiddenStates:
    """Right-pad a batch of samples to its longest into HiddenStates on ``device`` (padding not counted).

    The last layer is normed with the target's final norm where the producer stored it before the norm.
    """
    S = max(len(s) for s in samples)
    B, H = len(samples), int(samples[0].last.shape[-1])
    ids = torch.zeros(B, S, dtype=torch.long)
    mask = torch.zeros(B, S, dtype=torch.bool)
    aux = torch.zeros(B, S, 3 * H, dtype=dtype, device=device)
    last = torch.zeros(B, S, H, dtype=dtype, device=device)
    for i, s in enumerate(samples):
        n = len(s)
        ids[i, :n], mask[i, :n] = s.input_ids, s.loss_mask
        aux[i, :n] = s.aux.to(device, dtype)
        h = s.last.to(device)
        last[i, :n] = (h if s.last_normed else heads.norm(h)).to(dtype)
    return HiddenStates(ids, mask, aux, last)


@torch.no_grad()
def run_dump_probe(pairs: DumpPairs, heads_a: TargetHeads, heads_b: TargetHeads, drafter: Eagle3Drafter,
                   aux_layer_outputs: tuple[int, ...], k: int = 3, batch_size: int = 8, head_chunk: int = HEAD_CHUNK,
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
    from eaglelab.probe.plugin import ProbeSource, finish_probe, layer_labels, update_similarity
    from eaglelab.probe.similarity import SimilarityAccumulator
    from eaglelab.train.ttt import AcceptanceTally, evaluate_batch

    labels = layer_labels(aux_layer_outputs)
    sim = SimilarityAccumulator(labels)
    tally_a, tally_b = AcceptanceTally(k), AcceptanceTally(k)
    dev, dtype = drafter.fc.weight.device, heads_a.lm_head.dtype
    draft_ids = drafter.draft_target_ids()
    embed_a, embed_b = heads_a.embedding.to(dev), heads_b.embedding.to(dev)  # rows are cast as they are looked up
    for start in range(0, len(pairs.indices), batch_size):
        read = [pairs.read(i) for i in pairs.indices[start: start + batch_size]]
        sa = stack_batch([p[0] for p in read], heads_a, dev, dtype)
        sb = stack_batch([p[1] for p in read], heads_b, dev, dtype)
        heads = head_pass(sa.last_hidden, sb.last_hidden, heads_a.lm_head, heads_b.lm_head, draft_ids, head_chunk)
        update_similarity(sim, sa, sb, argmax_a=heads.a.greedy, argmax_b=heads.b.greedy, tv=heads.tv)
        with drafter.serving_embedding(embed_a, heads_a.lm_head):
            evaluate_batch(drafter, sa, None, k, tally_a, target=heads.a)
        with drafter.serving_embedding(embed_b, heads_b.lm_head):
            evaluate_batch(drafter, sb, None, k, tally_b, target=heads.b)
        if on_batch is not None:
            on_batch()
    source = ProbeSource(f"{printable(str(pairs.a.root))} (A) and {printable(str(pairs.b.root))} (B)", DumpError,
                         "paired samples", "positions counted (a position counts when the next token's loss mask "
                                           "is 1; a one-token sample counts none)")
    return finish_probe(sim, labels, tally_a, tally_b, source)
