"""Subcommands that read checkpoints' configs and headers only: ``inspect``, ``compare``, ``compare-targets``.

Like the other metadata commands (:mod:`eaglelab.cli.metadata`) they never import torch or transformers.
"""

from __future__ import annotations

from eaglelab.cli.arguments import add_settings, settings_from
from eaglelab.cli.output import print_report
from eaglelab.jobs.compare import CompareSettings, InspectSettings, compare_drafters, inspect_drafter
from eaglelab.jobs.targets import TargetCompareSettings, compare_targets

# --------------------------------------------------------------------------- inspect / compare

def cmd_inspect(args) -> int:
    return print_report(inspect_drafter(settings_from(args, InspectSettings)), args.json, escape=True)


def cmd_compare(args) -> int:
    return print_report(compare_drafters(settings_from(args, CompareSettings)), args.json, escape=True)


def cmd_compare_targets(args) -> int:
    return print_report(compare_targets(settings_from(args, TargetCompareSettings)), args.json, escape=True)


def add_parsers(sub) -> None:
    """Register the checkpoint subcommands on the ``eaglelab`` subparsers."""
    i = sub.add_parser("inspect", help="tensor table and problems of one checkpoint, headers only",
                       description="Read a drafter checkpoint's config and safetensors headers (no tensor "
                                   "data) and check it against its config.")
    add_settings(i, InspectSettings)
    i.add_argument("--json", action="store_true", help="machine-readable output")
    i.set_defaults(func=cmd_inspect)

    c = sub.add_parser("compare", help="config and tensor diff of two drafters, with a verdict",
                       description="Compare two drafter checkpoints from metadata only.")
    add_settings(c, CompareSettings)
    c.add_argument("--json", action="store_true", help="machine-readable output")
    c.set_defaults(func=cmd_compare)

    t = sub.add_parser("compare-targets", help="two targets from configs, headers and tokenizer files: what the "
                                               "old drafter meets on the new",
                       description="Compare two target models before any probe: the language models' configs "
                                   "(classified), quantization, tokenizers id by id and chat templates rendered on "
                                   "one conversation, from metadata only (local folders or hub ids).")
    add_settings(t, TargetCompareSettings)
    t.add_argument("--json", action="store_true", help="machine-readable output")
    t.set_defaults(func=cmd_compare_targets)
