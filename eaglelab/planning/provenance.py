"""Where each number comes from: the user's checkpoints, their logs, their entries, or the demo world.

Every number the findings and the game plan print carries one of these labels. Projections into
the user's serving scenario take τ from the user's own evidence only; a τ measured on the demo
world illustrates the method and is never a forecast for the user's model.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

YOURS = "yours"  # the workbook or the CLI run on the user's own checkpoints (not "measured": that is real decoding)
LOGS = "logs"  # parsed from the user's SGLang / vLLM logs
ENTERED = "entered"  # typed in by the user (a notebook parameter or a CLI flag)
DEFAULT = "default"  # a parameter left at its default: the founding case's numbers
DEMO = "demo"  # measured on the offline demo world: an illustration of the method
SAMPLE = "sample"  # a bundled sample input (logs, public configs), standing in for the user's
ASSUMED = "assumed"  # an assumption of a model, with its range
DERIVED = "derived"  # computed from numbers with the labels above

#: The label printed next to a number, and what it means (the game plan's legend).
LABELS = {
    YOURS: ("your checkpoints", "computed by the workbook on your checkpoints"),
    LOGS: ("your logs", "parsed from your SGLang / vLLM serving logs"),
    ENTERED: ("entered", "entered by you (a notebook parameter or a command-line flag)"),
    DEFAULT: ("default", "left at its default: the founding case's numbers (Kimi-K2.5 on 8 PCIe GPUs); "
                         "enter yours"),
    DEMO: ("demo", "illustration on the offline world the project builds (the SmolLM2-135M demo pair; the tiny "
                   "world in smoke runs): shows the method, never a forecast for your model"),
    SAMPLE: ("sample", "a bundled sample input (illustrative serving logs, public drafter configs): point the "
                       "parameter at yours"),
    ASSUMED: ("assumed", "an assumption of the model, with the range it spans; replace it with a measurement"),
    DERIVED: ("derived", "computed from the numbers above"),
}


def tag(source: str) -> str:
    """The tag printed after a number from ``source``: ``[demo]``, ``[your logs]``, ..."""
    return f"[{LABELS[source][0]}]"


def legend(sources: Iterable[str] | None = None) -> list[str]:
    """Markdown lines of the legend, for the given sources (all when None), in a fixed order."""
    used = set(LABELS if sources is None else sources)
    return [f"- **[{tag}]** {meaning}" for key, (tag, meaning) in LABELS.items() if key in used]


def evidence_source(paths: Iterable[str | Path | None], world_dir: str | Path) -> str:
    """:data:`DEMO` when every given checkpoint lies inside the offline world, else :data:`YOURS`.

    Args:
        paths: the targets and drafters a notebook ran on (None entries are skipped).
        world_dir: the offline world's folder.
    """
    world = Path(world_dir).resolve()
    given = [Path(p) for p in paths if p is not None]
    inside = [p.exists() and world in p.resolve().parents for p in given]
    return DEMO if given and all(inside) else YOURS


def files_source(paths: Iterable[str | Path], bundled_dir: str | Path) -> str:
    """:data:`SAMPLE` when every file lies in the repository's bundled ``bundled_dir``, else :data:`LOGS`."""
    bundled = Path(bundled_dir).resolve()
    given = [Path(p).resolve() for p in paths]
    return SAMPLE if given and all(bundled in p.parents for p in given) else LOGS
