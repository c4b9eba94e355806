"""Flags generated from a settings dataclass: each field's type, range, choices, spelling and help declared once."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eaglelab.cli import OneLineParser
from eaglelab.cli.arguments import add_settings, settings_from
from eaglelab.settings import field_help, option


@dataclasses.dataclass(frozen=True)
class Knobs:
    """Every kind of field a command takes.

    Attributes:
        old_target: the old target
            (a folder or hub id).
        name: a required value.
        steps, batch: whole numbers of at least one.
        seed: a whole number, zero allowed.
        lr: a learning rate.
        share: a share in [0, 1].
        tau: an acceptance length, ``k + 1`` at most (:func:`eaglelab.decisions.plan`).
        kind: one of three.
        sizes: several whole numbers.
        quiet: a switch that is off.
        check: a switch that is on.
        renamed: a field whose flag is another word.
        layers: exactly three whole numbers.
    """

    name: str = option(positional=True)
    old_target: str | None = None
    steps: int = option(10, min=1)
    batch: int = option(4, min=1)
    seed: int = option(0, min=0)
    lr: float = option(1e-3, above=0)
    share: float = option(0.5, min=0, max=1)
    tau: float = option(2.0, min=1)
    kind: str = option("a", choices=("a", "b", "c"))
    sizes: tuple[int, ...] = option((1, 8), min=1)
    quiet: bool = False
    check: bool = True
    renamed: str | None = option(None, flag="other-word", help="said here, not in the docstring")
    layers: tuple[int, ...] | None = option(None, min=0, count=3)
    internal: int = option(3, cli=False)


def parser():
    p = OneLineParser(prog="knobs")
    add_settings(p, Knobs)
    return p


def test_no_flags_give_the_dataclass_defaults():
    assert settings_from(parser().parse_args(["x"]), Knobs) == Knobs("x")


def test_each_kind_of_flag_lands_in_its_field_typed():
    args = parser().parse_args(["x", "--old-target", "T", "--steps", "3", "--seed", "0", "--lr", "0.1", "--share", "1",
                                "--tau", "1.5", "--kind", "c", "--sizes", "2", "4", "--quiet", "--no-check",
                                "--other-word", "w", "--layers", "1", "6", "11"])
    got = settings_from(args, Knobs)
    assert got == Knobs("x", "T", 3, 4, 0, 0.1, 1.0, 1.5, "c", (2, 4), True, False, "w", (1, 6, 11))
    assert isinstance(got.sizes, tuple) and got.internal == 3


def test_the_help_is_the_docstring_entry_and_says_the_default():
    text = parser().format_help()
    assert "the old target (a folder or hub id)" in text  # continuation lines joined
    assert "an acceptance length, k + 1 at most (eaglelab.decisions.plan) (default: 2.0)" in " ".join(text.split())
    assert "said here, not in the docstring" in text and "--internal" not in text and "--iters" not in text
    assert "whole numbers of at least one (default: 10)" in " ".join(text.split())


@pytest.mark.parametrize("argv", [["x", "--steps", "0"], ["x", "--seed", "-1"], ["x", "--lr", "0"],
                                  ["x", "--share", "1.5"], ["x", "--tau", "0.9"], ["x", "--kind", "d"],
                                  ["x", "--lr", "nan"], ["x", "--steps", "2.5"], ["x", "--sizes", "0"], [],
                                  ["x", "--layers", "1", "2"]])
def test_a_value_out_of_its_range_is_one_line_and_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        parser().parse_args(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and err.startswith("knobs: error:")


def test_a_range_the_flags_cannot_check_is_refused_when_the_parser_is_built():
    @dataclasses.dataclass
    class Odd:
        """Attributes:
            n: a number of at least 2.
        """

        n: int = option(3, min=2)

    with pytest.raises(TypeError, match="min=0 or min=1"):
        add_settings(OneLineParser(prog="odd"), Odd)


def test_a_real_command_refuses_a_bad_value_in_one_line():
    out = subprocess.run([sys.executable, "-m", "eaglelab", "probe", "--old-target", "a", "--new-target", "b",
                          "--old-drafter", "c", "--sequences", "0"], capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "--sequences" in out.stderr


@given(st.text(max_size=400))
def test_reading_any_docstring_for_help_never_fails(doc):
    cls = type("Any", (), {"__doc__": doc})
    entries = field_help(cls)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in entries.items())


#: A default a help text names, written once as code (read by ``{DEFAULT_WIDTHS}`` in a docstring).
DEFAULT_WIDTHS = (1, 8, 64)


@dataclasses.dataclass(frozen=True)
class _Named:
    """Settings whose help names a module constant.

    Attributes:
        widths: how wide (None: {DEFAULT_WIDTHS}); {not_a_constant} and {MISSING_NAME} stay as written.
    """

    widths: tuple[int, ...] | None = option(None, min=1)


@dataclasses.dataclass(frozen=True)
class _Extended(_Named):
    """Settings that extend another's.

    Attributes:
        depth: how deep.
    """

    depth: int = option(2, min=1)


def test_a_help_names_a_default_by_its_constant_and_a_subclass_keeps_its_bases_entries():
    helps = field_help(_Extended)
    assert helps["widths"] == "how wide (None: 1, 8, 64); {not_a_constant} and {MISSING_NAME} stay as written."
    assert helps["depth"] == "how deep."
    parser = OneLineParser(prog="t")
    add_settings(parser, _Extended)
    text = parser.format_help()
    assert "(None: 1, 8, 64)" in text and "how deep" in text
