"""Fine-tune a drafter for a new target: warm start from an old drafter, or from scratch.

Joins the pieces the notebook and ``eaglelab finetune`` share: the new target's states (built by
:func:`eaglelab.data.sets.finetune_set`), the initial drafter (warm: the old drafter with its own
d2t / t2d; scratch: fresh weights with a vocabulary map from the data), and
:func:`eaglelab.train.training.train_drafter`.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import replace
from pathlib import Path

import torch

from eaglelab.checkpoints.drafters.spec import aux_ids_as_layer_outputs
from eaglelab.data.states import FinetuneData
from eaglelab.errors import ConfigError
from eaglelab.model.drafter import Eagle3Drafter
from eaglelab.model.drafter_files import load_drafter
from eaglelab.model.vocab import build_vocab_map, count_tokens
from eaglelab.progress import progress as progress_bar
from eaglelab.train.training import TrainConfig, TrainResult, train_drafter
from eaglelab.train.ttt import evaluate_drafter


def initial_drafter(model, init: str | Path | Eagle3Drafter | None, train_ids: torch.Tensor,
                    draft_vocab_size: int | None = None, rebuild_vocab: bool = False, seed: int = 0) -> Eagle3Drafter:
    """Warm start from ``init`` (keeping its d2t / t2d) or a fresh drafter with a data-built map.

    Args:
        model: the new target.
        init: the old drafter (its folder, or the drafter already loaded: a copy is trained, the loaded one
            stays as it is, and nothing is read again), or None for scratch.
        train_ids: training tokens, [N, S] or a list of rows (for the scratch vocabulary map).
        rebuild_vocab: warm start but rebuild d2t / t2d from the data (warns: lm_head rows then
            mean other tokens).
    """
    vocab = model.config.vocab_size
    if init is None:
        drafter = Eagle3Drafter.from_target_config(model.config.to_dict(), draft_vocab_size=draft_vocab_size,
                                                   seed=seed)
        drafter.set_vocab_map(*build_vocab_map(count_tokens(train_ids, vocab), drafter.spec.draft_vocab_size))
    else:
        drafter = copy.deepcopy(init) if isinstance(init, Eagle3Drafter) else load_drafter(init)
        if rebuild_vocab:
            warnings.warn("rebuilding d2t / t2d of a warm-started drafter: its lm_head rows now stand for other "
                          "tokens and must be re-learned", stacklevel=2)
            drafter.set_vocab_map(*build_vocab_map(count_tokens(train_ids, vocab), drafter.spec.draft_vocab_size))
    # a full-vocabulary drafter without a head of its own starts from the target's and trains it
    drafter.set_embedding(model.get_input_embeddings().weight.detach().to(drafter.fc.weight.dtype),
                          model.get_output_embeddings().weight.detach())
    return drafter.to(next(model.parameters()).device)


def finetune(model, init: str | Path | Eagle3Drafter | None, data: FinetuneData, cfg: TrainConfig,
             run_dir: str | Path | None = None, resume: bool = False, overwrite: bool = False, rebuild_vocab: bool = False,
             draft_vocab_size: int | None = None, progress: bool = True, stop_after: int | None = None) -> TrainResult:
    """Train a drafter for ``model`` from ``init`` (warm: a folder or a loaded drafter) or from scratch (``init=None``)."""

    drafter = initial_drafter(model, init, data.train.input_ids, draft_vocab_size, rebuild_vocab, cfg.seed)
    L = model.config.num_hidden_layers
    wanted = aux_ids_as_layer_outputs(drafter.spec.aux_layer_ids, drafter.spec.aux_convention, L)
    if tuple(wanted) != tuple(data.aux_layer_outputs):
        name = "scratch drafter" if init is None else "the old drafter" if isinstance(init, Eagle3Drafter) else str(init)
        raise ConfigError(name, f"reads layer outputs {list(wanted)} but the data was "
                                                          f"captured at {list(data.aux_layer_outputs)}")
    return train_drafter(drafter, data.train, model.lm_head, cfg, run_dir=run_dir, eval_states=data.held_out,
                         resume=resume, overwrite=overwrite, progress=progress, stop_after=stop_after)


def budget_sweep(model, init: str | Path | Eagle3Drafter, data: FinetuneData, budgets: list[int], seeds: list[int],
                 cfg: TrainConfig, epochs: float = 3.0,
                 draft_vocab_size: int | None = None) -> dict[str, list[tuple[int, float]]]:
    """Held-out τ of the warm start and of scratch at each data budget and seed (a data-scaling sweep).

    Each run trains ``max(cfg.steps, epochs x budget / batch)`` steps, so a larger budget is not
    cut short; the rest of ``cfg`` (batch, TTT length, learning rate) is shared. The old drafter
    as is gives the warm start's point at budget 0.

    Args:
        init: the old drafter (the warm start's initialisation): its folder, read once, or the drafter loaded.
        budgets: training sequences per point (the first ``n`` of ``data.train``).
        seeds: one run per seed and budget (initialisation of scratch, batch order of both).
        cfg: shared settings; ``cfg.steps`` is the least number of steps of a run.

    Returns:
        ``{"warm start": [(0, τ_plugin), (n, τ), ...], "from scratch": [(n, τ), ...]}``, held-out τ with
        ``cfg.eval_k`` (else ``cfg.ttt_length``) drafts.
    """
    init = init if isinstance(init, Eagle3Drafter) else load_drafter(init)  # read once, copied for every warm run
    old = initial_drafter(model, init, data.train.input_ids)  # as served: with the new target's embedding
    plugged = evaluate_drafter(old, data.held_out, model.lm_head, cfg.eval_k or cfg.ttt_length)["accept_len"]
    points = {"warm start": [(0, float(plugged))], "from scratch": []}
    runs = [(n, seed, label) for n in budgets for seed in seeds for label in points]
    for n, seed, label in progress_bar(runs, desc="data-budget sweep"):
        steps = max(cfg.steps, int(round(epochs * min(n, len(data.train)) / cfg.batch_size)))
        run_cfg = replace(cfg, steps=steps, seed=seed, log_every=steps, eval_every=steps)
        run = finetune(model, init if label == "warm start" else None, data.subset(n), run_cfg,
                       draft_vocab_size=draft_vocab_size, progress=False)
        points[label].append((n, float(run.metrics[-1]["eval_accept_len"])))
    return points
