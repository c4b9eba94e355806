"""The fine-tune as one job: the old drafter as is, warm-started and from scratch on the new target's data.

``eaglelab finetune`` trains one start (:func:`train_one`); notebook 04 and its picker compare the three
(:func:`warm_vs_scratch`). Both take a :class:`FinetuneSettings`, whose defaults are the only ones
(``tests/test_parity.py`` ties the notebook's parameters cell and the command line's flags to them).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from eaglelab.checkpoints.drafters.export import export_drafter
from eaglelab.checkpoints.drafters.implied_config import drafter_config_for_target
from eaglelab.checkpoints.drafters.preflight import check_context, check_opened_drafter, check_target
from eaglelab.checkpoints.drafters.spec import drafter_spec_from_config
from eaglelab.checkpoints.files.sources import Checkpoint, load_checkpoint
from eaglelab.data.probe_data import world_for_data
from eaglelab.data.world import World
from eaglelab.decisions import Option
from eaglelab.engines.recipes import TRAINING_ENGINES, RecipeSettings, build_recipe
from eaglelab.errors import ParameterError
from eaglelab.progress import progress as progress_bar
from eaglelab.recommendation import Recommendation, recommend
from eaglelab.serving.speculation import Speculations
from eaglelab.settings import DEFAULT_K, DEFAULT_MEASURE_PROMPTS, DEFAULT_MEASURE_TOKENS, check_ranges, option
from eaglelab.train.conventions import DEFAULT_CONVENTION, LOSS_CONVENTIONS
from eaglelab.views import Column, View

if TYPE_CHECKING:  # the types only: the metadata commands import this module without torch or transformers
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from eaglelab.data.sets import DataSource
    from eaglelab.data.states import FinetuneData
    from eaglelab.model.drafter import Eagle3Drafter

DTYPES = ("float32", "bfloat16", "float16")
#: The two starts a fine-tune can take.
STARTS = (Option.WARM_START, Option.FROM_SCRATCH)


@dataclass(frozen=True)
class FinetuneSettings:
    """What a fine-tune trains on and how.

    Attributes:
        new_target: the new target folder or hub id (the one to train a drafter for).
        old_drafter: warm start from the old drafter (its d2t / t2d are kept); also the plug-in baseline (None: from
            scratch only).
        data: text or JSONL file (None: the world's replies of the target, else built-in text).
        world_dir: world folder whose target-B replies to train on (None: the world ``new_target`` lies in, if any).
        seq_len: tokens per row of packed text.
        train_sequences: training sequences (at most; a world's replies are capped by it too).
        eval_sequences: held-out sequences (at most).
        steps: total optimizer steps per run.
        batch_size: sequences per step.
        lr: AdamW learning rate (a small drafter's; the recipes leave a large one's to the engine).
        ttt_length: training-time-test unroll (SpecForge's ``ttt_length``).
        k: drafts per cycle of the held-out τ, the plug-in τ and the measured τ.
        loss_convention: whose TTT loss, loss-mask alignment and accuracy to train on and report (specforge or
            speculators).
        seed: data order and scratch's initialisation.
        draft_vocab_size: draft vocabulary size for a drafter from scratch (None: the old drafter's, else
            min(32000, V)).
        measure_prompts, measure_tokens: real speculative decoding of each start on the target.
        dtype: the dtype the target loads in (its states are stored in float32).
        device: cpu or cuda (None: cuda when available, one GPU per rank).
        trust_remote_code: allow the target's own code (off unless asked).
    """

    new_target: str
    old_drafter: str | None = None
    data: str | None = None
    world_dir: str | None = None
    seq_len: int = option(64, min=1)
    train_sequences: int = option(128, min=1, flag="sequences")
    eval_sequences: int = option(32, min=1)
    steps: int = option(60, min=1)
    batch_size: int = option(4, min=1)
    lr: float = option(2e-3, above=0, max=1.0)
    ttt_length: int = option(3, min=1)
    k: int = option(DEFAULT_K, min=1)
    loss_convention: str = option(DEFAULT_CONVENTION, choices=LOSS_CONVENTIONS)
    seed: int = option(0, min=0)
    draft_vocab_size: int | None = option(None, min=1, flag="draft-vocab")
    measure_prompts: int = option(DEFAULT_MEASURE_PROMPTS, min=0)
    measure_tokens: int = option(DEFAULT_MEASURE_TOKENS, min=1)
    dtype: str = option("float32", choices=DTYPES)
    device: str | None = None
    trust_remote_code: bool = False

    #: notebook 04's smoke run (``eaglelab.settings.smoke_sized``): a short run of a deeper unroll and chain
    SMOKE_SIZES: ClassVar[dict[str, int]] = {"train_sequences": 48, "eval_sequences": 16, "steps": 20, "batch_size": 8,
                                             "ttt_length": 5, "k": 5, "measure_prompts": 3, "measure_tokens": 24}

    def __post_init__(self):
        check_ranges(self)  # each field's declared range and choices: flags, notebook parameters and the API alike

    def train_config(self, **changes):
        """The :class:`~eaglelab.train.training.TrainConfig` of one run (``changes``: the cadence, a sweep's steps)."""
        from eaglelab.train.training import TrainConfig

        fields = {"batch_size": self.batch_size, "ttt_length": self.ttt_length, "lr": self.lr, "seed": self.seed,
                  "loss_convention": self.loss_convention, "eval_k": self.k}
        cadence = {name: changes.pop(name) for name in ("log_every", "eval_every", "checkpoint_every") if name in changes}
        return TrainConfig.for_steps(changes.pop("steps", self.steps), **cadence, **{**fields, **changes})


@dataclass
class FinetuneInputs:
    """What a fine-tune loads once: the new target, its tokenizer, the old drafter, and the captured data."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    old: Eagle3Drafter | None
    data: FinetuneData
    source: DataSource
    world: World | None

    def prompts(self, n: int) -> list[list[int]]:
        from eaglelab.data.sets import measure_prompts

        return measure_prompts(self.tokenizer, n, self.world)


@dataclass(frozen=True)
class FinetuneCheck:
    """What the pre-flight check read, handed to the loader so nothing is parsed twice.

    Attributes:
        target_config: the new target's config.
        old_drafter: the old drafter's checkpoint as opened (config and headers), or None for scratch.
    """

    target_config: dict
    old_drafter: Checkpoint | None


def check_finetune(settings: FinetuneSettings) -> FinetuneCheck:
    """Every checkpoint checked from configs and headers before anything loads; what was opened returned."""
    opened = load_checkpoint(settings.old_drafter) if settings.old_drafter else None
    if opened is not None:
        _, tcfg = check_opened_drafter(opened, settings.old_drafter, settings.new_target)
    else:
        tcfg = check_target(settings.new_target)
    check_context(settings.seq_len, "--seq-len", (settings.new_target, tcfg))
    return FinetuneCheck(tcfg, opened)


def load_inputs(settings: FinetuneSettings, device: str | None = None, progress: bool = True, bar=None,
                checked: FinetuneCheck | None = None) -> FinetuneInputs:
    """Check, load the target (and the old drafter), and capture the new target's training and held-out states.

    The layers captured are those the old drafter reads, or a fresh drafter's defaults for the target. ``checked``:
    the pre-flight's result when the caller ran it already (:func:`check_finetune`): the drafter it opened is loaded
    from it, not opened again.
    """
    from eaglelab.data.sets import finetune_set
    from eaglelab.model.drafter_files import load_drafter
    from eaglelab.model.targets import load_target

    checked = checked or check_finetune(settings)
    model, tok = load_target(settings.new_target, dtype=settings.dtype, device=device or settings.device,
                             trust_remote_code=settings.trust_remote_code, need_tokenizer=True)
    old = load_drafter(checked.old_drafter) if checked.old_drafter is not None else None
    if bar is not None:
        bar.set_postfix_str("capturing the new target's data")
        bar.update()
    spec = old.spec if old is not None else drafter_spec_from_config(
        drafter_config_for_target(model.config.to_dict(), settings.draft_vocab_size), "scratch drafter")
    world = world_for_data(settings.new_target, settings.world_dir)
    data, source = finetune_set(model, tok, spec, settings.data, world, settings.seq_len, settings.train_sequences,
                                settings.eval_sequences, progress=progress)
    return FinetuneInputs(model, tok, old, data, source, world)


def train_one(settings: FinetuneSettings, inputs: FinetuneInputs, start: str, run_dir: str | Path | None = None,
              resume: bool = False, force: bool = False, rebuild_vocab: bool = False, progress: bool = True,
              stop_after: int | None = None, **cadence):
    """One fine-tune run: from the old drafter (``start="warm start"``) or from scratch, into ``run_dir``.

    Returns:
        :class:`eaglelab.train.training.TrainResult`.
    """
    from eaglelab.train.finetune import finetune

    if start not in STARTS:
        raise ParameterError("start", f"must be one of {', '.join(STARTS)}, got {start!r}")
    if start == Option.WARM_START and not settings.old_drafter:
        raise ParameterError("--init", "a warm start needs the old drafter")
    vocab = settings.draft_vocab_size or (inputs.old.spec.draft_vocab_size if inputs.old is not None else None)
    return finetune(inputs.model, inputs.old if start == Option.WARM_START else None, inputs.data,
                    settings.train_config(**cadence), run_dir=run_dir, resume=resume, overwrite=force,
                    rebuild_vocab=rebuild_vocab, draft_vocab_size=vocab, progress=progress, stop_after=stop_after)


@dataclass
class FinetuneReport:
    """The old drafter as is, warm-started and from scratch, at equal budget: held-out τ and the recommendation.

    Attributes:
        settings: what was trained.
        plugin_tau: the old drafter's held-out τ on the new target, teacher forced, before any training.
        runs: ``{"warm start": TrainResult, "from scratch": TrainResult}``.
        recommendation: :class:`eaglelab.recommendation.Recommendation` on held-out τ.
        data: where the data came from (one line).
        data_kind: its :class:`~eaglelab.data.sets.DataSource` kind (``built-in``: the headline says it decides nothing).
        per_sequence: option -> ``(hits, counted)`` per held-out sequence (teacher forced, ``settings.k`` drafts):
            what the recommendation's bands resample (:func:`eaglelab.recommendation.sequence_bands`).
    """

    settings: FinetuneSettings
    plugin_tau: float
    runs: dict[str, Any]
    recommendation: Recommendation | None
    data: str
    notes: list[str] = field(default_factory=list)
    data_kind: str = ""
    per_sequence: dict[str, tuple[list, list]] | None = None

    @property
    def taus(self) -> dict[str, float]:
        """Held-out τ of each option (teacher forced, ``settings.k`` drafts)."""
        return {Option.PLUG_IN: self.plugin_tau,
                **{start: float(r.metrics[-1]["eval_accept_len"]) for start, r in self.runs.items()}}

    def to_json(self) -> dict[str, Any]:
        return {"checkpoints": {"new_target": self.settings.new_target, "old_drafter": self.settings.old_drafter},
                "k": self.settings.k, "steps": self.settings.steps, "data": self.data, "held_out_tau": self.taus,
                "final_loss": {start: r.metrics[-1]["loss"] for start, r in self.runs.items()},
                "recommendation": self.recommendation.to_json()}

    def headline(self, tag: str = "") -> str:
        s, t = self.settings, self.taus
        return (f"{self.recommendation.action.upper()}{' ' + tag if tag else ''} for {s.new_target} from {s.old_drafter} "
                f"on held-out τ (teacher forced, k = {s.k}, {s.steps} steps each; {self.data}): plugged in "
                f"{t[Option.PLUG_IN]:.2f}, warm start {t[Option.WARM_START]:.2f}, from scratch "
                f"{t[Option.FROM_SCRATCH]:.2f}"
                + ("; on built-in text this order decides nothing for a served model: give DATA, your conversations"
                   if self.data_kind == "built-in" else ""))

    def view(self) -> View:
        """Each start's run at equal budget: its final loss, held-out τ and training throughput."""
        columns = [Column("start"), Column(f"final loss ({self.settings.loss_convention})", "{:.4f}"),
                   Column("held-out τ", "{:.3f}"), Column("tokens/s (training)", "{:.0f}")]
        return View.of(columns, [[name, r.metrics[-1]["loss"], r.metrics[-1]["eval_accept_len"],
                                  r.tokens / r.seconds if r.seconds else None] for name, r in self.runs.items()],
                       index="start")

    def table(self):
        return self.view().frame()

    def lines(self) -> list[str]:
        return [self.headline(), self.recommendation.text]

    def findings(self, tag: str = "") -> dict[str, str]:
        """The comparison's own findings, one sentence (markdown) each, by name, for a notebook to pick and order:
        ``compared``, ``equal_budget``. ``tag``: the evidence tag (``[demo]``...)."""
        s, t, at = self.settings, self.taus, f" {tag}" if tag else ""
        return {"compared": f"**Compared{at}:** the old drafter `{s.old_drafter}` plugged in, warm-started and from "
                            f"scratch on `{s.new_target}`.",
                "equal_budget": f"**Equal budget{at} ({s.steps} steps; data: {self.data}):** warm start reaches held-out τ "
                                f"{t[Option.WARM_START]:.2f} vs {t[Option.FROM_SCRATCH]:.2f} from scratch (plugged in: "
                                f"{t[Option.PLUG_IN]:.2f})."}


def warm_vs_scratch(settings: FinetuneSettings, inputs: FinetuneInputs | None = None,
                    runs_dir: str | Path | None = None, progress: bool = True) -> FinetuneReport:
    """The old drafter plugged in, warm-started and from scratch at equal budget on the new target's data.

    One progress bar: loading and capture, the plug-in τ, the warm run, the scratch run.

    Args:
        inputs: what :func:`load_inputs` loaded (a notebook keeps it for its other sections); None: loaded here.
        runs_dir: where the two runs' folders go (``warm``, ``scratch``; replaced, they are eaglelab's); None: memory only.
    """
    from eaglelab.train.finetune import initial_drafter
    from eaglelab.train.ttt import evaluate_drafter

    if not settings.old_drafter:
        raise ParameterError("old_drafter", "warm start vs scratch needs the old drafter")
    with progress_bar(total=4 if inputs is None else 3, desc="warm start vs scratch", disable=not progress,
                      leave=True) as bar:
        if inputs is None:
            bar.set_postfix_str("checking and loading the target")
            inputs = load_inputs(settings, progress=False, bar=bar)
        bar.set_postfix_str("training the warm start")
        plugged = evaluate_drafter(initial_drafter(inputs.model, inputs.old, inputs.data.train.input_ids),
                                   inputs.data.held_out, inputs.model.lm_head, settings.k)
        runs = {}
        for start, name in ((Option.WARM_START, "warm"), (Option.FROM_SCRATCH, "scratch")):
            bar.set_postfix_str(f"training the {start}" if start == Option.WARM_START else "training from scratch")
            runs[start] = train_one(settings, inputs, start, Path(runs_dir) / name if runs_dir else None, force=True,
                                    progress=False)
            bar.update()
        bar.set_postfix_str("done")
        bar.update()
    # per held-out sequence, for the bands: each trained drafter once more on what its run's last evaluation read
    held = {Option.PLUG_IN: plugged, **{start: evaluate_drafter(r.drafter, inputs.data.held_out, inputs.model.lm_head,
                                                                 settings.k) for start, r in runs.items()}}
    per_sequence = {o: (ev["seq_hits"], ev["seq_counted"]) for o, ev in held.items()}
    report = FinetuneReport(settings, float(plugged["accept_len"]), runs, None, str(inputs.source),
                            data_kind=inputs.source.kind, per_sequence=per_sequence)
    report.recommendation = recommend(report.taus, per_sequence=per_sequence)
    return report


def measure_starts(settings: FinetuneSettings, inputs: FinetuneInputs, report: FinetuneReport) -> Speculations:
    """Real speculative decoding on the new target of the old drafter plugged in and of both trained starts.

    One plain-greedy baseline shared by all three, interleaved (:func:`eaglelab.model.decoding.benchmark_drafters`).

    Returns:
        ``plug in``, ``warm start`` and ``from scratch``'s measurements, in that order.
    """
    from eaglelab.model.decoding import benchmark_drafters
    from eaglelab.model.targets import Target

    target = Target.for_drafter(inputs.model, inputs.old.spec)
    drafters = {Option.PLUG_IN: inputs.old, **{start: r.drafter for start, r in report.runs.items()}}
    try:
        return benchmark_drafters(target, {n: d.eval() for n, d in drafters.items()},
                                  inputs.prompts(settings.measure_prompts), settings.measure_tokens, k=settings.k)
    finally:
        target.close()


@dataclass(frozen=True)
class ScalingSettings:
    """Notebook 04's data-scaling sweep (:func:`data_scaling`): both starts trained at each budget and seed.

    Attributes:
        budgets: training sequences per sweep point, log-spaced up to the data there is.
        seeds: one sweep run per seed and budget (two seeds double the sweep and narrow the ratio's band).
        sweep_steps: the least optimizer steps of a sweep run (fewer leave scratch too weak for the fit's band).
        sweep_epochs: larger budgets train this many epochs, so they are not cut short.
    """

    budgets: tuple[int, ...] = option((4, 8, 16, 32, 64), min=1)
    seeds: tuple[int, ...] = option((0,), min=0)
    sweep_steps: int = option(40, min=1)
    sweep_epochs: float = option(6, above=0)

    SMOKE_SIZES: ClassVar[dict[str, Any]] = {"budgets": (3, 6, 12, 24, 48), "sweep_steps": 10, "sweep_epochs": 1}

    def __post_init__(self):
        check_ranges(self)


def sweep_config(settings: FinetuneSettings, sweep_steps: int):
    """The shared settings of a data-scaling sweep's runs (each trains at least ``sweep_steps``)."""
    return replace(settings, steps=sweep_steps).train_config()


def data_scaling(settings: FinetuneSettings, inputs: FinetuneInputs, sweep: ScalingSettings):
    """Held-out τ of both starts at each of the sweep's budgets and seeds, and the saturating law fitted to each.

    Returns:
        a :class:`~eaglelab.planning.scaling.ScalingSweep`: :func:`eaglelab.train.finetune.budget_sweep`'s points
        and :func:`eaglelab.planning.scaling.fit_scaling`'s fit (the data each start needs for a τ, their ratio).
    """
    from eaglelab.planning.scaling import ScalingSweep, fit_scaling
    from eaglelab.train.finetune import budget_sweep

    points = budget_sweep(inputs.model, inputs.old, inputs.data, list(sweep.budgets), list(sweep.seeds),
                          sweep_config(settings, sweep.sweep_steps), sweep.sweep_epochs, inputs.old.spec.draft_vocab_size)
    fit = fit_scaling(points[Option.FROM_SCRATCH], points[Option.WARM_START], k=settings.k)
    return ScalingSweep(points, fit, sweep.budgets, sweep.seeds, sweep.sweep_steps, sweep.sweep_epochs)


def export_for_serving(settings: FinetuneSettings, inputs: FinetuneInputs, drafter, out_dir: str | Path,
                       force: bool = True) -> tuple[Path, Path]:
    """The chosen drafter written for SGLang (``out_dir/sglang``, bf16) and for vLLM (``out_dir/vllm``, speculators).

    ``force`` replaces an export eaglelab wrote there before (never a file it did not write).
    """
    from eaglelab.model.drafter_files import save_drafter

    sglang = save_drafter(drafter, Path(out_dir) / "sglang", dtype="bfloat16", overwrite=force)
    vllm = export_drafter(sglang, Path(out_dir) / "vllm", "speculators", inputs.model.config.to_dict(),
                          verifier=str(settings.new_target), target_embedding=inputs.model.get_input_embeddings().weight,
                          overwrite=force, k=settings.k)
    return sglang, vllm


@dataclass(frozen=True)
class HandOver:
    """The warm start at scale: a recipe per training engine and the folder it was written to."""

    recipes: dict[str, Any]
    folders: dict[str, Path]

    @property
    def scripts(self) -> dict[str, Path]:
        """Each engine's runnable script."""
        return {engine: folder / "run.sh" for engine, folder in self.folders.items()}

    def table(self):
        """Each recipe's provenance (what it was built from), one column per engine."""
        import pandas as pd

        return pd.DataFrame({engine: r.provenance for engine, r in self.recipes.items()})

    def findings(self, tag: str, action: str) -> dict[str, str]:
        """``hand_over``: the recipes that keep the old drafter's vocabulary map, and where; ``action``: the option
        chosen (for reference only when it is to plug in)."""
        slots = next(iter(self.recipes.values())).vocab_map["draft_slots"]
        where = ", ".join(f"{engine} `{script}`" for engine, script in self.scripts.items())
        why = " (for reference: nothing to train on this evidence)." if action == Option.PLUG_IN else "."
        return {"hand_over": f"**Hand-over** (the chosen path here is **{action}** {tag}): warm-start recipes that keep "
                             f"the old drafter's {slots}-slot vocabulary map, {where}{why}"}


def hand_over(settings: FinetuneSettings, warm_run: str | Path, out_dir: str | Path, data: str = "prompts.jsonl",
              gpus: int = 8, force: bool = True) -> HandOver:
    """The warm start at scale: a recipe per training engine, epochs and TTT length from the workbook's warm run, each
    written to ``out_dir/<engine>``."""
    recipes, folders = {}, {}
    for engine in TRAINING_ENGINES:
        recipes[engine] = build_recipe(RecipeSettings(engine, str(settings.old_drafter), str(settings.new_target),
                                                      data=data, gpus=gpus, k=settings.k), from_run=warm_run)
        folders[engine] = recipes[engine].write(Path(out_dir) / engine, overwrite=force)
    return HandOver(recipes, folders)
