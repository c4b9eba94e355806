"""Subcommands that read files and numbers only (``run``, ``perf``, ``plan``, ``predict``, ``report``, ``showroom``, ``recipe``;
the checkpoints' own, ``inspect``, ``compare`` and ``compare-targets``, are in :mod:`eaglelab.cli.checkpoints`).

None of them imports torch or transformers: they start in a fraction of a second.
"""

from __future__ import annotations

from eaglelab.cli.output import Command
from eaglelab.jobs.perf import PerfSettings, diagnose_serving
from eaglelab.jobs.plan import PlanSettings, founding_help, plan_options
from eaglelab.jobs.predict import PredictSettings, predict_plugin_tau
from eaglelab.jobs.recipe import RecipeJobSettings, job_defaults_help, write_recipe
from eaglelab.workbook.commands import ReportSettings, RunSettings, run_notebooks, write_report
from eaglelab.workbook.showroom import ShowroomSettings, build_showroom

COMMANDS = (
    Command("run", RunSettings, run_notebooks, "execute the numbered notebooks (papermill)",
            "Execute the workbook's numbered notebooks in order.", json=None),
    Command("perf", PerfSettings, diagnose_serving,
            "throughput model: effective tok/s, break-even, requirements, per concurrency; or parse a log",
            "From a measured cycle time and acceptance length to tok/s, or from a SGLang / vLLM server log to a table "
            "of measured points; with --concurrency, speedup and break-even τ against the requests in flight."),
    Command("plan", PlanSettings, plan_options,
            "the decision table: what each option (plug in, warm start, scratch) needs and gives",
            "From your serving numbers to the decision table: break-even and goal τ, projected τ and tok/s of each "
            "option with bands, the samples still to generate and how long that takes, and the recommendation. Flags "
            "left out take the founding case's numbers (Kimi-K2.5 on 8 PCIe GPUs), labelled [default].",
            helps=founding_help()),
    Command("predict", PredictSettings, predict_plugin_tau,
            "the old drafter's τ on a new target, predicted from engine logprobs",
            "Predict the plug-in τ of the old drafter on the new target before running it there: from its acceptance "
            "on the old target (a server log, or given) and both targets' prompt logprobs on the same teacher-forced "
            "text, as vLLM (prompt_logprobs) or SGLang (return_logprob) return them, one response per line (layouts: "
            "eaglelab/engines/logprob_files.py). Prints τ with its band and the projected tok/s."),
    Command("report", ReportSettings, write_report, "write the game-plan markdown from the exported findings",
            "Assemble GAME_PLAN.md from the notebooks' findings and figures.", json=None),
    Command("showroom", ShowroomSettings, build_showroom,
            "copy a whole workbook run's game plan, figures and notebooks into the showroom, stamped",
            "Copy the game plan, its figures and findings (FIGURES) and the executed notebooks (RUNS) of a whole "
            "`make workbook` run into OUT (docs/example), with STAMP.json: the commit and date they were made from and "
            "the headline numbers. `make showroom` runs the workbook and this.", json=None),
    Command("recipe", RecipeJobSettings, write_recipe,
            "scripts for the cluster: the warm start (SpecForge / speculators), the probe's hidden-state dumps, or the "
            "serving engine's cost table",
            "Write a runnable, commented script (and its config files). --job warm-start (default): warm-start the old "
            "drafter for the new target at scale: regenerate responses, capture hidden states, train with the old "
            "drafter's own d2t / t2d, export, check, serve. --job probe: dump both targets' hidden states at the old "
            "drafter's layers on the same conversations (SpecForge on SGLang, or vLLM through speculators where the "
            "targets are not MLA), then probe the dumps. --job load: the serving engine's cost table for `eaglelab "
            "perf --costs`. Reads configs and headers only.", json="print the recipe's steps as JSON",
            helps=job_defaults_help()),
)


def add_parsers(sub) -> None:
    """Register the metadata subcommands on the ``eaglelab`` subparsers."""
    for command in COMMANDS:
        command.add_to(sub)
