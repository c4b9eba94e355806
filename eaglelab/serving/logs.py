"""Parse speculative-decoding metrics out of SGLang and vLLM server logs.

Recognised lines (``docs/EAGLE3_FORMAT.md``); every other line is skipped:

- SGLang, newer: ``Decode batch[ iter], #running-req: N, #token: N, token usage: X,
  accept len: X.XX, accept rate: X.XX, cuda graph: B, gen throughput (token/s): X.XX, ...``
- SGLang, older: ``Decode batch. #running-req: 1, #token: 112, token usage: 0.00,
  accept len: 2.19, cuda graph: True, gen throughput (token/s): 258.07, #queue-req: 0,``
- vLLM: ``SpecDecoding metrics: Mean acceptance length: X.XX, Accepted throughput: X.XX
  tokens/s, Drafted throughput: ..., Per-position acceptance rate: <list>, ...``
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
        batch_size: running requests (SGLang), None for vLLM.
        accept_rate: fraction of drafts accepted, when logged.
        cuda_graph: whether the step ran under CUDA graphs (SGLang).
        per_position: vLLM per-position acceptance rates.
    """

    line_no: int
    source: str
    accept_len: float
    throughput: float | None
    batch_size: int | None = None
    accept_rate: float | None = None
    cuda_graph: bool | None = None
    per_position: list[float] = field(default_factory=list)


@dataclass
class ParsedLog:
    """All records of a log plus what was skipped."""

    path: str
    records: list[LogRecord]
    skipped_lines: int
    malformed: list[tuple[int, str]]

    def summary(self) -> dict:
        """Medians of accept length and throughput overall and per (source, batch size)."""
        return summarise(self.records)

    def to_json(self) -> dict:
        return {"path": self.path, "records": [asdict(r) for r in self.records],
                "summary": self.summary(), "skipped_lines": self.skipped_lines,
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


def _sglang(body: str, line_no: int) -> LogRecord | None:
    f = _fields(body.lstrip("[]0123456789 ."))
    accept = _one(f, "accept len")
    if accept is None:
        return None  # a decode line of a server without speculation
    get = {k: _one(f, k) for k in ("#running-req", "accept rate", "cuda graph", "gen throughput (token/s)")}
    graph = get["cuda graph"]
    if graph not in (None, "True", "False"):
        raise ValueError(f"cuda graph: {printable(repr(graph[:_MAX_NUMBER_CHARS]))} is not True or False")
    return LogRecord(
        line_no=line_no, source="sglang",
        accept_len=_number(accept, "accept len (SGLang counts the bonus token)", low=1.0),
        throughput=None if get["gen throughput (token/s)"] is None else
        _number(get["gen throughput (token/s)"], "gen throughput"),
        batch_size=None if get["#running-req"] is None else _count(get["#running-req"], "#running-req"),
        accept_rate=None if get["accept rate"] is None else _number(get["accept rate"], "accept rate", high=1.0),
        cuda_graph=None if graph is None else graph == "True",
    )


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


def parse_line(line: str, line_no: int = 0) -> LogRecord | None:
    """Parse one log line, in time linear in its length; None when it is not a metrics line.

    Raises:
        ValueError: a metrics line whose numbers cannot be read or are impossible (τ below 1, a
            negative rate or throughput, an acceptance rate above 1 or 100%, vLLM's τ disagreeing
            with its own per-position rates).
    """
    at = line.find(_SGLANG_MARK)
    if at >= 0 and "accept len" in line:
        return _sglang(line[at + len(_SGLANG_MARK):], line_no)
    at = line.find(_VLLM_MARK)
    if at >= 0:
        return _vllm(line[at + len(_VLLM_MARK):], line_no)
    return None


def _parse_lines(lines: Iterable[tuple[int, str, bool]], path: str) -> ParsedLog:
    records, malformed, skipped = [], [], 0
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
        else:
            records.append(rec)
    return ParsedLog(path, records, skipped, malformed)


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


def summarise(records: list[LogRecord]) -> dict:
    """Median accept length and throughput overall and grouped by source and batch size."""
    def stats(rs: list[LogRecord]) -> dict:
        tps = [r.throughput for r in rs if r.throughput is not None]
        return {"n": len(rs), "median_accept_len": statistics.median(r.accept_len for r in rs),
                "median_throughput": statistics.median(tps) if tps else None}

    if not records:
        return {"n": 0, "by_batch_size": []}
    groups: dict[tuple[str, int | None], list[LogRecord]] = {}
    for r in records:
        groups.setdefault((r.source, r.batch_size), []).append(r)
    out = stats(records)
    out["by_batch_size"] = [{"source": s, "batch_size": b, **stats(rs)}
                            for (s, b), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0))]
    return out
