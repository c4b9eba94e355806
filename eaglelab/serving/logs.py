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
concurrency (:func:`by_concurrency`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from eaglelab.errors import LogFormatError
from eaglelab.inputs import iter_lines, printable

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


@dataclass
class ParsedLog:
    """All records of a log plus what was skipped."""

    path: str
    records: list[LogRecord]
    skipped_lines: int
    malformed: list[tuple[int, str]]
    plain: list[PlainRecord] = field(default_factory=list)

    def summary(self) -> dict:
        """Medians of accept length and throughput overall and per (source, concurrency)."""
        return summarise(self.records)

    def to_json(self) -> dict:
        return {"path": self.path, "records": [asdict(r) for r in self.records],
                "summary": self.summary(), "by_concurrency": by_concurrency(self),
                "skipped_lines": self.skipped_lines,
                "malformed": [{"line_no": n, "problem": p} for n, p in self.malformed]}


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
    if not word.isdigit() or len(word) > 12:
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
    gen = None if get["gen throughput (token/s)"] is None else _number(get["gen throughput (token/s)"], "gen throughput")
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
                       None if gen is None else _number(gen, "Avg generation throughput"))


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
        throughput=None if throughput is None else _number(throughput, "Accepted throughput"),
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


def _parse_lines(lines: Iterable[tuple[int, str, bool]], path: str) -> ParsedLog:
    records, plain, malformed, skipped = [], [], [], 0
    for i, line, cut in lines:
        if cut:
            if _SGLANG_MARK in line or _VLLM_MARK in line:
                malformed.append((i, f"a line over {MAX_LINE_BYTES >> 20} MiB, not parsed"))
            else:
                skipped += 1
            continue
        try:
            rec = parse_line(line, i)
        except ValueError as exc:
            malformed.append((i, str(exc)))
            continue
        if rec is None:
            skipped += 1
        elif isinstance(rec, PlainRecord):
            plain.append(rec)
        else:
            records.append(rec)
    _pair_vllm(records, plain)
    return ParsedLog(path, records, skipped, malformed, plain)


def _pair_vllm(records: list[LogRecord], plain: list[PlainRecord]) -> None:
    """Give each vLLM SpecDecoding record the concurrency and generation tok/s of its interval's stats line.

    vLLM logs both every interval, the stats line just after the metrics line: a record takes the next
    stats line before the next record, else the last one before it. Stats lines so taken are a
    speculative server's and leave the plain list.
    """
    stats = [p for p in plain if p.source == "vllm"]
    if not stats:
        return
    import bisect

    at = [p.line_no for p in stats]  # ascending: lines are read in order
    vllm = [r for r in records if r.source == "vllm"]
    for n, rec in enumerate(vllm):
        limit = vllm[n + 1].line_no if n + 1 < len(vllm) else math.inf
        i = bisect.bisect_right(at, rec.line_no)  # the first stats line after the record
        pick = stats[i] if i < len(stats) and at[i] < limit else (stats[i - 1] if i else None)
        if pick is not None:
            rec.concurrency, rec.gen_throughput = pick.concurrency, pick.gen_throughput
    if vllm:  # a speculative server's stats lines are not a plain decoding baseline
        plain[:] = [p for p in plain if p.source != "vllm"]


def parse_log_text(text: str, path: str = "<text>") -> ParsedLog:
    """Parse a whole log's text; non-metrics lines are counted as skipped, bad numbers as malformed."""
    return _parse_lines(((i, line, False) for i, line in enumerate(text.splitlines(), start=1)), path)


def parse_log(path: str | Path) -> ParsedLog:
    """Parse a server log file, streamed line by line (any size; time linear in its length).

    Raises:
        LogFormatError: not a readable regular file, or no speculative-decoding line in it.
    """
    where = printable(str(path))
    lines = ((i, raw.decode("utf-8", errors="replace"), cut)
             for i, raw, cut in iter_lines(path, LogFormatError, MAX_LINE_BYTES))
    parsed = _parse_lines(lines, where)
    if not parsed.records:
        extra = f"; {len(parsed.malformed)} malformed (first: line {parsed.malformed[0][0]}: " \
                f"{parsed.malformed[0][1]})" if parsed.malformed else ""
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
    lines = ((i, raw.decode("utf-8", errors="replace"), cut)
             for i, raw, cut in iter_lines(path, LogFormatError, MAX_LINE_BYTES))
    parsed = _parse_lines(lines, where)
    if parsed.records:
        raise LogFormatError(where, f"holds {len(parsed.records)} speculative-decoding lines: give a log of the server "
                                    "without speculation as the baseline")
    if not any(p.concurrency is not None and p.gen_throughput is not None for p in parsed.plain):
        raise LogFormatError(where, "no SGLang 'Decode batch ... #running-req ... gen throughput' or vLLM 'Avg generation "
                                    "throughput ... Running' lines")
    return parsed


def by_concurrency(spec: ParsedLog, plain: ParsedLog | None = None) -> list[dict]:
    """The speculative log's records grouped by concurrency: count, median τ and tok/s; with a plain log, the speedup.

    Returns:
        rows with ``concurrency``, ``n``, ``accept_len`` (median), ``throughput`` (median generated tok/s, all
        requests), ``throughput_per_request`` and, where the plain log has the same concurrency,
        ``plain_throughput``, ``plain_n`` and ``speedup`` (the medians' ratio). Records without a
        concurrency form no group.
    """
    groups: dict[int, list[LogRecord]] = {}
    for r in spec.records:
        if r.concurrency is not None:
            groups.setdefault(r.concurrency, []).append(r)
    base: dict[int, list[float]] = {}
    for p in (plain.plain if plain is not None else []):
        if p.concurrency is not None and p.gen_throughput is not None and p.gen_throughput > 0:
            base.setdefault(p.concurrency, []).append(p.gen_throughput)
    rows = []
    for b, rs in sorted(groups.items()):
        tps = [r.gen_throughput for r in rs if r.gen_throughput is not None]
        row = {"concurrency": b, "n": len(rs), "accept_len": statistics.median(r.accept_len for r in rs),
               "throughput": statistics.median(tps) if tps else None}
        row["throughput_per_request"] = row["throughput"] / b if row["throughput"] is not None and b else None
        if b in base:
            row["plain_throughput"], row["plain_n"] = statistics.median(base[b]), len(base[b])
            row["speedup"] = row["throughput"] / row["plain_throughput"] if row["throughput"] else None
        rows.append(row)
    return rows


def summarise(records: list[LogRecord]) -> dict:
    """Median accept length and throughput overall and grouped by source and concurrency."""
    def stats(rs: list[LogRecord]) -> dict:
        tps = [r.throughput for r in rs if r.throughput is not None]
        return {"n": len(rs), "median_accept_len": statistics.median(r.accept_len for r in rs),
                "median_throughput": statistics.median(tps) if tps else None}

    if not records:
        return {"n": 0, "by_source": []}
    groups: dict[tuple[str, int | None], list[LogRecord]] = {}
    for r in records:
        groups.setdefault((r.source, r.concurrency), []).append(r)
    out = stats(records)
    out["by_source"] = [{"source": s, "concurrency": b, **stats(rs)}
                        for (s, b), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0))]
    return out
