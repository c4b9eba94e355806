# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · A small fine-tune: warm start from the old drafter vs training from scratch
#
# **Question.** On the new target's data and at the same budget, does a drafter initialised from
# the old target's drafter beat one trained from scratch, and by how much? How much new-target
# data does the warm start save?
#
# **Inputs.** The new target (B), the old drafter (trained on A), data from the new target: a text /
# JSONL file (`DATA`), else the world's own replies of B (demo world), else built-in offline text.
# Every section runs a job of `eaglelab.jobs.finetune` on one `FinetuneSettings` built from the
# parameters below (`eaglelab finetune` takes the same settings, with the same defaults).
#
# **Outputs.** Learning curves, measured τ and tok/s of both drafters on B, a data-scaling sweep
# (held-out τ at log-spaced budgets and seeds, a fitted saturating law per start with its bootstrap
# band, the data each start needs for a τ and their ratio), the chosen drafter exported for SGLang
# and vLLM, warm-start recipes for SpecForge and speculators (`RUNS_DIR/recipes`), figures `04_*`,
# and the game plan (`GAME_PLAN.md` beside the figures). Numbers are tagged [demo] on the offline
# world (an illustration of the method) and [your checkpoints] on yours.

# %% tags=["parameters"]
SMOKE = False
FIGURES_DIR = "../figures"
WORLD = "demo"  # the offline world: "demo" (SmolLM2-135M pair) or "tiny"; smoke runs use "tiny"
WORLD_DIR = None  # None: data/worlds/<WORLD> (built on first use)
NEW_TARGET = None  # None: the world's target B (the new target)
OLD_DRAFTER = None  # None: the world's drafter-a (trained on the old target)
DATA = None  # None: the world's replies of B (demo) or built-in text; else a .txt / .jsonl file
SEQ_LEN = 64
TRAIN_SEQUENCES = 128
EVAL_SEQUENCES = 32
STEPS = 60
BATCH_SIZE = 4
LR = 2e-3
TTT_LENGTH = 3  # training-time-test unroll
K = 3  # drafts per cycle: held-out τ, plug-in τ, measured τ
LOSS_CONVENTION = "specforge"  # whose TTT loss, mask alignment and accuracy: "specforge" or "speculators"
BUDGETS = [4, 8, 16, 32, 64]  # training sequences per sweep point, log-spaced up to the data there is
SEEDS = [0]  # one sweep run per seed and budget: [0, 1] doubles the sweep (+4 min), the ratio's band 64x -> 27x
SWEEP_STEPS = 40  # the least steps of a sweep run (fewer leave scratch too weak for the fit's band)
SWEEP_EPOCHS = 6  # larger budgets train this many epochs, so they are not cut short
MEASURE_PROMPTS = 4
MEASURE_TOKENS = 48
RUNS_DIR = "../data/runs/04"  # training runs and the exports (export/sglang, export/vllm)
DEVICE = None  # None: cuda when available
DTYPE = "float32"
# your serving scenario (as in notebook 01), used only when this notebook runs on your checkpoints
BASELINE_TPS = 82.0
CYCLE_MS = 30.0
GOAL_TPS = 150.0
# the hand-over: warm-start recipes for the training engines at scale
RECIPE_DATA = "prompts.jsonl"  # your prompts / conversations on the cluster, regenerated with the new target
RECIPE_GPUS = 8
SERVING_ENGINE = "vllm"  # measure the drafters in vLLM too when its environment exists (`make engine`); None: skip

# %%
from pathlib import Path

from IPython.display import Markdown, display

from eaglelab.decisions import Option
from eaglelab.jobs.engine import engine_beside_workbook
from eaglelab.jobs.finetune import (
    FinetuneSettings,
    ScalingSettings,
    data_scaling,
    export_for_serving,
    hand_over,
    load_inputs,
    measure_starts,
    warm_vs_scratch,
)
from eaglelab.planning import provenance as pv
from eaglelab.recommendation import recommend
from eaglelab.serving import perf
from eaglelab.settings import from_parameters
from eaglelab.workbook import figures, plots
from eaglelab.workbook.answers import finetune_answer
from eaglelab.workbook.opening import open_case
from eaglelab.workbook.report import findings_markdown, write_game_plan
from eaglelab.workbook.runner import scratch_dir

# the settings from the parameters (a bad one is one line), then whose case: nothing given, the world's, else yours
case = open_case("04", globals(), FinetuneSettings)  # a smoke run trains the settings' smoke sizes
NEW_TARGET, OLD_DRAFTER, DATA = case.values.values()  # a pick made below survives Run All
settings, sweep = case.settings, from_parameters(ScalingSettings, globals(), SMOKE)
RUNS_DIR = str(Path(scratch_dir(RUNS_DIR, FIGURES_DIR, SMOKE, "04")).resolve())  # absolute: the game plan links into it

# %% [markdown]
# ## Pick the checkpoints
# Each picker lists what was found under the world folder and takes any folder, file or hub id you
# type (data: a .txt / .jsonl file, or empty for the world's own); the line under it says what it is,
# or what is wrong (an old drafter that does not fit the new target is refused here). **Fine-tune**
# answers here: held-out τ of the old drafter as is, warm-started and from scratch after `STEPS`
# steps each, with progress. The sections below take the choice once the set-up cell above runs again
# (Run All keeps the pick), and until then refuse to run on the old checkpoints.

# %%
case.panel(lambda values: finetune_answer(settings, values, str(case.world.root)), button="Fine-tune")

# %% [markdown]
# ## 1 · The new target, the old drafter, and the new target's data, captured once

# %%
EVIDENCE, TAG = case.evidence, case.tag  # demo: an illustration, not your forecast
inputs = load_inputs(settings)
print(f"{inputs.source}; aux layers {list(inputs.data.aux_layer_outputs)}")

# %% [markdown]
# ## 2 · Warm start vs scratch at equal budget
# Same data, steps, optimiser, schedule and architecture (the old drafter's draft-vocabulary
# size); the warm start keeps the old drafter's d2t / t2d, scratch builds its own from the data.

# %%
finetuned = warm_vs_scratch(settings, inputs, RUNS_DIR)
display(finetuned.table())
for key, label in (("loss", f"training loss ({LOSS_CONVENTION} convention)"), ("eval_accept_len", "held-out simulated τ")):
    fig = figures.learning_curve_figure(finetuned, key, label)
    plots.savefig(fig, f"04_curve_{key}", FIGURES_DIR, {"steps": settings.steps, "train_sequences": len(inputs.data.train)})

# %% [markdown]
# ## 3 · Measured on the new target: real speculative decoding

# %%
measured = measure_starts(settings, inputs, finetuned)
display(measured.table())

# %% [markdown]
# ### Measured in vLLM: the same drafters and prompt token ids in the engine you serve with
# Each drafter folder exported as vLLM reads it and run by vLLM itself on the new target (greedy,
# eagle3, k drafts, one prompt at a time), in its own environment (`make engine`); skipped, with the
# reason, where that environment is absent.

# %%
folders = {Option.PLUG_IN: OLD_DRAFTER, **{n: r.final_dir for n, r in finetuned.runs.items()}}
eos = [inputs.tokenizer.eos_token_id] if inputs.tokenizer.eos_token_id is not None else None
engine = engine_beside_workbook({n: (NEW_TARGET, f) for n, f in folders.items()}, inputs.prompts(settings.measure_prompts),
                                settings.measure_tokens, settings.k, measured, engine=SERVING_ENGINE, stop_token_ids=eos)
display(engine.table()) if engine.ran else print(f"vLLM section skipped: {engine.status}")

# %% [markdown]
# ## 4 · How much new-target data does the warm start save? A data-scaling law
# Held-out τ at log-spaced budgets, every seed a point; the old drafter as is sits at 0. The law
# (`eaglelab.planning.scaling`): for each start the per-position miss rate falls as a power of the
# data, 1 − α = c N^−b, fitted on the budgets > 0, with a bootstrap band. The law saturates at
# τ = k + 1, so the samples it says a τ needs are lower bounds. The old drafter as is is the level a
# fine-tune has to beat: on a handful of samples the warm start can fall below it.

# %%
scaling = data_scaling(settings, inputs, sweep)
display(scaling.points_table().round(3))
display(scaling.equal_table())
lines = {}
if EVIDENCE == pv.YOURS:  # your scenario's needs, only against your own curves
    lines = {"break-even τ": float(perf.break_even_tau(CYCLE_MS / 1e3, BASELINE_TPS)),
             f"τ for {GOAL_TPS:g} tok/s": float(perf.required_accept_len(GOAL_TPS, CYCLE_MS / 1e3))}
fig = figures.scaling_figure(scaling, lines, TAG)
plots.savefig(fig, "04_scaling", FIGURES_DIR, {"budgets": sweep.budgets, "seeds": sweep.seeds,
                                               "min_steps": sweep.sweep_steps, "epochs": sweep.sweep_epochs,
                                               "fit": scaling.fit.to_json()})

# %% [markdown]
# ## 5 · Export the recommended drafter for SGLang and vLLM
# The recommendation is the cheapest option unless a dearer one's measured gain is clear of zero, by the
# band of the difference over the prompts (`eaglelab.recommendation.recommend`: "too close to call" where the band
# straddles zero); the drafter exported is that option's: the old drafter itself
# when plugging in wins, so the recommendation, the export and the game plan name one drafter.

# %%
decision = recommend({option: m.accept_len for option, m in measured.items()}, held_out=finetuned.taus,
                     counts={option: m.prompt_counts for option, m in measured.items()},
                     per_sequence=finetuned.per_sequence)
best = decision.action
chosen_drafter = inputs.old if best == Option.PLUG_IN else finetuned.runs[best].drafter
sglang_dir, vllm_dir = export_for_serving(settings, inputs, chosen_drafter, Path(RUNS_DIR) / "export")
print(f"{decision.text}\nexported: {best}\nSGLang: {sglang_dir}\nvLLM:   {vllm_dir}")

# %% [markdown]
# ## 6 · Hand-over: the warm start at scale, in SpecForge and speculators
# A runnable, commented script per engine (`eaglelab recipe`): regenerate the responses with the
# new target, capture its hidden states at the old drafter's layers, train from the old drafter
# with its own vocabulary map (never a regenerated one), export, check with `eaglelab compare`
# that the map survived, and serve. Epochs and TTT length come from the warm run above.

# %%
handed = hand_over(settings, Path(RUNS_DIR) / "warm", Path(RUNS_DIR) / "recipes", data=RECIPE_DATA, gpus=RECIPE_GPUS)
display(handed.table())
print("\n".join(f"{engine}: {script} ({len(handed.recipes[engine].steps)} steps)" for engine, script in handed.scripts.items()))

# %% [markdown]
# ## Findings

# %%
goal = (lines[f"τ for {GOAL_TPS:g} tok/s"], f"your goal's, {GOAL_TPS:g} tok/s") if EVIDENCE == pv.YOURS else None
said = {**finetuned.findings(TAG), **scaling.findings(TAG, goal), **handed.findings(TAG, decision.action),
        **measured.findings(TAG, next(inputs.model.parameters()).device.type, on="the new target"),
        **measured.projection_findings(CYCLE_MS, BASELINE_TPS, EVIDENCE == pv.YOURS),
        "engine": f"**Measured in vLLM {TAG}:** {engine.findings()}",
        "exported": f"**Exported {TAG}** the recommended option's drafter, `{best}`"
                    f"{' (the old drafter as it is)' if best == Option.PLUG_IN else ''}, for SGLang (`{sglang_dir}`) and "
                    f"vLLM (`{vllm_dir}`)."}
bullets = [f"- {said[name]}" for name in ("compared", "equal_budget", "measured", "engine", "scaling", "plugin",
                                          "projected", "exported", "hand_over")]
display(Markdown(findings_markdown(bullets, f"**Recommendation {TAG}.** {decision.text}")))
case.not_done += [] if case.demo or engine.ran else [f"no measurement in vLLM ({engine.status})"]
case.save({"measured": measured.to_json(), "engine": engine.rows, "scaling": scaling.to_json(),
           "equal_tau": scaling.fit.equal_tau(scaling.levels), "data": str(inputs.source), "chosen": best,
           "recommendation": decision.to_json(), "k": settings.k, "evidence": EVIDENCE, "smoke": SMOKE,
           "recipes": {engine: str(script) for engine, script in handed.scripts.items()}},
          bullets, FIGURES_DIR, data_line=str(inputs.source), data_kind=inputs.source.kind)
print("game plan:", write_game_plan(FIGURES_DIR))
