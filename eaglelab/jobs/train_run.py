"""One training run for the cluster or this machine: ``eaglelab finetune`` as one job.

:func:`train_run` takes the fine-tune's :class:`~eaglelab.jobs.finetune.FinetuneSettings` (what is trained, as
notebook 04 trains it) and a :class:`TrainRunSettings` (the run's folder, whether it resumes, its cadence):
it checks everything from metadata before the target loads, joins the DDP group when it runs under
``torchrun`` (one GPU per rank), trains one start (warm or from scratch) and returns a :class:`TrainRunReport`
that prints itself on the main rank.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eaglelab.decisions import Option
from eaglelab.errors import ParameterError
from eaglelab.jobs.finetune import FinetuneSettings, check_finetune, load_inputs, train_one
from eaglelab.settings import option

if TYPE_CHECKING:
    from eaglelab.train.training import TrainResult


@dataclass(frozen=True)
class TrainRunSettings:
    """The run: its folder, its start, whether it continues, and how often it logs, evaluates and saves.

    Attributes:
        out: run folder (checkpoints/, final/, metrics.jsonl).
        scratch: fresh weights, vocabulary map from the data (instead of the old drafter).
        resume: continue the run in ``out`` up to ``steps``.
        force: start over, replacing the run eaglelab wrote in ``out``.
        log_every: metrics line every N steps (None: steps/12).
        eval_every: held-out evaluation every N steps (None: steps/6).
        checkpoint_every: resumable checkpoint every N steps (None: steps/2).
        rebuild_vocab: warm start but rebuild d2t / t2d from the data.
        stop_after: stop as if interrupted after N steps (a test hook).
    """

    out: str
    scratch: bool = False
    resume: bool = False
    force: bool = False
    log_every: int | None = option(None, min=0)
    eval_every: int | None = option(None, min=0)
    checkpoint_every: int | None = option(None, min=0)
    rebuild_vocab: bool = False
    stop_after: int | None = option(None, min=1, help=argparse.SUPPRESS)

    def __post_init__(self):
        if self.resume and self.force:
            raise ParameterError("finetune", "give --resume (continue the run) or --force (start over), not both")


@dataclass
class TrainRunReport:
    """What the run trained: its data, its last metrics, where the drafter is; ``main``: this rank prints."""

    settings: FinetuneSettings
    run: TrainRunSettings
    data: str
    result: TrainResult
    main: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"data": self.data, "out": self.run.out, "final_dir": None if self.result.final_dir is None else
                str(self.result.final_dir), "metrics": self.result.metrics, "notes": self.result.notes,
                "seconds": self.result.seconds, "tokens": self.result.tokens}

    def lines(self) -> list[str]:
        last = self.result.metrics[-1] if self.result.metrics else {}
        where = self.result.final_dir or f"{self.run.out}/checkpoints (stopped early; continue with --resume)"
        return [f"data: {self.data}", *(f"note: {note}" for note in self.result.notes),
                f"trained to step {last.get('step', '?')}: loss {last.get('loss', float('nan')):.4f}, simulated accept "
                f"len {last.get('accept_len', float('nan')):.2f}; drafter in {where}; metrics in {self.run.out}/metrics.jsonl"]


def train_run(settings: FinetuneSettings, run: TrainRunSettings, progress: bool = True) -> TrainRunReport:
    """Train one start into ``run.out``: the old drafter warm-started, or a drafter from scratch (``run.scratch``).

    Raises:
        ParameterError: neither or both of the old drafter and ``scratch``; checkpoints that do not fit together
            (checked from metadata before the target loads: :func:`~eaglelab.jobs.finetune.check_finetune`).
    """
    import torch

    from eaglelab.train.training import init_distributed

    if bool(settings.old_drafter) == bool(run.scratch):
        raise ParameterError("finetune", "give exactly one of --old-drafter DRAFTER (warm start) or --scratch")
    checked = check_finetune(settings)  # before the process group: a bad input is one line, on every rank
    dist = init_distributed()
    device = settings.device or (f"cuda:{dist.rank % torch.cuda.device_count()}" if torch.cuda.is_available() else "cpu")
    inputs = load_inputs(settings, device=device, progress=progress and dist.main, checked=checked)
    result = train_one(settings, inputs, Option.WARM_START if settings.old_drafter else Option.FROM_SCRATCH, run.out,
                       resume=run.resume, force=run.force, rebuild_vocab=run.rebuild_vocab,
                       progress=progress and dist.main, stop_after=run.stop_after, log_every=run.log_every,
                       eval_every=run.eval_every, checkpoint_every=run.checkpoint_every)
    return TrainRunReport(settings, run, str(inputs.source), result, dist.main)
