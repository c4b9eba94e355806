"""Subcommands that read files and numbers only (``run``, ``perf``, ``plan``, ``predict``, ``report``, ``recipe``;
the checkpoints' own, ``inspect``, ``compare`` and ``compare-targets``, are in :mod:`eaglelab.cli.checkpoints`).

None of them imports torch or transformers: they start in a fraction of a second.
"""

from __future__ import annotations

from eaglelab.cli.arguments import add_settings, settings_from
from eaglelab.cli.output import print_report
from eaglelab.jobs.perf import PerfSettings, diagnose_serving
from eaglelab.jobs.plan import PlanSettings, founding_help, plan_options
from eaglelab.jobs.predict import PredictSettings, predict_plugin_tau
from eaglelab.jobs.recipe import RecipeJobSettings, write_recipe
from eaglelab.workbook.commands import ReportSettings, RunSettings, run_notebooks, write_report

# --------------------------------------------------------------------------- run

def cmd_run(args) -> int:
    return print_report(run_notebooks(settings_from(args, RunSettings)), False)


# --------------------------------------------------------------------------- perf, plan

def cmd_perf(args) -> int:
    return print_report(diagnose_serving(settings_from(args, PerfSettings)), args.json)


def cmd_plan(args) -> int:
    return print_report(plan_options(settings_from(args, PlanSettings)), args.json)


def cmd_predict(args) -> int:
    return print_report(predict_plugin_tau(settings_from(args, PredictSettings)), args.json)


def cmd_report(args) -> int:
    return print_report(write_report(settings_from(args, ReportSettings)), False)


def cmd_recipe(args) -> int:
    return print_report(write_recipe(settings_from(args, RecipeJobSettings)), args.json)


def add_parsers(sub) -> None:
    """Register the metadata subcommands on the ``eaglelab`` subparsers."""
    r = sub.add_parser("run", help="execute the numbered notebooks (papermill)",
                       description="Execute the workbook's numbered notebooks in order.")
    add_settings(r, RunSettings)
    r.set_defaults(func=cmd_run)

    f = sub.add_parser("perf", help="throughput model: effective tok/s, break-even, requirements, per concurrency; "
                                    "or parse a log",
                       description="From a measured cycle time and acceptance length to tok/s, or from a "
                                   "SGLang / vLLM server log to a table of measured points; with --concurrency, "
                                   "speedup and break-even τ against the requests in flight.")
    add_settings(f, PerfSettings)
    f.add_argument("--json", action="store_true", help="machine-readable output")
    f.set_defaults(func=cmd_perf)

    pl = sub.add_parser("plan", help="the decision table: what each option (plug in, warm start, scratch) needs and gives",
                        description="From your serving numbers to the decision table: break-even and goal τ, "
                                    "projected τ and tok/s of each option with bands, the samples still to generate "
                                    "and how long that takes, and the recommendation. Flags left out take the "
                                    "founding case's numbers (Kimi-K2.5 on 8 PCIe GPUs), labelled [default].")
    add_settings(pl, PlanSettings, helps=founding_help())
    pl.add_argument("--json", action="store_true", help="machine-readable output")
    pl.set_defaults(func=cmd_plan)

    pr = sub.add_parser("predict", help="the old drafter's τ on a new target, predicted from engine logprobs",
                        description="Predict the plug-in τ of the old drafter on the new target before running it "
                                    "there: from its acceptance on the old target (a server log, or given) and both "
                                    "targets' prompt logprobs on the same teacher-forced text, as vLLM "
                                    "(prompt_logprobs) or SGLang (return_logprob) return them, one response per line "
                                    "(layouts: eaglelab/engines/logprob_files.py). Prints τ with its band and the "
                                    "projected tok/s.")
    add_settings(pr, PredictSettings)
    pr.add_argument("--json", action="store_true", help="machine-readable output")
    pr.set_defaults(func=cmd_predict)

    r = sub.add_parser("report", help="write the game-plan markdown from the exported findings",
                       description="Assemble GAME_PLAN.md from the notebooks' findings and figures.")
    add_settings(r, ReportSettings)
    r.set_defaults(func=cmd_report)

    rc = sub.add_parser("recipe", help="scripts for the cluster: the warm start (SpecForge / speculators), or the "
                                       "probe's hidden-state dumps",
                        description="Write a runnable, commented script (and its config files). --job warm-start "
                                    "(default): warm-start the old drafter for the new target at scale: regenerate "
                                    "responses, capture hidden states, train with the old drafter's own d2t / t2d, "
                                    "export, check, serve. --job probe: dump both targets' hidden states at the old "
                                    "drafter's layers on the same conversations (SpecForge on SGLang, or vLLM through "
                                    "speculators where the targets are not MLA), then probe the dumps. Reads configs "
                                    "and headers only.")
    add_settings(rc, RecipeJobSettings)
    rc.add_argument("--json", action="store_true", help="print the recipe's steps as JSON")
    rc.set_defaults(func=cmd_recipe)
