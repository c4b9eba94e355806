"""Subcommands that read checkpoints' configs and headers only: ``inspect``, ``compare``, ``compare-targets``.

Like the other metadata commands (:mod:`eaglelab.cli.metadata`) they never import torch or transformers.
"""

from __future__ import annotations

from eaglelab.checkpoints.drafters.inspection import inspect_checkpoint
from eaglelab.cli.arguments import add_settings, settings_from
from eaglelab.cli.output import print_json, print_report
from eaglelab.inputs import printable, quoted
from eaglelab.jobs.compare import CompareSettings, compare_drafters
from eaglelab.jobs.targets import TargetCompareSettings, compare_targets
from eaglelab.outputs import table

# --------------------------------------------------------------------------- inspect / compare

def _say(*lines: str) -> None:
    """Print each line with its control and format characters escaped: a file's text cannot add a line or
    move the cursor (what came from a file is also quoted where the line is composed)."""
    for line in lines:
        print(printable(line))


def cmd_inspect(args) -> int:
    return print_report(inspect_checkpoint(args.source, args.revision), args.json, escape=True)


def cmd_compare(args) -> int:
    return print_report(compare_drafters(settings_from(args, CompareSettings)), args.json, escape=True)


def cmd_compare_targets(args) -> int:
    report = compare_targets(settings_from(args, TargetCompareSettings))
    if args.json:
        print_json(report.to_json())
        return 0
    _say(report.headline(), "")
    print(table([[side, s.source, quoted((s.config.get("architectures") or ["?"])[0], 60),
                  f"{s.quantization.method}: {s.quantization.scheme}" if s.quantization.method != "none" else "none",
                  "-" if s.prefix is None else quoted(s.prefix) if s.prefix else "(none)",
                  f"{s.tokenizer.kind}, {s.tokenizer.size:,} ids"]
                 for side, s in (("old", report.a), ("new", report.b))],
                ["", "target", "architecture", "quantization", "weights prefix", "tokenizer"]))
    if report.config_diff:
        print("\n" + table([[quoted(d.key, 60), _short(d.a), _short(d.b), d.category, d.why[:60]]
                            for d in report.config_diff], ["config key", "old", "new", "category", "what it means"]))
    else:
        _say("", "configs: the language models' fields are identical")
    _say("", f"tokenizers: {report.tokenizers.line}")
    _say(*(f"  - {line}" for line in report.tokenizers.special_changes[:10] + report.tokenizers.examples))
    _say(f"chat templates: {report.templates.line}")
    _say(*(f"  {line}" for line in report.templates.diff))
    _say("", f"verdict: {report.verdict.level.upper()}")
    _say(*(f"  - {r}" for r in report.verdict.reasons))
    return 0


def _short(value, limit: int = 40) -> str:
    """A config value in a table cell: a string from the file quoted unless it is a plain name, others as JSON."""
    return quoted(value, limit)


def add_parsers(sub) -> None:
    """Register the checkpoint subcommands on the ``eaglelab`` subparsers."""
    i = sub.add_parser("inspect", help="tensor table and problems of one checkpoint, headers only",
                       description="Read a drafter checkpoint's config and safetensors headers (no tensor "
                                   "data) and check it against its config.")
    i.add_argument("source", help="folder, .safetensors file, shard index, or hub id")
    i.add_argument("--revision", help="hub revision")
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
