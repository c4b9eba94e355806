"""A serving log's running aggregates: counts and exact medians per group, in memory that grows with the
log's groups (source and concurrency) and its distinct numbers, not with its lines.

:mod:`eaglelab.serving.logs` streams a log's lines through a :class:`Tally`; every summary it prints (the
medians overall, per source and per concurrency, the plain log's baseline) is read from it. A median is
exact, as :func:`statistics.median` of the values would give it (a zero logged as ``-0`` counted as 0): a group
counts its values while few are distinct (engines print two decimals, so a log's numbers repeat), else packs
them at 8 bytes each.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

#: Distinct values a group counts before it packs them.
MAX_DISTINCT = 1024


class Values:
    """One field's values in one group, for an exact median in little memory.

    Counted while few are distinct (engines print two decimals, so a log's numbers repeat); past
    :data:`MAX_DISTINCT` distinct values, packed at 8 bytes each.
    """

    __slots__ = ("counts", "packed")

    def __init__(self):
        self.counts: dict[float, int] = {}
        self.packed: array | None = None

    def add(self, value: float) -> None:
        value += 0.0  # a zero counts as 0.0, whichever sign it was logged with
        if self.packed is not None:
            self.packed.append(value)
            return
        self.counts[value] = self.counts.get(value, 0) + 1
        if len(self.counts) > MAX_DISTINCT:
            self.packed = array("d", _expand(self.counts))
            self.counts = {}

    def __len__(self) -> int:
        return sum(self.counts.values()) + (len(self.packed) if self.packed is not None else 0)


def _expand(counts: dict[float, int]) -> Iterator[float]:
    return (v for v, c in counts.items() for _ in range(c))


def median(parts: Iterable[Values]) -> float | None:
    """The median of the values of ``parts`` together, as :func:`statistics.median` gives it; None when there are none."""
    parts = list(parts)
    counts: dict[float, int] = {}
    for p in parts:
        for v, c in p.counts.items():
            counts[v] = counts.get(v, 0) + c
    packed = [p.packed for p in parts if p.packed is not None]
    n = sum(counts.values()) + sum(len(a) for a in packed)
    if not n:
        return None
    lo, hi = (n - 1) // 2, n // 2
    if packed:
        data = np.concatenate([np.frombuffer(a, dtype=float) for a in packed] + [np.fromiter(_expand(counts), float)])
        data.partition((lo, hi))
        a, b = float(data[lo]), float(data[hi])
    else:
        seen, a, b = 0, None, None
        for v in sorted(counts):
            seen += counts[v]
            if a is None and seen > lo:
                a = v
            if seen > hi:
                b = v
                break
    return a if n % 2 else (a + b) / 2


class Group:
    """The records of one (source, concurrency): their count and their τ and tok/s values."""

    __slots__ = ("n", "accept", "throughput", "gen")

    def __init__(self, source: str):
        self.n, self.accept, self.throughput = 0, Values(), Values()
        self.gen = self.throughput if source == "sglang" else Values()  # SGLang logs one tok/s for both

    def add(self, r: Any) -> None:
        self.n += 1
        self.accept.add(r.accept_len)
        if r.throughput is not None:
            self.throughput.add(r.throughput)
        if r.gen_throughput is not None and self.gen is not self.throughput:
            self.gen.add(r.gen_throughput)


class Tally:
    """A log's running aggregates: what every summary of it reads, in memory that grows with its groups, not its lines."""

    def __init__(self):
        self.skipped = self.malformed = self.vllm_records = 0
        self.first_malformed: tuple[int, str] | None = None
        self.groups: dict[tuple[str, int | None], Group] = {}
        self.plain: dict[tuple[str, int], Values] = {}  # positive generation tok/s of plain lines, by concurrency
        self.plain_usable: set[str] = set()  # sources with a plain line that has a concurrency and a tok/s

    def add(self, item: Any) -> None:
        """Count one line's outcome: a record, a plain line, ``(line, problem)`` if malformed, None if skipped."""
        if item is None:
            self.skipped += 1
        elif isinstance(item, tuple):
            self.malformed += 1
            self.first_malformed = self.first_malformed or item
        elif not hasattr(item, "accept_len"):  # a plain decode / stats line
            if item.concurrency is not None and item.gen_throughput is not None:
                self.plain_usable.add(item.source)
                if item.gen_throughput > 0:
                    self.plain.setdefault((item.source, item.concurrency), Values()).add(item.gen_throughput)
        else:
            self.vllm_records += item.source == "vllm"
            key = (item.source, item.concurrency)
            if key not in self.groups:
                self.groups[key] = Group(item.source)
            self.groups[key].add(item)

    def plain_sources(self) -> set[str]:
        """The sources whose plain lines count: a speculative vLLM server's stats lines are not a plain baseline."""
        return {"sglang"} if self.vllm_records else {"sglang", "vllm"}


def group_summary(groups: dict[tuple[str, int | None], Group]) -> dict:
    """Median accept length and throughput overall and per (source, concurrency), from the groups' values."""
    def stats(gs: list[Group]) -> dict:
        return {"n": sum(g.n for g in gs), "median_accept_len": median(g.accept for g in gs),
                "median_throughput": median(g.throughput for g in gs)}

    if not groups:
        return {"n": 0, "by_source": []}
    out = stats(list(groups.values()))
    out["by_source"] = [{"source": s, "concurrency": b, **stats([g])}
                        for (s, b), g in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0))]
    return out
