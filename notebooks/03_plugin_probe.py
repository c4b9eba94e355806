# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
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
# world), else held-out stdlib docstrings and code. For targets too large for this machine,
# SpecForge offline hidden-state files of both targets (section 4).
#
# **Outputs.** Similarity table, figures `03_*` in `FIGURES_DIR`, measured speculative decoding of
# the old drafter on both targets, and a verdict: plug in, warm start, or retrain.

# %% tags=["parameters"]
SMOKE = False
FIGURES_DIR = "../figures"
WORLD = "demo"  # the offline world: "demo" (SmolLM2-135M pair) or "tiny"; smoke runs use "tiny"
WORLD_DIR = None  # None: data/worlds/<WORLD> (built on first use)
TARGET_A = None  # None: the world's target A
TARGET_B = None  # None: the world's target B
DRAFTER = None  # None: the world's drafter-a (trained on A)
DATA = None  # None: the world's held-out conversations (when A is the world's target), else built-in text; or a .txt / .jsonl file
N_SEQUENCES = 24  # demo world: held-out conversations (whole); tiny world: text rows of SEQ_LEN tokens
SEQ_LEN = 64
TTT_STEPS = 3  # drafts per cycle in the simulated acceptance
MEASURE_PROMPTS = 6
MEASURE_TOKENS = 48
DEVICE = None  # None: cuda when available
DEVICE_MAP = None  # "auto": spread each target over all GPUs (large targets; needs accelerate)
DTYPE = "float32"  # bfloat16 for large targets on GPUs
BATCH_SIZE = 8  # sequences per forward: the probe's memory is bounded by the batch
# the user's serving scenario, for the projected throughput
BASELINE_TPS = 82.0
CYCLE_MS = 30.0
SERVING_ENGINE = "vllm"  # measure the drafter in vLLM too when its environment exists (`make engine`); None: skip

# %%
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from eaglelab.data.sets import measure_prompts, probe_set, world_of
from eaglelab.engines.vllm import compare_with_workbook, engine_findings, engine_status, measure_in_engine
from eaglelab.model.decoding import timing_warning
from eaglelab.model.drafter_files import load_drafter
from eaglelab.model.targets import load_target
from eaglelab.planning import provenance as pv
from eaglelab.probe.plugin import layerwise_cka, measure_plugin, run_probe
from eaglelab.progress import progress
from eaglelab.serving import perf
from eaglelab.workbook import plots
from eaglelab.workbook.answers import probe_answer
from eaglelab.workbook.choices import Choices, Slot
from eaglelab.workbook.report import bullets_from_markdown, save_findings
from eaglelab.workbook.widgets import ChoicePanel
from eaglelab.worlds.build import build_world

plots.use_style()
if SMOKE:
    N_SEQUENCES, MEASURE_PROMPTS, MEASURE_TOKENS = 16, 3, 24
world = build_world("tiny" if SMOKE else WORLD, WORLD_DIR)
choices = Choices("03", [Slot("TARGET_A", "old target (A)", "target", TARGET_A, str(world.target_a)),
                         Slot("TARGET_B", "new target (B)", "target", TARGET_B, str(world.target_b)),
                         Slot("DRAFTER", "old drafter (on A)", "drafter", DRAFTER, str(world.drafter_a), fits="TARGET_A"),
                         Slot("DATA", "data (optional)", "data", DATA, "")], root=str(world.root))
TARGET_A, TARGET_B, DRAFTER, DATA = choices.values().values()  # a pick made below survives Run All

# %% [markdown]
# ## Pick the checkpoints
# Each picker lists what was found under the world folder and takes any folder, file or hub id you
# type; the line under it says what it is, or what is wrong (a drafter that does not fit target A is
# refused here, from configs and headers). **Probe** loads the two targets and answers here: the
# verdict, τ on A and on B, and the similarity per layer, with progress. The sections below read the
# choice when run (Run All keeps it); a headless run needs no clicks.

# %%
ChoicePanel(choices, lambda values: probe_answer(values, str(world.root), sequences=N_SEQUENCES, seq_len=SEQ_LEN,
                                                 steps=TTT_STEPS, batch_size=BATCH_SIZE, dtype=DTYPE, device=DEVICE,
                                                 device_map=DEVICE_MAP), button="Probe")

# %% [markdown]
# ## The targets, the drafter and the data

# %%
EVIDENCE = pv.evidence_source([TARGET_A, TARGET_B, DRAFTER], world.root)  # demo: an illustration, not your forecast
TAG = pv.tag(EVIDENCE)
model_a, tok = load_target(TARGET_A, dtype=DTYPE, device=DEVICE, device_map=DEVICE_MAP)
model_b, _ = load_target(TARGET_B, dtype=DTYPE, device=DEVICE, device_map=DEVICE_MAP)
drafter = load_drafter(DRAFTER).to(next(model_a.parameters()).device)
data_world = world_of(TARGET_A)  # the world's own conversations when A is the world's target (as `eaglelab probe`)
data = probe_set(tok, N_SEQUENCES, SEQ_LEN, data_world, DATA or None)
print(f"{data.source}; {len(data.ids)} sequences x {data.ids.shape[1]} tokens, {data.positions} positions counted; "
      f"drafter reads layer outputs {list(drafter.spec.aux_layer_ids)}")

# %% [markdown]
# ## 1 · Paired capture and similarity at the drafter's layers
# Cosine and relative L2 per token, norm ratio, and linear CKA (unbiased HSIC, accumulated over
# minibatches), plus how often the two targets' next-token argmax agree.

# %%
probe = run_probe(model_a, model_b, drafter, data.ids, steps=TTT_STEPS, batch_size=BATCH_SIZE, loss_mask=data.counted)
report = probe.to_json()
similarity = pd.DataFrame(report["layers"]).set_index("layer")
display(similarity.round(4))
print(f"next-token argmax agreement A vs B: {probe.argmax_agreement:.3f} over {probe.tokens} tokens")

# %%
fig = plots.plot_cosine_distributions(probe.cosines)
plots.savefig(fig, "03_cosine_per_layer", FIGURES_DIR, {"a": str(TARGET_A), "b": str(TARGET_B), "tokens": probe.tokens})
cka_all = layerwise_cka(model_a, model_b, data.ids, loss_mask=data.counted)
names = ["emb"] + [str(i) for i in range(cka_all.shape[0] - 1)]
fig = plots.plot_cka_map(cka_all.numpy(), names, names)
plots.savefig(fig, "03_cka_map", FIGURES_DIR, {"a": str(TARGET_A), "b": str(TARGET_B)})

# %% [markdown]
# ## 2 · Plug-in acceptance: the old drafter on the new target
# Teacher-forced per-position accuracy and simulated τ (bonus included) on A's states and on B's.

# %%
fig = plots.plot_position_acceptance({"drafter A on target A": probe.eval_a["acc"],
                                      "drafter A on target B (plug-in)": probe.eval_b["acc"]})
plots.savefig(fig, "03_position_acceptance", FIGURES_DIR, {"drafter": str(DRAFTER), "steps": TTT_STEPS})
display(pd.DataFrame({"on A": probe.eval_a["acc"], "on B": probe.eval_b["acc"]},
                     index=[f"draft {i + 1}" for i in range(TTT_STEPS)]).T.round(3))

# %% [markdown]
# ## 3 · Measured: real speculative decoding with the old drafter on both targets

# %%
prompts = measure_prompts(tok, MEASURE_PROMPTS, data_world)
measured = measure_plugin(model_a, model_b, drafter, prompts, MEASURE_TOKENS, k=TTT_STEPS)
display(pd.DataFrame(measured).T[["accept_len", "tokens_per_s", "greedy_tokens_per_s", "speedup", "matches_greedy", "timing_note"]])

# %% [markdown]
# ### Measured in vLLM: the engine you serve with, on the same prompt token ids
# The drafter exported as vLLM reads it (speculators layout, the target's embedding shared), run by
# vLLM itself (greedy, eagle3, k drafts, one prompt at a time) in its own environment (`make engine`);
# skipped, with the reason, where that environment is absent. τ should agree with the workbook's own
# decoder within a few percent; vLLM's per-position rate is unconditional (all drafts up to i accepted),
# the workbook's conditional (draft i accepted given the ones before): both are shown, named.

# %%
ENGINE_OK, ENGINE_LINE = engine_status() if SERVING_ENGINE else (False, "SERVING_ENGINE = None")
engine_rows = {}
if ENGINE_OK:
    eos = [tok.eos_token_id] if tok.eos_token_id is not None else None
    for name, target in progress([("A", TARGET_A), ("B", TARGET_B)], desc="vLLM runs"):
        in_engine = measure_in_engine(target, DRAFTER, prompts, MEASURE_TOKENS, k=TTT_STEPS, engine=SERVING_ENGINE,
                                      stop_token_ids=eos)
        engine_rows[name] = compare_with_workbook(measured[name], in_engine)
    display(pd.DataFrame(engine_rows).T)
else:
    print(f"vLLM section skipped: {ENGINE_LINE}")

# %% [markdown]
# ## 4 · The SpecForge offline path gives the same numbers
# Large targets are captured offline (SpecForge `prepare_hidden_states.py`); the probe reads those
# files (with `torch.load(weights_only=True)`) and must agree with the live path.

# %%
import tempfile

from eaglelab.probe.plugin import compare_live_and_specforge

with tempfile.TemporaryDirectory() as tmp:
    live, from_files = compare_live_and_specforge(model_a, model_b, drafter.spec, data.ids[:8], tmp)
live_cos = [layer.cosine_mean for layer in live["layers"]]
off_cos = [layer.cosine_mean for layer in from_files["layers"]]
offline_gap = max(abs(x - y) for x, y in zip(live_cos, off_cos))
print("cosine per layer, live:", np.round(live_cos, 4), "from SpecForge files:", np.round(off_cos, 4))

# %% [markdown]
# ## Findings

# %%
tau_a, tau_b = probe.eval_a["accept_len"], probe.eval_b["accept_len"]
proj_a, proj_b = (float(perf.effective_tps(t, CYCLE_MS / 1e3)) for t in (tau_a, tau_b))
low, high = similarity["cosine_mean"].idxmin(), similarity["cosine_mean"].idxmax()
scenario = (f"τ {tau_b:.2f} {TAG} projects to {proj_b:.1f} tok/s [derived] on the new target (the old target's τ would give "
            f"{proj_a:.1f}); break-even needs τ = {float(perf.break_even_accept_len(CYCLE_MS / 1e3, BASELINE_TPS)):.2f}; "
            "the game plan's decision table uses this plug-in τ." if EVIDENCE == pv.MEASURED else
            "not projected: τ measured on the demo world illustrates the method and is no forecast for your model; "
            "run this notebook on your checkpoints (`TARGET_A`, `TARGET_B`, `DRAFTER`) for the number the decision "
            "table needs.")
findings = f"""
- **How far the target moved {TAG}:** mean per-token cosine between A and B ranges from
  {similarity['cosine_mean'].min():.3f} ({low}) to {similarity['cosine_mean'].max():.3f} ({high}); relative L2
  {similarity['rel_l2'].min():.2f}–{similarity['rel_l2'].max():.2f}; CKA {similarity['cka'].min():.3f}–{similarity['cka'].max():.3f};
  the two targets agree on the next token {100 * probe.argmax_agreement:.1f}% of the time.
- **Data {TAG}:** {data.source} ({data.positions} positions counted).
- **Plug-in acceptance {TAG} (teacher forced, k = {TTT_STEPS}):** simulated τ {tau_a:.2f} on A vs **{tau_b:.2f} on B**;
  first-draft accuracy {probe.eval_a['acc'][0]:.2f} → {probe.eval_b['acc'][0]:.2f}.
- **Measured {TAG} (real speculative decoding on {next(model_b.parameters()).device.type}):** τ {measured['A']['accept_len']:.2f}
  on A and {measured['B']['accept_len']:.2f} on B; {measured['B']['speedup']:.2f}× plain decoding on B (outputs identical
  to greedy: {measured['B']['matches_greedy']}){timing_warning(measured)}.
- **Measured in vLLM {TAG}:** {engine_findings(engine_rows, ENGINE_LINE)}
- **Verdict {TAG}: {probe.decision.action.upper()}.** {'; '.join(probe.decision.reasons)}.
- **In your serving scenario** ({CYCLE_MS:g} ms cycle, {BASELINE_TPS:g} tok/s baseline): {scenario}
- **Offline files {TAG}:** the SpecForge-file path reproduces the live cosines (max difference {offline_gap:.1e}).
"""
display(Markdown(findings))
save_findings("03", {**probe.to_json(), "measured": measured, "engine": engine_rows, "data": data.source.description, "evidence": EVIDENCE,
                     "steps": TTT_STEPS}, bullets_from_markdown(findings), FIGURES_DIR)
