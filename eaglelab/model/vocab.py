"""The draft vocabulary: which target tokens the drafter's lm_head rows stand for (``d2t`` / ``t2d``).

``d2t[i]`` is the offset from draft id ``i`` to its target id (target id = ``i + d2t[i]``);
``t2d`` marks, over the target vocabulary, the ids that have a draft row.
"""

from __future__ import annotations

import torch

from eaglelab.errors import ConfigError


def identity_vocab_map(vocab_size: int, draft_vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first Vd target ids as the draft vocabulary: d2t all zeros."""
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[:draft_vocab_size] = True
    return torch.zeros(draft_vocab_size, dtype=torch.int64), t2d


def build_vocab_map(token_counts: torch.Tensor, draft_vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Draft vocabulary from target-token frequencies (SpecForge's recipe).

    Take the Vd most frequent ids (ties broken by the lower id), pad with unused ids when
    fewer than Vd occur, sort ascending; ``d2t[i] = used[i] - i``; ``t2d[j] = j in used``.

    Args:
        token_counts: [V] counts of each target id over positions with loss_mask 1.
        draft_vocab_size: Vd.

    Returns:
        (d2t [Vd] int64, t2d [V] bool).
    """
    V = token_counts.shape[0]
    if draft_vocab_size > V:
        raise ConfigError("draft_vocab_size", f"{draft_vocab_size} exceeds the target vocabulary {V}")
    counts = token_counts.to(torch.float64)
    # stable order: by count descending, then id ascending
    order = sorted(range(V), key=lambda j: (-counts[j].item(), j)) if V <= 4096 else \
        torch.argsort(-counts + torch.arange(V, dtype=torch.float64) / (V * 2.0), stable=True).tolist()
    occurring = [j for j in order if counts[j] > 0][:draft_vocab_size]
    chosen = set(occurring)
    pad = (j for j in range(V) if j not in chosen)
    while len(occurring) < draft_vocab_size:
        occurring.append(next(pad))
    used = torch.tensor(sorted(occurring), dtype=torch.int64)
    d2t = used - torch.arange(draft_vocab_size)
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[used] = True
    return d2t, t2d


def count_tokens(sequences, vocab_size: int, loss_masks=None) -> torch.Tensor:
    """Counts [V] of target ids over sequences (optionally only where the loss mask is 1)."""
    counts = torch.zeros(vocab_size, dtype=torch.int64)
    for i, ids in enumerate(sequences):
        ids = torch.as_tensor(ids).reshape(-1)
        if loss_masks is not None:
            ids = ids[torch.as_tensor(loss_masks[i]).reshape(-1).bool()]
        counts += torch.bincount(ids, minlength=vocab_size)[:vocab_size]
    return counts
