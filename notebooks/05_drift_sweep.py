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
# # 05 · The drift sweep: how τ falls as the target moves, and the plug-in τ predicted before running it
#
# **Question.** When the target moves (a fine-tune, a quantized release, continued training), how
# much of the old drafter's acceptance survives, and can that be predicted from what serving
# engines already return, without capturing hidden states or running the drafter on the new target?
#
# **Inputs.** Target A, the target B it moved to and the drafter trained on A (default: the demo
# world's). From them, three controlled drift families, each at four or five magnitudes plus A
# itself: the weight path `A + α (B - A)`, A quantized (int8 per channel to int2 in groups of 32),
# and A continued-trained with a LoRA on another domain than B's. A second, different pair (the tiny
# world's own A → B with its own drafter) tests the predictors on another model.
#
# **Outputs.** The table of points (measures, teacher-forced and measured τ), figures `05_*`, the
# predictors' held-out errors and the chosen one, its calibration `05_predictor.json` (what `eaglelab
# predict --calibration` reads), and the same prediction made from engine-layout JSONL files.
# Numbers are tagged [demo] on the offline world (an illustration of the method) and [your
# checkpoints] on yours.

# %% tags=["parameters"]
SMOKE = False
FIGURES_DIR = "../figures"
WORLD = "demo"  # the offline world: "demo" (SmolLM2-135M pair) or "tiny"; smoke runs use "tiny"
WORLD_DIR = None  # None: data/worlds/<WORLD> (built on first use)
OLD_TARGET = None  # None: the world's target A (the old target)
NEW_TARGET = None  # None: the world's target B (it defines the path family A + α (B - A))
OLD_DRAFTER = None  # None: the world's drafter-a (trained on A)
PAIR_WORLD = "tiny"  # another world whose own A → B pair tests the predictors on a different model; None: skip
CACHE_DIR = None  # None: data/worlds/cache/drift (each point's record, reused by reruns)
RUNS_DIR = "../data/runs/05"  # the engine-layout JSONL files of section 4
DATA = None  # None: the world's held-out conversations (when A is the world's target), else built-in text; or your .txt / .jsonl (as 03)
SEQUENCES = 16  # held-out sequences teacher forced at every point (the first 16 of the 24 notebook 03 probes)
K = 3  # drafts per cycle
MEASURE_PROMPTS = 4  # real speculative decoding at the measured points
MEASURE_TOKENS = 48
TOP_K = 20  # logprobs per position in the engine-layout files (vLLM's default --max-logprobs)
TOLERANCE = 0.10  # the goal: held-out τ error and teacher-forced vs measured gap within 10%
# the user's serving scenario, for the projected throughput
CYCLE_MS = 30.0
BASELINE_TPS = 82.0

# %%
from pathlib import Path

from IPython.display import Markdown, display

from eaglelab.drift import analysis
from eaglelab.drift.sweep import (
    DEMO_MEASURED,
    DEMO_POINTS,
    SMOKE_MEASURED,
    SMOKE_POINTS,
    SweepSettings,
    run_sweep,
    sweep_data,
)
from eaglelab.workbook import plots
from eaglelab.workbook.opening import open_case
from eaglelab.workbook.report import bullets_from_markdown, findings_markdown
from eaglelab.workbook.runner import scratch_dir
from eaglelab.worlds.build import build_world

# the settings from the parameters (a bad one is one line, before any world), then whose case: nothing given, the
# offline world's three checkpoints; else yours, all three, and none filled in from the world
case = open_case("05", globals(), SweepSettings)  # a smoke run sweeps the settings' smoke sizes
OLD_TARGET, NEW_TARGET, OLD_DRAFTER = case.values.values()
settings, EVIDENCE, TAG = case.settings, case.evidence, case.tag  # demo: an illustration, not your forecast
points, measured = (SMOKE_POINTS, SMOKE_MEASURED) if SMOKE else (DEMO_POINTS, DEMO_MEASURED)
pair_world = build_world(PAIR_WORLD) if PAIR_WORLD and not SMOKE else None  # a smoke run sweeps one pair
CACHE_DIR = scratch_dir(CACHE_DIR, FIGURES_DIR, SMOKE, "05")  # a smoke run keeps its records beside its figures

# %% [markdown]
# ## 1 · The sweep: every point built from A, measured against A, with the old drafter on it
# Per point: cosine, relative L2 and CKA at the drafter's aux layers and the last layer; top-1
# agreement, total variation and KL of the next-token distributions; the old drafter teacher forced
# on B' (τ, per-draft accuracy); real speculative decoding at the measured points. Records are
# cached: a rerun recomputes only new points.

# %%
sweep = run_sweep(OLD_TARGET, NEW_TARGET, OLD_DRAFTER, points, measured, settings, CACHE_DIR,
                  pair=(pair_world.target_a, pair_world.target_b, pair_world.drafter_a) if pair_world else None)
drift = analysis.analyse(sweep.records, sweep.pair, TOLERANCE)
print(f"A {OLD_TARGET}\nB {NEW_TARGET}\ndrafter {OLD_DRAFTER}\n{len(points)} points, {len(measured)} measured by decoding; "
      f"second pair: {pair_world.root if pair_world else 'none'}\n{sweep.computed} points computed, the rest from the "
      f"cache; {sweep.seconds:.0f} s\nteacher forced on: {sweep.records[0].data if sweep.records else 'no point'}")
display(drift.table().round(3))

# %% [markdown]
# ## 2 · How τ falls as the target moves
# τ on every drifted target against each measure, all families on one axes per measure, with the
# law fitted on all of them: `τ' = 1 + Σ_i c_i s^(i+1)`, where `c_i` are the drafter's chain rates on A
# and `s` the per-token survival read from the measure (`x^γ`, or `exp(-γ KL)`).

# %%
tau_a = sweep.on_a.accept_len
fig = plots.plot_tau_vs_measures([{"family": r.family, "tau": r.on_b.accept_len, **r.measures} for r in sweep.records],
                                 analysis.MEASURE_PANELS, analysis.laws(sweep.records), tau_a)
plots.savefig(fig, "05_tau_vs_measures", FIGURES_DIR, {"a": str(OLD_TARGET), "b": str(NEW_TARGET), "drafter": str(OLD_DRAFTER)});
fig = plots.plot_position_vs_magnitude(analysis.magnitude_series(sweep.records))
plots.savefig(fig, "05_position_vs_magnitude", FIGURES_DIR, {"k": settings.k});

# %% [markdown]
# ## 3 · Predictors, chosen by held-out error
# Each predictor reads only A-vs-B' measures and the drafter's behaviour on A. Those with an
# exponent γ fit it on all families but one and are tested on the one left out, every family in
# turn; the other pair is tested with γ fitted on the whole sweep. Each worst held-out error gets a
# bootstrap band (the probed sequences resampled: the chain on A and the τ on B' move as another draw
# of conversations would move them), and the predictors are ranked by the band's upper end: a
# predictor that wins only on these sequences does not win.

# %%
choice = drift.choice
display(drift.predictors_table().round(3))
calibration = analysis.save_calibration(Path(FIGURES_DIR) / "05_predictor.json", choice,
                                        f"notebook 05 on {OLD_TARGET} -> {NEW_TARGET} ({EVIDENCE})")
fig = plots.plot_predicted_vs_measured(drift.rows, TOLERANCE)
plots.savefig(fig, "05_predicted_vs_measured", FIGURES_DIR, {"predictor": choice.chosen});
print(f"chosen: {choice.chosen}; engine-computable: {choice.chosen_engine}; calibration -> {calibration}")

# %% [markdown]
# ## 4 · The serving-engine path: the same prediction from engine files
# At Kimi scale nobody captures hidden states. The two targets' top-k prompt logprobs on the same
# teacher-forced text, as vLLM (`prompt_logprobs`) and SGLang (`return_logprob`) return them, plus
# the drafter's acceptance on the old target (its server log, or here its chain rates on A), are
# enough for the engine-computable predictor. Here the demo's A and B write those files and
# `eaglelab predict` reads them.

# %%
from eaglelab.drift.measures import write_engine_file
from eaglelab.jobs.predict import PredictSettings, predict_plugin_tau
from eaglelab.model.targets import load_target

files_dir = Path(scratch_dir(RUNS_DIR, FIGURES_DIR, SMOKE, "05"))
data = sweep_data(load_target(OLD_TARGET)[1], settings, OLD_TARGET)  # the sweep's own held-out set
old_file = write_engine_file(OLD_TARGET, data.ids, data.counted, files_dir / "old_target.vllm.jsonl", "vllm", TOP_K)
new_file = write_engine_file(NEW_TARGET, data.ids, data.counted, files_dir / "new_target.sglang.jsonl", "sglang", TOP_K)
chain_a = sweep.on_a.chain
predicted = predict_plugin_tau(PredictSettings(str(old_file), str(new_file), chain=tuple(chain_a), cycle_ms=CYCLE_MS,
                                               baseline_tps=BASELINE_TPS, calibration=str(calibration)))
print(f"eaglelab predict --old-logprobs {old_file} --new-logprobs {new_file} --chain {','.join(map(str, chain_a))} "
      f"--calibration {calibration} --cycle-ms {CYCLE_MS:g} --baseline-tps {BASELINE_TPS:g}")
print("\n".join(predicted.lines()))  # what that command prints: the same job, run once
display(Markdown(predicted.findings(TAG)["predicted"]))

# %% [markdown]
# ## Findings

# %%
said = {**drift.findings(TAG), **drift.files_findings(predicted.prediction, sweep.at("path", 1.0), TAG, calibration.name),
        "data": f"**Data {TAG}:** every point teacher forced on {data.source.description}: notebook 03's probe set for "
                f"these inputs, its first {settings.sequences} sequences, so 03's τ on B and this sweep's at α = 1 differ "
                "only by the sequences 03 adds."}
findings = "".join(f"- {said[name]}\n" for name in ("data", "law", "families", "predictors", "decoding", "files"))
display(Markdown(findings_markdown(findings)))
case.save({"evidence": EVIDENCE, "k": settings.k, **drift.to_json(), "engine_prediction": predicted.to_json(),
           "sweep_seconds": sweep.seconds}, bullets_from_markdown(findings), FIGURES_DIR,
          data_line=data.source.description, data_kind=data.source.kind);
