"""Drafter training: EAGLE-3 training-time test, from scratch or warm-started.

Nothing is lost: every checkpoint is written atomically (drafter folder + optimizer state);
``resume=True`` continues from the newest one and reproduces the uninterrupted loss curve
(the batch of step s depends only on (seed, s)); a finished run is never overwritten unless
asked. Under ``torchrun`` the same entry point trains with DDP (gloo on CPU, nccl on GPU),
each rank taking its share of every batch; rank 0 writes.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from eaglelab.checkpoints.drafters.tensor_table import expected_eagle3_tensors
from eaglelab.data.states import HiddenStates
from eaglelab.errors import ConfigError, ParameterError
from eaglelab.model.drafter import Eagle3Drafter
from eaglelab.model.drafter_files import load_drafter, write_drafter
from eaglelab.outputs import OutputError, open_output_folder, os_problem, where
from eaglelab.progress import progress as progress_bar
from eaglelab.train.conventions import DEFAULT_CONVENTION, LOSS_CONVENTIONS
from eaglelab.train.run_files import (
    METRICS,
    RECORD,
    RUN_KIND,
    check_resume,
    checkpoint_dirs,
    checkpoint_step,
    load_training_state,
    read_metrics,  # noqa: F401 (the metrics reader's home is run_files; tests and notebooks import it here too)
    read_metrics_file,
    read_run_record,
    run_record,
)
from eaglelab.train.ttt import (
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
        ttt_length: unroll length of training-time test (SpecForge's ``ttt_length``; its default is 7).
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
        eval_k: drafts per cycle of the held-out τ (None: ``ttt_length``).
    """

    steps: int = 200
    batch_size: int = 8
    ttt_length: int = 7
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
    eval_k: int | None = None

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

    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    return DistInfo(dist.get_rank(), dist.get_world_size())


def _save_checkpoint(out, step: int, drafter: Eagle3Drafter, opt, cfg: TrainConfig, keep: int = 2) -> Path:
    """``checkpoints/step-N`` written whole into a hidden folder, then renamed into place; the newest ``keep`` stay."""
    rel, tmp_rel = f"checkpoints/step-{step}", f"checkpoints/.tmp-step-{step}"
    with open_output_folder(out.file(tmp_rel), "training checkpoint", force=True) as tmp:
        write_drafter(tmp, drafter)
        with tmp.writing("training_state.pt") as p:
            torch.save({"step": step, "optimizer": opt.state_dict(), "config": asdict(cfg)}, p)
    out.remove(rel)  # an older copy of this step (a resumed run redoes it)
    try:
        os.replace(out.file(tmp_rel), out.file(rel))  # the folder appears whole or not at all
    except OSError as exc:
        raise OutputError(where(out.file(rel)), f"cannot move the checkpoint into place ({os_problem(exc)})") from None
    out.record_tree(rel)
    for old in checkpoint_dirs(out.path)[:-keep]:
        out.remove(old.relative_to(out.path).as_posix())
    return out.file(rel)


@dataclass
class TrainResult:
    """What a run produced: the trained drafter, its folder, the logged metrics, and notes from a resume."""

    drafter: Eagle3Drafter
    final_dir: Path | None
    metrics: list[dict]
    seconds: float
    tokens: int
    notes: list[str] = field(default_factory=list)  # what a resume changed or dropped, one line each


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
        overwrite: start over in a ``run_dir`` that holds a run (``--force``): the files eaglelab
            wrote there are removed, nothing else.
        progress: show a progress bar.
        stop_after: stop (as if interrupted) after this many steps of this call; for tests.

    Raises:
        OverwriteError: ``run_dir`` holds a run and neither ``resume`` nor ``overwrite`` is set, holds
            files eaglelab did not write, or another run is writing it.
        ConfigError: a resume that cannot continue the stored run exactly (:func:`check_resume`).
    """
    dist = init_distributed()
    run = Path(run_dir) if run_dir is not None else None
    start_step = 0
    notes: list[str] = []
    params = [p for p in drafter.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    out = None
    if run is not None and dist.main:  # rank 0 writes; the folder is eaglelab's, locked while the run lasts
        out = open_output_folder(run, RUN_KIND, force=overwrite and not resume, resume=resume or None)
    try:
        if run is not None:
            record = run_record(cfg, len(train), train.aux_layers, drafter)
            done = checkpoint_dirs(run)
            if resume and done:
                last = done[-1]
                notes += check_resume(read_run_record(run), record, run, checkpoint_step(last))
                state = load_training_state(last / "training_state.pt")
                # weights and vocabulary maps from the checkpoint; the embedding stays the target's
                saved = {k: v for k, v in load_drafter(last).state_dict().items() if k != "embed_tokens.weight"}
                drafter.load_state_dict(saved, strict=False)
                try:
                    opt.load_state_dict(state["optimizer"])
                except (ValueError, KeyError, RuntimeError) as exc:
                    raise ConfigError(str(last / "training_state.pt"), f"its optimizer state does not fit this drafter "
                                                                       f"({type(exc).__name__})") from None
                start_step = int(state["step"])
            if out is not None:
                if resume:  # lines logged after the checkpoint are redone; a torn last line is dropped
                    rows, note = read_metrics_file(run / METRICS)
                    notes += [note] if note else []
                    kept = [r for r in rows if r["step"] <= start_step]
                    if (run / METRICS).exists():
                        out.write_text(METRICS, "".join(json.dumps(r) + "\n" for r in kept))
                out.write_json(RECORD, record)
        return _train_loop(drafter, train, target_lm_head, cfg, out, eval_states, progress, stop_after, dist, opt,
                           params, start_step, notes)
    finally:
        if out is not None:
            out.close()


def _train_loop(drafter, train, target_lm_head, cfg, out, eval_states, progress, stop_after, dist, opt, params,
                start_step, notes) -> TrainResult:
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
        res = objective(batch, target, cfg.ttt_length, cfg.decay, cfg.loss_convention)
        opt.zero_grad(set_to_none=True)
        res.loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        tokens += int(batch.input_ids.numel()) * dist.world
        done = step + 1
        if done % cfg.log_every == 0 or done == cfg.steps:
            row = {"step": done, "loss": res.loss.item(), "loss_convention": res.convention,
                   f"acc_{res.convention}": [round(a, 5) for a in res.convention_acc],
                   "acc": [round(a, 5) for a in res.acc], "accept_len": res.simulated_accept_len,
                   "lr": lr_at(step, cfg), "grad_norm": float(grad_norm)}
            if eval_states is not None and cfg.eval_every and (done % cfg.eval_every == 0 or done == cfg.steps):
                ev = evaluate_drafter(drafter, eval_states, target_lm_head, cfg.eval_k or cfg.ttt_length,
                                      convention=cfg.loss_convention)
                row.update(eval_loss=ev["loss"], eval_acc=ev["acc"], eval_accept_len=ev["accept_len"])
            metrics.append(row)
            bar.set_postfix(loss=f"{row['loss']:.3f}", tau=f"{row['accept_len']:.2f}")
            if out is not None:
                out.append_line(METRICS, json.dumps(row))
        if out is not None and (done % cfg.checkpoint_every == 0 or done == cfg.steps):
            _save_checkpoint(out, done, drafter, opt, cfg)
    final_dir = None
    if out is not None and end == cfg.steps:
        out.remove("final")  # this run's earlier final drafter (a resumed run writes it again)
        with open_output_folder(out.file("final"), "drafter", force=True) as final:
            write_drafter(final, drafter)
        out.record_tree("final")
        final_dir = final.path
    return TrainResult(drafter, final_dir, metrics, time.perf_counter() - t0, tokens, notes)


def ttt_flops_per_token(spec, seq_len: int, ttt_length: int, target_rows: int) -> float:
    """Matmul FLOPs of one training token: TTT forward + backward (x3) plus the target-logit recompute.

    Per step: every matrix of the drafter layer (q/k/v/o or MLA's low-rank paths, over 2H; the MLP),
    lm_head over the draft vocabulary, and attention scores and mixing over all ``seq_len`` keys: the unroll
    (:meth:`eaglelab.model.attention._Attention.forward_ttt`) computes the full ``S x S`` products and masks
    them, so that is what it costs (the earlier count of ``seq_len / 2`` keys, what a causal kernel would
    compute, undercounted a Kimi-width Llama drafter's unroll by 16% at 32k tokens, k 3); the step's diagonal keys are elementwise
    products, not matmuls. ``fc`` once. The target's lm_head runs once per token without
    gradients over ``target_rows`` rows: the draft vocabulary when the capture kept the target's greedy ids,
    its whole vocabulary otherwise.
    """
    H, Ht = spec.hidden_size, spec.target_hidden_size
    layer = sum(e.shape[0] * e.shape[1] for name, e in expected_eagle3_tensors(spec).items()
                if name.startswith(spec.layer_prefix + ".") and len(e.shape) == 2)
    per_step = 2 * (layer + H * spec.draft_vocab_size)
    nh = spec.num_attention_heads
    qk, v = (nh * spec.head_dim, nh * spec.head_dim) if spec.mla is None else \
        (nh * spec.mla.qk_head_dim, nh * spec.mla.v_head_dim)
    attn = 2 * (qk + v) * seq_len
    forward = 2 * 3 * Ht * H + ttt_length * (per_step + attn)
    return 3 * forward + 2 * Ht * target_rows
