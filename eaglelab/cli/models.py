"""Subcommands that need tensors or models (each job imports torch where it needs it, not here)."""

from __future__ import annotations

from eaglelab.cli.arguments import add_settings, settings_from
from eaglelab.cli.output import Command, print_report
from eaglelab.errors import EngineError
from eaglelab.jobs.drafters import DrafterInitSettings, ExportSettings, export_for_engine, init_drafter
from eaglelab.jobs.engine import EngineMeasureSettings, measure_drafter_in_vllm
from eaglelab.jobs.finetune import FinetuneSettings
from eaglelab.jobs.probe import DumpSettings, ProbeSettings, dump_states, probe_checkpoints
from eaglelab.jobs.speculate import SpeculateSettings, speculate
from eaglelab.jobs.train_run import TrainRunSettings, train_run
from eaglelab.worlds.build import WorldSettings, build_world_for

DRAFTER = (
    Command("init", DrafterInitSettings, init_drafter, "write a freshly initialised drafter sized for a target",
            "Write config.json + model.safetensors of a new EAGLE-3 drafter for target T (SpecForge / SGLang layout).",
            json=None),
    Command("export", ExportSettings, export_for_engine,
            "write a drafter in the vLLM (speculators) or SGLang (SpecForge) format",
            "Convert a drafter between the speculators format vLLM loads and the SpecForge layout SGLang loads: the "
            "same model, or one line naming the flag the destination cannot express.", json=None),
)
COMMANDS = (
    Command("speculate", SpeculateSettings, speculate, "speculative decoding vs greedy on one prompt",
            "Run greedy EAGLE-3 speculative decoding and plain greedy decoding on a prompt; report accept length, "
            "tok/s of both, and whether the outputs match.", escape=False),
    Command("probe", ProbeSettings, probe_checkpoints,
            "similarity of two targets and the old drafter's plug-in acceptance",
            "Capture targets A and B on the same tokens, compare their hidden states at the drafter's layers, and "
            "measure the drafter's acceptance on both.", progress=True),
    Command("dump", DumpSettings, dump_states,
            "write a target's hidden states as SpecForge or vLLM would (the probe's dumps)",
            "Run a target that loads here over the probe's sequences and write its states at the drafter's layers in "
            "an engine's layout: what `probe --old-states / --new-states` reads. At scale the engines write them "
            "(`eaglelab recipe --job probe`).", progress=True),
)
ENGINE = Command("measure", EngineMeasureSettings, measure_drafter_in_vllm, "measure a drafter on a target in vLLM")
DEMO = Command("build", WorldSettings, build_world_for, "build or verify the world", "Build or verify the world.")


def cmd_finetune(args) -> int:
    """``finetune`` takes two settings: what is trained (notebook 04's) and the run; only the main rank prints."""
    report = train_run(settings_from(args, FinetuneSettings), settings_from(args, TrainRunSettings))
    return print_report(report, False) if report.main else 0


def cmd_engine_status(args) -> int:
    from eaglelab.engines.vllm import engine_status

    ok, line = engine_status()
    if not ok:
        raise EngineError("vllm", line)
    print(line)
    return 0


def add_parsers(sub) -> None:
    """Register the model subcommands on the ``eaglelab`` subparsers."""
    d = sub.add_parser("drafter", help="create or export drafter checkpoints",
                       description="Create a fresh drafter for a target, or export one for vLLM.")
    actions = d.add_subparsers(dest="drafter_command", required=True, metavar="ACTION")
    for command in DRAFTER:
        command.add_to(actions)
    for command in COMMANDS:
        command.add_to(sub)

    f = sub.add_parser("finetune", help="train a drafter for a target: warm start or from scratch",
                       description="EAGLE-3 training-time test on the target's own states. Writes checkpoints and "
                                   "metrics.jsonl under --out; --resume continues an interrupted run. Runs under "
                                   "torchrun for DDP.")
    start = f.add_mutually_exclusive_group()
    add_settings(f, FinetuneSettings, skip=("measure_prompts", "measure_tokens"), into={"old_drafter": start})
    add_settings(f, TrainRunSettings, into={"scratch": start})
    f.set_defaults(func=cmd_finetune)

    en = sub.add_parser("engine", help="measure a drafter in vLLM itself (its own environment: make engine)",
                        description="Run the target alone and with the drafter in vLLM (greedy, eagle3, k drafts) on "
                                    "the same prompt token ids the workbook decodes: τ, both per-position rates, tok/s, "
                                    "whether the outputs equal the target alone; --compare adds the workbook's own "
                                    "decoder on the same prompts.")
    actions = en.add_subparsers(dest="engine_command", required=True, metavar="ACTION")
    actions.add_parser("status", help="is vLLM's environment there, and which version").set_defaults(
        func=cmd_engine_status)
    ENGINE.add_to(actions)

    m = sub.add_parser("demo", help="build the offline world the workbook runs on",
                       description="Build (or reuse) the offline targets and drafters: cached, verified by a "
                                   "manifest, rebuilt when corrupt.")
    DEMO.add_to(m.add_subparsers(dest="demo_command", required=True, metavar="ACTION"))
