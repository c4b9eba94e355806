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
# # 02 · Config and weight shapes: can drafter A take drafter B's slot, and what changed in the target?
#
# **Question.** Two EAGLE-3 drafter checkpoints (say the community's Kimi-K2 drafter and a Kimi-K2.5
# one, Llama or MLA): which config differences matter, do the tensors match, and is the old drafter
# interchangeable, a warm start, or incompatible, for the new target? And the two targets themselves,
# before any probe: the same architecture, RoPE and quantization, the same tokenizer, the same chat template?
#
# **Inputs.** Two drafters and the two targets (folders, `.safetensors` files, shard indexes or hub ids).
# Only configs, tokenizer files and safetensors *headers* are read: no tensor is loaded, so this works the
# same for a 2 MB drafter and a 1 TB target.
#
# **Outputs.** Config and tensor tables, the verdicts, figures `02_*` in `FIGURES_DIR`.

# %% tags=["parameters"]
SMOKE = False
FIGURES_DIR = "../figures"
WORLD = "demo"  # the offline world: "demo" (SmolLM2-135M pair) or "tiny"; smoke runs use "tiny"
WORLD_DIR = None  # None: data/worlds/<WORLD> (built on first use)
OLD_DRAFTER = None  # None: the world's drafter-a (the old, well-trained drafter)
NEW_DRAFTER = None  # None: the world's drafter-b-small (the new target's own drafter); with your checkpoints: none
NEW_TARGET = None  # None: the world's target B (the new target)
OLD_TARGET = None  # None: the world's target A (the old target the drafters were trained on)
SCRATCH_DIR = "../data/runs/02"  # where the full-size Kimi-shaped checkpoints go (sparse files)
FIXTURES_DIR = "../data/fixtures/specforge-configs"  # real SpecForge drafter configs, shipped with the repository
KIMI_FIXTURES_DIR = "../data/fixtures/kimi"  # the Kimi family's public configs (sources in its README)

# %%
from pathlib import Path

import pandas as pd
from IPython.display import Markdown, display

from eaglelab.checkpoints.drafters.inspection import inspect_checkpoint
from eaglelab.jobs.compare import CompareSettings, compare_drafters
from eaglelab.jobs.targets import TargetCompareSettings, compare_targets
from eaglelab.workbook import plots
from eaglelab.workbook.answers import comparison_answer
from eaglelab.workbook.opening import open_case
from eaglelab.workbook.report import bullets_from_markdown, findings_markdown
from eaglelab.workbook.runner import scratch_dir

SCRATCH_DIR = scratch_dir(SCRATCH_DIR, FIGURES_DIR, SMOKE, "02")
# nothing given: all four from the offline world (built on first use); else yours, and none filled in from the world
case = open_case("02", globals())
OLD_DRAFTER, NEW_DRAFTER, NEW_TARGET, OLD_TARGET = case.values.values()  # a pick made below survives Run All
TAG = case.tag

# %% [markdown]
# ## 1 · Pick the two checkpoints
# Each picker lists the checkpoints found under the world folder and takes any folder, file or hub id
# you type; the line under it says what it is, or what is wrong. **Compare** answers here for the new
# choice; the sections below take it once the set-up cell above runs again (Run All keeps the pick), and
# until then refuse to run on the old checkpoints. The pickers start at the parameters, so a headless run
# needs no clicks.

# %%
case.panel(lambda values: comparison_answer(values, str(case.world.root)), button="Compare")

# %% [markdown]
# ## 2 · Each checkpoint against its own config

# %%
insp_a, insp_b = inspect_checkpoint(OLD_DRAFTER), inspect_checkpoint(NEW_DRAFTER)
tables = pd.concat({"A": pd.DataFrame(insp_a.tensor_rows()).set_index("name"),
                    "B": pd.DataFrame(insp_b.tensor_rows()).set_index("name")}, axis=1)
display(tables[[("A", "shape"), ("A", "dtype"), ("B", "shape"), ("B", "dtype"), ("A", "meaning")]])
print("problems A:", insp_a.problems or "none", "| problems B:", insp_b.problems or "none")
for label, insp in (("A", insp_a), ("B", insp_b)):  # exact as its engine, or shapes only; and what engines read otherwise
    print(f"{label}: {insp.status_line}" + "".join(f"\n   caution: {c}" for c in insp.cautions))

# %% [markdown]
# ## 3 · Config differences, classified, and the verdict
# Shapes and config decide whether the tensors fit; the vocabulary maps get a verdict of their own:
# two drafters with identical shapes but different `d2t` / `t2d` have `lm_head` rows that name
# different tokens (what a warm start with a regenerated map produces). The headline takes the
# worst of the verdict, the maps and each drafter's fit to the target.

# %%
compared = compare_drafters(CompareSettings(OLD_DRAFTER, NEW_DRAFTER, NEW_TARGET))
display(compared.table() if compared.comparison.config_diff else Markdown("*configs identical*"))
display(Markdown("\n".join([compared.markdown(TAG), *(f"- note: {a} and {b} are the same checkpoint: this compares it "
                                                      "with itself" for a, b in case.choices.same())])))

# %%
fig = plots.plot_params_by_module(insp_a.parameters_by_module(), insp_b.parameters_by_module(), ("A", "B"))
plots.savefig(fig, "02_params_by_module", FIGURES_DIR, {"a": OLD_DRAFTER, "b": NEW_DRAFTER})
fig = plots.plot_mismatch_map(compared.to_json()["tensor_diff"])
plots.savefig(fig, "02_mismatch_map", FIGURES_DIR, {"a": OLD_DRAFTER, "b": NEW_DRAFTER})

# %% [markdown]
# ## 4 · The two targets, before any probe
# The old target against the new one, from configs, headers and tokenizer files: the language models'
# fields classified (a multimodal wrapper's `text_config` read as the language model), each target's
# quantization and weight prefix, the tokenizers id by id (and the ids drafter A's vocabulary map uses), and
# the chat templates rendered on one conversation. Another tokenizer invalidates the drafter's maps and
# `lm_head`; another template changes every prompt it meets (one Kimi drafter accepted 74.6% of drafts on raw
# prompts and 48.5% on chat-templated ones); neither: the probe (notebook 03) decides.

# %%
targets = compare_targets(TargetCompareSettings(OLD_TARGET, NEW_TARGET, OLD_DRAFTER))
display(targets.table() if targets.config_diff else Markdown("*the language models' configs are identical*"))
display(Markdown(targets.markdown()))

# %% [markdown]
# ## 5 · The Kimi family at full size: K2's drafter, K2.5's Llama and MLA drafters, K2.6's, the two targets
# Kimi-shaped checkpoints built from the public configs (`KIMI_FIXTURES_DIR`, each with its source):
# real safetensors headers, weights as holes in sparse files, so a 163,840 x 7,168 head costs no disk. The
# K2.5 drafters are what the Kimi community publishes: TorchSpec's Llama drafter over the *whole*
# vocabulary (no `draft_vocab_size`), its MLA drafter (`Eagle3DeepseekV2ForCausalLM`, computed as SGLang
# computes it), and a K2.6 MLA drafter as NVIDIA publishes one (K2.5's shapes, no `lm_head` in the file).
# The targets: Kimi-K2 (FP8 blocks) and Kimi-K2.5 (multimodal, INT4 experts, weights under `language_model.`),
# each a header-only sample with its tokenizer files.

# %%
from eaglelab.jobs.kimi_family import kimi_family

kimi = kimi_family(Path(SCRATCH_DIR) / "kimi", KIMI_FIXTURES_DIR)
display(kimi.drafters_table())
display(kimi.pairs_table())
display(kimi.targets.table())
display(Markdown(kimi.markdown()))

# %% [markdown]
# ## 6 · Real SpecForge configs
# Every drafter config SpecForge ships (copied into `data/fixtures/specforge-configs`, see its
# README) must parse into a consistent expected-tensor table (`tensor_table.table_problems`: fc, q/k/v,
# o_proj, MLP, lm_head and vocabulary maps wired into one layer), and says whether eaglelab computes
# it exactly as its engine does (`computed`, else the flag it refuses; `docs/EAGLE3_FORMAT.md` §1.1);
# the EAGLE-3 vs EAGLE-3.1 configs of Qwen3-30B-A3B show a real architecture difference (`fc_norm`).

# %%
from eaglelab.jobs.config_survey import survey_configs

survey = survey_configs(FIXTURES_DIR)
display(survey.table())
display(survey.pair_table())

# %% [markdown]
# ## Findings

# %%
said = {**compared.findings(TAG), **targets.findings(TAG), **kimi.findings(), **survey.findings()}
findings = "".join(f"- {said[name]}\n" for name in ("headline", "pair", "targets", "kimi", "configs"))
findings += "".join(f"- **Not done with the checkpoints given:** {line}.\n" for line in case.not_done)
display(Markdown(findings_markdown(findings)))
case.save({**{key: value for key, value in compared.to_json().items() if key in ("headline", "verdict", "vocab_maps")},
           "targets": {"verdict": targets.to_json()["verdict"], "tokenizers": targets.tokenizers.line,
                       "templates": targets.templates.line}, "kimi": kimi.to_json(), "configs": survey.rows},
          bullets_from_markdown(findings), FIGURES_DIR)
