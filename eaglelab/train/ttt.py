"""The EAGLE-3 training-time-test (TTT) loss and teacher-forced acceptance, above the drafter.

Training and offline evaluation both unroll the drafter over captured target states
(:class:`eaglelab.train.states.HiddenStates`) and compare each step with the target's own
next-token distribution.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from eaglelab.model.drafter import Eagle3Drafter
from eaglelab.train.states import HiddenStates


def shift_mask(x: torch.Tensor, n: int) -> torch.Tensor:
    """x[:, n:] padded with zeros (False) at the end. [B, S, ...] -> same shape."""
    if n == 0:
        return x
    pad = torch.zeros_like(x[:, :n])
    return torch.cat([x[:, n:], pad], dim=1)[:, : x.shape[1]]


@dataclass
class TTTOutput:
    """Loss and metrics of one TTT unroll.

    Attributes:
        loss: weighted sum over steps of the masked soft cross-entropy (scalar, differentiable).
        step_losses: per-step losses (floats).
        acc: per-step accuracy (``argmax(draft) + d2t == argmax(target)``), SpecForge's metric.
        chain: per-step rate of positions where steps 0..i were all correct (teacher forced).
        counted: positions counted at each step.
        chain_hits: per step, the [B, S] bool mask behind ``chain`` (positions whose steps 0..i
            were all correct): what a per-token predictor of the acceptance elsewhere starts from.
    """

    loss: torch.Tensor
    step_losses: list[float]
    acc: list[float]
    chain: list[float]
    counted: list[int]
    chain_hits: list[torch.Tensor] = field(default_factory=list)

    @property
    def simulated_accept_len(self) -> float:
        """1 + sum of chain rates: expected tokens per cycle, bonus token included."""
        return 1.0 + sum(self.chain)


def target_logits(target_lm_head: torch.nn.Module, last_hidden: torch.Tensor) -> torch.Tensor:
    """Recompute the target's logits [B, S, V] from its last hidden state."""
    with torch.no_grad():
        w = target_lm_head.weight
        return F.linear(last_hidden.to(w.device, w.dtype), w).float()


@dataclass
class TargetTokens:
    """What the TTT loss needs of the target at each position.

    Attributes:
        greedy: [B, S] the target's argmax token (target ids) after each position.
        draft_logits: [B, S, Vd] its logits at the draft vocabulary's columns, in draft-id order.
    """

    greedy: torch.Tensor
    draft_logits: torch.Tensor

    @classmethod
    def from_logits(cls, logits: torch.Tensor, t2d_ids: torch.Tensor) -> TargetTokens:
        """From full logits [B, S, V]; ``t2d_ids`` [Vd]: the target id of each draft id."""
        return cls(logits.argmax(-1), logits[..., t2d_ids.to(logits.device)].float())

    @classmethod
    @torch.no_grad()
    def recompute(cls, target_lm_head: torch.nn.Module, batch: HiddenStates, t2d_ids: torch.Tensor) -> TargetTokens:
        """From the last hidden states: only the ``Vd`` draft rows of lm_head when the greedy ids are stored."""
        if batch.target_ids is None:
            return cls.from_logits(target_logits(target_lm_head, batch.last_hidden), t2d_ids)
        w = target_lm_head.weight
        rows = w[t2d_ids.to(w.device)]
        return cls(batch.target_ids, F.linear(batch.last_hidden.to(w.device, w.dtype), rows).float())


def ttt_forward(drafter: Eagle3Drafter, batch: HiddenStates, target: TargetTokens, steps: int,
                decay: float = 0.8) -> TTTOutput:
    """EAGLE-3 training-time test on one batch.

    Step i at position t predicts the target's distribution at t + 1 + i (the token t + 2 + i).
    Loss: soft cross-entropy between the target's distribution restricted to the draft
    vocabulary and the drafter's log-softmax, masked by the loss mask and by whether the
    target's argmax lies in the draft vocabulary, weighted decay**i.

    Args:
        drafter: the drafter (train or eval mode).
        batch: ids, mask and aux states, [B, S, ...].
        target: the target's greedy tokens and draft-vocabulary logits.
        steps: unroll length.
        decay: per-step loss weight base (0.8 in SpecForge).
    """
    dev = drafter.fc.weight.device
    ids = batch.input_ids.to(dev)
    t_arg = target.greedy.to(dev)  # [B, S] target's greedy token after each position
    in_draft = drafter.t2d[t_arg]
    t_probs = torch.softmax(target.draft_logits.to(dev), dim=-1)  # columns in draft-id order
    base_mask = batch.loss_mask.to(dev)
    logits = drafter.ttt_logits(ids, batch.aux.to(dev, drafter.fc.weight.dtype), steps)
    loss = torch.zeros((), device=dev)
    step_losses, acc, chain, counted, hits = [], [], [], [], []
    alive = None
    for i, lg in enumerate(logits):
        valid = shift_mask(base_mask, 1 + i)
        tgt_p = shift_mask(t_probs, 1 + i)
        tgt_arg = shift_mask(t_arg, 1 + i)
        train_mask = valid & shift_mask(in_draft, 1 + i)
        logp = torch.log_softmax(lg.float(), dim=-1)
        per_pos = -(tgt_p * logp).sum(-1)
        n_train = train_mask.sum().clamp(min=1)
        step_loss = (per_pos * train_mask).sum() / n_train
        loss = loss + decay ** i * step_loss
        correct = (drafter.to_target_ids(lg.argmax(-1)) == tgt_arg) & valid
        # chain: counted over positions valid for every step so far (same denominator per step)
        alive = correct if alive is None else alive & correct
        n_valid = int(valid.sum())
        step_losses.append(step_loss.item())
        acc.append(float(correct.sum()) / max(n_valid, 1))
        hits.append(alive & valid)
        chain.append(float(hits[-1].sum()) / max(n_valid, 1))
        counted.append(n_valid)
    return TTTOutput(loss, step_losses, acc, chain, counted, hits)


class TTTObjective(torch.nn.Module):
    """The drafter's TTT loss as a module: what a DDP wrapper calls so gradients are all-reduced.

    Its parameters are the drafter's; ``forward`` is :func:`ttt_forward`.
    """

    def __init__(self, drafter: Eagle3Drafter):
        super().__init__()
        self.drafter = drafter

    def forward(self, batch: HiddenStates, target: TargetTokens, steps: int, decay: float = 0.8) -> TTTOutput:
        return ttt_forward(self.drafter, batch, target, steps, decay)


@dataclass
class AcceptanceTally:
    """Running sums of per-step accuracy and chain rates over batches (weights: counted positions)."""

    steps: int
    acc: list = None
    chain: list = None
    n: list = None
    loss_sum: float = 0.0
    sequences: int = 0

    def __post_init__(self):
        self.acc, self.chain, self.n = [0.0] * self.steps, [0.0] * self.steps, [0] * self.steps

    def add(self, out: TTTOutput, sequences: int) -> None:
        for s in range(self.steps):
            self.acc[s] += out.acc[s] * out.counted[s]
            self.chain[s] += out.chain[s] * out.counted[s]
            self.n[s] += out.counted[s]
        self.loss_sum += float(out.loss) * sequences
        self.sequences += sequences

    def result(self) -> dict:
        acc = [a / max(n, 1) for a, n in zip(self.acc, self.n)]
        chain = [c / max(n, 1) for c, n in zip(self.chain, self.n)]
        return {"acc": acc, "chain": chain, "accept_len": 1.0 + sum(chain),
                "loss": self.loss_sum / max(self.sequences, 1), "positions": self.n[0]}


@torch.no_grad()
def evaluate_batch(drafter: Eagle3Drafter, batch: HiddenStates, target_lm_head: torch.nn.Module, steps: int,
                   tally: AcceptanceTally, t_logits: torch.Tensor | None = None) -> TTTOutput:
    """Add one batch's teacher-forced acceptance to ``tally`` (drafter in eval mode) and return it.

    ``t_logits`` [B, S, V]: the target's logits when the caller has them (else recomputed).
    """
    was_training = drafter.training
    drafter.eval()
    target = (TargetTokens.recompute(target_lm_head, batch, drafter.draft_target_ids()) if t_logits is None
              else TargetTokens.from_logits(t_logits, drafter.draft_target_ids()))
    out = ttt_forward(drafter, batch, target, steps)
    tally.add(out, len(batch))
    drafter.train(was_training)
    return out


@torch.no_grad()
def evaluate_drafter(drafter: Eagle3Drafter, states: HiddenStates, target_lm_head: torch.nn.Module,
                     steps: int = 7, batch_size: int = 16) -> dict:
    """Teacher-forced per-position accuracy and simulated acceptance length over a dataset.

    Returns:
        dict with ``acc`` (per step), ``chain`` (all-correct-so-far rate per step),
        ``accept_len`` (1 + sum(chain), bonus included), ``loss`` and ``positions``.
    """
    tally = AcceptanceTally(steps)
    for i in range(0, len(states), batch_size):
        evaluate_batch(drafter, states.batch(range(i, min(i + batch_size, len(states)))), target_lm_head, steps, tally)
    return tally.result()
