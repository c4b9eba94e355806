"""Subcommands that read files and numbers only (``run``, ``perf``, ``plan``, ``predict``, ``report``, ``recipe``;
the checkpoints' own, ``inspect``, ``compare`` and ``compare-targets``, are in :mod:`eaglelab.cli.checkpoints`).

None of them imports torch or transformers: they start in a fraction of a second.
"""

from __future__ import annotations

import sys

from eaglelab.cli.arguments import accept_len, add_settings, alias, checkpoint, count, fraction, positive, settings_from
from eaglelab.cli.output import print_json, print_report
from eaglelab.engines.load_recipes import LoadRecipeSettings, write_load_recipe
from eaglelab.engines.probe_recipes import ProbeRecipeSettings, write_probe_recipe
from eaglelab.engines.recipes import RecipeSettings, build_recipe
from eaglelab.errors import ParameterError
from eaglelab.jobs.load import LoadSettings, lines, load_model_for, speculation_under_load
from eaglelab.jobs.predict import PredictSettings, predict_plugin_tau
from eaglelab.outputs import table
from eaglelab.planning.decision_table import Scenario, plan
from eaglelab.planning.render import NEED_HEADERS, ROW_HEADERS, need_cells, row_cells, scenario_lines
from eaglelab.serving.gpus import GPUS
from eaglelab.serving.load import LINK_LATENCY_S, STEP_KINDS, VERIFY_KV, scales_table
from eaglelab.serving.logs import log_by_concurrency, parse_log
from eaglelab.serving.perf import diagnose
from eaglelab.serving.target_shape import KV_DTYPE_BYTES
from eaglelab.settings import DEFAULT_K
from eaglelab.workbook.report import write_game_plan
from eaglelab.workbook.runner import absolutise_paths, parse_parameter, run_workbook

# --------------------------------------------------------------------------- run

def cmd_run(args) -> int:
    params = {name: absolutise_paths(value) for name, value in map(parse_parameter, args.param)}
    out = args.out if args.out is not None else ("runs/smoke" if args.smoke else "runs/workbook")
    runs = run_workbook(out, smoke=args.smoke, only=args.only, parameters=params, prepare_only=args.prepare_only,
                        progress=not args.prepare_only)
    for r in runs:
        print(f"{r.notebook.name}: prepared -> {r.output}" if args.prepare_only else
              f"{r.notebook.name}: not run here ({r.not_run}); its findings say what to run instead" if r.not_run else
              f"{r.notebook.name}: {r.seconds:.1f} s -> {r.output}")
    return 0


# --------------------------------------------------------------------------- perf

def cmd_perf(args) -> int:
    if args.concurrency or args.plain_log or args.costs:
        return _perf_under_load(args)
    if args.log:
        parsed = parse_log(args.log)
        if args.json:  # record by record: the log's size in output, not in memory
            for chunk in parsed.json_chunks():
                sys.stdout.write(chunk)
            print()
            return 0
        s = parsed.summary()
        print(f"{args.log}: {s['n']} metrics lines, {parsed.skipped_lines} other lines skipped, "
              f"{parsed.n_malformed} malformed")
        print(f"median accept length {s['median_accept_len']:.2f}, median throughput {s['median_throughput']}")
        rows = log_by_concurrency(parsed)
        if rows:
            print(table([[r["concurrency"], r["n"], f"{r['accept_len']:.2f}", _tps(r["throughput"]),
                          _tps(r["throughput_per_request"])] for r in rows],
                        ["concurrency", "n", "accept len", "tok/s (all)", "tok/s per request"]))
        else:
            print(table([[g["source"], g["n"], f"{g['median_accept_len']:.2f}", g["median_throughput"]]
                         for g in s["by_source"]], ["source", "n", "accept len", "tok/s"]))
        return 0
    missing = [n for n in ("baseline_tps", "cycle_ms", "accept_len") if getattr(args, n) is None]
    if missing:
        raise ParameterError("perf", "give --log FILE, or all of --baseline-tps, --cycle-ms and --accept-len")

    out = diagnose(args.baseline_tps, args.cycle_ms, args.accept_len, args.goal_tps or [], k=args.k)
    if args.json:
        print_json(out)
        return 0
    print(f"effective tok/s        {out['effective_tps']:.1f}  ({out['speedup']:.2f}x baseline {args.baseline_tps})")
    print(f"break-even τ           {out['break_even_tau']:.2f}")
    print(f"max cycle at break-even {out['max_cycle_ms_for_break_even']:.1f} ms")
    for tps, tau in out["required_accept_len"].items():
        print(f"{tps} tok/s needs accept len {tau:.2f}")
    print(out["verdict"])
    return 0


def _tps(x) -> str:
    return "-" if x is None else f"{x:.1f}"


def load_settings(args):
    """The command line's :class:`~eaglelab.jobs.load.LoadSettings` (its flags' defaults are the dataclass's)."""

    d = LoadSettings.__dataclass_fields__
    graphs = None if args.cuda_graphs is None else tuple(args.cuda_graphs or d["cuda_graphs"].default or STEP_KINDS)
    return LoadSettings(concurrency=tuple(args.concurrency or d["concurrency"].default),
                        baseline_tps=args.baseline_tps, cycle_ms=args.cycle_ms, accept_len=args.accept_len,
                        accept_lens=tuple(args.accept_lens) if args.accept_lens else None,
                        at_concurrency=args.at_concurrency, k=args.k, topk=args.topk, draft_tokens=args.draft_tokens,
                        target_config=args.target_config, gpu=args.gpu, gpus=args.gpus, link=args.link,
                        link_gbps=args.link_gbps, kv_dtype=args.kv_dtype, cuda_graphs=graphs,
                        verify_kv=args.verify_kv, context=args.context,
                        log=args.log, plain_log=args.plain_log, costs=tuple(args.costs) if args.costs else None)


def _perf_under_load(args) -> int:
    report = speculation_under_load(load_settings(args))
    if args.json:
        out = report.to_json()
        if args.baseline_tps is not None and args.cycle_ms is not None and args.accept_len is not None:
            out = {**diagnose(args.baseline_tps, args.cycle_ms, args.accept_len, args.goal_tps or [], k=args.k), **out}
        print_json(out)
        return 0
    if report.log_rows:
        print(table([[r["concurrency"], r["n"], f"{r['accept_len']:.2f}", _tps(r["throughput"]),
                      _tps(r.get("plain_throughput")), "-" if r.get("speedup") is None else f"{r['speedup']:.2f}x"]
                     for r in report.log_rows],
                    ["concurrency", "n (log)", "accept len", "tok/s", "plain tok/s", "measured"]))
        print()
    if report.rows:
        print(table([[r["concurrency"], f"{r['decode_ms']:.1f}", f"{r['verify_ms']:.1f}", f"{r['cycle_ms']:.1f}",
                      f"{r['speedup']:.2f}x", f"{r['break_even_tau']:.2f}", r["best_k"],
                      f"{r['best_speedup']:.2f}x"] for r in report.rows],
                    ["concurrency", "decode ms", "verify ms", "cycle ms", f"speedup (τ {report.tau:.2f})",
                     "break-even τ", "best k", "at best k"]))
        print(f"({report.source}" + (f", {report.calibration.line()})" if report.calibration is not None else ")"))
    if len(report.residuals) > 2:
        print()
        print(table([[r["concurrency"], r["what"], r["k"] or "-", r["context"] or "-", f"{r['measured_ms']:.2f}",
                      f"{r['model_ms']:.2f}", f"{100 * r['error']:+.1f}%"] for r in report.residuals],
                    ["concurrency", "measured", "k", "context", "measured ms", "model ms", "residual"]))
        print("each term, measured over its datasheet value: " + ", ".join(
            f"{r['term']} {r['multiplier']:.2f}x" for r in scales_table(report.model)))
    for line in lines(report):
        print(line)
    return 0


def cmd_plan(args) -> int:
    given = {name: getattr(args, name) for name in PLAN_FIELDS if getattr(args, name) is not None}
    if args.log and "accept_len" in given:
        raise ParameterError("plan", "give --accept-len or --log, not both")
    if args.exponent:
        given["exponents"] = tuple(args.exponent)
    if args.transfer:
        given["transfer_fraction"] = tuple(args.transfer)
    scenario = Scenario.founding_case(**given)
    if args.log:
        scenario = scenario.with_logged_tau(parse_log(args.log).summary()["median_accept_len"])

    graphs = None if args.cuda_graphs is None else tuple(args.cuda_graphs or STEP_KINDS)
    load, source = load_model_for(LoadSettings(target_config=args.target_config, gpu=args.gpu, gpus=args.gpus,
                                               link=args.link, kv_dtype=args.kv_dtype, cuda_graphs=graphs,
                                               verify_kv=args.verify_kv,
                                               context=args.context, k=scenario.k))
    result = plan(scenario, args.budgets, load=load, load_source=source, name_lever=args.verify_model != "none")
    if args.json:
        print_json(result.to_json())
        return 0
    print(table([list(r) for r in scenario_lines(result)], ["scenario", "value", "source"]))
    print()
    print(table(row_cells(result), ROW_HEADERS))
    print()
    if result.needs:
        print(table(need_cells(result), NEED_HEADERS))
        print("(the law has no ceiling below k + 1: samples are lower bounds)\n")
    print(result.text)
    return 0


#: Scenario fields the ``plan`` flags set (flag = field with dashes).
PLAN_FIELDS = ("baseline_tps", "cycle_ms", "accept_len", "goal_tps", "samples", "gen_tps", "tokens_per_sample",
               "k", "plugin_tau", "old_samples", "at_concurrency")


def cmd_predict(args) -> int:
    return print_report(predict_plugin_tau(settings_from(args, PredictSettings)), args.json)


def cmd_report(args) -> int:
    print(write_game_plan(args.figures, args.out))
    return 0


def cmd_recipe(args) -> int:
    if args.job == "probe":
        return _probe_recipe(args)
    if args.job == "load":
        return _load_recipe(args)
    if args.engine not in ("specforge", "speculators"):
        raise ParameterError("--engine", f"{args.engine} serves; the warm start trains with specforge or speculators")
    if args.old_target is not None:
        raise ParameterError("--old-target", "is the probe's old target: give it with --job probe")
    settings = RecipeSettings(engine=args.engine, old_drafter=args.old_drafter, new_target=args.new_target,
                              data=args.data or "prompts.jsonl",
                              workdir=args.workdir or "warm-start", gpus=args.gpus, learning_rate=args.lr, epochs=args.epochs,
                              ttt_length=args.ttt_length, k=args.k, max_length=args.max_length,
                              chat_template=args.chat_template, embedding_key=args.embedding_key,
                              lm_head_key=args.lm_head_key)
    recipe = build_recipe(settings, from_run=args.from_run)
    out = recipe.write(args.out, overwrite=args.force)
    if args.json:
        print_json(recipe.to_json())
        return 0
    print(f"wrote {out}/run.sh ({len(recipe.steps)} steps, {recipe.settings.engine}) "
          + " ".join(f"{out}/{name}" for name in recipe.files))
    for key, value in recipe.provenance.items():
        print(f"  {key}: {value}")
    print("  vocabulary: the whole target vocabulary (no map to keep)" if recipe.vocab_map["full_vocab"] else
          f"  vocabulary map kept: {recipe.vocab_map['draft_slots']} draft slots of {recipe.vocab_map['target_vocab']}")
    return 0


def _load_recipe(args) -> int:
    if args.engine not in ("sglang", "vllm"):
        raise ParameterError("--engine", f"--job load measures a serving engine: sglang or vllm, got {args.engine}")
    for flag, value in (("--new-target", args.new_target), ("--old-drafter", args.old_drafter)):
        if value is None:
            raise ParameterError(flag, "--job load serves the target with a drafter (its quality does not matter: τ is "
                                       "forced): give both --new-target and --old-drafter")
    d = LoadRecipeSettings.__dataclass_fields__
    given = {"concurrency": tuple(args.concurrency) if args.concurrency else None,
             "accept_lens": tuple(args.accept_lens) if args.accept_lens else None, "topk": args.topk,
             "draft_tokens": args.draft_tokens, "prompt_tokens": args.prompt_tokens, "output_tokens": args.output_tokens,
             "repeats": args.repeats, "workdir": args.workdir}
    settings = LoadRecipeSettings(engine=args.engine, new_target=args.new_target, old_drafter=args.old_drafter,
                                  gpus=args.gpus, k=args.k,
                                  **{n: v for n, v in given.items() if v is not None and n in d})
    recipe = write_load_recipe(settings, args.out, overwrite=args.force)
    if args.json:
        print_json(recipe.to_json())
        return 0
    print(f"wrote {args.out}/run.sh ({len(recipe.steps)} steps, {settings.engine}): plain decoding and the cycle at "
          f"forced τ per concurrency into costs.csv, then `eaglelab perf --costs`")
    return 0


def _probe_recipe(args) -> int:
    if args.old_target is None:
        raise ParameterError("--old-target", "--job probe dumps the old target too: give it (folder or hub id)")
    unused = [f"--{n.replace('_', '-')}" for n in ("from_run", "lr", "epochs", "ttt_length", "embedding_key", "lm_head_key")
              if getattr(args, n) is not None]
    if unused:
        raise ParameterError(unused[0], "is a warm-start setting; --job probe trains nothing")
    defaults = ProbeRecipeSettings.__dataclass_fields__
    settings = ProbeRecipeSettings(
        engine=args.engine, old_drafter=args.old_drafter, old_target=args.old_target, new_target=args.new_target,
        data=args.data if args.data is not None else defaults["data"].default,
        workdir=args.workdir if args.workdir is not None else defaults["workdir"].default, gpus=args.gpus,
        max_length=args.max_length,
        chat_template=args.chat_template)
    recipe = write_probe_recipe(settings, args.out, overwrite=args.force)
    if args.json:
        print_json(recipe.to_json())
        return 0
    print(f"wrote {args.out}/run.sh ({len(recipe.steps)} steps, {settings.engine}): dumps of both targets at layer "
          f"outputs {recipe.vocab_map['aux_layer_outputs']}, then `eaglelab probe --old-states --new-states`")
    for key, value in recipe.provenance.items():
        print(f"  {key}: {value}")
    return 0


def _machine_flags(p) -> None:
    """The serving-cost model's target and machine flags, shared by ``perf`` and ``plan``."""
    p.add_argument("--target-config", help="the target's config.json (or folder, hub id) for the serving-cost model "
                                           "(default: the founding case's Kimi-K2.5, assumed)")
    p.add_argument("--gpu", choices=sorted(GPUS) + ["cpu"],
                   help="the GPU, or cpu: this machine as the workbook's engine runs it (default: the founding case's "
                        "rtx-pro-6000, or h100-sxm for a --target-config; said so in the output)")
    p.add_argument("--gpus", type=count, help="GPUs of the tensor-parallel group (default: the founding case's 8, or "
                                              "the fewest that hold the config's weights)")
    p.add_argument("--link", choices=sorted(LINK_LATENCY_S), help="the interconnect, when not the GPU's usual one")
    p.add_argument("--link-gbps", type=positive, help="the all-reduce bus bandwidth measured on your GPUs (nccl-tests "
                                                      "busbw, GB/s)")
    p.add_argument("--kv-dtype", choices=sorted(KV_DTYPE_BYTES), default="bf16", help="the KV cache's dtype (default bf16)")
    p.add_argument("--cuda-graphs", nargs="*", choices=STEP_KINDS, metavar="KIND",
                   help="the step kinds that run as CUDA graphs: decode, verify, draft (bare: all; default: all, or "
                        "the founding case's decode and draft)")
    p.add_argument("--verify-kv", choices=VERIFY_KV, default="once",
                   help="how the verify's attention reads the KV cache: once per request (FlashAttention, FlashInfer, "
                        "FlashMLA; default) or per-token (decode kernels, e.g. vLLM's TRITON_MLA)")
    p.add_argument("--context", type=count, default=2048, help="mean context tokens per request (default 2048)")


def add_parsers(sub) -> None:
    """Register the metadata subcommands on the ``eaglelab`` subparsers."""
    r = sub.add_parser("run", help="execute the numbered notebooks (papermill)",
                       description="Execute the workbook's numbered notebooks in order.")
    r.add_argument("--smoke", action="store_true", help="tiny world, SMOKE=True, figures in OUT/figures")
    r.add_argument("--only", nargs="+", metavar="NN", help="notebook numbers or name parts, e.g. 01 03")
    r.add_argument("--out", help="folder for executed copies (default runs/workbook or runs/smoke)")
    r.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a notebook parameter for every notebook (repeatable): a Python literal of JSON's types "
                        "(numbers, strings, True / False / None, lists, dicts), else the text itself")
    r.add_argument("--prepare-only", action="store_true",
                   help="write the notebooks with their parameters filled in, without running them")
    r.set_defaults(func=cmd_run)

    f = sub.add_parser("perf", help="throughput model: effective tok/s, break-even, requirements, per concurrency; "
                                    "or parse a log",
                       description="From a measured cycle time and acceptance length to tok/s, or from a "
                                   "SGLang / vLLM server log to a table of measured points; with --concurrency, "
                                   "speedup and break-even τ against the requests in flight.")
    f.add_argument("--baseline-tps", type=positive, help="plain decoding tok/s per request")
    f.add_argument("--cycle-ms", type=positive, help="speculative cycle time in ms (draft + verify + overhead)")
    f.add_argument("--accept-len", type=accept_len, help="acceptance length tau (bonus token included)")
    f.add_argument("--goal-tps", type=positive, nargs="+", help="throughputs wanted: the τ each needs")
    alias(f, "--target-tps", "--goal-tps", "goal_tps", type=positive, nargs="+")
    f.add_argument("--log", help="SGLang or vLLM server log to parse instead (grouped by concurrency)")
    f.add_argument("--plain-log", help="the same server's log without speculation: the measured speedup per "
                                       "concurrency, and the model's calibration")
    f.add_argument("--concurrency", type=count, nargs="+", metavar="B",
                   help="requests in flight to answer for: speedup, break-even τ and the best k at each")
    f.add_argument("--at-concurrency", type=count, default=1,
                   help="the concurrency --baseline-tps and --cycle-ms were measured at (default 1)")
    f.add_argument("--k", type=count, default=DEFAULT_K, help=f"drafts per cycle (default {DEFAULT_K})")
    f.add_argument("--accept-lens", type=accept_len, nargs="+", metavar="TAU",
                   help="τ at each --concurrency, one per value (τ moves with load in published sweeps)")
    f.add_argument("--costs", nargs="+", metavar="CSV",
                   help="engines' cost tables (plain steps and cycles at forced τ, as `eaglelab recipe --job load` "
                        "measures; two at different prompt lengths or k tell the model's terms apart): the model is "
                        "fitted to them and every point's residual printed")
    f.add_argument("--topk", type=count, default=1, help="the drafter's branching per step (default 1: a chain)")
    f.add_argument("--draft-tokens", type=count, help="tokens verified per request per cycle (a tree; default k + 1)")
    _machine_flags(f)
    f.add_argument("--json", action="store_true", help="machine-readable output")
    f.set_defaults(func=cmd_perf)

    pl = sub.add_parser("plan", help="the decision table: what each option (plug in, warm start, scratch) needs and gives",
                        description="From your serving numbers to the decision table: break-even and goal τ, "
                                    "projected τ and tok/s of each option with bands, the samples still to generate "
                                    "and how long that takes, and the recommendation. Flags left out take the "
                                    "founding case's numbers (Kimi-K2.5 on 8 PCIe GPUs), labelled [default].")
    pl.add_argument("--baseline-tps", type=positive, help="plain decoding tok/s (default 82)")
    pl.add_argument("--cycle-ms", type=positive, help="speculative cycle, ms: draft + verify + overhead (default 30)")
    pl.add_argument("--accept-len", type=accept_len, help="τ of the drafter you serve now, bonus included (default 2.0)")
    pl.add_argument("--log", help="SGLang / vLLM log: take the served τ as the median of its metrics lines")
    pl.add_argument("--goal-tps", type=positive, help="the throughput you want (default 150)")
    alias(pl, "--target-tps", "--goal-tps", "goal_tps", type=positive)
    pl.add_argument("--samples", type=positive,
                    help="samples of the new target's data the served drafter was trained on (default 37000)")
    pl.add_argument("--gen-tps", type=positive, help="tok/s at which you generate training data, all streams (default 82)")
    pl.add_argument("--tokens-per-sample", type=positive, help="tokens per generated sample (default 512, assumed)")
    pl.add_argument("--k", type=count, help=f"draft tokens per cycle (default {DEFAULT_K})")
    pl.add_argument("--plugin-tau", type=accept_len, help="the old drafter's τ on the new target, as measured by notebook 03 "
                                                   "or `eaglelab probe` on your checkpoints")
    pl.add_argument("--old-samples", type=positive, help="samples the old drafter was trained on (e.g. 1400000)")
    pl.add_argument("--exponent", type=positive, nargs=2, metavar=("LO", "HI"),
                    help="range of the data exponent b, miss rate ∝ N^-b (default 0.1 0.3, assumed)")
    pl.add_argument("--transfer", type=fraction, nargs=2, metavar=("LO", "HI"),
                    help="share of --old-samples a warm start carries over when no --plugin-tau (default 0.1 0.5)")
    pl.add_argument("--budgets", type=positive, nargs="+", help="total new-target samples per trained option")
    pl.add_argument("--verify-model", choices=["load", "kimi-k2-pcie", "none"], default="load",
                    help="name the lever when the cycle must shrink: the load model's largest part of the cycle (load; "
                         "kimi-k2-pcie is its old name), or none")
    pl.add_argument("--at-concurrency", type=count,
                    help="requests in flight when --baseline-tps and --cycle-ms were measured (default 1)")
    _machine_flags(pl)
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
    r.add_argument("--figures", default="figures", help="folder with the exported figures and findings")
    r.add_argument("--out", help="output file (default FIGURES/GAME_PLAN.md)")
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
    rc.add_argument("--job", choices=["warm-start", "probe", "load"], default="warm-start",
                    help="what the script does: the warm start, the dump-and-probe, or load: the serving engine's cost "
                         "table (plain steps and cycles at forced τ per concurrency) for `eaglelab perf --costs`")
    rc.add_argument("--engine", required=True, choices=["specforge", "speculators", "sglang", "vllm"],
                    help="specforge / speculators (warm start, probe); sglang / vllm (load)")
    rc.add_argument("--concurrency", type=count, nargs="+", metavar="B", help="load: concurrencies to measure")
    rc.add_argument("--accept-lens", type=accept_len, nargs="+", metavar="TAU",
                    help="load: the τ values to force (default 1 2 3, those up to k + 1)")
    rc.add_argument("--topk", type=count, help="load: the drafter's branching (default 1: a chain)")
    rc.add_argument("--draft-tokens", type=count, help="load: tokens verified per request (a tree; default k + 1)")
    rc.add_argument("--prompt-tokens", type=count, help="load: prompt tokens per request (default 1024)")
    rc.add_argument("--output-tokens", type=count, help="load: tokens generated per request (default 256)")
    rc.add_argument("--repeats", type=count, help="load: timed runs per concurrency (default 2)")
    checkpoint(rc, "old-drafter", "the old drafter (folder or hub id)", required=True, old=("--init",))
    checkpoint(rc, "new-target", "the new target (folder, config.json or hub id)", required=True, old=("--target",))
    checkpoint(rc, "old-target", "--job probe: the old target (the drafter was trained on it)", old=("--target-a",))
    rc.add_argument("--out", required=True, help="folder for run.sh, its config files and recipe.json")
    rc.add_argument("--data", help="prompts / conversations on the cluster (warm start: regenerated; default "
                                   "prompts.jsonl; probe: run through both targets, default conversations.jsonl)")
    rc.add_argument("--workdir", help="work folder on the cluster (default warm-start, or probe)")
    rc.add_argument("--gpus", type=count, default=8, help="GPUs of the node")
    rc.add_argument("--from-run", help="a workbook fine-tune folder (notebook 04's warm run): epochs and TTT length")
    rc.add_argument("--lr", type=positive, help="learning rate (default: the engine's)")
    rc.add_argument("--epochs", type=count, help="epochs over the regenerated data (default: --from-run, else the engine's)")
    rc.add_argument("--ttt-length", type=count, help="training-time-test unroll (default: --from-run, else the engine's)")
    rc.add_argument("--k", type=count, default=DEFAULT_K, help="draft tokens per cycle when serving")
    rc.add_argument("--max-length", type=count, default=4096, help="tokens per training sequence")
    rc.add_argument("--chat-template", help="SpecForge's chat-template name for the target (default: picked from the "
                                            "target, llama3 for --job probe)")
    rc.add_argument("--embedding-key", help="the target's embedding tensor as SpecForge reads it (default: read from "
                                            "the target's headers, e.g. language_model.model.embed_tokens.weight)")
    rc.add_argument("--lm-head-key", help="the target's head tensor (default: read from its headers)")
    rc.add_argument("--force", action="store_true", help="replace a recipe in --out")
    rc.add_argument("--json", action="store_true", help="print the recipe's steps as JSON")
    rc.set_defaults(func=cmd_recipe)
