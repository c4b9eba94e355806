"""Parse speculative-decoding metrics out of SGLang and vLLM server logs, and group them by concurrency.

Recognised lines (``docs/EAGLE3_FORMAT.md``); every other line is skipped:

- SGLang, newer: ``Decode batch[ iter], #running-req: N, #token: N, token usage: X,
  accept len: X.XX, accept rate: X.XX, cuda graph: B, gen throughput (token/s): X.XX, ...``
- SGLang, older: ``Decode batch. #running-req: 1, #token: 112, token usage: 0.00,
  accept len: 2.19, cuda graph: True, gen throughput (token/s): 258.07, #queue-req: 0,``
- vLLM: ``SpecDecoding metrics: Mean acceptance length: X.XX, Accepted throughput: X.XX
  tokens/s, Drafted throughput: ..., Per-position acceptance rate: <list>, ...``, and the engine's
  stats line of the same interval, ``Engine 000: Avg prompt throughput: X tokens/s, Avg generation
  throughput: Y tokens/s, Running: N reqs, ...``, which gives the record its concurrency and
  generation throughput.

A server without speculation logs the same decode and stats lines without the acceptance: they are
kept apart (:attr:`ParsedLog.plain`), so a plain log of the same server gives the measured speedup per
concurrency (:func:`log_by_concurrency`).

A log is streamed line by line into running aggregates (:mod:`eaglelab.serving.log_tally`): its
memory grows with its groups and distinct numbers, not its lines (at most 8 bytes a number). Every
line's record is read again only for a caller that asks for them (:attr:`ParsedLog.records`), and
``perf --log --json`` streams them (:meth:`ParsedLog.json_chunks`).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from eaglelab.errors import LogFormatError
from eaglelab.inputs import is_ascii_digits, iter_lines, printable
from eaglelab.outputs import finite_json, strict_json_text
from eaglelab.serving.log_tally import Group, Tally, Values, group_summary, median
from eaglelab.serving.perf import MAX_SERVER_TPS

_SGLANG_MARK = "Decode batch"
_VLLM_MARK = "SpecDecoding metrics:"
#: Longest log line parsed (a real metrics line is under 1 KB); longer lines are reported, not parsed.
MAX_LINE_BYTES = 16 * 1024 * 1024
#: Longest text read as one number: real ones are short, and int() / float() of a huge string is not linear.
_MAX_NUMBER_CHARS = 40
#: Most draft positions a metrics line can list (engines draft a handful of tokens per step).
_MAX_POSITIONS = 256
#: How far vLLM's rounded mean acceptance length may sit from 1 + the sum of its rounded per-position rates.
_VLLM_ROUNDING = 0.02


@dataclass
class LogRecord:
    """One parsed metrics line.

    Attributes:
        line_no: 1-based line in the file.
        source: ``sglang`` or ``vllm``.
        accept_len: tau, bonus token included (both servers count it).
        throughput: SGLang generation tok/s, or vLLM accepted-token tok/s.
        concurrency: requests in flight (SGLang's ``#running-req``; vLLM's ``Running: N reqs`` of the
            interval's stats line), None when not logged.
        accept_rate: fraction of drafts accepted, when logged.
        cuda_graph: whether the step ran under CUDA graphs (SGLang).
        per_position: vLLM per-position acceptance rates.
        gen_throughput: generated tok/s over all requests (SGLang's ``gen throughput``, vLLM's
            ``Avg generation throughput`` of the interval), None when not logged.
    """

    line_no: int
    source: str
    accept_len: float
    throughput: float | None
    concurrency: int | None = None
    accept_rate: float | None = None
    cuda_graph: bool | None = None
    per_position: list[float] = field(default_factory=list)
    gen_throughput: float | None = None


@dataclass
class PlainRecord:
    """A decode or stats line without speculation: concurrency and generated tok/s over all requests."""

    line_no: int
    source: str
    concurrency: int | None
    gen_throughput: float | None


def _number(text: str, name: str, low: float = 0.0, high: float = math.inf) -> float:
    """A finite number in ``[low, high]``; the unit after it (``tokens/s``, ``%``) is ignored."""
    word = text.strip().split(" ", 1)[0].rstrip("%")
    if len(word) > _MAX_NUMBER_CHARS:
        raise ValueError(f"{name}: not a number (a {len(word)}-character value)")
    try:
        value = float(word)
    except ValueError:
        raise ValueError(f"{name}: not a number: {printable(repr(word))}") from None
    if not math.isfinite(value):
        raise ValueError(f"{name}: not a finite number: {printable(repr(word))}")
    if not low <= value <= high:
        raise ValueError(f"{name}: {value:g} is impossible (must lie in [{low:g}, {high:g}])")
    return value


def _count(text: str, name: str) -> int:
    word = text.strip().split(" ", 1)[0]
    if not is_ascii_digits(word) or len(word) > 12:
        raise ValueError(f"{name}: not a count: {printable(repr(word[:_MAX_NUMBER_CHARS]))}")
    return int(word)


def _fields(body: str) -> dict[str, list[str]]:
    """``key: value`` pairs of a comma-separated metrics line, in one pass (linear in the line's length).

    A piece without a colon continues the previous key's value (vLLM's per-position list:
    ``Per-position acceptance rate: 0.5, 0.33, 0.22``).
    """
    out: dict[str, list[str]] = {}
    values: list[str] | None = None
    for piece in body.split(","):
        key, colon, value = piece.partition(":")
        if colon:
            values = out.setdefault(key.strip().lstrip(".").strip(), [])
            values.append(value.strip())
        elif values is not None and piece.strip():
            values.append(piece.strip())
    return out


def _one(fields: dict[str, list[str]], key: str) -> str | None:
    got = fields.get(key)
    return got[0] if got else None


def _sglang(body: str, line_no: int) -> LogRecord | PlainRecord | None:
    f = _fields(body.lstrip("[]0123456789 ."))
    accept = _one(f, "accept len")
    get = {k: _one(f, k) for k in ("#running-req", "accept rate", "cuda graph", "gen throughput (token/s)")}
    running = None if get["#running-req"] is None else _count(get["#running-req"], "#running-req")
    gen = None if get["gen throughput (token/s)"] is None else _number(get["gen throughput (token/s)"], "gen throughput",
                                                                       high=MAX_SERVER_TPS)
    if accept is None:  # a decode line of a server without speculation
        return PlainRecord(line_no, "sglang", running, gen) if running is not None or gen is not None else None
    graph = get["cuda graph"]
    if graph not in (None, "True", "False"):
        raise ValueError(f"cuda graph: {printable(repr(graph[:_MAX_NUMBER_CHARS]))} is not True or False")
    return LogRecord(
        line_no=line_no, source="sglang",
        accept_len=_number(accept, "accept len (SGLang counts the bonus token)", low=1.0),
        throughput=gen, concurrency=running,
        accept_rate=None if get["accept rate"] is None else _number(get["accept rate"], "accept rate", high=1.0),
        cuda_graph=None if graph is None else graph == "True", gen_throughput=gen,
    )


def _vllm_stats(body: str, line_no: int) -> PlainRecord | None:
    """vLLM's periodic engine stats: ``Avg generation throughput: Y tokens/s, Running: N reqs, ...``."""
    f = _fields(body)
    gen, running = _one(f, "Avg generation throughput"), _one(f, "Running")
    if gen is None and running is None:
        return None
    return PlainRecord(line_no, "vllm", None if running is None else _count(running, "Running"),
                       None if gen is None else _number(gen, "Avg generation throughput", high=MAX_SERVER_TPS))


def _vllm(body: str, line_no: int) -> LogRecord:
    f = _fields(body)
    accept = _one(f, "Mean acceptance length")
    if accept is None:
        raise ValueError("SpecDecoding line without a 'Mean acceptance length'")
    tau = _number(accept, "Mean acceptance length (vLLM counts the bonus token)", low=1.0)
    rates = f.get("Per-position acceptance rate", [])
    if len(rates) > _MAX_POSITIONS:
        raise ValueError(f"Per-position acceptance rate: {len(rates)} values, more than any draft length")
    per_position = [_number(v.strip("[] "), "Per-position acceptance rate", high=1.0) for v in rates if v.strip("[] ")]
    if per_position and abs(tau - 1 - sum(per_position)) > _VLLM_ROUNDING:
        raise ValueError(f"Mean acceptance length {tau:g} is not 1 + the per-position rates' sum "
                         f"{1 + sum(per_position):.3f} (vLLM logs both from the same counters)")
    rate = _one(f, "Avg Draft acceptance rate")
    throughput = _one(f, "Accepted throughput")
    return LogRecord(
        line_no=line_no, source="vllm", accept_len=tau,
        throughput=None if throughput is None else _number(throughput, "Accepted throughput", high=MAX_SERVER_TPS),
        accept_rate=None if rate is None else _number(rate, "Avg Draft acceptance rate", high=100.0) / 100,
        per_position=per_position,
    )


_VLLM_STATS = "Avg generation throughput"


def parse_line(line: str, line_no: int = 0) -> LogRecord | PlainRecord | None:
    """Parse one log line, in time linear in its length; None when it is not a metrics line.

    A decode line without acceptance (SGLang without speculation) and vLLM's stats line come back as
    :class:`PlainRecord`.

    Raises:
        ValueError: a metrics line whose numbers cannot be read or are impossible (τ below 1, a
            negative rate or throughput, an acceptance rate above 1 or 100%, vLLM's τ disagreeing
            with its own per-position rates).
    """
    at = line.find(_SGLANG_MARK)
    if at >= 0 and ("accept len" in line or "#running-req" in line):
        return _sglang(line[at + len(_SGLANG_MARK):], line_no)
    at = line.find(_VLLM_MARK)
    if at >= 0:
        return _vllm(line[at + len(_VLLM_MARK):], line_no)
    at = line.find(_VLLM_STATS)
    if at >= 0:
        return _vllm_stats(line[at:], line_no)
    return None


Line = tuple[int, str, bool]  # (line number, text, cut: a line over MAX_LINE_BYTES, not parsed)
Item = LogRecord | PlainRecord | tuple[int, str] | None  # a line's record, (line, problem) if malformed, None if skipped


def _scan(lines: Iterable[Line], again: Callable[[], Iterable[Line]]) -> Iterator[Item]:
    """Each line's outcome in order, streamed: its record, ``(line, problem)`` for a malformed metrics line, or None.

    A vLLM SpecDecoding record takes the concurrency and generation tok/s of its interval's stats line:
    vLLM logs both every interval, the stats line just after the metrics line, so a record takes the next
    stats line before the next record (found by a second reader of the same lines, ``again()``, kept just
    ahead: :class:`_Ahead`), else the last one before it.
    """
    ahead, last = None, None
    for i, line, cut in lines:
        if cut:
            big = _SGLANG_MARK in line or _VLLM_MARK in line
            yield (i, f"a line over {MAX_LINE_BYTES >> 20} MiB, not parsed") if big else None
            continue
        try:
            rec = parse_line(line, i)
        except ValueError as exc:
            yield i, str(exc)
            continue
        if isinstance(rec, PlainRecord) and rec.source == "vllm":
            last = rec
        elif isinstance(rec, LogRecord) and rec.source == "vllm":
            ahead = ahead or _Ahead(again())
            pick = ahead.stats_after(i) or last
            if pick is not None:
                rec.concurrency, rec.gen_throughput = pick.concurrency, pick.gen_throughput
        yield rec


class _Ahead:
    """A second reader of a log's lines, kept just ahead of the first: what follows a vLLM record."""

    def __init__(self, lines: Iterable[Line]):
        self._lines = iter(lines)
        self._found: tuple[float, PlainRecord | None] = (0, None)  # the last vLLM line found: (line, its stats)

    def stats_after(self, n: int) -> PlainRecord | None:
        """The vLLM stats line after line ``n`` and before the next vLLM record (None: there is none)."""
        if self._found[0] > n:
            return self._found[1]
        for i, line, cut in self._lines:
            if i <= n or cut or (_VLLM_MARK not in line and _VLLM_STATS not in line):
                continue
            try:
                rec = parse_line(line, i)
            except ValueError:
                continue
            if rec is not None and rec.source == "vllm":
                self._found = (i, rec if isinstance(rec, PlainRecord) else None)
                return self._found[1]
        self._found = (math.inf, None)
        return None


class ParsedLog:
    """A parsed log: its records' counts and medians per group, read in one pass in bounded memory.

    The summaries (:meth:`summary`, :func:`log_by_concurrency`) come from running aggregates, whose memory grows
    with the log's groups (source and concurrency) and its distinct numbers, not with its lines.
    :attr:`records`, :attr:`plain` and :attr:`malformed` read the log again for a caller that needs every
    line's record (their lists grow with the log); :meth:`json_chunks` streams them.
    """

    def __init__(self, path: str, lines: Callable[[], Iterable[Line]]):
        self.path, self._lines = path, lines
        self._tally = Tally()
        for item in self._items():
            self._tally.add(item)

    def _items(self) -> Iterator[Item]:
        return _scan(self._lines(), self._lines)

    @property
    def skipped_lines(self) -> int:
        return self._tally.skipped

    @property
    def n_records(self) -> int:
        return sum(g.n for g in self._tally.groups.values())

    @property
    def n_malformed(self) -> int:
        return self._tally.malformed

    @property
    def first_malformed(self) -> tuple[int, str] | None:
        return self._tally.first_malformed

    @property
    def records(self) -> list[LogRecord]:
        """Every metrics line's record, in order (read again: a list as long as the log)."""
        return [r for r in self._items() if isinstance(r, LogRecord)]

    @property
    def plain(self) -> list[PlainRecord]:
        """The decode / stats lines without speculation, in order (a speculative vLLM server's stats lines left out)."""
        keep = self._tally.plain_sources()
        return [r for r in self._items() if isinstance(r, PlainRecord) and r.source in keep]

    @property
    def malformed(self) -> list[tuple[int, str]]:
        """``(line, problem)`` of each malformed metrics line, in order."""
        return [r for r in self._items() if isinstance(r, tuple)]

    def summary(self) -> dict:
        """Medians of accept length and throughput overall and per (source, concurrency)."""
        return group_summary(self._tally.groups)

    def to_json(self) -> dict:
        return {"path": self.path, "records": [asdict(r) for r in self.records], "summary": self.summary(),
                "by_concurrency": log_by_concurrency(self), "skipped_lines": self.skipped_lines,
                "malformed": [{"line_no": n, "problem": p} for n, p in self.malformed]}

    def json_chunks(self) -> Iterator[str]:
        """``strict_json_text(self.to_json())`` in pieces, one record at a time (``perf --log --json``, bounded memory).

        The log is read once more; the summary, groups and counts printed are that reading's.
        """
        fresh = copy.copy(self)
        fresh._tally = Tally()
        yield strict_json_text({"path": self.path})[:-2] + ',\n  "records": ['
        first = True
        for item in fresh._items():
            fresh._tally.add(item)
            if isinstance(item, LogRecord):
                yield ("\n" if first else ",\n") + _indented(vars(item), 4)  # its fields, as asdict orders them
                first = False
        yield "]" if first else "\n  ]"
        rest, replaced = finite_json({"summary": fresh.summary(), "by_concurrency": log_by_concurrency(fresh),
                                      "skipped_lines": fresh.skipped_lines})
        yield ",\n" + json.dumps(rest, indent=2, default=str, allow_nan=False)[2:-2] + ',\n  "malformed": ['
        first = True
        for item in fresh._items() if fresh.n_malformed else ():
            if isinstance(item, tuple):
                yield ("\n" if first else ",\n") + _indented({"line_no": item[0], "problem": item[1]}, 4)
                first = False
        yield "]" if first else "\n  ]"
        if replaced:
            yield ',\n  "non_finite": ' + _indented(replaced, 2)[2:]
        yield "\n}"


def _indented(value, spaces: int) -> str:
    """``value`` as ``json.dumps(indent=2)`` writes it ``spaces`` deep inside an outer document."""
    pad = " " * spaces
    return pad + json.dumps(value, indent=2, default=str, allow_nan=False).replace("\n", "\n" + pad)


def parse_log_text(text: str, path: str = "<text>") -> ParsedLog:
    """Parse a whole log's text; non-metrics lines are counted as skipped, bad numbers as malformed."""
    return ParsedLog(path, lambda: ((i, line, False) for i, line in enumerate(text.splitlines(), start=1)))


def _file_lines(path: str | Path) -> Callable[[], Iterator[Line]]:
    """The lines of a log file, decoded (bad UTF-8 replaced), streamed anew on each call."""
    def lines() -> Iterator[Line]:
        return ((i, raw.decode("utf-8", errors="replace"), cut)
                for i, raw, cut in iter_lines(path, LogFormatError, MAX_LINE_BYTES))

    return lines


def parse_log(path: str | Path) -> ParsedLog:
    """Parse a server log file, streamed line by line (any size; time linear in its length, memory bounded).

    Raises:
        LogFormatError: not a readable regular file, or no speculative-decoding line in it.
    """
    where = printable(str(path))
    parsed = ParsedLog(where, _file_lines(path))
    if not parsed.n_records:
        first = parsed.first_malformed
        extra = f"; {parsed.n_malformed} malformed (first: line {first[0]}: {first[1]})" if first else ""
        raise LogFormatError(where, "no SGLang 'Decode batch ... accept len' or vLLM 'SpecDecoding metrics' "
                                    f"lines{extra}")
    return parsed


def parse_plain_log(path: str | Path) -> ParsedLog:
    """A log of the same server without speculation: its decode / stats lines (concurrency, tok/s).

    Raises:
        LogFormatError: not a readable regular file, no decode or stats line with a concurrency and a
            throughput, or speculative-decoding lines in it (a speculative server is not a baseline).
    """
    where = printable(str(path))
    parsed = ParsedLog(where, _file_lines(path))
    if parsed.n_records:
        raise LogFormatError(where, f"holds {parsed.n_records} speculative-decoding lines: give a log of the server "
                                    "without speculation as the baseline")
    if not parsed._tally.plain_usable & parsed._tally.plain_sources():
        raise LogFormatError(where, "no SGLang 'Decode batch ... #running-req ... gen throughput' or vLLM 'Avg generation "
                                    "throughput ... Running' lines")
    return parsed


def log_by_concurrency(spec: ParsedLog, plain: ParsedLog | None = None) -> list[dict]:
    """The speculative log's records grouped by concurrency: count, median τ and tok/s; with a plain log, the speedup.

    Returns:
        rows with ``concurrency``, ``n``, ``accept_len`` (median), ``throughput`` (median generated tok/s, all
        requests), ``throughput_per_request`` and, where the plain log has the same concurrency,
        ``plain_throughput``, ``plain_n`` and ``speedup`` (the medians' ratio). Records without a
        concurrency form no group.
    """
    groups: dict[int, list[Group]] = {}
    for (_, b), g in spec._tally.groups.items():
        if b is not None:
            groups.setdefault(b, []).append(g)
    base: dict[int, list[Values]] = {}
    if plain is not None:
        keep = plain._tally.plain_sources()
        for (source, b), values in plain._tally.plain.items():
            if source in keep:
                base.setdefault(b, []).append(values)
    rows = []
    for b, gs in sorted(groups.items()):
        tps = median(g.gen for g in gs)
        row = {"concurrency": b, "n": sum(g.n for g in gs), "accept_len": median(g.accept for g in gs),
               "throughput": tps}
        row["throughput_per_request"] = tps / b if tps is not None and b else None
        if b in base:
            row["plain_throughput"], row["plain_n"] = median(base[b]), sum(len(v) for v in base[b])
            row["speedup"] = row["throughput"] / row["plain_throughput"] if row["throughput"] else None
        rows.append(row)
    return rows
