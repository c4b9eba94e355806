"""Captured target states as a dataset, the TTT loss, and offline acceptance evaluation.

A sample pairs token ids with what the target computed on them: the aux hidden states the
drafter reads and the last hidden state (from which the target's logits are recomputed with
its lm_head, as SpecForge's offline pipeline does, so no [S, V] logits are stored). Captures
made here also keep the target's greedy token at each position, so training needs only the
logits of the draft vocabulary (``H x Vd`` per token, not ``H x V``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from eaglelab.drafter import Eagle3Drafter
from eaglelab.errors import SourceError
from eaglelab.targets import Target


@dataclass
class HiddenStates:
    """Target states over N sequences of S tokens (kept on CPU).

    Attributes:
        input_ids: [N, S] int64.
        loss_mask: [N, S] bool: positions that count (e.g. assistant turns).
        aux: [N, S, 3H] concat(low, mid, high).
        last_hidden: [N, S, H] final-norm output (lm_head input).
        target_ids: [N, S] int64, the target's greedy token after each position, or None
            (SpecForge files lack it; it is then recomputed from ``last_hidden``).
        aux_layers: the target's decoder-layer outputs ``aux`` holds (low, mid, high), when known.
    """

    input_ids: torch.Tensor
    loss_mask: torch.Tensor
    aux: torch.Tensor
    last_hidden: torch.Tensor
    target_ids: torch.Tensor | None = None
    aux_layers: tuple[int, ...] | None = None

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def batch(self, idx: torch.Tensor | Sequence[int]) -> HiddenStates:
        idx = torch.as_tensor(idx)
        tids = None if self.target_ids is None else self.target_ids[idx]
        return HiddenStates(self.input_ids[idx], self.loss_mask[idx], self.aux[idx], self.last_hidden[idx], tids,
                            self.aux_layers)

    def save(self, path: str | Path) -> Path:
        """Write as one safetensors file, atomically."""
        from safetensors.torch import save_file

        from eaglelab.atomic import atomic_path

        with atomic_path(path) as tmp:
            tensors = {"input_ids": self.input_ids.contiguous(), "loss_mask": self.loss_mask.contiguous(),
                       "aux_hidden_state": self.aux.contiguous(), "hidden_state": self.last_hidden.contiguous()}
            if self.target_ids is not None:
                tensors["target_ids"] = self.target_ids.contiguous()
            meta = {"aux_layers": json.dumps(list(self.aux_layers))} if self.aux_layers is not None else None
            save_file(tensors, str(tmp), metadata=meta)
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> HiddenStates:
        from safetensors import safe_open
        from safetensors.torch import load_file

        try:
            d = load_file(str(path))
            with safe_open(str(path), "pt") as fh:
                meta = fh.metadata() or {}
            aux_layers = tuple(json.loads(meta["aux_layers"])) if "aux_layers" in meta else None
        except Exception as exc:
            raise SourceError(path, f"not a readable hidden-state file ({exc})") from None
        missing = {"input_ids", "loss_mask", "aux_hidden_state", "hidden_state"} - set(d)
        if missing:
            raise SourceError(path, f"hidden-state file lacks {sorted(missing)}")
        return cls(d["input_ids"], d["loss_mask"].bool(), d["aux_hidden_state"], d["hidden_state"], d.get("target_ids"),
                   aux_layers)


@torch.no_grad()
def capture_hidden_states(target: Target, sequences: torch.Tensor, loss_mask: torch.Tensor | None = None,
                          batch_size: int = 8, dtype: torch.dtype = torch.float32,
                          progress: bool = True) -> HiddenStates:
    """Run the target over token sequences and keep what drafter training needs.

    Args:
        target: the target with aux capture.
        sequences: [N, S] token ids.
        loss_mask: [N, S] (default all ones).
        batch_size: sequences per forward.
        dtype: storage dtype of the states.
    """
    from eaglelab.progress import progress as bar

    aux, last, greedy = [], [], []
    for i in bar(range(0, len(sequences), batch_size), desc="capture", disable=not progress):
        out = target.forward(sequences[i: i + batch_size].to(target.device))
        aux.append(out.aux.to("cpu", dtype))
        last.append(out.last_hidden.to("cpu", dtype))
        greedy.append(out.logits.argmax(-1).cpu())
    mask = loss_mask if loss_mask is not None else torch.ones_like(sequences, dtype=torch.bool)
    return HiddenStates(sequences.cpu(), mask.bool().cpu(), torch.cat(aux), torch.cat(last), torch.cat(greedy),
                        tuple(target.aux_layer_outputs))


def load_specforge_sample(path: str | Path) -> dict[str, torch.Tensor]:
    """Read one SpecForge ``prepare_hidden_states.py`` file (a torch.save dict), safely.

    Uses ``torch.load(weights_only=True)``: plain tensors only, no code is unpickled.

    Returns:
        dict with ``input_ids`` [S], ``loss_mask`` [S], ``hidden_state`` [1, S, H],
        ``aux_hidden_state`` [1, S, 3H].
    """
    try:
        d = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise SourceError(path, f"not a SpecForge hidden-state file readable with weights_only=True ({exc})") from None
    missing = {"input_ids", "loss_mask", "hidden_state", "aux_hidden_state"} - set(d)
    if missing:
        raise SourceError(path, f"SpecForge sample lacks {sorted(missing)}")
    return d


def hidden_states_from_specforge(paths: Iterable[str | Path]) -> HiddenStates:
    """Stack SpecForge offline samples of equal length into a HiddenStates."""
    samples = [load_specforge_sample(p) for p in paths]
    if not samples:
        raise SourceError("specforge", "no sample files given")
    lengths = {s["input_ids"].shape[-1] for s in samples}
    if len(lengths) != 1:
        raise SourceError("specforge", f"samples have different lengths {sorted(lengths)}; pad or crop them first")
    return HiddenStates(
        torch.stack([s["input_ids"].reshape(-1) for s in samples]),
        torch.stack([s["loss_mask"].reshape(-1).bool() for s in samples]),
        torch.cat([s["aux_hidden_state"].reshape(1, -1, s["aux_hidden_state"].shape[-1]) for s in samples]),
        torch.cat([s["hidden_state"].reshape(1, -1, s["hidden_state"].shape[-1]) for s in samples]),
    )


def save_specforge_samples(states: HiddenStates, out_dir: str | Path) -> list[Path]:
    """Write HiddenStates as SpecForge offline files (``data_{i}.ckpt``), for interchange."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(len(states)):
        p = out / f"data_{i}.ckpt"
        torch.save({"input_ids": states.input_ids[i], "loss_mask": states.loss_mask[i].long(),
                    "hidden_state": states.last_hidden[i: i + 1], "aux_hidden_state": states.aux[i: i + 1]}, p)
        paths.append(p)
    return paths


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
    """

    loss: torch.Tensor
    step_losses: list[float]
    acc: list[float]
    chain: list[float]
    counted: list[int]

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
    step_losses, acc, chain, counted = [], [], [], []
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
        chain.append(float((alive & valid).sum()) / max(n_valid, 1))
        counted.append(n_valid)
    return TTTOutput(loss, step_losses, acc, chain, counted)


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
                   tally: AcceptanceTally, t_logits: torch.Tensor | None = None) -> None:
    """Add one batch's teacher-forced acceptance to ``tally`` (drafter in eval mode).

    ``t_logits`` [B, S, V]: the target's logits when the caller has them (else recomputed).
    """
    was_training = drafter.training
    drafter.eval()
    target = (TargetTokens.recompute(target_lm_head, batch, drafter.draft_target_ids()) if t_logits is None
              else TargetTokens.from_logits(t_logits, drafter.draft_target_ids()))
    tally.add(ttt_forward(drafter, batch, target, steps), len(batch))
    drafter.train(was_training)


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
