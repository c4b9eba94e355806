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
# # 01 · Performance diagnosis: is speculation paying off?
#
# **Question.** Given a measured cycle time and acceptance length (and real serving logs), what
# throughput does EAGLE-3 deliver, where is break-even, and what acceptance would a throughput
# goal demand?
#
# **Inputs.** Your serving scenario: plain-decoding tok/s, speculative cycle time, acceptance
# length τ, the throughput goal (the tok/s wanted), the data behind the drafter and how fast you generate more
# (defaults: the founding case, Kimi-K2.5 on 8 PCIe GPUs: 82 tok/s, 30 ms, τ = 2.0, 37k samples,
# 150 tok/s wanted); SGLang / vLLM logs (`LOG_FILES`); for the closed-loop check on this machine, the old
# target and its drafter (`OLD_TARGET`, `OLD_DRAFTER`: yours when given and small enough to load here,
# else the offline world's, and the findings say which).
#
# **Outputs.** Figures `01_*` (PNG + PDF + parameter sidecar) in `FIGURES_DIR`; the decision table
# for your scenario (section 6, and the game plan); speedup and break-even τ against concurrency
# (section 7: up to how many requests in flight speculation pays); the findings at the end, every
# number tagged with its source ([default], [entered], [your logs], [sample], [demo], [assumed], [derived]).
# τ counts the bonus token, as SGLang and vLLM report it (1.0 = no gain).

# %% tags=["parameters"]
SMOKE = False
FIGURES_DIR = "../figures"
WORLD = "demo"  # the offline world: "demo" (SmolLM2-135M pair) or "tiny"; smoke runs use "tiny"
WORLD_DIR = None  # None: data/worlds/<WORLD> (built on first use)
BASELINE_TPS = 82.0  # plain decoding, tok/s
CYCLE_MS = 30.0  # one speculative cycle: draft steps + verify + overhead
ACCEPT_LEN = 2.0  # measured τ, bonus token included
PER_STEP_ACCURACY = 0.64  # measured per-position acceptance
K = 3  # drafts per cycle (the scenario's, and the closed loop's on the demo world)
K_CHAIN = 7  # a longer chain (k) at which to ask what per-position acceptance each goal needs
GOAL_TPS = 150.0  # the throughput wanted, tok/s (one number, as in notebook 04)
CHART_GOALS_TPS = [100, 150, 200]  # further goals the charts mark and the requirement table answers
MEASURED_VERIFY_MS = 30.0
LOG_FILES = ["../data/logs/sglang_kimi_k25_sample.log", "../data/logs/vllm_sample.log"]
MEASURE_PROMPTS = 4  # the closed loop: prompts decoded plain and speculatively (as notebooks 03-05 measure)
MEASURE_TOKENS = 48  # tokens generated per prompt and run
MODEL_TOLERANCE = 0.10  # the performance model counts as confirmed within this relative error of the measurement
# the decision table (section 6): what it takes to reach GOAL_TPS
SAMPLES = 37_000  # samples of the new target's data your served drafter was trained on
GEN_TPS = 82.0  # tok/s at which you generate training data (all streams together)
TOKENS_PER_SAMPLE = 512
OLD_SAMPLES = 1_400_000  # samples the old (community) drafter was trained on
PLUGIN_TAU = None  # the old drafter's τ on the new target, from notebook 03 on your checkpoints
EXPONENTS = [0.1, 0.3]  # assumed range of the data exponent (miss rate ∝ samples^-b) until you measure it
# speculation under load (section 7)
AT_CONCURRENCY = 1  # requests in flight when BASELINE_TPS and CYCLE_MS were measured
CONCURRENCY = [1, 8, 64, 128]  # the concurrencies to answer for
PLAIN_LOG = None  # your server's log without speculation: the measured speedup per concurrency
LOAD_BATCHES = [1, 4, 16]  # the demo world in vLLM, batched at these concurrencies (the model checked on this machine)
LOAD_TOKENS = 32
LOAD_FORCED_TAUS = [1.5, 2.5]  # the τ forced in vLLM for the cost table (each in [1, K + 1])
SERVING_ENGINE = "vllm"  # None: skip the vLLM measurement
# the closed loop and the vLLM check on this machine: the drafter on its own target
OLD_TARGET = None  # None: the offline world's target A
OLD_DRAFTER = None  # None: the offline world's drafter-a (trained on A)

# %%
from pathlib import Path

import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from eaglelab.jobs.load_engine import HereSettings
from eaglelab.planning import provenance as pv
from eaglelab.planning.decision_table import Scenario, plan
from eaglelab.planning.render import plan_markdown
from eaglelab.serving import perf
from eaglelab.serving.log_set import LogSet
from eaglelab.workbook import figures, plots
from eaglelab.workbook.opening import open_case
from eaglelab.workbook.report import bullets_from_markdown, findings_markdown

# the closed loop's checkpoints: yours when given (both), else the offline world's; checked before anything runs
case = open_case("01", globals(), HereSettings)  # a smoke run measures the settings' smoke sizes
OLD_TARGET, OLD_DRAFTER = case.values.values()
sizes, scenario = case.settings, Scenario.from_parameters(globals())  # each number tagged with its source

# %% [markdown]
# ## 1 · The seed's calculation, as a checked model
# tok/s = τ / T_cycle; break-even τ* = T_cycle × baseline tok/s; required τ = goal × T_cycle.

# %%
GOALS = sorted({*CHART_GOALS_TPS, GOAL_TPS})
T = {name: pv.tag(scenario.source(name)) for name in ("baseline_tps", "cycle_ms", "accept_len", "goal_tps")}
diag = perf.diagnose(BASELINE_TPS, CYCLE_MS, ACCEPT_LEN, GOALS)
requirements = pd.DataFrame(perf.requirement_table(GOALS, CYCLE_MS / 1e3, k=K))
display(pd.Series({k: v for k, v in diag.to_json().items() if k != "required_accept_len"}, name="value").to_frame())
display(requirements.round(3))

# %%
accept_grid = np.linspace(1.0, 7.0, 121)
figure_params = {"baseline_tps": BASELINE_TPS, "cycle_ms": CYCLE_MS, "accept_len": ACCEPT_LEN}
curves = {f"cycle {ms:g} ms": perf.effective_tps(accept_grid, ms / 1e3) for ms in (CYCLE_MS / 2, CYCLE_MS, CYCLE_MS * 1.5)}
fig = plots.plot_tps_vs_accept_len(accept_grid, curves, BASELINE_TPS,
                                   points=[(ACCEPT_LEN, diag.effective_tps, "measured")], goals=GOALS)
plots.savefig(fig, "01_tps_vs_accept_len", FIGURES_DIR, figure_params)

# %%
# your range: a third of the cycle to twice it, τ up to what the goal needs (or k + 1)
cycle_grid = np.linspace(CYCLE_MS / 3, 2 * CYCLE_MS, 111)
tau_grid = np.linspace(1.0, max(K + 1, scenario.goal_tau) + 0.5, 121)
speedup = perf.tokens_per_s_grid(tau_grid, cycle_grid) / BASELINE_TPS
fig = plots.plot_speedup_map(speedup, tau_grid, cycle_grid, GOAL_TPS / BASELINE_TPS,
                             points=[(ACCEPT_LEN, CYCLE_MS, f"you: τ {ACCEPT_LEN:g}, {CYCLE_MS:g} ms")])
plots.savefig(fig, "01_speedup_map", FIGURES_DIR, {**figure_params, "goal_tps": GOAL_TPS})

# %% [markdown]
# ## 2 · What acceptance can a drafter reach?
# With per-position acceptance α on a chain of k drafts, E[τ] = (1 − α^(k+1)) / (1 − α)
# (Leviathan et al. 2023). The dashed tree curves are an optimistic bound (candidates assumed
# independent, see `perf.accept_len_tree`).

# %%
alphas = np.linspace(0.0, 0.95, 96)
tau_curves = {f"chain k={k}": perf.accept_len_constant_rate(alphas, k) for k in (1, 3, 5, 7)}
tau_curves["tree top-2, depth 3"] = np.array([perf.accept_len_tree(a, 3, 2) for a in alphas])
needs = perf.acceptance_needs(GOALS, CYCLE_MS, K_CHAIN, PER_STEP_ACCURACY, K)
fig = plots.plot_tau_vs_accuracy(alphas, tau_curves, marks=[(PER_STEP_ACCURACY, needs.tau_at_alpha, f"α={PER_STEP_ACCURACY}, k={K}")])
plots.savefig(fig, "01_tau_vs_accuracy", FIGURES_DIR, {"per_step_accuracy": PER_STEP_ACCURACY, "k": K})
display(needs.table())

# %% [markdown]
# ## 3 · Why is the verify 30 ms? The serving-cost model, term by term
# One model of the target's forward (`eaglelab.serving.load`): the weights it reads (a verify of k+1
# tokens wakes more experts than a decode step, N(1 − (1 − K/N)^t)), the FLOPs of every token, the
# tensor-parallel all-reduces (on PCIe two per layer), and, for a step that is not a CUDA graph, each
# kernel's launch. Here the founding case's Kimi-K2.5 on 8 PCIe GPUs [assumed], calibrated at your point.

# %%
from eaglelab.serving.cycle_cost import cycle_cost
from eaglelab.serving.load import kimi_k25_on_pcie
from eaglelab.serving.load_fit import Point, calibrate
from eaglelab.serving.target_shape import distinct_experts_touched

seed_point = Point(AT_CONCURRENCY, decode_s=1.0 / BASELINE_TPS, cycle_s=CYCLE_MS / 1e3, k=K)
moe = calibrate(kimi_k25_on_pcie(), [seed_point])
cost = cycle_cost(moe, K, f"the serving-cost model of Kimi-K2.5 on {moe.machine.gpus} PCIe GPUs [assumed]",
                  measured_verify_ms=MEASURED_VERIFY_MS)
tokens = np.arange(1, 17)
parts_ms = {name: 1e3 * v for name, v in moe.forward_parts(tokens, 1, "verify").items() if np.any(v > 0)}
fig = plots.plot_moe_verify(tokens, parts_ms, measured_ms=MEASURED_VERIFY_MS)
plots.savefig(fig, "01_moe_verify_cost", FIGURES_DIR, {"model": "kimi_k25_on_pcie", "gpus": moe.machine.gpus})
display(cost.table().round(3))
display(pd.DataFrame({"tokens": tokens,
                      "distinct experts": distinct_experts_touched(tokens, moe.target.experts_total,
                                                                   moe.target.experts_per_token).round(1),
                      "forward ms (verify, no graphs)": (moe.forward_s(tokens, 1, "verify") * 1e3).round(2)}
                     ).set_index("tokens").T)

# %% [markdown]
# ## 4 · Serving logs
# Each metrics line of an SGLang or vLLM log becomes a row; every other line is skipped.
# The bundled logs are illustrative (see `data/logs/README.md`): point `LOG_FILES` at yours.

# %%
logs = LogSet.read(LOG_FILES)
display(logs.table())
display(logs.by_concurrency())
fig = plots.plot_log_points(logs.records, accept_grid, {f"model, cycle {CYCLE_MS:g} ms": perf.effective_tps(accept_grid, CYCLE_MS / 1e3)},
                            BASELINE_TPS)
plots.savefig(fig, "01_log_points", FIGURES_DIR, {"logs": LOG_FILES})

# %% [markdown]
# ## 5 · Closed loop: the model against a real measurement
# Real speculative decoding of the old drafter on its own target (`OLD_TARGET`, `OLD_DRAFTER`: yours when
# given and small enough to load here, else the offline world's target A and drafter-a; CPU), against
# plain greedy decoding in the same process; the model predicts tok/s from the measured τ and the
# measured cycle split. On a CPU, stock PyTorch makes a verify of k + 1 tokens cost far more
# than a one-token decode step (an MKL kernel choice for 2-16 rows); the run routes the target's
# linear layers through the small-batch path of `eaglelab.model.cpu_kernels`, as a serving engine
# picks its kernels. The findings quote the measured ratio; `benchmarks/bench_speculation.py`
# measures both paths side by side.

# %%
from eaglelab.checkpoints.targets.footprint import fits_here
from eaglelab.data.sets import measure_prompts, world_of
from eaglelab.model.decoding import benchmark_speculation
from eaglelab.model.drafter_files import load_drafter
from eaglelab.model.targets import Target, load_target

LOOP_TAG = case.tag
fit = fits_here(OLD_TARGET, "float32")
loop = None
if fit.loads:
    model_a, tokenizer = load_target(OLD_TARGET, device="cpu")
    drafter_a = load_drafter(OLD_DRAFTER)
    target_a = Target.for_drafter(model_a, drafter_a.spec)
    prompt_ids = measure_prompts(tokenizer, sizes.measure_prompts, world_of(OLD_TARGET))
    loop = benchmark_speculation(target_a, drafter_a, prompt_ids, sizes.measure_tokens, k=K)
    fig = figures.closed_loop_figure(loop)
    plots.savefig(fig, "01_closed_loop", FIGURES_DIR, {"k": K, "prompts": sizes.measure_prompts, "target": OLD_TARGET})
    display(pd.Series({key: v for key, v in loop.to_json().items() if key != "timing"}).to_frame("closed loop"))
    if not loop.timing_ok:
        display(Markdown(f"**⚠ Not a measurement to quote:** {loop.timing_note}."))
else:
    case.not_done.append(f"the closed loop and the vLLM check did not run: {fit.line}; your logs and measured numbers "
                         "(sections 4 and 7) stand in for them")
    print(case.not_done[-1])

# %% [markdown]
# ## 6 · The decision table: what it takes to reach the goal
# From your numbers only: the τ break-even and the goal need, then each option (serve as now,
# plug in the old drafter, warm start or scratch at growing data budgets) with its projected τ and
# tok/s, the samples still to generate and how long that takes. How τ grows with data is a law
# anchored at your drafter's point (τ at `SAMPLES`; the median of your logs when `LOG_FILES` are
# yours and `ACCEPT_LEN` is left at its default), with an assumed exponent range until a sweep on
# your data measures it (notebook 04). The game plan rebuilds this table with the plug-in τ of
# notebook 03 when that ran on your checkpoints. `eaglelab plan` prints the same table.

# %%
logs_source = pv.files_source(LOG_FILES, "../data/logs")
if logs_source == pv.LOGS:  # your logs: their median τ, unless you entered ACCEPT_LEN
    scenario = scenario.with_logged_tau(logs.median_tau)
decision = plan(scenario, lever=cost.lever)
display(Markdown(plan_markdown(decision)))
rows = [r.to_json() for r in decision.rows]
fig = plots.plot_options(rows, scenario.break_even_tau, scenario.goal_tau, K + 1,
                         title="Options from notebook 01's numbers alone (the game plan adds 03 / 04's evidence)")
plots.savefig(fig, "01_options", FIGURES_DIR, {**figure_params, "goal_tps": GOAL_TPS, "samples": SAMPLES})

# %% [markdown]
# ## 7 · Does it pay at your load? Speedup and break-even τ against concurrency
# At small batch a verify of k + 1 tokens per request costs about one read of the weights, like a
# decode step, plus its extra tokens' compute; as requests pile up that compute adds up (and a MoE
# wakes more of its experts), so the verify costs up to k + 1 decode steps while τ stays what it was.
# The one serving-cost model (`eaglelab.serving.load`, here the founding case's Kimi-K2.5 on 8 PCIe
# GPUs [assumed]) is calibrated on your measured point (`BASELINE_TPS`, `CYCLE_MS` at `AT_CONCURRENCY`),
# so it reproduces it exactly there; your logs' groups by concurrency are drawn beside it (with
# `PLAIN_LOG`, their measured speedups). `eaglelab perf --concurrency 1 8 64 128` prints the table,
# `eaglelab perf --costs` fits it to a cost table measured on your cluster (`eaglelab recipe --job load`).

# %%
from eaglelab.jobs.load import LoadSettings, speculation_under_load
from eaglelab.jobs.load_engine import EngineCostFit, EngineLoadCheck, engine_load_check

load = speculation_under_load(LoadSettings(concurrency=tuple(CONCURRENCY), baseline_tps=BASELINE_TPS, cycle_ms=CYCLE_MS,
                                           accept_len=scenario.accept_len, at_concurrency=AT_CONCURRENCY, k=K))
display(load.table())
print("\n".join([load.crossover(), *(load.band.lines() if load.band else [])]))
log_load = [speculation_under_load(LoadSettings(accept_len=scenario.accept_len, k=K, log=f, plain_log=PLAIN_LOG,
                                                baseline_tps=BASELINE_TPS, cycle_ms=CYCLE_MS,
                                                at_concurrency=AT_CONCURRENCY)) for f in LOG_FILES]
groups = [r for report in log_load for r in report.log_rows]
display(pd.DataFrame(groups) if groups else Markdown("*the logs hold no concurrency*"))
with_speedup = [r for r in groups if r.get("speedup")]  # a group the plain log also has
measured_points = {f"measured {pv.tag(logs_source)}": ([r["concurrency"] for r in with_speedup],
                                                      [r["speedup"] for r in with_speedup])} if with_speedup else {}
fig = figures.load_figure(load, measured_points)
plots.savefig(fig, "01_concurrency", FIGURES_DIR, {**figure_params, "at_concurrency": AT_CONCURRENCY, "k": K})

# %% [markdown]
# ### Measured here: the old target in vLLM at several concurrencies
# The load model checked against a real engine on this machine: the old target alone and with its drafter,
# batched at each of `LOAD_BATCHES` in vLLM (CPU build, `make engine`); the model (the old target on this
# CPU) is calibrated on the smallest and largest batch, and the ones between are held out. The figure draws
# the model at the runs' mean τ and, as points, at each concurrency's own measured τ.
# Skipped, with the reason, where vLLM's environment is absent.

# %%
here = EngineLoadCheck.skipped("the old target does not load here")
if loop is not None:
    here_prompts = measure_prompts(tokenizer, max(sizes.load_batches), world_of(OLD_TARGET))
    here = engine_load_check(OLD_TARGET, OLD_DRAFTER, here_prompts, sizes.load_tokens, K, list(sizes.load_batches),
                             model_a.config.to_dict(), engine=SERVING_ENGINE)
if here.rows:
    display(here.table().round(3))
    fig = figures.engine_load_figure(here, K, LOOP_TAG, title=f"{Path(OLD_TARGET).name} in {here.status}")
    plots.savefig(fig, "01_concurrency_here", FIGURES_DIR,
                  {"batches": sizes.load_batches, "tokens": sizes.load_tokens, "k": K})
else:
    print(f"vLLM measurement skipped: {here.status}")

# %% [markdown]
# ### Measured here: the cost of a cycle at forced τ, and the model fitted to it
# What `eaglelab recipe --job load` measures on your cluster, done here in vLLM's CPU build: the old target
# alone, then with its drafter at forced τ (`LOAD_FORCED_TAUS`: vLLM's synthetic acceptance; the drafter
# drafts and the target verifies for real, only the acceptance is forced), batched at each of
# `LOAD_BATCHES`, into a cost table (`FIGURES_DIR/01_costs.csv`); the model on this CPU fitted to every row
# (`eaglelab perf --costs`), and fitted to the smallest and largest batch alone to predict the ones between.

# %%
from eaglelab.jobs.load_engine import engine_cost_fit

costs = EngineCostFit.skipped("the old target does not load here")
if loop is not None:
    costs = engine_cost_fit(OLD_TARGET, OLD_DRAFTER, here_prompts, sizes.load_tokens, K, list(sizes.load_batches),
                            LOAD_FORCED_TAUS, str(Path(FIGURES_DIR) / "01_costs.csv"), engine=SERVING_ENGINE)
if costs.report is not None:
    display(costs.table().round(3))
    fig = figures.cost_fit_figure(costs, K, LOOP_TAG, title=f"{Path(OLD_TARGET).name} in {costs.status}: τ forced to "
                                                          f"{', '.join(map(str, LOAD_FORCED_TAUS))}")
    plots.savefig(fig, "01_cost_fit_here", FIGURES_DIR,
                  {"batches": sizes.load_batches, "taus": LOAD_FORCED_TAUS, "k": K})
else:
    print(f"cost table not measured: {costs.status}")

# %% [markdown]
# ## 8 · Explore
# Move the sliders: the numbers (tok/s, speedup, break-even τ, the τ each goal needs) update at
# once from `perf.diagnose` (called directly above, so a headless run checks the same function), then
# the figure redraws; "reset to measured" returns to your scenario.

# %%
from eaglelab.workbook.widgets import perf_explorer

perf_explorer(BASELINE_TPS, CYCLE_MS, ACCEPT_LEN, GOALS, accept_grid, k=K)

# %% [markdown]
# ## Findings

# %%
said = {**diag.findings(T), **needs.findings(T["accept_len"]), **cost.findings(T["cycle_ms"]),
        **logs.findings(pv.tag(logs_source)), **load.findings(T["cycle_ms"]), **here.findings(LOOP_TAG),
        **costs.findings(LOOP_TAG)}
said["plan"] = f"**Decision table** (your scenario, {GOAL_TPS:g} tok/s wanted {T['goal_tps']}): {decision.text}"
said["closed_loop"] = loop.findings(MODEL_TOLERANCE, LOOP_TAG, f"CPU, `{Path(OLD_DRAFTER).name}` on `{Path(OLD_TARGET).name}`, "
                                    f"k = {K}; checks the model on this machine, not your serving numbers")["closed_loop"] \
    if loop else f"**Closed loop {LOOP_TAG}:** not run: {fit.line}."
findings = "".join(f"- {said[name]}\n" for name in ("pays", "break_even", "goals", "acceptance", "cycle", "logs", "plan",
                                                     "load", "band", "engine_load", "engine_costs", "closed_loop") if said[name])
findings += "".join(f"- **Not done with the checkpoints given:** {line}.\n" for line in case.not_done)
display(Markdown(findings_markdown(findings)))
case.save({"diagnosis": diag.to_json(), "closed_loop": loop.to_json() if loop else None, "plan": decision.to_json(),
           "lever": cost.lever, "load": load.to_json(), "engine_load": here.to_json(), "engine_costs": costs.to_json()},
          bullets_from_markdown(findings), FIGURES_DIR, logs=[*LOG_FILES, *([PLAIN_LOG] if PLAIN_LOG else [])])
