"""The ``eaglelab`` command line: flags (generated from the jobs' settings where a command has them) and printing.

Every subcommand is a :class:`~eaglelab.cli.output.Command`: its settings dataclass (its flags are generated
from the fields) and the job the notebooks call, whose report it prints. The metadata commands
(:mod:`eaglelab.cli.checkpoints`: ``inspect``, ``compare``, ``compare-targets``; :mod:`eaglelab.cli.metadata`:
``run``, ``perf``, ``plan``, ``predict``, ``report``, ``recipe``) never import torch or transformers; the model
commands' jobs (:mod:`eaglelab.cli.models`) import them where they need them. Errors of type
:class:`EaglelabError`, and argument errors, print one line and exit with code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from eaglelab.cli.arguments import missing_required
from eaglelab.errors import EaglelabError
from eaglelab.inputs import printable


class OneLineParser(argparse.ArgumentParser):
    """An argument error is one line on stderr and exit code 2, like every other error (no usage block)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


@contextlib.contextmanager
def _printable_streams():
    """Print what a file names (a tensor called ``"\\udc80"``) escaped rather than crash on it."""
    streams = [s for s in (sys.stdout, sys.stderr) if hasattr(s, "reconfigure") and getattr(s, "errors", None)]
    before = [s.errors for s in streams]
    for s in streams:
        s.reconfigure(errors="backslashreplace")
    try:
        yield
    finally:
        for s, errors in zip(streams, before):
            with contextlib.suppress(ValueError):  # closed meanwhile
                s.reconfigure(errors=errors)


def build_parser() -> argparse.ArgumentParser:
    from eaglelab.cli import checkpoints, metadata, models

    p = OneLineParser(prog="eaglelab", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    checkpoints.add_parsers(sub)
    metadata.add_parsers(sub)
    models.add_parsers(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    missing = missing_required(args)
    if missing is not None:
        print(f"eaglelab {args.command}: error: {missing} is required (see eaglelab {args.command} --help)", file=sys.stderr)
        return 2
    try:
        with _printable_streams():
            return args.func(args)
    except EaglelabError as exc:
        print(f"eaglelab {args.command}: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("eaglelab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
