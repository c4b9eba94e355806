"""Log parsing stays linear: time per MB of ``parse_log`` is flat from 1 KB to 10 MB lines.

The question: does one long (hostile or corrupt) line in a server log cost time in proportion to
its length? Each case writes a fresh log file holding one line of the given size and times
``eaglelab.serving.logs.parse_log`` on it (open, stream, decode, parse, validate: the whole reader),
median of ``--repeat`` runs. Four kinds of line, each built to hit a parser's weak spot:

- ``sglang-digits``: ``Decode batch ... accept len: 1111...`` with no comma after the number;
- ``sglang-fields``: ``Decode batch,`` then ``accept len: 2.0, `` repeated;
- ``vllm-positions``: ``SpecDecoding metrics:`` with a per-position list of ``0.5, `` repeated;
- ``vllm-digits``: ``Avg Draft acceptance rate: 1111...`` with no ``%``.

Printed per size: seconds per MB, and the ratio to the same kind at 1 KB (flat means ~1x), next to a
baseline run in the same process on the same file: reading it and splitting the line on commas
(``bytes.split``), the least any parser of this format must do. The parser of the previous release
(regular expressions with lazy quantifiers) took tens of seconds on a 1 MB line: time grew with the
square of the length.

    python benchmarks/bench_logs.py [--max-mb 10] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from eaglelab.errors import LogFormatError  # noqa: E402
from eaglelab.serving.logs import parse_log  # noqa: E402

KINDS = {
    "sglang-digits": (b"[t TP0] Decode batch. #running-req: 1, accept len: ", b"1"),
    "sglang-fields": (b"[t TP0] Decode batch, ", b"accept len: 2.0, "),
    "vllm-positions": (b"INFO SpecDecoding metrics: Mean acceptance length: 2.0, Per-position acceptance rate: ",
                       b"0.5, "),
    "vllm-digits": (b"INFO SpecDecoding metrics: Mean acceptance length: 2.0, Avg Draft acceptance rate: ", b"1"),
}


def line_of(kind: str, size: int) -> bytes:
    head, unit = KINDS[kind]
    return head + unit * max(1, (size - len(head)) // len(unit)) + b"\n"


def timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def baseline(path: Path) -> None:
    with open(path, "rb") as fh:
        for line in fh:
            line.split(b",")


def parse(path: Path) -> None:
    try:
        parse_log(path)
    except LogFormatError:  # a hostile line gives no record: the error is the expected answer
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-mb", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sizes = [s for s in (1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22, 10 << 20) if s <= args.max_mb * (1 << 20)]
    print(f"{'line kind':<16} {'line':>8} {'parse s/MB':>11} {'vs 1 KB':>8} {'read+split s/MB':>16} {'parse/baseline':>15}")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for kind in KINDS:
            first = None
            for size in sizes:
                path = Path(tmp) / f"{kind}-{size}.log"
                path.write_bytes(line_of(kind, size))
                mb = path.stat().st_size / (1 << 20)
                reps = args.repeat if size >= 1 << 17 else max(args.repeat, 50)
                t_parse = timed(lambda p=path: parse(p), reps) / mb
                t_base = timed(lambda p=path: baseline(p), reps) / mb
                first = first or t_parse
                if size >= 1 << 17:  # below that, fixed costs (open, stat) dominate the per-MB figure
                    worst = max(worst, t_parse / first)
                label = f"{size >> 10} KB" if size < 1 << 20 else f"{size >> 20} MB"
                print(f"{kind:<16} {label:>8} {t_parse:>11.4f} {t_parse / first:>7.2f}x {t_base:>16.4f} "
                      f"{t_parse / t_base:>14.1f}x")
    print(f"\nlargest growth of s/MB from a 1 KB line to a longer one (>= 128 KB): {worst:.2f}x "
          "(quadratic parsing would grow ~10,000x from 1 KB to 10 MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
