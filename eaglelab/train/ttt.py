"""The EAGLE-3 training-time-test (TTT) loss and teacher-forced acceptance, above the drafter.

Training and offline evaluation both unroll the drafter over captured target states
(:class:`eaglelab.data.states.HiddenStates`) and compare each step with the target's own
next-token distribution.

Step ``i`` at position ``t`` predicts token ``t + 2 + i``. eaglelab's ``loss_mask[t]`` says that the
token after ``t`` is a response token, so the *token mask* the references take is ``loss_mask``
moved one right. Two loss conventions (:data:`LOSS_CONVENTIONS`), each exactly its reference's:

- ``specforge`` (default; SpecForge ``OnlineEagle3Model``): soft cross-entropy against the target's
  distribution over the draft vocabulary, counted where the token mask at ``t + i`` is set and the
  target's argmax is a draft token, summed and divided by *all* B x S positions; per-step weights
  0.8^i; accuracy over the token mask at ``t + i`` against the target's full-vocabulary argmax.
- ``speculators`` (speculators ``Eagle3DraftModel``): KL divergence, counted where the token mask
  at ``t + 1 + i`` is set, divided by the counted positions; weights 1.0^i; accuracy: draft argmax
  equals the target's argmax within the draft vocabulary at every step so far.

The acceptance measures (``acc``, ``chain``, the simulated τ) follow neither: they count step ``i``
at ``t`` when the token it predicts, ``t + 2 + i``, is a response token: what acceptance in serving is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from eaglelab.data.states import HiddenStates
from eaglelab.model.drafter import Eagle3Drafter
from eaglelab.train.conventions import CONVENTION_DECAY, DEFAULT_CONVENTION, LOSS_CONVENTIONS


def shift_mask(x: torch.Tensor, n: int, length: int | None = None) -> torch.Tensor:
    """x[:, n:] padded with zeros (False) at the end, cut to ``length`` (default: x's). [B, S, ...] -> [B, length, ...]."""
    length = x.shape[1] if length is None else length
    if n == 0 and length == x.shape[1]:
        return x
    rest = x[:, n: n + length]
    pad = torch.zeros_like(x[:, :1]).expand(-1, length - rest.shape[1], *x.shape[2:])
    return torch.cat([rest, pad], dim=1)


@dataclass
class TTTOutput:
    """Loss and metrics of one TTT unroll.

    Attributes:
        loss: sum over steps of decay^i x the step loss, in ``convention`` (scalar, differentiable).
        step_losses: per-step losses before the decay weight (floats), in ``convention``.
        acc: per-step accuracy (``argmax(draft) + d2t == argmax(target)``) where the predicted token
            is a response token (eaglelab's acceptance alignment).
        chain: per-step rate of positions where steps 0..i were all correct (teacher forced).
        counted: positions counted at each step.
        chain_hits: per step, the [B, S] bool mask behind ``chain`` (positions whose steps 0..i
            were all correct): what a per-token predictor of the acceptance elsewhere starts from.
        convention: the loss convention, ``specforge`` or ``speculators``.
        convention_acc: per-step accuracy as the convention's reference reports it (SpecForge's
            ``acc``, speculators' ``full_acc``).
        seq_counted: per step, [B] positions counted in each sequence (the denominators of ``chain``
            per sequence: what a bootstrap over sequences resamples).
    """

    loss: torch.Tensor
    step_losses: list[float]
    acc: list[float]
    chain: list[float]
    counted: list[int]
    chain_hits: list[torch.Tensor] = field(default_factory=list)
    convention: str = DEFAULT_CONVENTION
    convention_acc: list[float] = field(default_factory=list)
    seq_counted: list[torch.Tensor] = field(default_factory=list)

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
                decay: float | None = None, convention: str = DEFAULT_CONVENTION) -> TTTOutput:
    """EAGLE-3 training-time test on one batch: the loss in ``convention``, eaglelab's acceptance measures.

    Step i at position t predicts the target's distribution at t + 1 + i (the token t + 2 + i).

    Args:
        drafter: the drafter (train or eval mode).
        batch: ids, mask and aux states, [B, S, ...].
        target: the target's greedy tokens and draft-vocabulary logits.
        steps: unroll length.
        decay: per-step loss weight base (None: the convention's reference default, 0.8 or 1.0).
        convention: ``specforge`` or ``speculators`` (module docstring).
    """
    if convention not in LOSS_CONVENTIONS:
        raise ValueError(f"loss convention {convention!r} is not one of {LOSS_CONVENTIONS}")
    decay = CONVENTION_DECAY[convention] if decay is None else decay
    dev = drafter.fc.weight.device
    ids = batch.input_ids.to(dev)
    B, S = ids.shape
    t_arg = target.greedy.to(dev)  # [B, S] target's greedy token after each position
    draft_logits = target.draft_logits.to(dev)
    t_probs = torch.softmax(draft_logits, dim=-1)  # columns in draft-id order
    base_mask = batch.loss_mask.to(dev)
    token_mask = shift_mask(torch.cat([torch.zeros_like(base_mask[:, :1]), base_mask], 1), 0, S)  # token t is a response
    if convention == "specforge":
        # SpecForge pads its shifted targets with a zero-logit row: uniform, argmax token 0
        ext_probs = torch.cat([t_probs, torch.full_like(t_probs[:, :1], 1.0 / t_probs.shape[-1])], 1)
        ext_arg = torch.cat([t_arg, torch.zeros_like(t_arg[:, :1])], 1)
    else:
        d_arg = draft_logits.argmax(-1)  # speculators compares within the draft vocabulary
        prev = shift_mask(token_mask, 1)
    logits = drafter.ttt_logits(ids, batch.aux.to(dev, drafter.fc.weight.dtype), steps)
    loss = torch.zeros((), device=dev)
    step_losses, acc, chain, counted, hits, conv_acc, seq_counted = [], [], [], [], [], [], []
    alive = None
    for i, lg in enumerate(logits):
        logp = torch.log_softmax(lg.float(), dim=-1)
        if convention == "specforge":
            tgt_p, tgt_ids = shift_mask(ext_probs, 1 + i, S), shift_mask(ext_arg, 1 + i, S)
            counted_mask = shift_mask(token_mask, i)
            train_mask = counted_mask & drafter.t2d[tgt_ids]
            step_loss = -((tgt_p * logp).sum(-1) * train_mask).sum() / (B * S)
            hit = (drafter.to_target_ids(lg.argmax(-1)) == tgt_ids) & counted_mask
            conv_acc.append(float(hit.sum()) / max(float(counted_mask.sum()), 1e-6))
        else:
            tgt_p = shift_mask(t_probs, 1 + i)
            train_mask = shift_mask(token_mask, 1 + i)
            kl = (tgt_p * (torch.log(tgt_p.clamp_min(1e-30)) - logp)).sum(-1)
            step_loss = (kl * train_mask).sum() / (train_mask.sum() + 1e-5)
            prev = prev & (lg.argmax(-1) == shift_mask(d_arg, 1 + i))
            conv_acc.append(float((prev & train_mask).sum()) / max(int(train_mask.sum()), 1))
        loss = loss + decay ** i * step_loss
        step_losses.append(step_loss.item())
        # acceptance: counted where the predicted token t + 2 + i is a response token
        valid = shift_mask(base_mask, 1 + i)
        tgt_arg = shift_mask(t_arg, 1 + i)
        correct = (drafter.to_target_ids(lg.argmax(-1)) == tgt_arg) & valid
        # chain: counted over positions valid for every step so far (same denominator per step)
        alive = correct if alive is None else alive & correct
        n_valid = int(valid.sum())
        acc.append(float(correct.sum()) / max(n_valid, 1))
        hits.append(alive & valid)
        chain.append(float(hits[-1].sum()) / max(n_valid, 1))
        counted.append(n_valid)
        seq_counted.append(valid.sum(1))
    return TTTOutput(loss, step_losses, acc, chain, counted, hits, convention, conv_acc, seq_counted)


class TTTObjective(torch.nn.Module):
    """The drafter's TTT loss as a module: what a DDP wrapper calls so gradients are all-reduced.

    Its parameters are the drafter's; ``forward`` is :func:`ttt_forward`.
    """

    def __init__(self, drafter: Eagle3Drafter):
        super().__init__()
        self.drafter = drafter

    def forward(self, batch: HiddenStates, target: TargetTokens, steps: int, decay: float | None = None,
                convention: str = DEFAULT_CONVENTION) -> TTTOutput:
        return ttt_forward(self.drafter, batch, target, steps, decay, convention)


@dataclass
class AcceptanceTally:
    """Running sums of per-step accuracy and chain rates over batches (weights: counted positions).

    Also keeps, per sequence, the chain hits and counted positions of every step (``seq_hits``,
    ``seq_counted``: lists of [k] int lists), what :func:`eaglelab.decisions.tau_band` resamples.
    """

    steps: int
    acc: list = None
    chain: list = None
    n: list = None
    loss_sum: float = 0.0
    sequences: int = 0
    seq_hits: list = None
    seq_counted: list = None

    def __post_init__(self):
        self.acc, self.chain, self.n = [0.0] * self.steps, [0.0] * self.steps, [0] * self.steps
        self.seq_hits, self.seq_counted = [], []

    def add(self, out: TTTOutput, sequences: int) -> None:
        for s in range(self.steps):
            self.acc[s] += out.acc[s] * out.counted[s]
            self.chain[s] += out.chain[s] * out.counted[s]
            self.n[s] += out.counted[s]
        self.loss_sum += float(out.loss) * sequences
        self.sequences += sequences
        if out.seq_counted and out.chain_hits:
            hits = torch.stack([h.sum(1) for h in out.chain_hits], 1).tolist()  # [B, k]
            self.seq_hits += hits
            self.seq_counted += torch.stack(out.seq_counted, 1).tolist()

    def result(self) -> dict:
        acc = [a / max(n, 1) for a, n in zip(self.acc, self.n)]
        chain = [c / max(n, 1) for c, n in zip(self.chain, self.n)]
        return {"acc": acc, "chain": chain, "accept_len": 1.0 + sum(chain),
                "loss": self.loss_sum / max(self.sequences, 1), "positions": self.n[0],
                "seq_hits": self.seq_hits, "seq_counted": self.seq_counted}


@torch.no_grad()
def evaluate_batch(drafter: Eagle3Drafter, batch: HiddenStates, target_lm_head: torch.nn.Module | None, k: int,
                   tally: AcceptanceTally, t_logits: torch.Tensor | None = None,
                   convention: str = DEFAULT_CONVENTION, target: TargetTokens | None = None) -> TTTOutput:
    """Add one batch's teacher-forced acceptance to ``tally`` (drafter in eval mode) and return it.

    The target's tokens come from ``target`` when the caller computed them (the dump probe's head
    pass), else from ``t_logits`` [B, S, V] (a live forward's), else recomputed with ``target_lm_head``;
    ``convention``: that of the loss in the tally.
    """
    was_training = drafter.training
    drafter.eval()
    if target is None:
        target = (TargetTokens.recompute(target_lm_head, batch, drafter.draft_target_ids()) if t_logits is None
                  else TargetTokens.from_logits(t_logits, drafter.draft_target_ids()))
    out = ttt_forward(drafter, batch, target, k, convention=convention)
    tally.add(out, len(batch))
    drafter.train(was_training)
    return out


@torch.no_grad()
def evaluate_drafter(drafter: Eagle3Drafter, states: HiddenStates, target_lm_head: torch.nn.Module,
                     k: int = 7, batch_size: int = 16, convention: str = DEFAULT_CONVENTION) -> dict:
    """Teacher-forced per-position accuracy and simulated acceptance length over a dataset, with ``k`` drafts.

    Returns:
        dict with ``acc`` (per step), ``chain`` (all-correct-so-far rate per step),
        ``accept_len`` (1 + sum(chain), bonus included), ``loss`` (in ``convention``), ``positions``, and per
        sequence the chain hits and counted positions of every step (``seq_hits``, ``seq_counted``: [N][k]), what a
        band over the sequences resamples.
    """
    tally = AcceptanceTally(k)
    for i in range(0, len(states), batch_size):
        evaluate_batch(drafter, states.batch(range(i, min(i + batch_size, len(states)))), target_lm_head, k, tally,
                       convention=convention)
    return tally.result()
