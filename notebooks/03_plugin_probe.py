# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
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
# `eaglelab probe` takes the same settings, with the same defaults). For targets too large for this
# machine, SpecForge offline hidden-state files of both targets (section 4).
#
# **Outputs.** Similarity table, figures `03_*` in `FIGURES_DIR`, measured speculative decoding of
# the old drafter on both targets, and a verdict: plug in, warm start, or from scratch.

# %% tags=["parameters"]
SMOKE = False
FIGURES_DIR = "../figures"
WORLD = "demo"  # the offline world: "demo" (SmolLM2-135M pair) or "tiny"; smoke runs use "tiny"
WORLD_DIR = None  # None: data/worlds/<WORLD> (built on first use)
TARGET_A = None  # None: the world's target A
TARGET_B = None  # None: the world's target B
DRAFTER = None  # None: the world's drafter-a (trained on A)
DATA = None  # None: the world's held-out conversations (when A is the world's target), else built-in text; or a .txt / .jsonl file
SEQUENCES = 24  # demo world: held-out conversations (whole); tiny world: text rows of SEQ_LEN tokens
SEQ_LEN = 64
K = 3  # drafts per cycle, for the teacher-forced and the measured τ
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
from dataclasses import replace

import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from eaglelab.jobs.engine import engine_beside_workbook
from eaglelab.jobs.probe import ProbeSettings, load_pair, probe_checkpoints
from eaglelab.model.decoding import timing_warning
from eaglelab.planning import provenance as pv
from eaglelab.probe.plugin import layerwise_cka
from eaglelab.serving import perf
from eaglelab.workbook import plots
from eaglelab.workbook.answers import probe_answer
from eaglelab.workbook.choices import Choices, Slot
from eaglelab.workbook.report import bullets_from_markdown, plan_uses_plugin_tau, save_findings
from eaglelab.workbook.widgets import ChoicePanel
from eaglelab.worlds.build import build_world

plots.use_style()
if SMOKE:
    SEQUENCES, MEASURE_PROMPTS, MEASURE_TOKENS = 16, 3, 24
world = build_world("tiny" if SMOKE else WORLD, WORLD_DIR)
choices = Choices("03", [Slot("TARGET_A", "old target (A)", "target", TARGET_A, str(world.target_a)),
                         Slot("TARGET_B", "new target (B)", "target", TARGET_B, str(world.target_b)),
                         Slot("DRAFTER", "old drafter (on A)", "drafter", DRAFTER, str(world.drafter_a), fits="TARGET_A"),
                         Slot("DATA", "data (optional)", "data", DATA, "")], root=str(world.root))
TARGET_A, TARGET_B, DRAFTER, DATA = choices.values().values()  # a pick made below survives Run All
settings = ProbeSettings(TARGET_A, TARGET_B, DRAFTER, data=DATA or None, sequences=SEQUENCES, seq_len=SEQ_LEN, k=K,
                         batch_size=BATCH_SIZE, measure_prompts=MEASURE_PROMPTS, measure_tokens=MEASURE_TOKENS,
                         dtype=DTYPE, device=DEVICE, device_map=DEVICE_MAP)

# %% [markdown]
# ## Pick the checkpoints
# Each picker lists what was found under the world folder and takes any folder, file or hub id you
# type (a path is looked for from here and from the repository root); the line under it says what
# it is, or what is wrong (a drafter that does not fit target A is refused here, from configs and
# headers). **Probe** loads the two targets and answers here: the verdict, τ on A and on B, and the
# similarity per layer, with one progress bar. The sections below read the choice when run (Run All
# keeps it); a headless run needs no clicks.

# %%
ChoicePanel(choices, lambda values: probe_answer(settings, values, str(world.root)), button="Probe")

# %% [markdown]
# ## The targets, the drafter and the data

# %%
EVIDENCE = pv.evidence_source([TARGET_A, TARGET_B, DRAFTER], world.root)  # demo: an illustration, not your forecast
TAG = pv.tag(EVIDENCE)
pair = load_pair(settings)
print(f"{pair.data.source}; {len(pair.data.ids)} sequences x {pair.data.ids.shape[1]} tokens, {pair.data.positions} "
      f"positions counted; drafter reads layer outputs {list(pair.drafter.spec.aux_layer_ids)}")

# %% [markdown]
# ## 1 · Paired capture and similarity at the drafter's layers
# Cosine and relative L2 per token, norm ratio, and linear CKA (unbiased HSIC, accumulated over
# minibatches), plus how often the two targets' next-token argmax agree; then the teacher-forced
# acceptance of the drafter on both, and real speculative decoding on both (section 3).

# %%
probe = probe_checkpoints(settings, pair)
result = probe.result
similarity = pd.DataFrame(probe.to_json()["layers"]).set_index("layer")
display(similarity.round(4))
print(f"next-token argmax agreement A vs B: {result.argmax_agreement:.3f} over {result.tokens} tokens")

# %%
fig = plots.plot_cosine_distributions(result.cosines)
plots.savefig(fig, "03_cosine_per_layer", FIGURES_DIR, {"a": TARGET_A, "b": TARGET_B, "tokens": result.tokens})
cka_all = layerwise_cka(pair.model_a, pair.model_b, pair.data.ids, loss_mask=pair.data.counted)
names = ["emb"] + [str(i) for i in range(cka_all.shape[0] - 1)]
fig = plots.plot_cka_map(cka_all.numpy(), names, names)
plots.savefig(fig, "03_cka_map", FIGURES_DIR, {"a": TARGET_A, "b": TARGET_B})

# %% [markdown]
# ## 2 · Plug-in acceptance: the old drafter on the new target
# Teacher-forced per-position accuracy and simulated τ (bonus included) on A's states and on B's.

# %%
fig = plots.plot_position_acceptance({"drafter A on target A": result.eval_a["acc"],
                                      "drafter A on target B (plug-in)": result.eval_b["acc"]})
plots.savefig(fig, "03_position_acceptance", FIGURES_DIR, {"drafter": DRAFTER, "k": K})
display(pd.DataFrame({"on A": result.eval_a["acc"], "on B": result.eval_b["acc"]},
                     index=[f"draft {i + 1}" for i in range(K)]).T.round(3))

# %% [markdown]
# ## 3 · Measured: real speculative decoding with the old drafter on both targets

# %%
measured = probe.measured
display(pd.DataFrame(measured).T[["accept_len", "tokens_per_s", "greedy_tokens_per_s", "speedup", "matches_greedy", "timing_note"]])

# %% [markdown]
# ### Measured in vLLM: the engine you serve with, on the same prompt token ids
# The drafter exported as vLLM reads it (speculators layout, the target's embedding shared), run by
# vLLM itself (greedy, eagle3, k drafts, one prompt at a time) in its own environment (`make engine`);
# skipped, with the reason, where that environment is absent. τ should agree with the workbook's own
# decoder within a few percent; vLLM's per-position rate is unconditional (all drafts up to i accepted),
# the workbook's conditional (draft i accepted given the ones before): both are shown, named.

# %%
eos = [pair.tokenizer.eos_token_id] if pair.tokenizer.eos_token_id is not None else None
engine = engine_beside_workbook({"A": (TARGET_A, DRAFTER), "B": (TARGET_B, DRAFTER)}, pair.prompts(MEASURE_PROMPTS),
                                MEASURE_TOKENS, K, measured, engine=SERVING_ENGINE, stop_token_ids=eos)
display(pd.DataFrame(engine.rows).T) if engine.ran else print(f"vLLM section skipped: {engine.status}")

# %% [markdown]
# ## 4 · The SpecForge offline path gives the same numbers
# Large targets are captured offline (SpecForge `prepare_hidden_states.py`); the probe reads those
# files (with `torch.load(weights_only=True)`) and must agree with the live path.

# %%
import tempfile

from eaglelab.probe.plugin import compare_live_and_specforge

with tempfile.TemporaryDirectory() as tmp:
    live, from_files = compare_live_and_specforge(pair.model_a, pair.model_b, pair.drafter.spec, pair.data.ids[:8], tmp)
live_cos = [layer.cosine_mean for layer in live["layers"]]
off_cos = [layer.cosine_mean for layer in from_files["layers"]]
offline_gap = max(abs(x - y) for x, y in zip(live_cos, off_cos))
print("cosine per layer, live:", np.round(live_cos, 4), "from SpecForge files:", np.round(off_cos, 4))

# %% [markdown]
# ## Findings

# %%
tau_a, tau_b = probe.tau_a, probe.tau_b
proj_a, proj_b = (float(perf.effective_tps(t, CYCLE_MS / 1e3)) for t in (tau_a, tau_b))
low, high = similarity["cosine_mean"].idxmin(), similarity["cosine_mean"].idxmax()
scenario = (f"τ {tau_b:.2f} {TAG} projects to {proj_b:.1f} tok/s [derived] on the new target (the old target's τ would give "
            f"{proj_a:.1f}); break-even needs τ = {float(perf.break_even_accept_len(CYCLE_MS / 1e3, BASELINE_TPS)):.2f}; "
            + plan_uses_plugin_tau(FIGURES_DIR, K) if EVIDENCE == pv.YOURS else
            "not projected: τ measured on the demo world illustrates the method and is no forecast for your model; "
            "run this notebook on your checkpoints (`TARGET_A`, `TARGET_B`, `DRAFTER`) for the number the decision "
            "table needs.")
findings = f"""
- **Compared {TAG}:** the drafter `{DRAFTER}` on `{TARGET_A}` (A, old) and `{TARGET_B}` (B, new).
- **How far the target moved {TAG}:** mean per-token cosine between A and B ranges from
  {similarity['cosine_mean'].min():.3f} ({low}) to {similarity['cosine_mean'].max():.3f} ({high}); relative L2
  {similarity['rel_l2'].min():.2f}–{similarity['rel_l2'].max():.2f}; CKA {similarity['cka'].min():.3f}–{similarity['cka'].max():.3f};
  the two targets agree on the next token {100 * result.argmax_agreement:.1f}% of the time.
- **Data {TAG}:** {probe.data} ({probe.positions} positions counted).
- **Plug-in acceptance {TAG} (teacher forced, k = {K}):** simulated τ {tau_a:.2f} on A vs **{tau_b:.2f} on B**;
  first-draft accuracy {result.eval_a['acc'][0]:.2f} → {result.eval_b['acc'][0]:.2f}.
- **Measured {TAG} (real speculative decoding on {next(pair.model_b.parameters()).device.type}):** τ {measured['A']['accept_len']:.2f}
  on A and {measured['B']['accept_len']:.2f} on B; {measured['B']['speedup']:.2f}× plain decoding on B (outputs identical
  to greedy: {measured['B']['matches_greedy']}){timing_warning(measured)}.
- **Measured in vLLM {TAG}:** {engine.findings()}
- **Verdict {TAG}: {result.decision.action.upper()}.** {'; '.join(result.decision.reasons)}.
- **In your serving scenario** ({CYCLE_MS:g} ms cycle, {BASELINE_TPS:g} tok/s baseline): {scenario}
- **Offline files {TAG}:** the SpecForge-file path reproduces the live cosines (max difference {offline_gap:.1e}).
"""
display(Markdown(findings))
save_findings("03", {**probe.to_json(), "measured": measured, "engine": engine.rows, "evidence": EVIDENCE},
              bullets_from_markdown(findings), FIGURES_DIR)
