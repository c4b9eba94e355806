"""Subcommands that need tensors or models (each job imports torch where it needs it, not here)."""

from __future__ import annotations

from eaglelab.cli.arguments import add_settings, settings_from
from eaglelab.cli.output import print_report
from eaglelab.errors import EngineError
from eaglelab.jobs.drafters import DrafterInitSettings, ExportSettings, export_for_engine, init_drafter
from eaglelab.jobs.engine import EngineMeasureSettings, measure_drafter_in_vllm
from eaglelab.jobs.finetune import FinetuneSettings
from eaglelab.jobs.probe import DumpSettings, ProbeSettings, dump_states, probe_checkpoints
from eaglelab.jobs.speculate import SpeculateSettings, speculate
from eaglelab.jobs.train_run import TrainRunSettings, train_run
from eaglelab.worlds.build import WorldSettings, build_world_for

# --------------------------------------------------------------------------- drafter init / export

def cmd_drafter_init(args) -> int:
    print(init_drafter(settings_from(args, DrafterInitSettings)))
    return 0


def cmd_drafter_export(args) -> int:
    print(export_for_engine(settings_from(args, ExportSettings)))
    return 0


# --------------------------------------------------------------------------- speculate

def cmd_speculate(args) -> int:
    return print_report(speculate(settings_from(args, SpeculateSettings)), args.json)


# --------------------------------------------------------------------------- probe

def cmd_probe(args) -> int:
    return print_report(probe_checkpoints(settings_from(args, ProbeSettings), progress=not args.json), args.json)


def cmd_dump(args) -> int:
    return print_report(dump_states(settings_from(args, DumpSettings), progress=not args.json), args.json)


# --------------------------------------------------------------------------- finetune

def cmd_finetune(args) -> int:
    report = train_run(settings_from(args, FinetuneSettings), settings_from(args, TrainRunSettings))
    return print_report(report, False) if report.main else 0


# --------------------------------------------------------------------------- engine

def cmd_engine(args) -> int:
    if args.engine_command == "status":
        from eaglelab.engines.vllm import engine_status

        ok, line = engine_status()
        if not ok:
            raise EngineError("vllm", line)
        print(line)
        return 0
    return print_report(measure_drafter_in_vllm(settings_from(args, EngineMeasureSettings)), args.json)


# --------------------------------------------------------------------------- demo

def cmd_demo_build(args) -> int:
    return print_report(build_world_for(settings_from(args, WorldSettings)), args.json)


def add_parsers(sub) -> None:
    """Register the model subcommands on the ``eaglelab`` subparsers (defaults: the jobs' settings dataclasses)."""
    d = sub.add_parser("drafter", help="create or export drafter checkpoints",
                       description="Create a fresh drafter for a target, or export one for vLLM.")
    dsub = d.add_subparsers(dest="drafter_command", required=True, metavar="ACTION")
    i = dsub.add_parser("init", help="write a freshly initialised drafter sized for a target",
                        description="Write config.json + model.safetensors of a new EAGLE-3 drafter for "
                                    "target T (SpecForge / SGLang layout).")
    add_settings(i, DrafterInitSettings)
    i.set_defaults(func=cmd_drafter_init)
    e = dsub.add_parser("export", help="write a drafter in the vLLM (speculators) or SGLang (SpecForge) format",
                        description="Convert a drafter between the speculators format vLLM loads and the SpecForge "
                                    "layout SGLang loads: the same model, or one line naming the flag the "
                                    "destination cannot express.")
    add_settings(e, ExportSettings)
    e.set_defaults(func=cmd_drafter_export)

    s = sub.add_parser("speculate", help="speculative decoding vs greedy on one prompt",
                       description="Run greedy EAGLE-3 speculative decoding and plain greedy decoding on a prompt; "
                                   "report accept length, tok/s of both, and whether the outputs match.")
    add_settings(s, SpeculateSettings)
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=cmd_speculate)

    p = sub.add_parser("probe", help="similarity of two targets and the old drafter's plug-in acceptance",
                       description="Capture targets A and B on the same tokens, compare their hidden states at the "
                                   "drafter's layers, and measure the drafter's acceptance on both.")
    add_settings(p, ProbeSettings)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_probe)

    u = sub.add_parser("dump", help="write a target's hidden states as SpecForge or vLLM would (the probe's dumps)",
                       description="Run a target that loads here over the probe's sequences and write its states "
                                   "at the drafter's layers in an engine's layout: what `probe --old-states / --new-states` "
                                   "reads. "
                                   "At scale the engines write them (`eaglelab recipe --job probe`).")

    add_settings(u, DumpSettings)
    u.add_argument("--json", action="store_true", help="machine-readable output")
    u.set_defaults(func=cmd_dump)

    f = sub.add_parser("finetune", help="train a drafter for a target: warm start or from scratch",
                       description="EAGLE-3 training-time test on the target's own states. Writes checkpoints and "
                                   "metrics.jsonl under --out; --resume continues an interrupted run. Runs under "
                                   "torchrun for DDP.")
    g = f.add_mutually_exclusive_group()
    add_settings(f, FinetuneSettings, skip=("measure_prompts", "measure_tokens"), into={"old_drafter": g})
    add_settings(f, TrainRunSettings, into={"scratch": g})
    f.set_defaults(func=cmd_finetune)

    en = sub.add_parser("engine", help="measure a drafter in vLLM itself (its own environment: make engine)",
                        description="Run the target alone and with the drafter in vLLM (greedy, eagle3, k drafts) on "
                                    "the same prompt token ids the workbook decodes: τ, both per-position rates, tok/s, "
                                    "whether the outputs equal the target alone; --compare adds the workbook's own "
                                    "decoder on the same prompts.")
    ensub = en.add_subparsers(dest="engine_command", required=True, metavar="ACTION")
    ensub.add_parser("status", help="is vLLM's environment there, and which version").set_defaults(func=cmd_engine)
    em = ensub.add_parser("measure", help="measure a drafter on a target in vLLM")
    add_settings(em, EngineMeasureSettings)
    em.add_argument("--json", action="store_true", help="machine-readable output")
    em.set_defaults(func=cmd_engine)

    m = sub.add_parser("demo", help="build the offline world the workbook runs on",
                       description="Build (or reuse) the offline targets and drafters: cached, verified by a "
                                   "manifest, rebuilt when corrupt.")
    msub = m.add_subparsers(dest="demo_command", required=True, metavar="ACTION")
    b = msub.add_parser("build", help="build or verify the world", description="Build or verify the world.")
    add_settings(b, WorldSettings)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_demo_build)
