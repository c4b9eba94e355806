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
# # 02 · Config and weight shapes: can drafter A take drafter B's slot?
#
# **Question.** Two EAGLE-3 drafter checkpoints (say the community's Kimi-K2 drafter and your
# own Kimi-K2.5 one): which config differences matter, do the tensors match, and is the old
# drafter interchangeable, a warm start, or incompatible, for the new target?
#
# **Inputs.** Two checkpoints (folders, `.safetensors` files, shard indexes or hub ids) and
# optionally the target's config. Only configs and safetensors *headers* are read: no tensor is
# loaded, so this works the same for a 2 MB and a 5 GB drafter.
#
# **Outputs.** Config and tensor tables, the verdict, figures `02_*` in `FIGURES_DIR`.

# %% tags=["parameters"]
SMOKE = False
FIGURES_DIR = "../figures"
WORLD = "demo"  # the offline world: "demo" (SmolLM2-135M pair) or "tiny"; smoke runs use "tiny"
WORLD_DIR = None  # None: data/worlds/<WORLD> (built on first use)
DRAFTER_A = None  # None: the world's drafter-a (the old, well-trained drafter)
DRAFTER_B = None  # None: the world's drafter-b-small (the new target's own drafter)
TARGET = None  # None: the world's target B (the new target)
SCRATCH_DIR = "../data/runs/02"  # where the full-size synthetic K2 / K2.5 checkpoints go (sparse files)
FIXTURES_DIR = "../data/fixtures/specforge-configs"  # real SpecForge drafter configs, shipped with the repository

# %%
import json
import time
from pathlib import Path

import pandas as pd
from IPython.display import Markdown, display

from eaglelab.checkpoints.inspection import compare_checkpoints, inspect_checkpoint
from eaglelab.jobs.compare import CompareSettings, compare_drafters
from eaglelab.planning import provenance as pv
from eaglelab.workbook import plots
from eaglelab.workbook.answers import comparison_answer
from eaglelab.workbook.choices import Choices, Slot
from eaglelab.workbook.report import bullets_from_markdown, save_findings
from eaglelab.workbook.runner import scratch_dir
from eaglelab.workbook.widgets import ChoicePanel
from eaglelab.worlds.build import build_world

plots.use_style()
SCRATCH_DIR = scratch_dir(SCRATCH_DIR, FIGURES_DIR, SMOKE, "02")
world = build_world("tiny" if SMOKE else WORLD, WORLD_DIR)
choices = Choices("02", [Slot("DRAFTER_A", "drafter A (old)", "drafter", DRAFTER_A, str(world.drafter_a)),
                         Slot("DRAFTER_B", "drafter B (new)", "drafter", DRAFTER_B, str(world.drafter_b_small)),
                         Slot("TARGET", "the new target", "target", TARGET, str(world.target_b))], root=str(world.root))
DRAFTER_A, DRAFTER_B, TARGET = choices.values().values()  # a pick made below survives Run All
TAG = pv.tag(pv.evidence_source([DRAFTER_A, DRAFTER_B, TARGET], world.root))

# %% [markdown]
# ## 1 · Pick the two checkpoints
# Each picker lists the checkpoints found under the world folder and takes any folder, file or hub id
# you type; the line under it says what it is, or what is wrong. **Compare** answers here for the new
# choice, and the sections below read it when run (Run All keeps it). The pickers start at the
# parameters, so a headless run needs no clicks.

# %%
ChoicePanel(choices, lambda values: comparison_answer(values, str(world.root)), button="Compare")

# %% [markdown]
# ## 2 · Each checkpoint against its own config

# %%
insp_a, insp_b = inspect_checkpoint(DRAFTER_A), inspect_checkpoint(DRAFTER_B)
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
compared = compare_drafters(CompareSettings(DRAFTER_A, DRAFTER_B, TARGET))
comparison, report = compared.comparison, compared.to_json()
print(compared.headline(TAG))
display(pd.DataFrame(report["config_diff"]) if report["config_diff"] else Markdown("*configs identical*"))
print(f"verdict, A vs B: {comparison.verdict.level}")
for first, second in choices.same():
    print(f"  note: {first} and {second} are the same checkpoint: this compares it with itself")
for r in comparison.verdict.reasons:
    print("  -", r)
vocab = comparison.vocab_maps  # a verdict of its own: equal shapes cannot show a regenerated map
print(f"vocabulary maps: {vocab.level if vocab else 'not readable'}" + (f"\n  - {vocab.message}" if vocab else ""))
for label, v in comparison.target_verdicts.items():
    print(f"{label.upper()} on the target: {v.level}")
    for r in v.reasons:
        print("  -", r)

# %%
fig = plots.plot_params_by_module(insp_a.parameters_by_module(), insp_b.parameters_by_module(), ("A", "B"))
plots.savefig(fig, "02_params_by_module", FIGURES_DIR, {"a": DRAFTER_A, "b": DRAFTER_B})
fig = plots.plot_mismatch_map(report["tensor_diff"])
plots.savefig(fig, "02_mismatch_map", FIGURES_DIR, {"a": DRAFTER_A, "b": DRAFTER_B})

# %% [markdown]
# ## 4 · The seed's case at full size: Kimi-K2 drafter vs a Kimi-K2.5 drafter
# Two checkpoints with the real Kimi-K2 drafter shapes are written as sparse files (no bytes of
# weights on disk), their configs differing as the seed's did: `max_position_embeddings`,
# `max_window_layers` and `transformers_version`; the K2.5 one saved without the embedding.

# %%
from eaglelab.checkpoints.synthetic import KIMI_K2_DRAFTER_CONFIG, write_synthetic_drafter

k25_config = {**KIMI_K2_DRAFTER_CONFIG, "max_position_embeddings": 262144, "max_window_layers": 48,
              "transformers_version": "4.56.2"}
k2_dir = write_synthetic_drafter(Path(SCRATCH_DIR) / "kimi-k2-drafter", KIMI_K2_DRAFTER_CONFIG)
k25_dir = write_synthetic_drafter(Path(SCRATCH_DIR) / "kimi-k25-drafter", k25_config, include_embedding=False)
start = time.perf_counter()
kimi = compare_checkpoints(str(k2_dir), str(k25_dir))
kimi_s = time.perf_counter() - start
kimi_a = kimi.a.to_json()
kimi_spec = kimi.a.spec
print(f"Kimi-K2 drafter: H {kimi_spec.hidden_size}, V {kimi_spec.vocab_size}, Vd {kimi_spec.draft_vocab_size}; "
      f"{kimi_a['total_bytes'] / 1e9:.2f} GB in {KIMI_K2_DRAFTER_CONFIG['torch_dtype']}")
display(pd.DataFrame(kimi.to_json()["config_diff"]))
display(pd.DataFrame([t for t in kimi.to_json()["tensor_diff"] if t["status"] != "same"]))
print(f"verdict: {kimi.verdict.level}; read in {kimi_s * 1e3:.0f} ms without loading a tensor")
for r in kimi.verdict.reasons:
    print("  -", r)

# %% [markdown]
# ## 5 · Real SpecForge configs
# Every drafter config SpecForge ships (copied into `data/fixtures/specforge-configs`, see its
# README) must parse into a consistent expected-tensor table (`tensor_table.table_problems`: fc, q/k/v,
# o_proj, MLP, lm_head and vocabulary maps wired into one layer), and says whether eaglelab computes
# it exactly as its engine does (`computed`, else the flag it refuses; `docs/EAGLE3_FORMAT.md` §1.1);
# the EAGLE-3 vs EAGLE-3.1 configs of Qwen3-30B-A3B show a real architecture difference (`fc_norm`).

# %%
from eaglelab.checkpoints.inspection import config_table
from eaglelab.checkpoints.config_diff import diff_configs

rows = config_table(sorted(Path(FIXTURES_DIR).glob("*.json")))
table = pd.DataFrame(rows).set_index("config")
display(table)
pair = [Path(FIXTURES_DIR) / "qwen3-30B-A3B-eagle3.json", Path(FIXTURES_DIR) / "qwen3-30B-A3B-eagle3.1.json"]
fc_norm_diff = diff_configs(*(json.loads(p.read_text()) for p in pair))
display(pd.DataFrame([vars(d) for d in fc_norm_diff]))

# %% [markdown]
# ## Findings

# %%
arch = [d for d in report["config_diff"] if d["category"] == "architecture"]
findings = f"""
- **{compared.headline(TAG)}.**
- **The pair {TAG}** (`{DRAFTER_A}` vs `{DRAFTER_B}`, on `{TARGET}`): A vs B **{comparison.verdict.level}**;
  {len(report['config_diff'])} config keys differ ({len(arch)} of them architecture);
  {sum(t['status'] != 'same' for t in report['tensor_diff'])} of {len(report['tensor_diff'])} tensors differ in shape,
  dtype or presence. On the new target: A is **{comparison.target_verdicts['a'].level}**, B is
  **{comparison.target_verdicts['b'].level}**. Vocabulary maps: **{vocab.level if vocab else 'not readable'}**{
  (' — ' + vocab.message) if vocab else ''}.
- **Kimi-K2 vs K2.5 drafter shapes [sample]** (public configs, zero-filled sparse weights): verdict **{kimi.verdict.level}** — the config differences are
  {', '.join(f"`{d['key']}` ({d['category']})" for d in kimi.to_json()['config_diff'])}. The {kimi_spec.vocab_size}-row
  `embed_tokens` is the *target's vocabulary* copied from the target, present in one checkpoint only and
  injected by SGLang anyway; attention weights are present in both ({kimi_a['parameters_without_embedding'] / 1e9:.2f} B
  parameters without the embedding, {kimi_a['total_bytes'] / 1e9:.2f} GB with it), read in {kimi_s * 1e3:.0f} ms from headers.
- **SpecForge configs [sample]:** {int(table['consistent'].sum())} of {len(table)} real configs parse into consistent tensor
  tables{'' if table['consistent'].all() else ' (inconsistent: ' + ', '.join(table.index[~table['consistent']]) + ')'};
  eaglelab computes {int(table['computed'].sum())} of them exactly as SpecForge does{'' if table['computed'].all() else
  ' (refused: ' + '; '.join(f"{', '.join(f'`{n}`' for n in names)}: {why}"
                            for why, names in table[~table['computed']].groupby('refused').groups.items()) + ')'};
  EAGLE-3 vs EAGLE-3.1 of Qwen3-30B-A3B differ in {', '.join(f"`{d.key}` ({d.category})" for d in fc_norm_diff)}.
"""
display(Markdown(findings))
save_findings("02", {"headline": report["headline"], "verdict": report["verdict"], "vocab_maps": report["vocab_maps"],
                     "checkpoints": {"a": DRAFTER_A, "b": DRAFTER_B, "target": TARGET},
                     "kimi_verdict": kimi.to_json()["verdict"]},
              bullets_from_markdown(findings), FIGURES_DIR)
