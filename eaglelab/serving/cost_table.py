"""The cost table: what a serving engine measured, plain decoding and the speculative cycle at forced τ.

A serving engine can force its acceptance length (vLLM's ``rejection_sample_method="synthetic"``, SGLang's
``SGLANG_SIMULATE_ACC_LEN``, TensorRT-LLM's ``TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS``), so the cost of a
cycle is measured on the user's cluster without a good drafter. ``eaglelab recipe --job load`` writes the
script that measures; this module reads (and writes) what it measured, and the load model
(:func:`eaglelab.serving.load.fit`) is fitted to it.

The file is a UTF-8 CSV. Lines starting with ``#`` are comments (the script writes its provenance there);
then a header and one row per measurement, repeats of one setup as separate rows::

    concurrency,k,draft_tokens,topk,accept_len,context,output_tok_s

- ``concurrency``: requests in flight; ``k``: drafts per cycle, 0 for plain decoding;
- ``draft_tokens``: tokens verified per request per cycle (empty: ``k + 1``, a chain); ``topk``: the
  drafter's branching (empty: 1);
- ``accept_len``: the (forced) τ, bonus token included, in [1, k + 1]; 1 for plain decoding;
- ``context``: mean context tokens per request while decoding;
- ``output_tok_s``: generated tokens per second summed over the requests, in the decode phase.

A plain step is ``concurrency / output_tok_s``; a cycle, ``accept_len · concurrency / output_tok_s``.
Extra columns after these are kept out of the way (ignored). Only the standard library: ``perf`` stays a
metadata command.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from eaglelab.atomic import write_text_atomic
from eaglelab.errors import CostTableError, ParameterError
from eaglelab.inputs import printable, read_bytes, shown
from eaglelab.serving.perf import MAX_STEP_S, MIN_STEP_S, require_tree

#: The columns, in order.
COLUMNS = ("concurrency", "k", "draft_tokens", "topk", "accept_len", "context", "output_tok_s")
#: The largest cost table read (a measured sweep is a few hundred rows).
MAX_BYTES = 8 * 1024 * 1024
#: The most rows read.
MAX_ROWS = 100_000
#: Whole-number columns' ceiling: beyond it a value is a typo, not a load.
MAX_WHOLE = 10_000_000
#: The most requests in flight a row (and every setting that names a concurrency: ``perf``, ``plan``, ``recipe --job
#: load`` and its client) may hold: one server's batch is a few thousand at most, and the client opens a
#: connection per request.
MAX_CONCURRENCY = 65_536


@dataclass(frozen=True)
class Measurement:
    """One row: a steady decode phase of ``concurrency`` requests, plain (``k`` 0) or speculative.

    Attributes:
        concurrency: requests in flight.
        k: drafts per cycle (0: plain decoding).
        draft_tokens: tokens verified per request per cycle (``k + 1`` for a chain; 1 for plain decoding).
        topk: the drafter's branching (1: a chain).
        accept_len: τ, bonus token included (1 for plain decoding).
        context: mean context tokens per request.
        output_tok_s: generated tokens per second over all requests.
    """

    concurrency: int
    k: int
    draft_tokens: int
    topk: int
    accept_len: float
    context: int
    output_tok_s: float

    @property
    def plain(self) -> bool:
        return self.k == 0

    @property
    def step_s(self) -> float:
        """The measured step: a plain decoding step, or one speculative cycle (τ tokens per request)."""
        return self.accept_len * self.concurrency / self.output_tok_s

    def to_row(self) -> list[str]:
        return [str(self.concurrency), str(self.k), str(self.draft_tokens), str(self.topk), f"{self.accept_len:.6g}",
                str(self.context), f"{self.output_tok_s:.9g}"]


@dataclass(frozen=True)
class CostTable:
    """A cost table's rows and its comment lines (the measuring script's provenance)."""

    rows: tuple[Measurement, ...]
    comments: tuple[str, ...] = ()
    path: str = ""

    @property
    def plain(self) -> tuple[Measurement, ...]:
        return tuple(r for r in self.rows if r.plain)

    @property
    def cycles(self) -> tuple[Measurement, ...]:
        return tuple(r for r in self.rows if not r.plain)

    def provenance(self) -> dict[str, str]:
        """``# key: value`` comment lines as a mapping (engine, model, gpu, date...)."""
        out = {}
        for line in self.comments:
            key, sep, value = line.partition(":")
            if sep and key.strip() and " " not in key.strip():
                out[key.strip()] = value.strip()
        return out

    def text(self) -> str:
        buf = io.StringIO()
        for line in self.comments:
            buf.write(f"# {line}\n")
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(COLUMNS)
        writer.writerows(r.to_row() for r in self.rows)
        return buf.getvalue()


def _whole(text: str, column: str, where: str, low: int, high: int = MAX_WHOLE) -> int:
    t = text.strip()
    if not (t.isascii() and t.isdigit()) or len(t) > 12 or not low <= int(t) <= high:
        raise CostTableError(where, f"column {column} must be a whole number from {low} to {high:,}, got {shown(text)}")
    return int(t)


def _positive(text: str, column: str, where: str) -> float:
    try:
        value = float(text.strip()) if len(text) <= 64 else math.nan
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise CostTableError(where, f"column {column} must be a positive finite number, got {shown(text)}")
    return value


def measurement(cells: list[str], where: str) -> Measurement:
    """One row from its cells, checked: every number in range and τ reachable with ``k`` drafts.

    Raises:
        CostTableError: naming ``where`` (file and line) and the column.
    """
    if len(cells) < len(COLUMNS):
        raise CostTableError(where, f"a row needs the {len(COLUMNS)} columns {', '.join(COLUMNS)}; got {len(cells)}")
    c, k, draft_tokens, topk, tau, context, tps = cells[: len(COLUMNS)]
    k_value = _whole(k, "k", where, 0)
    row = Measurement(
        concurrency=_whole(c, "concurrency", where, 1, MAX_CONCURRENCY), k=k_value,
        draft_tokens=_whole(draft_tokens, "draft_tokens", where, 1) if draft_tokens.strip() else k_value + 1,
        topk=_whole(topk, "topk", where, 1) if topk.strip() else 1,
        accept_len=_positive(tau, "accept_len", where) if tau.strip() or k_value else 1.0,
        context=_whole(context, "context", where, 0), output_tok_s=_positive(tps, "output_tok_s", where))
    if row.plain and (row.accept_len != 1.0 or row.topk != 1 or row.draft_tokens != 1):
        raise CostTableError(where, "a plain decoding row (k 0) has accept_len 1, topk 1 and no draft tokens, got "
                                    f"accept_len {row.accept_len:g}, topk {row.topk}, draft_tokens {row.draft_tokens}")
    if not row.plain and not 1.0 <= row.accept_len <= row.k + 1:
        raise CostTableError(where, f"accept_len {row.accept_len:g} is not reachable with k = {row.k} drafts per cycle "
                                    f"(it counts the bonus token: [1, {row.k + 1}])")
    if not row.plain:
        try:
            require_tree(row.k, row.topk, row.draft_tokens, "draft_tokens")
        except ParameterError as exc:
            raise CostTableError(where, exc.problem) from None
    if not MIN_STEP_S <= row.step_s <= MAX_STEP_S:
        raise CostTableError(where, f"output_tok_s {row.output_tok_s:g} at concurrency {row.concurrency} makes one "
                                    f"{'step' if row.plain else 'cycle'} {row.step_s:.3g} s, outside the "
                                    f"{MIN_STEP_S * 1e6:g} µs to {MAX_STEP_S:g} s any GPU takes: output_tok_s is "
                                    "tokens per second summed over the requests (not per millisecond, not per request)")
    return row


def read_cost_table(path: str | Path) -> CostTable:
    """A cost table from its file, every row checked.

    Raises:
        CostTableError: an unreadable or oversized file, a header that is not :data:`COLUMNS`, a bad row (naming its
            line), no plain decoding row, or no row at all.
    """
    where = printable(str(path))
    data = read_bytes(path, CostTableError, MAX_BYTES, "cost table")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CostTableError(where, f"is not UTF-8 text (byte {exc.start})") from None
    if "\x00" in text:
        raise CostTableError(where, "holds a NUL byte: not a CSV text file")
    comments, body = [], []
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#"):
            comments.append(printable(line.lstrip()[1:].strip()))
        elif line.strip():
            body.append((n, line))
    if not body:
        raise CostTableError(where, f"holds no header and no rows; expected the header {','.join(COLUMNS)}")
    if len(body) - 1 > MAX_ROWS:
        raise CostTableError(where, f"holds {len(body) - 1:,} rows, over the {MAX_ROWS:,}-row cap")
    (hn, header), *lines = body
    try:
        names = [h.strip().lower() for h in next(csv.reader([header]))]
    except csv.Error as exc:
        raise CostTableError(f"{where}:{hn}", f"the header is not CSV ({exc})") from None
    if tuple(names[: len(COLUMNS)]) != COLUMNS:
        raise CostTableError(f"{where}:{hn}", f"the header must begin {','.join(COLUMNS)}, got {shown(header)}")
    rows = []
    for n, line in lines:
        try:
            cells = next(csv.reader([line]))
        except csv.Error as exc:
            raise CostTableError(f"{where}:{n}", f"not a CSV row ({exc})") from None
        rows.append(measurement(cells, f"{where}:{n}"))
    if not rows:
        raise CostTableError(where, "holds a header but no measured row")
    if not any(r.plain for r in rows):
        raise CostTableError(where, "holds no plain decoding row (k 0): the speedup needs the step without a drafter")
    return CostTable(tuple(rows), tuple(comments), where)


def write_cost_table(path: str | Path, rows: Iterable[Measurement], comments: Iterable[str] = ()) -> Path:
    """Write ``rows`` (and ``comments``, one per line) atomically; the caller owns ``path``."""
    return write_text_atomic(path, CostTable(tuple(rows), tuple(comments)).text())
