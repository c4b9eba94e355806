"""The reference engines' own argument parsers and config schemas, to check commands against.

SpecForge 0.2.0 and speculators 0.9.0 are installed by scripts/setup.sh without their serving stacks
(no sglang, vllm or GPU kernels): what is imported here is their command-line and config code only.
Each check returns the engine's own parse result or raises its own error.
"""

from __future__ import annotations

import argparse

import pytest


def require(module: str):
    """Import an engine module, or skip with the reason (the engines are installed by scripts/setup.sh)."""
    return pytest.importorskip(module, reason=f"{module} is installed by scripts/setup.sh (pip --no-deps)")


def specforge_parser() -> argparse.ArgumentParser:
    """SpecForge's ``specforge`` parser: ``specforge.cli.main`` builds it inline, so stop it at parse time."""
    cli = require("specforge.cli")

    class Captured(Exception):
        def __init__(self, parser):
            self.parser = parser

    original = argparse.ArgumentParser.parse_args

    def capture(self, *args, **kwargs):
        raise Captured(self)

    argparse.ArgumentParser.parse_args = capture
    try:
        cli.main([])
    except Captured as c:
        return c.parser
    finally:
        argparse.ArgumentParser.parse_args = original
    raise AssertionError("specforge.cli.main built no parser")


def subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def exact_flags(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """Flags of ``argv`` the parser does not define verbatim (argparse would accept abbreviations)."""
    known = {o for a in parser._actions for o in a.option_strings}
    return [a.split("=")[0] for a in argv if a.startswith("--") and a.split("=")[0] not in known]


def specforge_config(path: str):
    """SpecForge's own validation of a training config: the pydantic schema, then the run's resolution."""
    require("specforge.config")
    import yaml
    from specforge.application import resolve_run
    from specforge.config import Config

    cfg = Config.model_validate(yaml.safe_load(open(path)))
    return cfg, resolve_run(cfg)


def speculators_command(name: str, argv: list[str]):
    """Parse ``speculators NAME ARGV`` with its own Typer command (nothing runs); returns the parsed params."""
    cli = require("speculators.cli")
    import typer

    command = typer.main.get_command(cli.app).commands[name]
    return command.make_context(name, list(argv)).params


def speculators_train(argv: list[str]):
    """speculators' own resolution of training arguments (argparse, its schema, conflicts, required keys)."""
    require("speculators.train.config")
    from speculators.train.config import TrainConfig
    from speculators.train.config.resolution import build_parser

    parser = build_parser()
    assert exact_flags(parser, argv) == []
    return TrainConfig.resolve(argv)
