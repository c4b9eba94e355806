"""Drafter training: EAGLE-3 training-time test, from scratch or warm-started.

Nothing is lost: every checkpoint is written atomically (drafter folder + optimizer state);
``resume=True`` continues from the newest one and reproduces the uninterrupted loss curve
(the batch of step s depends only on (seed, s)); a finished run is never overwritten unless
asked. Under ``torchrun`` the same entry point trains with DDP (gloo on CPU, nccl on GPU),
each rank taking its share of every batch; rank 0 writes.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from eaglelab.atomic import atomic_path, write_json_atomic, write_text_atomic
from eaglelab.errors import OverwriteError, ParameterError
from eaglelab.model.drafter import Eagle3Drafter
from eaglelab.model.drafter_files import load_drafter, save_drafter
from eaglelab.train.states import HiddenStates
from eaglelab.train.ttt import (
    DEFAULT_CONVENTION,
    LOSS_CONVENTIONS,
    TargetTokens,
    TTTObjective,
    evaluate_drafter,
)


@dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters of one drafter training run.

    Attributes:
        steps: total optimizer steps (``--steps``; a resumed run stops here too).
        batch_size: sequences per step (over all ranks).
        ttt_steps: unroll length of training-time test (SpecForge default 7).
        lr: AdamW learning rate (EAGLE-3 paper: 5e-5 at scale; tiny models want more).
        betas: AdamW betas (paper: 0.9, 0.95).
        weight_decay: AdamW weight decay.
        grad_clip: max gradient norm (paper: 0.5).
        warmup_steps: linear warm-up, then cosine decay to 10%.
        decay: per-step loss weight base (None: the convention's own, SpecForge 0.8, speculators 1.0).
        loss_convention: ``specforge`` (default) or ``speculators``: whose TTT loss, mask alignment
            and accuracy the run trains on and reports (:mod:`eaglelab.train.ttt`).
        log_every: write a metrics line every this many steps.
        eval_every: evaluate on held-out states every this many steps (0: never).
        checkpoint_every: save a resumable checkpoint every this many steps.
        seed: data order and initialisation.
    """

    steps: int = 200
    batch_size: int = 8
    ttt_steps: int = 7
    lr: float = 3e-3
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.0
    grad_clip: float = 0.5
    warmup_steps: int = 10
    decay: float | None = None
    loss_convention: str = DEFAULT_CONVENTION
    log_every: int = 10
    eval_every: int = 50
    checkpoint_every: int = 50
    seed: int = 0

    def __post_init__(self):
        if self.loss_convention not in LOSS_CONVENTIONS:
            raise ParameterError("loss_convention",
                                 f"{self.loss_convention!r} is not one of {', '.join(LOSS_CONVENTIONS)}")

    @classmethod
    def for_steps(cls, steps: int, log_every: int | None = None, eval_every: int | None = None,
                  checkpoint_every: int | None = None, **kwargs) -> TrainConfig:
        """A run of ``steps`` steps logging 12 times, evaluating 6 times and checkpointing twice (unless given).

        One cadence for ``eaglelab finetune`` and notebook 04, so their metrics files line up.
        """
        return cls(steps=steps, log_every=log_every or max(steps // 12, 1), eval_every=eval_every or max(steps // 6, 1),
                   checkpoint_every=checkpoint_every or max(steps // 2, 1), **kwargs)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up then cosine to 10% of ``lr``."""
    import math

    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(cfg.steps - cfg.warmup_steps, 1)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))


def batch_indices(step: int, n: int, batch_size: int, seed: int) -> torch.Tensor:
    """Sample indices of step ``step``: a per-epoch permutation seeded by (seed, epoch)."""
    per_epoch = max(n // batch_size, 1)
    epoch, j = divmod(step, per_epoch)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100003 + epoch))
    idx = perm[j * batch_size: (j + 1) * batch_size]
    if len(idx) < batch_size:  # fewer samples than one batch: wrap around
        idx = perm.repeat((batch_size // n) + 1)[:batch_size]
    return idx


@dataclass
class DistInfo:
    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed() -> DistInfo:
    """Join the process group when launched by ``torchrun`` (WORLD_SIZE > 1)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    return DistInfo(dist.get_rank(), dist.get_world_size())


def _checkpoints(run_dir: Path) -> list[Path]:
    ck = run_dir / "checkpoints"
    found = [p for p in ck.glob("step-*") if (p / "training_state.pt").is_file() and (p / "model.safetensors").is_file()]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def _save_checkpoint(run_dir: Path, step: int, drafter: Eagle3Drafter, opt, cfg: TrainConfig, keep: int = 2) -> Path:
    final = run_dir / "checkpoints" / f"step-{step}"
    tmp = run_dir / "checkpoints" / f".tmp-step-{step}"
    if tmp.exists():
        shutil.rmtree(tmp)
    save_drafter(drafter, tmp, overwrite=True)
    with atomic_path(tmp / "training_state.pt") as p:
        torch.save({"step": step, "optimizer": opt.state_dict(), "config": asdict(cfg)}, p)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)  # the folder appears whole or not at all
    for old in _checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old)
    return final


def _append_metrics(path: Path, row: dict) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop metric lines written after the checkpoint a resumed run restarts from."""
    if not path.exists():
        return
    keep = [ln for ln in path.read_text().splitlines() if ln.strip() and json.loads(ln)["step"] <= step]
    write_text_atomic(path, "".join(k + "\n" for k in keep))


@dataclass
class TrainResult:
    """What a run produced: the trained drafter, its folder, and the logged metrics."""

    drafter: Eagle3Drafter
    final_dir: Path | None
    metrics: list[dict]
    seconds: float
    tokens: int


def train_drafter(
    drafter: Eagle3Drafter,
    train: HiddenStates,
    target_lm_head: torch.nn.Module,
    cfg: TrainConfig,
    run_dir: str | Path | None = None,
    eval_states: HiddenStates | None = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    stop_after: int | None = None,
) -> TrainResult:
    """Train ``drafter`` with TTT on captured target states.

    Args:
        drafter: the model to train, fresh or warm-started (its d2t / t2d are kept).
        train: captured states of the (new) target.
        target_lm_head: the target's lm_head, to recompute its logits from last hidden states.
        cfg: hyper-parameters.
        run_dir: where checkpoints, ``metrics.jsonl`` and ``final/`` go (None: in memory only).
        eval_states: held-out states for periodic evaluation.
        resume: continue from the newest checkpoint in ``run_dir``.
        overwrite: allow replacing a finished run in ``run_dir``.
        progress: show a progress bar.
        stop_after: stop (as if interrupted) after this many steps of this call; for tests.

    Raises:
        OverwriteError: ``run_dir`` holds a finished or started run and neither ``resume``
            nor ``overwrite`` is set.
    """
    from eaglelab.progress import progress as progress_bar

    dist = init_distributed()
    run = Path(run_dir) if run_dir is not None else None
    metrics_path = run / "metrics.jsonl" if run else None
    start_step = 0
    params = [p for p in drafter.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    if run is not None:
        started = (run / "final").exists() or bool(_checkpoints(run)) or (metrics_path.exists() and not resume)
        if started and not resume and not overwrite:
            raise OverwriteError(run, "holds a training run already; pass resume=True (--resume) to continue it "
                                      "or overwrite=True (--force) to start over")
        if overwrite and not resume and run.exists() and dist.main:
            for sub in ("checkpoints", "final"):
                shutil.rmtree(run / sub, ignore_errors=True)
            if metrics_path.exists():
                metrics_path.unlink()
        if resume and _checkpoints(run):
            last = _checkpoints(run)[-1]
            state = torch.load(last / "training_state.pt", map_location="cpu", weights_only=True)
            # weights and vocabulary maps from the checkpoint; the embedding stays the target's
            saved = {k: v for k, v in load_drafter(last).state_dict().items() if k != "embed_tokens.weight"}
            drafter.load_state_dict(saved, strict=False)
            opt.load_state_dict(state["optimizer"])
            start_step = int(state["step"])
        if resume and dist.main:
            _truncate_metrics(metrics_path, start_step)  # lines logged after the checkpoint are redone
        run.mkdir(parents=True, exist_ok=True)
        if dist.main:  # what the run is, readable without torch (eaglelab recipe --from-run reads it)
            write_json_atomic(run / "run.json", {"config": asdict(cfg), "train_sequences": len(train),
                                                 "aux_layers": list(train.aux_layers or [])})
    objective = TTTObjective(drafter)
    if dist.world > 1:
        objective = torch.nn.parallel.DistributedDataParallel(objective)
    drafter.train()
    metrics: list[dict] = []
    tokens = 0
    t0 = time.perf_counter()
    end = cfg.steps if stop_after is None else min(cfg.steps, start_step + stop_after)
    bar = progress_bar(range(start_step, end), desc="train", disable=not (progress and dist.main))
    for step in bar:
        idx = batch_indices(step, len(train), cfg.batch_size, cfg.seed)
        idx = idx[dist.rank:: dist.world]
        batch = train.batch(idx)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg)
        target = TargetTokens.recompute(target_lm_head, batch, drafter.draft_target_ids())
        out = objective(batch, target, cfg.ttt_steps, cfg.decay, cfg.loss_convention)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        tokens += int(batch.input_ids.numel()) * dist.world
        done = step + 1
        if done % cfg.log_every == 0 or done == cfg.steps:
            row = {"step": done, "loss": out.loss.item(), "loss_convention": out.convention,
                   f"acc_{out.convention}": [round(a, 5) for a in out.convention_acc],
                   "acc": [round(a, 5) for a in out.acc], "accept_len": out.simulated_accept_len,
                   "lr": lr_at(step, cfg), "grad_norm": float(grad_norm)}
            if eval_states is not None and cfg.eval_every and (done % cfg.eval_every == 0 or done == cfg.steps):
                ev = evaluate_drafter(drafter, eval_states, target_lm_head, cfg.ttt_steps,
                                      convention=cfg.loss_convention)
                row.update(eval_loss=ev["loss"], eval_acc=ev["acc"], eval_accept_len=ev["accept_len"])
            metrics.append(row)
            bar.set_postfix(loss=f"{row['loss']:.3f}", tau=f"{row['accept_len']:.2f}")
            if metrics_path is not None and dist.main:
                _append_metrics(metrics_path, row)
        if run is not None and dist.main and (done % cfg.checkpoint_every == 0 or done == cfg.steps):
            _save_checkpoint(run, done, drafter, opt, cfg)
    final_dir = None
    if run is not None and dist.main and end == cfg.steps:
        final_dir = save_drafter(drafter, run / "final", overwrite=True)
    return TrainResult(drafter, final_dir, metrics, time.perf_counter() - t0, tokens)


def ttt_flops_per_token(spec, seq_len: int, ttt_steps: int, target_rows: int) -> float:
    """Matmul FLOPs of one training token: TTT forward + backward (x3) plus the target-logit recompute.

    Per step: q/k/v over 2H, o, MLP, lm_head over the draft vocabulary, and attention scores and
    mixing over on average ``seq_len / 2`` keys (plus the step's diagonal keys); ``fc`` once.
    The target's lm_head runs once per token without gradients over ``target_rows`` rows: the
    draft vocabulary when the capture kept the target's greedy ids, its whole vocabulary otherwise.
    """
    H, Ht, I = spec.hidden_size, spec.target_hidden_size, spec.intermediate_size
    q, kv = spec.num_attention_heads * spec.head_dim, spec.num_key_value_heads * spec.head_dim
    per_step = 2 * (2 * H * (q + 2 * kv) + q * H + 3 * H * I + H * spec.draft_vocab_size)
    attn = 2 * 2 * q * (seq_len / 2 + ttt_steps / 2)
    forward = 2 * 3 * Ht * H + ttt_steps * (per_step + attn)
    return 3 * forward + 2 * Ht * target_rows


def read_metrics(run_dir: str | Path) -> list[dict]:
    """The metrics lines of a run folder."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
