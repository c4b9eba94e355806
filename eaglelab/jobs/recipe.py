"""Scripts for the cluster: ``eaglelab recipe`` as one job, for its three jobs (warm start, dump-and-probe, load).

:func:`write_recipe` takes a :class:`RecipeJobSettings` (the command's flags are generated from it): the job,
the engine, the checkpoints and the folder, and any of the job's own settings. A setting left as None takes
its job's default, which its job's settings own (:class:`~eaglelab.engines.recipes.RecipeSettings`,
:class:`~eaglelab.engines.probe_recipes.ProbeRecipeSettings`,
:class:`~eaglelab.engines.load_recipes.LoadRecipeSettings`); a setting another job takes is refused in one
line. Its :class:`RecipeReport` prints and serialises itself. Reads configs and headers only; no torch.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from eaglelab.engines.load_recipes import MAX_GPUS, MAX_REPEATS, LoadRecipe, LoadRecipeSettings, write_load_recipe
from eaglelab.engines.probe_recipes import ProbeRecipe, ProbeRecipeSettings, write_probe_recipe
from eaglelab.engines.recipes import Recipe, RecipeSettings, build_recipe
from eaglelab.errors import ParameterError
from eaglelab.inputs import printable
from eaglelab.serving.cost_table import MAX_CONCURRENCY, MAX_WHOLE
from eaglelab.settings import check_ranges, default_of, field_help, flag_name, option

#: Each job's settings and the engines it runs on.
JOBS: dict[str, tuple[type, tuple[str, ...]]] = {
    "warm-start": (RecipeSettings, ("specforge", "speculators")),
    "probe": (ProbeRecipeSettings, ("specforge", "speculators")),
    "load": (LoadRecipeSettings, ("sglang", "vllm")),
}
#: The fields of the command, not of a job's settings.
COMMAND_FIELDS = ("job", "out", "force", "from_run")


@dataclass(frozen=True)
class RecipeJobSettings:
    """What ``eaglelab recipe`` writes; a job's setting left as None takes that job's default.

    Attributes:
        engine: specforge / speculators (warm start, probe); sglang / vllm (load).
        old_drafter: the old drafter (folder or hub id).
        new_target: the new target (folder, config.json or hub id).
        out: folder for run.sh, its config files and recipe.json.
        job: what the script does: the warm start, the dump-and-probe, or load: the serving engine's cost table
            (plain steps and cycles at forced τ per concurrency) for `eaglelab perf --costs`.
        old_target: --job probe: the old target (the drafter was trained on it).
        force: replace a recipe in ``out`` (only what eaglelab wrote there).
        data: prompts / conversations on the cluster (warm start: regenerated; probe: run through both targets).
        workdir: work folder on the cluster.
        gpus: GPUs of the node.
        from_run: a workbook fine-tune folder (notebook 04's warm run): epochs and TTT length.
        learning_rate: learning rate (default: the engine's).
        epochs: epochs over the regenerated data (default: ``from_run``, else the engine's).
        ttt_length: training-time-test unroll (default: ``from_run``, else the engine's).
        k: draft tokens per cycle when serving.
        max_length: tokens per training sequence or conversation.
        chat_template: SpecForge's chat-template name for the target (default: picked from the target).
        embedding_key: the target's embedding tensor as SpecForge reads it (default: read from the target's
            headers, e.g. language_model.model.embed_tokens.weight).
        lm_head_key: the target's head tensor (default: read from its headers).
        concurrency: load: concurrencies to measure.
        accept_lens: load: the τ values to force (None: 1 2 3, those up to k + 1).
        topk: load: the drafter's branching (1: a chain).
        draft_tokens: load: tokens verified per request (a tree; None: k + 1).
        prompt_tokens: load: prompt tokens per request.
        output_tokens: load: tokens generated per request.
        repeats: load: timed runs per concurrency.
    """

    engine: str = option(choices=("specforge", "speculators", "sglang", "vllm"))
    old_drafter: str
    new_target: str
    out: str
    job: str = option("warm-start", choices=tuple(JOBS))
    old_target: str | None = None
    force: bool = False
    data: str | None = None
    workdir: str | None = None
    gpus: int | None = option(None, min=1, max=MAX_GPUS)
    from_run: str | None = None
    learning_rate: float | None = option(None, above=0, flag="lr")
    epochs: int | None = option(None, min=1)
    ttt_length: int | None = option(None, min=1)
    k: int | None = option(None, min=1, max=64)
    max_length: int | None = option(None, min=1, max=MAX_WHOLE)
    chat_template: str | None = None
    embedding_key: str | None = None
    lm_head_key: str | None = None
    concurrency: tuple[int, ...] | None = option(None, min=1, max=MAX_CONCURRENCY)
    accept_lens: tuple[float, ...] | None = option(None, min=1)
    topk: int | None = option(None, min=1, max=64)
    draft_tokens: int | None = option(None, min=1, max=64 * 64 + 1)
    prompt_tokens: int | None = option(None, min=1, max=MAX_WHOLE)
    output_tokens: int | None = option(None, min=1, max=MAX_WHOLE)
    repeats: int | None = option(None, min=1, max=MAX_REPEATS)

    def __post_init__(self):
        check_ranges(self)  # each field's declared range (the load recipe's match what the cost table reads)

    def job_settings(self) -> RecipeSettings | ProbeRecipeSettings | LoadRecipeSettings:
        """The job's own settings: the values given, the job's defaults for the rest.

        Raises:
            ParameterError: an engine the job does not run on, the old target outside ``--job probe`` or missing
                from it, or a setting of another job.
        """
        cls, engines = JOBS[self.job]
        if self.engine not in engines:
            raise ParameterError("--engine", f"--job load measures a serving engine: sglang or vllm, got {self.engine}"
                                 if self.job == "load" else
                                 f"{self.engine} serves; --job {self.job} runs with specforge or speculators")
        if self.job == "probe" and self.old_target is None:
            raise ParameterError("--old-target", "--job probe dumps the old target too: give it (folder or hub id)")
        if self.job != "probe" and self.old_target is not None:
            raise ParameterError("--old-target", "is the probe's old target: give it with --job probe")
        own = {f.name for f in fields(cls)}
        by_name = {f.name: f for f in fields(self)}
        for name, f in by_name.items():
            value = getattr(self, name)
            if name in COMMAND_FIELDS or name in own or value is None:
                continue
            raise ParameterError(f"--{flag_name(f)}", f"is not a setting of --job {self.job}")
        if self.from_run is not None and self.job != "warm-start":
            raise ParameterError("--from-run", f"is a warm-start setting; --job {self.job} trains nothing")
        given = {name: getattr(self, name) for name in own if name in by_name and getattr(self, name) is not None}
        return cls(**given)


def job_defaults_help() -> dict[str, str]:
    """Each recipe flag's help with the defaults its jobs give it (the defaults live in the jobs' settings)."""
    docs = field_help(RecipeJobSettings)
    out = {}
    for name in docs:
        given = []
        for job, (cls, _) in JOBS.items():
            f = next((f for f in fields(cls) if f.name == name), None)
            if f is not None and (value := default_of(f)) not in (MISSING, None, ()):
                given.append((job, " ".join(map(str, value)) if isinstance(value, tuple) else str(value)))
        if given and name not in COMMAND_FIELDS:
            same = len({v for _, v in given}) == 1
            out[name] = docs[name].rstrip(".") + (f" (default: {given[0][1]})" if same else
                                                  " (default: " + ", ".join(f"{v} for {j}" for j, v in given) + ")")
    return out


@dataclass
class RecipeReport:
    """The script written: its job, its recipe (steps, files, where each setting came from) and its folder."""

    settings: RecipeJobSettings
    recipe: Recipe | ProbeRecipe | LoadRecipe
    out: Path

    def to_json(self) -> dict[str, Any]:
        return self.recipe.to_json()

    def lines(self) -> list[str]:
        r, out = self.recipe, printable(str(self.out))  # the folder as typed: a terminal shows it, never acts on it
        engine = self.settings.engine
        if isinstance(r, LoadRecipe):
            return [f"wrote {out}/run.sh ({len(r.steps)} steps, {engine}): plain decoding and the cycle at forced τ per "
                    "concurrency into costs.csv, then `eaglelab perf --costs`"]
        if isinstance(r, ProbeRecipe):
            return [f"wrote {out}/run.sh ({len(r.steps)} steps, {engine}): dumps of both targets at layer outputs "
                    f"{r.vocab_map['aux_layer_outputs']}, then `eaglelab probe --old-states --new-states`",
                    *(f"  {key}: {printable(str(value))}" for key, value in r.provenance.items())]
        vocab = ("  vocabulary: the whole target vocabulary (no map to keep)" if r.vocab_map["full_vocab"] else
                 f"  vocabulary map kept: {r.vocab_map['draft_slots']} draft slots of {r.vocab_map['target_vocab']}")
        return [f"wrote {out}/run.sh ({len(r.steps)} steps, {engine}) " + " ".join(f"{out}/{name}" for name in r.files),
                *(f"  {key}: {printable(str(value))}" for key, value in r.provenance.items()), vocab]


def write_recipe(settings: RecipeJobSettings) -> RecipeReport:
    """Build the job's script from its settings and write it into ``settings.out`` (atomically).

    Raises:
        ParameterError: see :meth:`RecipeJobSettings.job_settings`; the recipes' own checks of the checkpoints.
        OverwriteError: ``out`` holds a recipe and ``force`` was not given.
    """
    s = settings
    job = s.job_settings()
    if isinstance(job, LoadRecipeSettings):
        return RecipeReport(s, write_load_recipe(job, s.out, overwrite=s.force), Path(s.out))
    if isinstance(job, ProbeRecipeSettings):
        return RecipeReport(s, write_probe_recipe(job, s.out, overwrite=s.force), Path(s.out))
    recipe = build_recipe(job, from_run=s.from_run)
    return RecipeReport(s, recipe, recipe.write(s.out, overwrite=s.force))
