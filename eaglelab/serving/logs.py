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

import re
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from eaglelab.errors import LogFormatError

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_SGLANG = re.compile(r"Decode batch(?:\[[^\]]*\]|\.)?[^\n]*?accept len:\s*(?P<accept>\S+?),")
_SGLANG_FIELDS = {
    "running_req": re.compile(r"#running-req:\s*(\S+?),"),
    "num_tokens": re.compile(r"#token:\s*(\S+?),"),
    "token_usage": re.compile(r"token usage:\s*(\S+?),"),
    "accept_rate": re.compile(r"accept rate:\s*(\S+?),"),
    "cuda_graph": re.compile(r"cuda graph:\s*(\S+?),"),
    "throughput": re.compile(r"gen throughput \(token/s\):\s*(\S+?),"),
    "queue_req": re.compile(r"#queue-req:\s*(\S+?),"),
}
_VLLM = re.compile(r"SpecDecoding metrics:\s*(?P<body>.*)$")
_VLLM_FIELDS = {
    "accept_len": re.compile(rf"Mean acceptance length:\s*({_NUM})"),
    "throughput": re.compile(rf"Accepted throughput:\s*({_NUM})"),
    "drafted_throughput": re.compile(rf"Drafted throughput:\s*({_NUM})"),
    "accepted_tokens": re.compile(r"Accepted:\s*(\d+) tokens"),
    "drafted_tokens": re.compile(r"Drafted:\s*(\d+) tokens"),
    "accept_rate": re.compile(rf"Avg Draft acceptance rate:\s*({_NUM})\s*%"),
}
_VLLM_POSITIONS = re.compile(r"Per-position acceptance rate:\s*\[?([^\]A-Za-z]*)\]?")


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


def _float(text: str) -> float:
    value = float(text.strip().rstrip(","))
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"not a finite number: {text!r}")
    return value


def parse_line(line: str, line_no: int = 0) -> LogRecord | None:
    """Parse one log line; None when the line is not a metrics line.

    Raises:
        ValueError: a metrics line whose numbers cannot be read.
    """
    m = _SGLANG.search(line)
    if m:
        fields = {k: rx.search(line) for k, rx in _SGLANG_FIELDS.items()}
        get = {k: v.group(1) for k, v in fields.items() if v}
        accept = _float(m.group("accept"))
        if accept < 1.0:
            raise ValueError(f"accept len {accept} below 1.0 (SGLang counts the bonus token)")
        return LogRecord(
            line_no=line_no, source="sglang", accept_len=accept,
            throughput=_float(get["throughput"]) if "throughput" in get else None,
            batch_size=int(get["running_req"]) if "running_req" in get else None,
            accept_rate=_float(get["accept_rate"]) if "accept_rate" in get else None,
            cuda_graph=(get["cuda_graph"] == "True") if "cuda_graph" in get else None,
        )
    m = _VLLM.search(line)
    if m:
        body = m.group("body")
        got = {k: rx.search(body) for k, rx in _VLLM_FIELDS.items()}
        if not got["accept_len"]:
            raise ValueError("SpecDecoding line without a readable 'Mean acceptance length'")
        pos = _VLLM_POSITIONS.search(body)
        per_position = [_float(x) for x in pos.group(1).split(",") if x.strip()] if pos else []
        return LogRecord(
            line_no=line_no, source="vllm", accept_len=_float(got["accept_len"].group(1)),
            throughput=_float(got["throughput"].group(1)) if got["throughput"] else None,
            accept_rate=_float(got["accept_rate"].group(1)) / 100 if got["accept_rate"] else None,
            per_position=per_position,
        )
    return None


def parse_log_text(text: str, path: str = "<text>") -> ParsedLog:
    """Parse a whole log's text; non-metrics lines are counted as skipped, bad numbers as malformed."""
    records, malformed, skipped = [], [], 0
    for i, line in enumerate(text.splitlines(), start=1):
        try:
            rec = parse_line(line, i)
        except (ValueError, KeyError) as exc:
            malformed.append((i, str(exc)))
            continue
        if rec is None:
            skipped += 1
        else:
            records.append(rec)
    return ParsedLog(path, records, skipped, malformed)


def parse_log(path: str | Path) -> ParsedLog:
    """Parse a server log file.

    Raises:
        LogFormatError: unreadable file, or no speculative-decoding line in it.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise LogFormatError(path, "no such file") from None
    except IsADirectoryError:
        raise LogFormatError(path, "is a folder, expected a log file") from None
    parsed = parse_log_text(text, str(path))
    if not parsed.records:
        extra = f"; {len(parsed.malformed)} malformed (first: line {parsed.malformed[0][0]})" if parsed.malformed else ""
        raise LogFormatError(path, "no SGLang 'Decode batch ... accept len' or vLLM 'SpecDecoding metrics' "
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
