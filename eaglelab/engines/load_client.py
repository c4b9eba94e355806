"""Measure one row of eaglelab's cost table per (concurrency, repeat) against a running SGLang or vLLM server.

Standard library only: ``eaglelab recipe --job load`` copies this file verbatim beside its ``run.sh``, and it runs
on the cluster, where eaglelab may not be installed. Three commands::

    python load_client.py port-free --url http://127.0.0.1:30000
    python load_client.py wait --url http://127.0.0.1:30000 --pid "$SERVER_PID" --timeout 1800
    python load_client.py measure --url http://127.0.0.1:30000 --out costs.csv --concurrency 1,2,4 \\
        --prompt-tokens 1024 --output-tokens 256 --repeats 2 --k 3 --draft-tokens 4 --topk 1 --accept-len 2

``measure`` starts ``c`` streaming requests together (one thread each, released by one barrier) on the OpenAI
completions API (``POST /v1/completions``, ``"stream": true``): synthetic token-id prompts (no tokenizer, no data
set; each request's own ids, so no two share a cached prefix), ``"ignore_eos": true`` and ``"max_tokens"`` so every
request generates the same count, temperature 0, and ``stream_options`` asking for the usage in every chunk
(``continuous_usage_stats``, which both vLLM and SGLang honour): a speculative engine streams several tokens per
chunk, so the client counts tokens from the usage, never from chunks. Each request's timeline is the list of
(arrival time, tokens so far).

The row's ``output_tok_s`` (:func:`decode_rate`): the steady decode phase is the window from the *latest* first-token
time to the *earliest* last-token time -- where all ``c`` requests decode together and nothing is prefilled;
``output_tok_s`` = the tokens that arrived inside that window, summed over the requests, divided by its length.
Counting the tokens inside the window (not each request's tokens after its first, over the window) keeps the
numerator and the denominator on the same interval: tokens a request received before the last request started, or
after the first one finished, were made in a batch of another size. For ``c = 1`` it is the usual inter-token rate,
(tokens - first chunk's) / (last - first). A window that is empty (the requests never decoded all together, e.g. a
server that queues them) or holds no token is refused with the reason, not written.

Rows are appended one (concurrency, repeat) at a time, so a run that fails keeps what it measured: the whole file
is rewritten to a temporary file beside it and renamed over it. A new file starts with ``# key: value`` provenance
comments (the ``--note`` lines, the engine's version as the server reports it, the GPU as nvidia-smi names it, the
date) and the header.

Every network call runs under one deadline (``--timeout``, for the whole command) and a stall limit (``--stall``:
no chunk for that long is an error). A server error, a refused connection or a deadline passed is one line on
stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

#: The cost table's columns (eaglelab/serving/cost_table.py COLUMNS), then two of this client's (ignored by the reader).
COLUMNS = ("concurrency", "k", "draft_tokens", "topk", "accept_len", "context", "output_tok_s")
EXTRA_COLUMNS = ("window_s", "window_tokens")
HEADER = ",".join(COLUMNS + EXTRA_COLUMNS)
#: The most requests in flight one measurement opens (eaglelab/serving/cost_table.py MAX_CONCURRENCY): a connection
#: and a thread each, made before the round starts.
MAX_CONCURRENCY = 65_536
#: Whole-number options' ceiling (the cost table's MAX_WHOLE: beyond it a value is a typo, not a load).
MAX_WHOLE = 10_000_000
#: Largest error body shown from a server.
MAX_ERROR_BYTES = 2000
#: Longest line read from a stream (a chunk is a few hundred bytes).
MAX_LINE_BYTES = 1 << 20


class LoadError(Exception):
    """What ends the command: one line on stderr, exit code 2."""


class NoDecodeWindow(ValueError):
    """The timings hold no window in which every request decoded: no row can be computed from them."""


# --------------------------------------------------------------------------- the row's rate

def decode_rate(timelines: list[list[tuple[float, int]]]) -> tuple[float, float, int]:
    """Tokens per second summed over the requests, in the window where all of them decode together.

    Args:
        timelines: per request, its chunks' (arrival time in seconds, tokens received so far), in arrival order;
            the first entry is the first token's chunk.

    Returns:
        ``(output_tok_s, window_s, window_tokens)``: the rate, the window's length and the tokens inside it.

    Raises:
        NoDecodeWindow: no request, a request without a token, times or counts that are not finite or go backwards,
            a window that is empty or holds no token, or a rate that is not a positive finite number.
    """
    if not timelines:
        raise NoDecodeWindow("no request was timed")
    for n, timeline in enumerate(timelines):
        if not timeline:
            raise NoDecodeWindow(f"request {n} received no token")
        times = [t for t, _ in timeline]
        counts = [c for _, c in timeline]
        if not all(isinstance(t, (int, float)) and math.isfinite(t) for t in times):
            raise NoDecodeWindow(f"request {n} has a time that is not a finite number")
        if any(b < a for a, b in zip(times, times[1:])) or any(b <= a for a, b in zip(counts, counts[1:])) \
                or counts[0] < 1:
            raise NoDecodeWindow(f"request {n}'s chunks go backwards in time or in tokens")
    start = max(timeline[0][0] for timeline in timelines)  # the last request's first token
    end = min(timeline[-1][0] for timeline in timelines)  # the first request's last token
    if not end > start:
        raise NoDecodeWindow(f"the {len(timelines)} requests never decoded all together (the last first token came "
                             f"{start - end:.6g} s after the first request finished): raise --output-tokens, or the "
                             "server queues requests (raise its running-request limit)")
    tokens = sum(_tokens_at(timeline, end) - _tokens_at(timeline, start) for timeline in timelines)
    window = end - start
    if tokens <= 0:
        raise NoDecodeWindow(f"no token arrived in the {window:.6g} s in which all {len(timelines)} requests decoded")
    rate = tokens / window
    if not (math.isfinite(rate) and rate > 0):
        raise NoDecodeWindow(f"{tokens} tokens over {window:.6g} s is not a finite rate")
    return rate, window, tokens


def _tokens_at(timeline: list[tuple[float, int]], t: float) -> int:
    """Tokens a request had received by time ``t`` (its chunks arriving at or before ``t``)."""
    got = 0
    for when, count in timeline:
        if when > t:
            break
        got = count
    return got


def cost_row(concurrency: int, k: int, draft_tokens: int, topk: int, accept_len: float, context: int,
             rate: float, window_s: float, window_tokens: int) -> str:
    """One CSV line of the cost table (the number formats of eaglelab's own writer)."""
    return (f"{concurrency},{k},{draft_tokens},{topk},{accept_len:.6g},{context},{rate:.9g},"
            f"{window_s:.6g},{window_tokens}")


# --------------------------------------------------------------------------- HTTP under a deadline

class Deadline:
    """The one deadline of a command; each call asks it for the time left (never more than ``stall``)."""

    def __init__(self, seconds: float, stall: float):
        self.at, self.stall, self.seconds = time.monotonic() + seconds, stall, seconds

    def left(self, what: str) -> float:
        left = self.at - time.monotonic()
        if left <= 0:
            raise LoadError(f"{what}: the {self.seconds:g} s deadline (--timeout) passed")
        return min(left, self.stall)


def split_url(url: str) -> tuple[str, str, int]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LoadError(f"--url {url!r}: give http://HOST:PORT")
    return parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def connect(url: str, timeout: float) -> http.client.HTTPConnection:
    scheme, host, port = split_url(url)
    cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    return cls(host, port, timeout=timeout)


def one_line(text: str) -> str:
    return " ".join(str(text).split())[:MAX_ERROR_BYTES]


def get_json(url: str, path: str, deadline: Deadline) -> tuple[int, object]:
    """``GET path``: (status, the JSON body or None)."""
    conn = connect(url, deadline.left(f"GET {path}"))
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read(MAX_LINE_BYTES)
    finally:
        conn.close()
    try:
        return resp.status, json.loads(body)
    except ValueError:
        return resp.status, None


def stream_completion(url: str, body: dict, deadline: Deadline, conn: http.client.HTTPConnection,
                      barrier: threading.Barrier | None = None) -> list[tuple[float, int]]:
    """Send one streaming completion and time its chunks: [(arrival time, tokens so far)].

    Tokens are read from each chunk's usage (``continuous_usage_stats``); a server that sends none is counted one
    token per chunk and then held to the final usage, and refused when the two disagree.

    Raises:
        LoadError: an HTTP error, an error object in the stream, a stall, the deadline, or a token count that is not
            ``max_tokens``.
    """
    if barrier is not None:
        barrier.wait(deadline.left("waiting for the other requests"))
    conn.timeout = deadline.left("POST /v1/completions")
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        said = resp.read(MAX_ERROR_BYTES).decode("utf-8", "replace")
        raise LoadError(f"POST /v1/completions: HTTP {resp.status}: {one_line(said)}")
    timeline: list[tuple[float, int]] = []
    counted = reported = 0
    while True:
        if conn.sock is not None:
            conn.sock.settimeout(deadline.left("reading the stream"))
        line = resp.readline(MAX_LINE_BYTES)
        now = time.monotonic()
        if not line:
            break
        text = line.decode("utf-8", "replace").strip()
        if not text.startswith("data:"):
            continue
        data = text[5:].strip()
        if data == "[DONE]":
            break
        try:
            chunk = json.loads(data)
        except ValueError:
            raise LoadError(f"the stream holds a line that is not JSON: {one_line(data)[:200]}") from None
        if not isinstance(chunk, dict):
            raise LoadError(f"the stream holds a chunk that is not an object: {one_line(data)[:200]}")
        if "error" in chunk:
            error = chunk["error"]
            raise LoadError("the server answered with an error: "
                            + one_line(error.get("message", error) if isinstance(error, dict) else error))
        usage = chunk.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            reported = usage["completion_tokens"]
        if chunk.get("choices"):
            counted += 1
        so_far = reported or counted
        if so_far > (timeline[-1][1] if timeline else 0):
            timeline.append((now, so_far))
    want = body["max_tokens"]
    got = timeline[-1][1] if timeline else 0
    if got != want:
        raise LoadError(f"a request received {got} tokens, not the {want} asked (max_tokens with ignore_eos): the "
                        "server stopped it early or does not report usage per chunk (stream_options."
                        "continuous_usage_stats); its rate would be wrong")
    return timeline


# --------------------------------------------------------------------------- one round

def prompt_ids(length: int, seed: int, low: int, high: int) -> list[int]:
    """A synthetic prompt of ``length`` token ids in [low, high), its own for each seed (no shared cached prefix)."""
    rng = random.Random(seed)
    return [rng.randrange(low, high) for _ in range(length)]


def measure_round(url: str, model: str, concurrency: int, args: argparse.Namespace, seed: int,
                  deadline: Deadline, output_tokens: int | None = None) -> list[list[tuple[float, int]]]:
    """``concurrency`` requests started together; each one's timeline."""
    barrier = threading.Barrier(concurrency)
    timelines: list = [None] * concurrency
    errors: list[BaseException] = []
    blocked: list[int] = []
    conns = [connect(url, deadline.left("connecting")) for _ in range(concurrency)]

    def one(i: int) -> None:
        body = {"model": model, "prompt": prompt_ids(args.prompt_tokens, seed * 100_003 + i, *args.token_range),
                "max_tokens": output_tokens or args.output_tokens, "temperature": 0.0, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
        try:
            timelines[i] = stream_completion(url, body, deadline, conns[i], barrier)
        except threading.BrokenBarrierError:
            blocked.append(i)  # another request failed first: its error is the one reported
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
            barrier.abort()
        finally:
            conns[i].close()

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline.at - time.monotonic()))
    if any(t.is_alive() for t in threads):
        raise LoadError(f"{concurrency} requests: the {deadline.seconds:g} s deadline (--timeout) passed")
    if errors:
        raise errors[0] if isinstance(errors[0], LoadError) else LoadError(network_problem(errors[0]))
    if blocked:
        raise LoadError(f"{len(blocked)} of {concurrency} requests could not start together")
    return timelines


def network_problem(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer from the server within the stall limit (--stall) or the deadline (--timeout)"
    if isinstance(exc, ConnectionRefusedError):
        return "the server refused the connection (is it running on --url?)"
    return f"{type(exc).__name__}: {one_line(exc)}"


# --------------------------------------------------------------------------- the file

def provenance(args: argparse.Namespace, url: str, deadline: Deadline) -> list[str]:
    """The ``# key: value`` lines a new cost table starts with."""
    lines = list(args.note or [])
    version = "version not reported"
    try:
        status, body = get_json(url, "/version", deadline)
        if status == 200 and isinstance(body, dict) and isinstance(body.get("version"), str):
            version = body["version"]
    except (OSError, http.client.HTTPException):
        pass
    lines.insert(0, f"engine: {args.engine} {version}")
    lines.append(f"gpu: {gpu_name()}")
    lines.append(f"date: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
    lines.append("measured by: eaglelab load_client.py (decode window: latest first token to earliest last token)")
    return [" ".join(line.split()) for line in lines]


def gpu_name() -> str:
    try:
        proc = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return "unknown (no nvidia-smi)"
    names = [n.strip() for n in proc.stdout.splitlines() if n.strip()]
    if proc.returncode != 0 or not names:
        return "unknown (nvidia-smi failed)"
    return f"{len(names)} x {names[0]}" if len(set(names)) == 1 else ", ".join(names)


def append_rows(path: str, lines: list[str], comments: list[str]) -> None:
    """Append ``lines`` to the cost table at ``path`` (created with ``comments`` and the header when absent),
    by rewriting the whole file to a temporary beside it and renaming it over.

    Raises:
        LoadError: an existing file whose header is not this client's, or a write that fails.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            old = fh.read()
    except FileNotFoundError:
        old = "".join(f"# {c}\n" for c in comments) + HEADER + "\n"
    except (OSError, UnicodeDecodeError) as exc:
        raise LoadError(f"{path}: cannot read it ({exc})") from None
    header = next((ln.strip() for ln in old.splitlines() if ln.strip() and not ln.lstrip().startswith("#")), None)
    if header != HEADER:
        raise LoadError(f"{path}: its header is {header!r}, not this client's {HEADER!r}: write to a new file")
    text = old + ("" if old.endswith("\n") else "\n") + "".join(line + "\n" for line in lines)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".costs-", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise LoadError(f"{path}: cannot write it ({exc})") from None


# --------------------------------------------------------------------------- commands

def served_model(url: str, deadline: Deadline) -> str:
    status, body = get_json(url, "/v1/models", deadline)
    try:
        return body["data"][0]["id"]  # type: ignore[index]
    except (TypeError, KeyError, IndexError):
        raise LoadError(f"GET /v1/models answered HTTP {status} without a model id: give --model") from None


def check_setup(args: argparse.Namespace) -> None:
    if args.k == 0 and (args.accept_len != 1 or args.topk != 1 or args.draft_tokens not in (None, 1)):
        raise LoadError("plain decoding (--k 0) has --accept-len 1, --topk 1 and no --draft-tokens")
    if not 1 <= args.accept_len <= args.k + 1:
        raise LoadError(f"--accept-len {args.accept_len:g} is not in [1, k + 1 = {args.k + 1}]")
    low, high = args.token_range
    if not 0 <= low < high:
        raise LoadError(f"--token-range {low} {high}: give LOW < HIGH, both token ids")


def measure(args: argparse.Namespace) -> None:
    check_setup(args)
    deadline = Deadline(args.timeout, args.stall)
    model = args.model or served_model(args.url, deadline)
    draft_tokens = args.draft_tokens or args.k + 1
    context = args.prompt_tokens + args.output_tokens // 2
    comments = None if os.path.exists(args.out) else provenance(args, args.url, deadline) + [f"served model: {model}"]
    # one short round first: the server's first requests pay for lazy initialisation, not for decoding
    measure_round(args.url, model, min(args.concurrency), args, seed=999_983, deadline=deadline,
                  output_tokens=min(args.output_tokens, 16))
    for c in args.concurrency:
        for repeat in range(args.repeats):
            timelines = measure_round(args.url, model, c, args, seed=c * 1000 + repeat, deadline=deadline)
            try:
                rate, window, tokens = decode_rate(timelines)
            except NoDecodeWindow as exc:
                raise LoadError(f"concurrency {c}, repeat {repeat + 1}: {exc}") from None
            append_rows(args.out, [cost_row(c, args.k, draft_tokens, args.topk, args.accept_len, context, rate,
                                            window, tokens)], comments or [])
            comments = None
            print(f"concurrency {c:4d}, repeat {repeat + 1}: {rate:10.1f} tok/s over {window:.3f} s "
                  f"({tokens} tokens in the decode window)", flush=True)


def wait(args: argparse.Namespace) -> None:
    """Poll ``/health`` until it answers 200, the server's process ends, or the deadline passes."""
    deadline = Deadline(args.timeout, args.timeout)
    polls = 0
    while True:
        if args.pid is not None and not alive(args.pid):
            raise LoadError(f"the server (pid {args.pid}) exited before it served: see its log")
        try:
            status, _ = get_json(args.url, "/health", Deadline(min(10.0, deadline.left("waiting for /health")), 10.0))
            if status == 200:
                return
        except (OSError, http.client.HTTPException):
            pass
        polls += 1
        time.sleep(min(args.interval, 0.1 * 2 ** min(polls, 10), max(0.0, deadline.at - time.monotonic())))
        deadline.left(f"waiting for {args.url}/health")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def port_free(args: argparse.Namespace) -> None:
    """Refuse to start a server where one already answers (its numbers would be measured instead)."""
    _, host, port = split_url(args.url)

    try:
        with socket.create_connection((host, port), timeout=5):
            pass
    except OSError:
        return
    raise LoadError(f"something already listens on {host}:{port}: stop it (its answers would be measured) or choose "
                    "another port")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="load_client.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    free = sub.add_parser("port-free", help="exit 2 when something already listens on --url")
    free.add_argument("--url", required=True)
    w = sub.add_parser("wait", help="wait until the server answers /health")
    w.add_argument("--url", required=True)
    w.add_argument("--pid", type=int, help="the server's process: its end is an error at once")
    w.add_argument("--timeout", type=positive, default=1800.0, help="seconds (default 1800)")
    w.add_argument("--interval", type=positive, default=5.0, help="longest wait between polls, seconds (default 5)")
    m = sub.add_parser("measure", help="measure and append cost-table rows")
    m.add_argument("--url", required=True)
    m.add_argument("--out", required=True, help="the cost table (CSV) to append to")
    m.add_argument("--engine", required=True, help="sglang or vllm (provenance)")
    m.add_argument("--model", help="the served model's id (default: the first of GET /v1/models)")
    m.add_argument("--concurrency", type=lambda t: [whole(c, high=MAX_CONCURRENCY) for c in t.split(",")], required=True,
                   help="requests in flight, e.g. 1,2,4,8 (a connection and a thread each)")
    m.add_argument("--prompt-tokens", type=whole, default=1024)
    m.add_argument("--output-tokens", type=lambda t: whole(t, low=2), default=256, help="a decode phase needs 2 or more")
    m.add_argument("--repeats", type=whole, default=2)
    m.add_argument("--k", type=int, choices=range(0, 65), metavar="K", required=True, help="drafts per cycle (0: plain)")
    m.add_argument("--draft-tokens", type=whole, help="tokens verified per request per cycle (default k + 1)")
    m.add_argument("--topk", type=whole, default=1)
    m.add_argument("--accept-len", type=positive, default=1.0, help="the forced τ (1 for plain decoding)")
    m.add_argument("--token-range", type=int, nargs=2, default=[10, 250], metavar=("LOW", "HIGH"),
                   help="prompt token ids are drawn from [LOW, HIGH) (default 10 250)")
    m.add_argument("--note", action="append", help="a 'key: value' provenance line for a new file (repeatable)")
    m.add_argument("--timeout", type=positive, default=3600.0, help="seconds for the whole command (default 3600)")
    m.add_argument("--stall", type=positive, default=300.0, help="seconds without a chunk that end it (default 300)")
    return parser.parse_args(argv)


def whole(text: str, low: int = 1, high: int = MAX_WHOLE) -> int:
    word = text.strip()
    if not (word.isascii() and word.isdigit()) or len(word) > 12:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number")
    value = int(word)
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"must be a whole number from {low} to {high:,}, got {value}")
    return value


def positive(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        {"port-free": port_free, "wait": wait, "measure": measure}[args.command](args)
    except LoadError as exc:
        print(f"load_client.py {args.command}: {one_line(exc)}", file=sys.stderr)
        return 2
    except (OSError, http.client.HTTPException) as exc:
        print(f"load_client.py {args.command}: {network_problem(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"load_client.py {args.command}: interrupted", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
