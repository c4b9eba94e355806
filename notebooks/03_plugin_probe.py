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
# # 03 · The direct plug-in probe: how far did the target move, does the old drafter still work?
#
# **Question.** Before fine-tuning the old target's drafter for the new target, plug it in and
# measure: (a) how similar are the two targets' hidden states at the layers the drafter reads,
# and (b) what acceptance does the old drafter get on the new target?
#
# **Inputs.** Target A (old), target B (new), the drafter trained on A, and the token sequences
# both targets see, from the data layer (`eaglelab.data.sets.probe_set`, the same as `eaglelab
# probe`): your file (`DATA`), else the world's held-out conversations with A's own replies (demo
# world), else held-out stdlib docstrings and code. Every section runs one job of
# `eaglelab.jobs.probe` on one `ProbeSettings` built from the parameters below (the command line's
# `eaglelab probe` takes the same settings, with the same defaults). **For targets too large for one
# process** (two 1T-parameter MoE models on 8 GPUs each): set `OLD_STATES` / `NEW_STATES` to the folders
# of hidden-state dumps the serving engines wrote on the same conversations (SpecForge's
# `prepare_hidden_states.py` on SGLang, or vLLM's hidden-state connector; `eaglelab recipe --job
# probe` writes the script). Neither target is then loaded: only their final norm, `lm_head` and
# embedding are read by name (section 4 shows, on the world, that this path gives the live numbers).
#
# **Outputs.** Similarity table, figures `03_*` in `FIGURES_DIR`, measured speculative decoding of
# the old drafter on both targets (live only), and a verdict with its bootstrap band: plug in, warm
# start, or from scratch, or the two a band straddles.

# %% tags=["parameters"]
SMOKE = False
FIGURES_DIR = "../figures"
WORLD = "demo"  # the offline world: "demo" (SmolLM2-135M pair) or "tiny"; smoke runs use "tiny"
WORLD_DIR = None  # None: data/worlds/<WORLD> (built on first use)
OLD_TARGET = None  # None: the world's target A
NEW_TARGET = None  # None: the world's target B
OLD_DRAFTER = None  # None: the world's drafter-a (trained on A)
DATA = None  # None: the world's held-out conversations (when A is the world's target), else built-in text; or a .txt / .jsonl file
SEQUENCES = 24  # demo world: held-out conversations (whole); tiny world: text rows of SEQ_LEN tokens
SEQ_LEN = 64
K = 3  # drafts per cycle, for the teacher-forced and the measured τ
MEASURE_PROMPTS = 4
MEASURE_TOKENS = 48
DEVICE = None  # None: cuda when available
DEVICE_MAP = None  # "auto": spread each target over all GPUs (large targets; needs accelerate)
DTYPE = "float32"  # bfloat16 for large targets on GPUs
BATCH_SIZE = 8  # sequences per forward: the probe's memory is bounded by the batch
OLD_STATES = None  # a folder of target A's hidden-state dumps (SpecForge or vLLM layout): probe without loading the targets
NEW_STATES = None  # target B's, on the same conversations
# the user's serving scenario, for the projected throughput
BASELINE_TPS = 82.0
CYCLE_MS = 30.0
SERVING_ENGINE = "vllm"  # measure the drafter in vLLM too when its environment exists (`make engine`); None: skip

# %%
from IPython.display import Markdown, display

from eaglelab.jobs.engine import engine_beside_workbook
from eaglelab.jobs.probe import ProbeSettings, load_pair, probe_checkpoints
from eaglelab.planning import provenance as pv
from eaglelab.probe.plugin import layerwise_cka
from eaglelab.workbook import plots
from eaglelab.workbook.answers import probe_answer
from eaglelab.workbook.opening import open_case
from eaglelab.workbook.report import bullets_from_markdown, findings_markdown, plan_uses_plugin_tau

# the settings from the parameters (a bad one is one line), then whose case: nothing given, the world's, else yours
case = open_case("03", globals(), ProbeSettings)  # a smoke run probes the settings' smoke sizes
OLD_TARGET, NEW_TARGET, OLD_DRAFTER, DATA = case.values.values()  # a pick made below survives Run All
settings = case.settings
FROM_DUMPS = settings.from_dumps  # the engines' dumps: no target is loaded, nothing is decoded for real

# %% [markdown]
# ## Pick the checkpoints
# Each picker lists what was found under the world folder (not built when `OLD_TARGET`, `NEW_TARGET` and
# `OLD_DRAFTER` are all given) and takes any folder, file or hub id you type (a path is looked for from here
# and from the repository root); the line under it says what
# it is, or what is wrong (a drafter that does not fit target A is refused here, from configs and
# headers). **Probe** loads the two targets and answers here: the verdict, τ on A and on B, and the
# similarity per layer, with one progress bar. The sections below take the choice once the set-up cell
# above runs again (Run All keeps the pick), and until then refuse to run on the old checkpoints; a
# headless run needs no clicks.

# %%
case.panel(lambda values: probe_answer(settings, values, str(case.world.root)), button="Probe")

# %% [markdown]
# ## The targets, the drafter and the data

# %%
EVIDENCE, TAG = case.evidence, case.tag  # demo: an illustration, not your forecast
print(f"computing on {TAG}: A {settings.old_target} · B {settings.new_target} · drafter {settings.old_drafter}")
pair = None if FROM_DUMPS else load_pair(settings)
if pair is not None:
    print(f"{pair.data.source}; {len(pair.data.ids)} sequences x {pair.data.ids.shape[1]} tokens, {pair.data.positions} "
          f"positions counted; drafter reads layer outputs {list(pair.drafter.spec.aux_layer_ids)}")
else:
    print(f"from the engines' dumps: A {OLD_STATES}, B {NEW_STATES}; the targets are read for their heads only")

# %% [markdown]
# ## 1 · Paired capture and similarity at the drafter's layers
# Cosine and relative L2 per token, norm ratio, and linear CKA (unbiased HSIC, accumulated over
# minibatches), plus how often the two targets' next-token argmax agree; then the teacher-forced
# acceptance of the drafter on both, and real speculative decoding on both (section 3).

# %%
probe = probe_checkpoints(settings, pair)
result = probe.result
display(probe.table().round(4))
print(f"next-token argmax agreement A vs B: {result.argmax_agreement:.3f}, total variation {result.tv:.3f}, over "
      f"{result.tokens} tokens")

# %%
fig = plots.plot_cosine_distributions(result.cosines)
plots.savefig(fig, "03_cosine_per_layer", FIGURES_DIR, {"a": OLD_TARGET, "b": NEW_TARGET, "tokens": result.tokens})
if pair is not None:  # every layer of both targets: only where they load (the dumps hold the drafter's layers)
    cka_all = layerwise_cka(pair.model_a, pair.model_b, pair.data.ids, loss_mask=pair.data.counted)
    names = ["emb"] + [str(i) for i in range(cka_all.shape[0] - 1)]
    fig = plots.plot_cka_map(cka_all.numpy(), names, names)
    plots.savefig(fig, "03_cka_map", FIGURES_DIR, {"a": OLD_TARGET, "b": NEW_TARGET})

# %% [markdown]
# ## 2 · Plug-in acceptance: the old drafter on the new target
# Teacher-forced per-position accuracy and simulated τ (bonus included) on A's states and on B's;
# the chain rate (drafts 1..i all right) with its bootstrap band over sequences, which is what the
# verdict's band is made of: a verdict whose band straddles its threshold names both options.

# %%
chain = probe.chain_table()
fig = plots.plot_position_acceptance({"drafter A on target A": list(chain["accuracy on A"]),
                                      "drafter A on target B (plug-in)": list(chain["accuracy on B"])})
plots.savefig(fig, "03_position_acceptance", FIGURES_DIR, {"drafter": OLD_DRAFTER, "k": K})
display(chain.round(3))
print(f"verdict: {result.decision.label}; gain kept {result.decision.kept_text()} "
      "(resampling the probed sequences)")

# %% [markdown]
# ## 3 · Measured: real speculative decoding with the old drafter on both targets

# %%
measured = probe.measured  # None from dumps: decoding needs the targets
if measured:
    display(measured.table())
else:
    print("from dumps: nothing decoded for real (the teacher-forced τ above is the evidence; measure in the engine)")

# %% [markdown]
# ### Measured in vLLM: the engine you serve with, on the same prompt token ids
# The drafter exported as vLLM reads it (speculators layout, the target's embedding shared), run by
# vLLM itself (greedy, eagle3, k drafts, one prompt at a time) in its own environment (`make engine`);
# skipped, with the reason, where that environment is absent. τ should agree with the workbook's own
# decoder within a few percent; vLLM's per-position rate is unconditional (all drafts up to i accepted),
# the workbook's conditional (draft i accepted given the ones before): both are shown, named.

# %%
engine = None
if pair is not None:
    eos = [pair.tokenizer.eos_token_id] if pair.tokenizer.eos_token_id is not None else None
    engine = engine_beside_workbook({"A": (OLD_TARGET, OLD_DRAFTER), "B": (NEW_TARGET, OLD_DRAFTER)},
                                    pair.prompts(settings.measure_prompts),
                                    settings.measure_tokens, K, measured, engine=SERVING_ENGINE, stop_token_ids=eos)
    display(engine.table()) if engine.ran else print(f"vLLM section skipped: {engine.status}")

# %% [markdown]
# ## 4 · The engines' dump path gives the live numbers
# At scale the states come from the engines: SpecForge's `prepare_hidden_states.py` (SGLang; the
# one that works for MLA targets such as Kimi) or vLLM's hidden-state connector (Llama, Qwen). Here
# both targets are dumped on the probe's sequences as those engines lay them out (A as SpecForge
# `rows_*/data_{i}.ckpt`, the last layer after the final norm; B as vLLM `hs_{i}.safetensors`, before
# it), and the probe runs on the dumps with the targets read for their heads only. Every number must
# match the live probe's.

# %%
from eaglelab.jobs.dump_parity import dump_parity

dumps = dump_parity(settings, result)
display(dumps.table())
print("largest difference, live vs dumps:", {k: f"{v:.1e}" for k, v in dumps.gaps.items()} or "none: probed from dumps")

# %% [markdown]
# ## Findings

# %%
said = {**probe.findings(TAG), **dumps.findings(TAG),
        **probe.scenario_findings(CYCLE_MS, BASELINE_TPS, TAG, EVIDENCE == pv.YOURS, plan_uses_plugin_tau(FIGURES_DIR, K)),
        **(measured.findings(TAG, next(pair.model_b.parameters()).device.type, shared=False) if measured else
           {"measured": "**Measured:** nothing decoded for real (from the engines' dumps the targets are not loaded)."}),
        "engine": f"**Measured in vLLM {TAG}:** {engine.findings()}" if measured else ""}
findings = "\n".join(f"- {said[name]}" for name in ("compared", "moved", "data", "plugin", "measured", "engine", "verdict",
                                                   "scenario", "dumps") if said[name])
display(Markdown(findings_markdown(findings)))
case.not_done += [] if case.demo or engine is None or engine.ran else [f"no measurement in vLLM ({engine.status})"]
case.save({**probe.to_json(), "measured": measured.to_json() if measured else None, "engine": engine.rows if engine else None,
           "evidence": EVIDENCE, "dump_gap": dumps.worst}, bullets_from_markdown(findings), FIGURES_DIR,
          data_line=None if FROM_DUMPS else str(pair.data.source), data_kind=None if FROM_DUMPS else pair.data.source.kind,
          what={"OLD_TARGET": "heads only", "NEW_TARGET": "heads only"} if FROM_DUMPS else None)
