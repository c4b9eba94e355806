"""Subcommands that read checkpoints' configs and headers only: ``inspect``, ``compare``, ``compare-targets``.

Like the other metadata commands (:mod:`eaglelab.cli.metadata`) they never import torch or transformers. Their
reports quote what came from the checkpoints' files, and each line is printed escaped.
"""

from __future__ import annotations

from eaglelab.cli.output import Command
from eaglelab.jobs.compare import CompareSettings, InspectSettings, compare_drafters, inspect_drafter
from eaglelab.jobs.targets import TargetCompareSettings, compare_targets

COMMANDS = (
    Command("inspect", InspectSettings, inspect_drafter, "tensor table and problems of one checkpoint, headers only",
            "Read a drafter checkpoint's config and safetensors headers (no tensor data) and check it against its "
            "config."),
    Command("compare", CompareSettings, compare_drafters, "config and tensor diff of two drafters, with a verdict",
            "Compare two drafter checkpoints from metadata only."),
    Command("compare-targets", TargetCompareSettings, compare_targets,
            "two targets from configs, headers and tokenizer files: what the old drafter meets on the new",
            "Compare two target models before any probe: the language models' configs (classified), quantization, "
            "tokenizers id by id and chat templates rendered on one conversation, from metadata only (local folders "
            "or hub ids)."),
)


def add_parsers(sub) -> None:
    """Register the checkpoint subcommands on the ``eaglelab`` subparsers."""
    for command in COMMANDS:
        command.add_to(sub)
