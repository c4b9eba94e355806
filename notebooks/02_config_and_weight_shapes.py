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
import json
import time
from pathlib import Path

import pandas as pd
from IPython.display import Markdown, display

from eaglelab.checkpoints.drafters.inspection import compare_checkpoints, inspect_checkpoint
from eaglelab.jobs.compare import CompareSettings, compare_drafters
from eaglelab.jobs.targets import TargetCompareSettings, compare_targets
from eaglelab.planning import provenance as pv
from eaglelab.workbook import plots
from eaglelab.workbook.answers import comparison_answer
from eaglelab.workbook.case import given, notebook_case, world_default
from eaglelab.workbook.choices import Choices, Slot
from eaglelab.workbook.inputs_record import record_inputs
from eaglelab.workbook.report import bullets_from_markdown, findings_markdown, save_findings
from eaglelab.workbook.runner import scratch_dir
from eaglelab.workbook.widgets import ChoicePanel
from eaglelab.worlds.build import world_for

plots.use_style()
SCRATCH_DIR = scratch_dir(SCRATCH_DIR, FIGURES_DIR, SMOKE, "02")
# nothing given: all four from the offline world (built on first use); else yours, and none filled in from the world
demo = notebook_case("02", {"OLD_DRAFTER": OLD_DRAFTER, "NEW_DRAFTER": NEW_DRAFTER, "NEW_TARGET": NEW_TARGET,
                            "OLD_TARGET": OLD_TARGET})
world = world_for("tiny" if SMOKE else WORLD, WORLD_DIR, needed=demo)
NOT_DONE = []  # what this notebook could not do with the checkpoints it was given, and why
if not demo and not given(NEW_DRAFTER):  # no drafter of the new target's own: the old one checked against it alone
    NEW_DRAFTER = OLD_DRAFTER
    NOT_DONE.append("no NEW_DRAFTER given: the old drafter is checked against the new target on its own (A and B "
                    "below are the same checkpoint); give the new target's drafter to compare the two")
choices = Choices("02", [Slot("OLD_DRAFTER", "old drafter (A)", "drafter", OLD_DRAFTER, world_default(demo, world.drafter_a)),
                         Slot("NEW_DRAFTER", "new drafter (B)", "drafter", NEW_DRAFTER,
                              world_default(demo, world.drafter_b_small)),
                         Slot("NEW_TARGET", "the new target", "target", NEW_TARGET, world_default(demo, world.target_b)),
                         Slot("OLD_TARGET", "the old target", "target", OLD_TARGET, world_default(demo, world.target_a))],
                  root=str(world.root))
OLD_DRAFTER, NEW_DRAFTER, NEW_TARGET, OLD_TARGET = choices.values().values()  # a pick made below survives Run All
TAG = pv.tag(pv.evidence_source([OLD_DRAFTER, NEW_DRAFTER, NEW_TARGET, OLD_TARGET], world.root))

# %% [markdown]
# ## 1 · Pick the two checkpoints
# Each picker lists the checkpoints found under the world folder and takes any folder, file or hub id
# you type; the line under it says what it is, or what is wrong. **Compare** answers here for the new
# choice; the sections below take it once the set-up cell above runs again (Run All keeps the pick), and
# until then refuse to run on the old checkpoints. The pickers start at the parameters, so a headless run
# needs no clicks.

# %%
ChoicePanel(choices, lambda values: comparison_answer(values, str(world.root)), button="Compare")

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
report = compared.to_json()
print(compared.headline(TAG))
display(pd.DataFrame(report["config_diff"]) if report["config_diff"] else Markdown("*configs identical*"))
for first, second in choices.same():
    print(f"note: {first} and {second} are the same checkpoint: this compares it with itself")
print("\n".join(compared.verdict_lines()))  # the vocabulary maps' verdict too: equal shapes cannot show a new map

# %%
fig = plots.plot_params_by_module(insp_a.parameters_by_module(), insp_b.parameters_by_module(), ("A", "B"))
plots.savefig(fig, "02_params_by_module", FIGURES_DIR, {"a": OLD_DRAFTER, "b": NEW_DRAFTER})
fig = plots.plot_mismatch_map(report["tensor_diff"])
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
print(targets.headline())
display(pd.DataFrame([vars(d) for d in targets.config_diff]) if targets.config_diff
        else Markdown("*the language models' configs are identical*"))
for side, t in (("old", targets.a), ("new", targets.b)):
    print(f"{side}: {t.source}: {t.quantization.line}; tokenizer {t.tokenizer.kind}, {t.tokenizer.size:,} ids; "
          f"chat template {t.tokenizer.template_file or 'none'}")
print(f"tokenizers: {targets.tokenizers.line}\nchat templates: {targets.templates.line}")
for line in targets.templates.diff:
    print("   ", line)

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
from eaglelab.worlds.kimi_shapes import KIMI_SAMPLE, build_kimi_sample

start = time.perf_counter()
kimi = build_kimi_sample(Path(SCRATCH_DIR) / "kimi", KIMI_FIXTURES_DIR, force=True)
drafters = {name: inspect_checkpoint(str(getattr(kimi, name))) for name in
            ("k2_drafter", "k25_llama_drafter", "k25_mla_drafter", "k26_mla_drafter")}
display(pd.DataFrame([{"drafter": name, "what": KIMI_SAMPLE[name], "attention": i.spec.attention,
                       "draft vocabulary": i.spec.draft_vocab_size, "params (B)": round(i.checkpoint.total_parameters / 1e9, 2),
                       "problems": len(i.problems), "status": i.status_line, "cautions": len(i.cautions)}
                      for name, i in drafters.items()]).set_index("drafter"))
kimi_pairs = {"K2 -> K2.5 Llama": ("k2_drafter", "k25_llama_drafter"), "K2 -> K2.5 MLA": ("k2_drafter", "k25_mla_drafter"),
              "K2.5 MLA -> K2.6 MLA": ("k25_mla_drafter", "k26_mla_drafter")}
kimi_cmp = {label: compare_checkpoints(str(getattr(kimi, a)), str(getattr(kimi, b)), str(kimi.k25_target))
            for label, (a, b) in kimi_pairs.items()}
kimi_s = time.perf_counter() - start
display(pd.DataFrame([{"pair": label, "verdict": c.verdict.level, "first reason": c.verdict.reasons[0],
                       "config keys differing": len(c.config_diff),
                       "unclassified": sum(d.category == "unknown" for d in c.config_diff),
                       "tensors differing": sum(t.status != "same" for t in c.tensor_diff)}
                      for label, c in kimi_cmp.items()]).set_index("pair"))
for r in kimi_cmp["K2.5 MLA -> K2.6 MLA"].target_verdicts["b"].reasons:
    print("  K2.6 on K2.5:", r)

# %%
kimi_targets = compare_targets(TargetCompareSettings(str(kimi.k2_target), str(kimi.k25_target), str(kimi.k2_drafter)))
template_only = compare_targets(TargetCompareSettings(str(kimi.k25_tokenizer_k2_template), str(kimi.k25_tokenizer)))
print(kimi_targets.headline())
display(pd.DataFrame([vars(d) for d in kimi_targets.config_diff]).drop(columns="why"))
print(f"prefixes: K2 '{kimi_targets.a.prefix}', K2.5 '{kimi_targets.b.prefix}'; tokenizers: {kimi_targets.tokenizers.line}")
print(f"\ntwo tokenizer folders that differ only in the template: {template_only.headline()}")
for line in template_only.templates.diff:
    print("   ", line)
print(f"\nKimi family read in {kimi_s * 1e3:.0f} ms without loading a tensor")

# %% [markdown]
# ## 6 · Real SpecForge configs
# Every drafter config SpecForge ships (copied into `data/fixtures/specforge-configs`, see its
# README) must parse into a consistent expected-tensor table (`tensor_table.table_problems`: fc, q/k/v,
# o_proj, MLP, lm_head and vocabulary maps wired into one layer), and says whether eaglelab computes
# it exactly as its engine does (`computed`, else the flag it refuses; `docs/EAGLE3_FORMAT.md` §1.1);
# the EAGLE-3 vs EAGLE-3.1 configs of Qwen3-30B-A3B show a real architecture difference (`fc_norm`).

# %%
from eaglelab.checkpoints.drafters.inspection import config_table
from eaglelab.checkpoints.drafters.config_rules import diff_configs

rows = config_table(sorted(Path(FIXTURES_DIR).glob("*.json")))
table = pd.DataFrame(rows).set_index("config")
display(table)
pair = [Path(FIXTURES_DIR) / "qwen3-30B-A3B-eagle3.json", Path(FIXTURES_DIR) / "qwen3-30B-A3B-eagle3.1.json"]
fc_norm_diff = diff_configs(*(json.loads(p.read_text()) for p in pair))
display(pd.DataFrame([vars(d) for d in fc_norm_diff]))

# %% [markdown]
# ## Findings

# %%
findings = f"""
- **{compared.headline(TAG)}.**
- {compared.findings(TAG)}
- **The two targets {TAG}** (`{OLD_TARGET}` -> `{NEW_TARGET}`): **{targets.verdict.level}**: {targets.verdict.line}.
  {len(targets.config_diff)} language-model fields differ; tokenizers: {targets.tokenizers.line}; chat templates:
  {targets.templates.line}.
- **The Kimi family [sample]** (public configs, sparse weights): {'; '.join(f"{label}: **{c.verdict.level}** ({c.verdict.reasons[0]})" for label, c in kimi_cmp.items())}.
  Every config key of the three pairs is classified ({sum(d.category == 'unknown' for c in kimi_cmp.values() for d in c.config_diff)} unknown);
  the full-vocabulary and MLA drafters are computed with {sum(len(i.problems) for i in drafters.values())} problems; the K2.6 drafter ships no
  `lm_head` with `draft_vocab_size` written ({'SGLang would serve a random head' if drafters['k26_mla_drafter'].sglang_random_head else 'no caution'}).
  K2 -> K2.5 targets: **{kimi_targets.verdict.level}**, {', '.join(f"`{d.key}` {d.a} -> {d.b}" for d in kimi_targets.config_diff if d.category in ('rope and context', 'quantization') and d.key != 'quantization.kept')};
  K2.5 keeps its language model under `{kimi_targets.b.prefix}`; two K2.5 tokenizer folders that differ in the template only:
  **{template_only.verdict.level}**.
- **SpecForge configs [sample]:** {int(table['consistent'].sum())} of {len(table)} real configs parse into consistent tensor
  tables{'' if table['consistent'].all() else ' (inconsistent: ' + ', '.join(table.index[~table['consistent']]) + ')'};
  eaglelab computes {int(table['computed'].sum())} of them exactly as SpecForge does{'' if table['computed'].all() else
  ' (refused: ' + '; '.join(f"{', '.join(f'`{n}`' for n in names)}: {why}"
                            for why, names in table[~table['computed']].groupby('refused').groups.items()) + ')'};
  EAGLE-3 vs EAGLE-3.1 of Qwen3-30B-A3B differ in {', '.join(f"`{d.key}` ({d.category})" for d in fc_norm_diff)}.
"""
findings += "".join(f"- **Not done with the checkpoints given:** {line}.\n" for line in NOT_DONE)
display(Markdown(findings_markdown(findings)))
save_findings("02", {"headline": report["headline"], "verdict": report["verdict"], "vocab_maps": report["vocab_maps"],
                     "inputs": record_inputs({"OLD_TARGET": OLD_TARGET, "NEW_TARGET": NEW_TARGET, "OLD_DRAFTER": OLD_DRAFTER,
                                              "NEW_DRAFTER": NEW_DRAFTER}, world.root, not_done=NOT_DONE),
                     "targets": {"verdict": targets.to_json()["verdict"], "tokenizers": targets.tokenizers.line,
                                 "templates": targets.templates.line},
                     "kimi": {label: c.to_json()["verdict"] for label, c in kimi_cmp.items()},
                     "kimi_targets": kimi_targets.to_json()["verdict"]},
              bullets_from_markdown(findings), FIGURES_DIR)
