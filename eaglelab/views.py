"""A result's table, defined once for every surface: the notebook's DataFrame and the command line's text.

A report builds one :class:`View` (its columns, each with how the command line prints it, and its typed rows' values);
``report.table()`` is ``view.frame()`` (numbers stay numbers for a notebook to sort or plot) and the command's lines are
``view.text()``, so both surfaces carry the same columns in the same order. pandas is imported only by ``frame()``:
metadata commands print text without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eaglelab.outputs import table


@dataclass(frozen=True)
class Column:
    """One column: its header, and how the command line prints a value (``None`` prints ``-``).

    Attributes:
        name: the header, the same in the DataFrame and the text.
        fmt: a format string for one value (``"{:.2f}x"``), or a function of the value.
    """

    name: str
    fmt: Any = "{}"

    def cell(self, value: Any) -> str:
        if value is None:
            return "-"
        return self.fmt(value) if callable(self.fmt) else self.fmt.format(value)


@dataclass(frozen=True)
class View:
    """A table's columns and its rows' values, in the columns' order."""

    columns: tuple[Column, ...]
    rows: tuple[tuple, ...]
    index: str | None = None  # the column the DataFrame is indexed by (it stays a column of the text)

    @classmethod
    def of(cls, columns: Sequence[Column], rows: Sequence[Sequence[Any]], index: str | None = None) -> View:
        cols = tuple(columns)
        body = tuple(tuple(r) for r in rows)
        if any(len(r) != len(cols) for r in body):
            raise ValueError(f"every row needs {len(cols)} values (columns {[c.name for c in cols]})")
        return cls(cols, body, index)

    @property
    def headers(self) -> list[str]:
        return [c.name for c in self.columns]

    def text(self) -> str:
        """The aligned text the command line prints."""
        return table([[c.cell(v) for c, v in zip(self.columns, r)] for r in self.rows], self.headers)

    def frame(self):
        """The same table as a pandas DataFrame (values unformatted)."""
        import pandas as pd

        frame = pd.DataFrame([list(r) for r in self.rows], columns=self.headers)
        return frame.set_index(self.index) if self.index else frame
