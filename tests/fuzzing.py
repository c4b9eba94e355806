"""Hostile-input harness for the metadata commands (issue #13): a runner, outcome classes and case strategies.

The promise under test: for any input, ``eaglelab inspect`` / ``compare`` / ``perf`` / ``plan`` / ``predict``
either exit 0 with valid output (``--json``: strict JSON, no NaN / Infinity) or exit 2 with exactly one
line ``eaglelab <cmd>: error: <where>: <problem>`` on stderr; never a traceback, never a hang, never
garbage accepted as valid.

:func:`run_cli` calls :func:`eaglelab.cli.main` in this process with stdout / stderr captured as a real
terminal's are (UTF-8; stdout strict, stderr ``backslashreplace``), a time cap (``SIGALRM``) and an
address-space cap (``RLIMIT_AS``, so reading ``/dev/zero`` to its end becomes a ``MemoryError``
instead of eating the machine). Each outcome is one of:

- ``ok``: exit 0, output valid (``--json``: strict JSON);
- ``error``: exit 2, exactly one non-empty stderr line of the promised form (``--json``: empty stdout);
- ``traceback``: any exception other than ``SystemExit`` escaped ``main`` (type, message, innermost
  eaglelab frame);
- ``hang``: the time cap expired (frame where it was interrupted);
- ``bad-output``: exit 0 with invalid / non-strict JSON, exit 2 with several lines or another form,
  or another exit code;
- ``garbage``: exit 0 (or a refusal that leaks) where the case's oracle says the input is invalid, or
  exit-0 output that breaks the case's invariants (a log record with τ < 1, ...);
- ``refused``: exit 2 where the oracle says the input is valid (a header the safetensors library
  reads, numbers inside every documented range).

Cases come from hypothesis strategies, one per category (:data:`CATEGORIES`); each strategy writes its
files into a fresh folder under the root it is given and returns a :class:`Case` (argv + oracle:
``valid``, ``invalid`` or ``any``). The oracle of a ``header`` case is the safetensors library itself
(``safe_open`` and every tensor's metadata).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import itertools
import json
import math
import os
import re
import resource
import signal
import struct
import time
import traceback
import unicodedata
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("EAGLELAB_PROGRESS", "0")

CATEGORIES = ("header", "config", "index", "log", "args", "special", "targets")
OUTCOMES = ("ok", "error", "traceback", "hang", "bad-output", "garbage", "refused")
FAILURES = frozenset({"traceback", "hang", "bad-output", "garbage", "refused"})

#: Default per-case time cap (seconds). Every metadata command answers a tiny input in milliseconds.
TIME_CAP_S = 3.0
#: Address space a case may add to the process before allocations fail (MemoryError).
MEMORY_CAP_BYTES = 3 << 30

ERROR_LINE = re.compile(r"^eaglelab(?: [a-z][a-z0-9-]*)*: error: (?P<message>.+)$")

# --------------------------------------------------------------------------- outcomes and the runner


@dataclass
class Outcome:
    """What one command line did.

    Attributes:
        kind: one of :data:`OUTCOMES`.
        rc: exit code (None for a traceback or a hang).
        stdout, stderr: captured text.
        reason: short, groupable reason (``stderr has 3 lines``, ``exit 0 for an invalid input``...).
        detail: longer explanation (the exception message, the offending record...).
        exc_type: exception type name for ``traceback`` (``_TimeCap`` never shows).
        frame: innermost eaglelab frame ``eaglelab/x.py:123 (function)`` for tracebacks and hangs.
        seconds: wall time of the call.
        json: the parsed ``--json`` output when it parsed.
    """

    kind: str
    rc: int | None
    stdout: str
    stderr: str
    reason: str = ""
    detail: str = ""
    exc_type: str = ""
    frame: str = ""
    seconds: float = 0.0
    json: Any = None

    @property
    def acceptable(self) -> bool:
        return self.kind in ("ok", "error")

    @property
    def signature(self) -> str:
        """Groupable: ``traceback: RecursionError at eaglelab/x.py:12 (f)``, ``hang at ...``, ``garbage: reason``."""
        if self.kind == "traceback":
            return f"traceback: {self.exc_type} at {self.frame or '?'}"
        if self.kind == "hang":
            return f"hang at {self.frame or '?'}"
        return f"{self.kind}: {self.reason}" if self.reason else self.kind


class _TimeCap(BaseException):
    """Raised by the SIGALRM handler; a BaseException so that no ``except Exception`` swallows it."""


class _KeepOpenBytesIO(io.BytesIO):
    """A BytesIO that survives ``sys.stderr.close()`` (the CLI closes stderr on a broken pipe)."""

    def close(self):
        pass


def _on_alarm(signum, frame):
    raise _TimeCap()


@functools.cache
def _package_dir() -> str:
    import eaglelab

    return str(Path(eaglelab.__file__).resolve().parent)


def _where(frame: traceback.FrameSummary) -> str:
    pkg = _package_dir()
    path = frame.filename
    if path.startswith(pkg + os.sep):
        path = "eaglelab/" + os.path.relpath(path, pkg)
    else:
        path = "/".join(Path(path).parts[-2:])
    return f"{path}:{frame.lineno} ({frame.name})"


def innermost_frames(tb) -> tuple[str, str]:
    """``(innermost eaglelab frame, innermost frame)`` of a traceback, as ``file:line (function)`` (this
    harness's own frames left out)."""
    here = os.path.abspath(__file__)
    frames = [f for f in traceback.extract_tb(tb) if os.path.abspath(f.filename) != here]
    pkg = _package_dir() + os.sep
    ours = [f for f in frames if f.filename.startswith(pkg) and not f.filename.endswith(os.sep + "cli" + os.sep
                                                                                             + "__init__.py")]
    ours = ours or [f for f in frames if f.filename.startswith(pkg)]
    return (_where(ours[-1]) if ours else "", _where(frames[-1]) if frames else "")


def _vm_size() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@contextlib.contextmanager
def _memory_cap(extra_bytes: int | None):
    if not extra_bytes:
        yield
        return
    old = resource.getrlimit(resource.RLIMIT_AS)
    soft = _vm_size() + extra_bytes
    if old[1] != resource.RLIM_INFINITY:
        soft = min(soft, old[1])
    try:
        resource.setrlimit(resource.RLIMIT_AS, (soft, old[1]))
    except (ValueError, OSError):
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)


def _reject_constant(name: str):
    raise ValueError(f"non-strict JSON constant {name}")


def strict_json(text: str) -> Any:
    """Parse ``text`` as one strict JSON document (NaN / Infinity refused). Raises ValueError."""
    return json.loads(text, parse_constant=_reject_constant)


def _short(text: str, limit: int = 300) -> str:
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} chars)"


def run_cli(argv: list[str], time_cap_s: float = TIME_CAP_S, memory_cap_bytes: int | None = MEMORY_CAP_BYTES,
            main: Callable[[list[str]], int] | None = None) -> Outcome:
    """Run ``eaglelab <argv>`` in this process and classify what it did (no oracle: see :func:`judge`).

    stdout is a strict UTF-8 text stream over bytes, as a UTF-8 terminal's is (so printing a lone
    surrogate raises, as it would there); stderr uses ``backslashreplace``, as Python's own does.
    Warnings are shown on that stderr, as the interpreter would show them.

    Args:
        argv: the arguments after ``eaglelab``.
        time_cap_s: wall-clock cap; on expiry the call is interrupted and classified ``hang``.
        memory_cap_bytes: extra address space allowed during the call (None: no cap).
        main: the entry point (default :func:`eaglelab.cli.main`; tests of the harness pass another).
    """
    if main is None:
        from eaglelab.cli import main
    argv = list(argv)
    json_mode = "--json" in argv
    out_buf, err_buf = _KeepOpenBytesIO(), _KeepOpenBytesIO()
    out = io.TextIOWrapper(out_buf, encoding="utf-8", errors="strict", newline="\n", write_through=True)
    err = io.TextIOWrapper(err_buf, encoding="utf-8", errors="backslashreplace", newline="\n", write_through=True)
    rc: int | None = None
    exc: BaseException | None = None
    timed_out = False

    def show(message, category, filename, lineno, file=None, line=None):
        err.write(warnings.formatwarning(message, category, filename, lineno, line))

    old_handler = signal.signal(signal.SIGALRM, _on_alarm)
    t0 = time.perf_counter()
    try:
        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                    _memory_cap(memory_cap_bytes):
                warnings.simplefilter("always")
                warnings.showwarning = show
                signal.setitimer(signal.ITIMER_REAL, time_cap_s)
                try:
                    rc = main(argv)
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
        except SystemExit as e:  # argparse (and anything else that exits)
            code = e.code
            if code is None:
                rc = 0
            elif isinstance(code, int):
                rc = code
            else:
                err.write(f"{code}\n")
                rc = 1
        except _TimeCap as e:
            timed_out, exc = True, e
        except BaseException as e:  # noqa: BLE001 - everything else is the finding
            exc = e
    except _TimeCap as e:  # the alarm fired while unwinding
        timed_out, exc = True, e
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
    seconds = time.perf_counter() - t0
    with contextlib.suppress(Exception):
        out.flush()
        err.flush()
    stdout = out_buf.getvalue().decode("utf-8", errors="replace")
    stderr = err_buf.getvalue().decode("utf-8", errors="replace")

    if timed_out or (exc is None and seconds > time_cap_s * 1.5):
        ours, last, during = "", "", ""
        if exc is not None:
            ours, last = innermost_frames(exc.__traceback__)
            context = exc.__context__  # the alarm fired while an exception was on its way out
            if not ours and context is not None:
                ours, last = innermost_frames(context.__traceback__)
                during = f" (while handling {type(context).__name__})"
        return Outcome("hang", None, stdout, stderr, reason=f"over the {time_cap_s:g} s cap",
                       detail=(f"interrupted at {last}{during}" if last else f"took {seconds:.1f} s"),
                       frame=(ours or last) + during, seconds=seconds)
    if exc is not None:
        ours, last = innermost_frames(exc.__traceback__)
        message = _short(str(exc).replace("\n", " | "), 200)
        return Outcome("traceback", None, stdout, stderr, reason=type(exc).__name__,
                       detail=f"{type(exc).__name__}: {message} (raised at {last})", exc_type=type(exc).__name__,
                       frame=ours or last, seconds=seconds)
    return _classify(rc, stdout, stderr, json_mode, seconds)


def _classify(rc, stdout: str, stderr: str, json_mode: bool, seconds: float) -> Outcome:
    if rc == 0:
        if "Traceback (most recent call last)" in stderr:
            return Outcome("bad-output", rc, stdout, stderr, reason="exit 0 with a traceback on stderr",
                           detail=_short(stderr), seconds=seconds)
        parsed = None
        if json_mode:
            try:
                parsed = strict_json(stdout)
            except (ValueError, RecursionError) as e:
                return Outcome("bad-output", rc, stdout, stderr, reason="--json output is not strict JSON",
                               detail=f"{e}; stdout: {_short(stdout, 200)}", seconds=seconds)
        return Outcome("ok", rc, stdout, stderr, seconds=seconds, json=parsed)
    if rc == 2:
        lines = stderr.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if len(lines) != 1:
            return Outcome("bad-output", rc, stdout, stderr, reason=f"exit 2 with {len(lines)} stderr lines"
                           if len(lines) < 5 else "exit 2 with 5+ stderr lines", detail=_short(stderr), seconds=seconds)
        line = lines[0]
        m = ERROR_LINE.match(line)
        if not line.strip() or not m:
            return Outcome("bad-output", rc, stdout, stderr, reason="exit 2, stderr line not 'eaglelab <cmd>: error: ...'",
                           detail=_short(line), seconds=seconds)
        message = m.group("message")
        if ": " not in message and "(see eaglelab" not in message:
            return Outcome("bad-output", rc, stdout, stderr, reason="exit 2, error line without '<where>: <problem>'",
                           detail=_short(line), seconds=seconds)
        if json_mode and stdout.strip():
            return Outcome("bad-output", rc, stdout, stderr, reason="exit 2 with --json output on stdout",
                           detail=_short(stdout), seconds=seconds)
        return Outcome("error", rc, stdout, stderr, detail=_short(line), seconds=seconds)
    return Outcome("bad-output", rc, stdout, stderr, reason=f"exit code {rc!r}", detail=_short(stderr), seconds=seconds)


# --------------------------------------------------------------------------- cases and the oracle


@dataclass(eq=False)
class Case:
    """One generated command line with its oracle.

    Attributes:
        category: one of :data:`CATEGORIES`.
        label: what was done to the input, short (``metadata not a str map``, ``fifo as config.json``).
        argv: the arguments after ``eaglelab``.
        oracle: ``valid`` (must exit 0), ``invalid`` (must exit 2, or exit 0 listing the problem where
            ``listed`` says so) or ``any`` (either; never a traceback, hang or bad output).
        folder: the folder the case's files live in (None when it has none).
        listed: for ``invalid``: whether an exit-0 output lists the problem (then it is not garbage).
        check_ok: invariants of an exit-0 output; returns ``(kind, reason, detail)`` when broken.
        check_error: invariants of an exit-2 output (e.g. nothing of an outside file leaks).
        fair_refusal: for ``valid``: whether an exit 2 is nevertheless fair.
        note: how the oracle was decided (for reports).
        kind: a short, groupable tag of what was done (``trailing``, ``specforge aux_ids``); default the label.
        main: the entry point to run ``argv`` with (default :func:`eaglelab.cli.main`): function-level
            categories of :mod:`tests.fuzzing_write` pass one that prints errors as the command line does.
    """

    category: str
    label: str
    argv: list[str]
    oracle: str
    folder: Path | None = None
    listed: Callable[[Outcome], bool] | None = None
    check_ok: Callable[[Outcome], tuple[str, str, str] | None] | None = None
    check_error: Callable[[Outcome], tuple[str, str, str] | None] | None = None
    fair_refusal: Callable[[Outcome], bool] | None = None
    note: str = ""
    kind: str = ""
    main: Callable[[list[str]], int] | None = None

    @property
    def tag(self) -> str:
        return self.kind or self.label

    def __repr__(self) -> str:
        return f"Case({self.category}: {self.label!r}, oracle={self.oracle}, argv={shorten_argv(self.argv)})"


def shorten_argv(argv: list[str], limit: int = 120) -> list[str]:
    return [a if len(a) <= limit else f"{a[:limit]}...({len(a)} chars)" for a in argv]


def judge(case: Case, outcome: Outcome) -> Outcome:
    """Apply the case's oracle: an exit 0 on an invalid input becomes ``garbage``, an exit 2 on a valid one ``refused``."""
    if outcome.kind == "ok":
        if case.oracle == "invalid" and not (case.listed is not None and case.listed(outcome)):
            outcome.kind, outcome.reason = "garbage", f"{case.category}: exit 0 for an invalid input ({case.tag})"
            outcome.detail = (f"oracle: {case.note or 'invalid'}; stdout: {_short(outcome.stdout, 200)}")
            return outcome
        if case.check_ok is not None:
            broken = case.check_ok(outcome)
            if broken:
                outcome.kind, outcome.reason, outcome.detail = broken
    elif outcome.kind == "error":
        if case.oracle == "valid" and not (case.fair_refusal is not None and case.fair_refusal(outcome)):
            outcome.kind, outcome.reason = "refused", f"{case.category}: exit 2 for a valid input ({case.tag})"
            outcome.detail = f"oracle: {case.note or 'valid'}; stderr: {outcome.stderr.strip()[:300]}"
            return outcome
        if case.check_error is not None:
            broken = case.check_error(outcome)
            if broken:
                outcome.kind, outcome.reason, outcome.detail = broken
    return outcome


def check(case: Case, time_cap_s: float = TIME_CAP_S) -> Outcome:
    """Run a case and judge it."""
    return judge(case, run_cli(case.argv, time_cap_s=time_cap_s, main=case.main))


def describe(case: Case, outcome: Outcome) -> str:
    """A failure message: the case, the outcome, the output."""
    return (f"\n  case: {case!r}\n  oracle note: {case.note}\n  outcome: {outcome.signature}\n  detail: {outcome.detail}"
            f"\n  rc: {outcome.rc}  ({outcome.seconds:.2f} s)\n  stderr: {_short(outcome.stderr, 400)!r}"
            f"\n  stdout: {_short(outcome.stdout, 400)!r}")


# --------------------------------------------------------------------------- shared helpers

_COUNTER = itertools.count()


def new_dir(root: Path, category: str) -> Path:
    """A fresh folder for one case under ``root``."""
    d = Path(root) / f"{category}-{next(_COUNTER):05d}"
    d.mkdir(parents=True)
    return d


@dataclass(frozen=True)
class Raw:
    """JSON text written verbatim (NaN, 1e400, a 5000-digit integer, 100000 nested lists, invalid UTF-8)."""

    data: bytes

    def __repr__(self) -> str:
        d = self.data
        return f"Raw({d[:40]!r}{'...' if len(d) > 40 else ''}, {len(d)} bytes)"


def dump(value) -> bytes:
    """JSON bytes of ``value``; :class:`Raw` pieces verbatim, lone surrogates as ``\\udXXX`` escapes."""
    if isinstance(value, Raw):
        return value.data
    if isinstance(value, dict):
        return b"{" + b",".join(_dump_key(k) + b":" + dump(v) for k, v in value.items()) + b"}"
    if isinstance(value, (list, tuple)):
        return b"[" + b",".join(dump(v) for v in value) + b"]"
    return json.dumps(value).encode("ascii")


def _dump_key(key) -> bytes:
    return key.data if isinstance(key, Raw) else json.dumps(str(key)).encode("ascii")


def python_json(value) -> tuple[bool, Any]:
    """``(parsed, value)`` as Python's json module reads ``dump(value)`` (False when it cannot)."""
    try:
        return True, json.loads(dump(value).decode("utf-8"))
    except (ValueError, RecursionError, UnicodeDecodeError):
        return False, None


def digits(n: int) -> Raw:
    return Raw(b"1" + b"2" * (n - 1))


def nested_lists(depth: int) -> Raw:
    return Raw(b"[" * depth + b"]" * depth)


def nested_objects(depth: int) -> Raw:
    return Raw(b'{"a":' * depth + b"1" + b"}" * depth)


#: JSON values no schema field should take silently.
HOSTILE_SCALARS = st.one_of(
    st.none(), st.booleans(), st.sampled_from([0, -1, 1, 2, -(2 ** 63), 2 ** 63, 2 ** 64, 10 ** 30, 0.5, 2.0, -0.0, 1e300]),
    st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([Raw(b"NaN"), Raw(b"Infinity"), Raw(b"-Infinity"), Raw(b"1e400"), Raw(b"-1e400"), Raw(b"1E2")]),
    st.sampled_from([20, 400, 4299, 4301, 10000]).map(digits),
    st.sampled_from([10, 1000, 100_000]).map(nested_lists),
    st.sampled_from([10, 1000, 100_000]).map(nested_objects),
    st.sampled_from(["", "F32", "2", "16", "[2]", "1,3,4", "[1, 3, 4]", "true", "nan", "\ud800", "a\x00b", "x" * 300]),
    st.text(max_size=6),
)
HOSTILE_JSON = st.recursive(HOSTILE_SCALARS, lambda inner: st.lists(inner, max_size=3)
                            | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=6)


def _records(js, *path):
    for key in path:
        if not isinstance(js, dict):
            return None
        js = js.get(key)
    return js


def inspect_listed(outcome: Outcome) -> bool:
    """Whether an exit-0 ``inspect`` / ``compare`` output reports something wrong (problems, refusals, another family)."""
    js = outcome.json
    if isinstance(js, dict):
        if "problems" in js:  # inspect --json
            return bool(js.get("problems")) or bool(js.get("refusals")) or js.get("computed") is False
        reasons = _records(js, "verdict", "reasons") or []
        return bool(_records(js, "a", "problems")) or bool(_records(js, "b", "problems")) or any(
            isinstance(r, str) and r.startswith(("A:", "B:", "A has", "B has")) for r in reasons)
    text = outcome.stdout
    if "\nverdict:" in text:  # compare
        return any(s in text for s in ("  - A:", "  - B:", "  - A has", "  - B has"))
    return "problems: none" not in text or "shapes and configs only" in text


# --------------------------------------------------------------------------- the tiny drafter every category starts from

TINY_TARGET: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16, "intermediate_size": 24,
    "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 8, "vocab_size": 64,
    "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 512,
}
DRAFT_VOCAB = 32


@functools.cache
def tiny_config(fmt: str = "specforge") -> dict[str, Any]:
    """A tiny EAGLE-3 drafter config in ``specforge`` (SGLang) or ``speculators`` (vLLM) format."""
    from eaglelab.checkpoints.drafters.implied_config import drafter_config_for_target
    from eaglelab.checkpoints.drafters.variants import to_speculators_config

    cfg = drafter_config_for_target(TINY_TARGET, DRAFT_VOCAB, [1, 3, 4])
    return cfg if fmt == "specforge" else to_speculators_config(cfg, TINY_TARGET, "verifier")


@functools.cache
def _tiny_tensors(fmt: str) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    from eaglelab.checkpoints.drafters.spec import drafter_spec_from_config
    from eaglelab.checkpoints.drafters.tensor_table import expected_eagle3_tensors

    spec = drafter_spec_from_config(tiny_config(fmt))
    return tuple((n, e.shape, e.dtype) for n, e in expected_eagle3_tensors(spec).items())


def tiny_arrays(fmt: str = "specforge") -> dict[str, Any]:
    """numpy arrays of the tiny drafter: zero float weights, an identity vocabulary map."""
    import numpy as np

    arrays = {}
    for name, shape, dtype in _tiny_tensors(fmt):
        if dtype == "I64":
            arrays[name] = np.zeros(shape, np.int64)
        elif dtype == "BOOL":
            t2d = np.zeros(shape, bool)
            t2d[:DRAFT_VOCAB] = True
            arrays[name] = t2d
        else:
            arrays[name] = np.arange(math.prod(shape), dtype=np.float32).reshape(shape) / 1000
    return arrays


@functools.cache
def tiny_safetensors(fmt: str = "specforge") -> bytes:
    """The tiny drafter's ``model.safetensors``, written by the safetensors library itself."""
    from safetensors.numpy import save

    return save(tiny_arrays(fmt), metadata={"format": "pt"})


def write_tiny_drafter(folder: Path, fmt: str = "specforge", config: dict | bytes | None = None,
                       weights: bytes | None = None) -> Path:
    """``config.json`` + ``model.safetensors`` of the tiny drafter (either replaced) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = tiny_config(fmt) if config is None else config
    (folder / "config.json").write_bytes(cfg if isinstance(cfg, bytes) else json.dumps(cfg).encode())
    (folder / "model.safetensors").write_bytes(tiny_safetensors(fmt) if weights is None else weights)
    return folder


def write_sharded_drafter(folder: Path, shards: int = 2) -> Path:
    """The tiny drafter as ``shards`` safetensors files and a ``model.safetensors.index.json``
    (eaglelab's own synthetic writer)."""
    from eaglelab.worlds.synthetic_checkpoints import write_synthetic_drafter

    return write_synthetic_drafter(folder, dict(tiny_config("specforge")), dtype="F32", shards=shards)


def safetensors_verdict(path: Path) -> tuple[bool, str]:
    """The oracle of a header: ``(True, "")`` when ``safetensors.safe_open`` reads it and every tensor's
    shape and dtype, else ``(False, its error)``."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="np") as f:
            f.metadata()
            for key in f.keys():
                s = f.get_slice(key)
                s.get_shape()
                s.get_dtype()
    except Exception as e:  # noqa: BLE001 - SafetensorError, and whatever else it raises
        return False, _short(f"{type(e).__name__}: {e}", 200)
    return True, ""


# --------------------------------------------------------------------------- header: mutated safetensors files

#: safetensors 0.8.0's dtypes and their width in bits (from its "unknown variant" message).
ST_DTYPE_BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
                 "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
                 "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64}
UNKNOWN_DTYPES = ["F128", "f32", "", "BF16 ", "int8", "C128", "E8M0", "Q4_0", "F8", "\ud800"]
HOSTILE_NAMES = [
    "\ud800", "\udcff", "a\x01b", "tab\tname", "new\nline", "", " ", "x" * 300, "y" * 100_000,
    "/".join(["..", "..", "etc", "passwd"]),
    "\u202eevil", "\U0001f600", "__metadata__x", "a" + "\u0301" * 50,
]
RAW_NAMES = [Raw(b'"a\x01b"'), Raw(b'"\xff\xfe"'), Raw(b'"\xc0\x80"'), Raw(b'"\\ud800\\ud800"'), Raw(b'"\\u0000"'),
             Raw(b'"\xed\xa0\x80"')]


@dataclass
class _HeaderState:
    items: list[list]  # [key, value, blob]
    extra: list[tuple[bytes, bytes]] = field(default_factory=list)  # raw (key, value) pairs appended
    whole: Raw | None = None  # replaces the whole header JSON
    prefix: bytes = b""
    suffix: bytes = b""
    trailing: bytes = b""
    length: Callable[[int, int], int] | None = None  # (header length, file size) -> length field
    truncate: float | None = None
    relayout: bool = True

    @classmethod
    def base(cls, fmt: str = "specforge") -> _HeaderState:
        raw = tiny_safetensors(fmt)
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + n])
        data = raw[8 + n:]
        items = []
        for k, v in header.items():
            blob = data[v["data_offsets"][0]:v["data_offsets"][1]] if k != "__metadata__" else b""
            items.append([k, v, blob])
        return cls(items)

    def tensors(self) -> list[list]:
        return [it for it in self.items if it[0] != "__metadata__" and isinstance(it[1], dict)]

    def pick(self, i: int) -> list | None:
        ts = self.tensors()
        return ts[i % len(ts)] if ts else None

    def do_relayout(self):
        offset = 0
        for it in self.tensors():
            v = it[1]
            bits = ST_DTYPE_BITS.get(v.get("dtype")) if isinstance(v.get("dtype"), str) else None
            shape = v.get("shape")
            if bits is None or not isinstance(shape, list) or not all(
                    isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
                continue
            numel = math.prod(shape)  # 0 for [0, 2**63]: the shape alone is then the question
            if numel * bits > 8 << 20:
                continue
            nbytes = numel * bits // 8
            if len(it[2]) != nbytes:
                it[2] = bytes(nbytes)
            v["data_offsets"] = [offset, offset + nbytes]
            offset += nbytes

    def data(self) -> bytes:
        spans = []
        for it in self.tensors():
            off = it[1].get("data_offsets")
            if isinstance(off, list) and len(off) == 2 and all(isinstance(o, int) and not isinstance(o, bool)
                                                                and 0 <= o < 2 ** 24 for o in off):
                spans.append((off[0], off[1], it[2]))
        end = max([e for _, e, _ in spans] + [0])
        buf = bytearray(end)
        for b, e, blob in sorted(spans, key=lambda s: s[0]):
            if e >= b:
                chunk = blob[:e - b].ljust(e - b, b"\0")
                buf[b:e] = chunk
        return bytes(buf) + self.trailing

    def render(self) -> bytes:
        if self.whole is not None:
            body = self.whole.data
        else:
            parts = [_dump_key(k) + b":" + dump(v) for k, v, _ in self.items]
            parts += [k + b":" + v for k, v in self.extra]
            body = b"{" + b",".join(parts) + b"}"
        header = self.prefix + body + self.suffix
        data = self.data()
        size = 8 + len(header) + len(data)
        n = self.length(len(header), size) if self.length else len(header)
        raw = struct.pack("<Q", n % 2 ** 64) + header + data
        if self.truncate is not None:
            raw = raw[:int(len(raw) * self.truncate)]
        return raw


def _op_field(state: _HeaderState, i: int, name: str, value):
    it = state.pick(i)
    if it is not None:
        it[1][name] = value


def _op_dim(state: _HeaderState, i: int, d: int, value):
    it = state.pick(i)
    if it is not None and isinstance(it[1].get("shape"), list) and it[1]["shape"]:
        it[1]["shape"][d % len(it[1]["shape"])] = value


def _op_offset(state: _HeaderState, i: int, which: int, value):
    it = state.pick(i)
    if it is not None and isinstance(it[1].get("data_offsets"), list):
        it[1]["data_offsets"][which] = value


def _op_gap(state: _HeaderState, i: int, gap: int):
    ts = state.tensors()
    if not ts:
        return
    for it in ts[i % len(ts):]:  # the bytes in between are zeros (see _HeaderState.data)
        it[1]["data_offsets"] = [o + gap for o in it[1]["data_offsets"]]


def _op_overlap(state: _HeaderState, i: int, back: int):
    ts = state.tensors()
    it = ts[i % len(ts)] if ts else None
    if it is None:
        return
    b, e = it[1]["data_offsets"]
    shift = min(back, b)
    it[1]["data_offsets"] = [b - shift, e - shift]


def _op_rename(state: _HeaderState, i: int, name):
    it = state.pick(i)
    if it is not None:
        it[0] = name


def _op_vocab_shape(state: _HeaderState, which: str, shape):
    for it in state.tensors():
        if it[0] == which:
            it[1]["shape"] = shape


def _op_vocab_dtype(state: _HeaderState, which: str, dtype: str):
    for it in state.tensors():
        if it[0] == which:
            it[1]["dtype"] = dtype


def _op_metadata(state: _HeaderState, value):
    for it in state.items:
        if it[0] == "__metadata__":
            it[1] = value
            return
    state.items.insert(0, ["__metadata__", value, b""])


def _op_drop(state: _HeaderState, i: int):
    it = state.pick(i)
    if it is not None:
        state.items.remove(it)


def _op_duplicate(state: _HeaderState, i: int, metadata: bool):
    if metadata:
        state.extra.append((b'"__metadata__"', b'{"format":"np"}'))
        return
    it = state.pick(i)
    if it is not None:
        state.extra.append((_dump_key(it[0]), dump(it[1])))


def _op_extra_entry(state: _HeaderState, value):
    state.extra.append((b'"extra.tensor"', dump(value)))


def _op_entry_key(state: _HeaderState, i: int, key: str, value):
    it = state.pick(i)
    if it is not None:
        if value is None:
            it[1].pop(key, None)
        else:
            it[1][key] = value


def _op_whole(state: _HeaderState, raw: Raw):
    state.whole = raw


def _op_padding(state: _HeaderState, where: str, pad: bytes):
    if where == "prefix":
        state.prefix = pad
    else:
        state.suffix = pad


def _op_trailing(state: _HeaderState, n: int):
    state.trailing = bytes(range(256))[:n] if n <= 256 else bytes(n)


def _op_length(state: _HeaderState, how: str):
    state.length = {
        "+1": lambda n, size: n + 1, "-1": lambda n, size: n - 1, "+8": lambda n, size: n + 8, "0": lambda n, size: 0,
        "file": lambda n, size: size, "2^63": lambda n, size: 2 ** 63, "2^64-1": lambda n, size: 2 ** 64 - 1,
        "100MB+1": lambda n, size: 100 * 1024 * 1024 + 1,
    }[how]


def _op_truncate(state: _HeaderState, fraction: float):
    state.truncate = fraction


def _op_empty(state: _HeaderState):
    state.items = [it for it in state.items if it[0] == "__metadata__"]


_VOCAB_SHAPES = [[], [0], [DRAFT_VOCAB, 1], [1] * 33, [1] * 64, [0, 2 ** 63], [0, 2 ** 64 - 1], [0, 2 ** 62, 2 ** 62],
                 [2 * DRAFT_VOCAB], [DRAFT_VOCAB // 2], [2, DRAFT_VOCAB // 2], [1, 1, DRAFT_VOCAB]]

#: (phase, op) strategies; phase 0 runs before the automatic relayout, phase 1 after it (and breaks it).
HEADER_OPS = st.one_of(
    st.tuples(st.just("metadata"), st.sampled_from([
        {"format": "pt"}, {}, None, {"a": 1}, "x", [], {"a": None}, {"a": {"b": "c"}}, {"a": ["x"]}, {"a": True},
        {"a": 1.5}, {"\ud800": "x"}, {"k": "\ud800"}, Raw(b"[" * 100_000 + b"]" * 100_000)]) | HOSTILE_JSON),
    st.tuples(st.just("trailing"), st.sampled_from([1, 7, 8, 64, 1000])),
    st.tuples(st.just("gap"), st.integers(0, 40), st.sampled_from([1, 4, 8, 64])),
    st.tuples(st.just("overlap"), st.integers(1, 40), st.sampled_from([1, 4, 8, 64, 10 ** 6])),
    st.tuples(st.just("dtype"), st.integers(0, 40), st.sampled_from(sorted(ST_DTYPE_BITS) + UNKNOWN_DTYPES)),
    st.tuples(st.just("field"), st.integers(0, 40), st.sampled_from(["dtype", "shape", "data_offsets"]), HOSTILE_JSON),
    st.tuples(st.just("dim"), st.integers(0, 40), st.integers(0, 3), HOSTILE_SCALARS),
    st.tuples(st.just("offset"), st.integers(0, 40), st.integers(0, 1), HOSTILE_SCALARS),
    st.tuples(st.just("rename"), st.integers(0, 40), st.sampled_from(HOSTILE_NAMES + RAW_NAMES)),
    st.tuples(st.just("vocab_shape"), st.sampled_from(["d2t", "t2d"]), st.sampled_from(_VOCAB_SHAPES)),
    st.tuples(st.just("vocab_dtype"), st.sampled_from(["d2t", "t2d"]),
              st.sampled_from(["I32", "U64", "F32", "U8", "BOOL", "I64", "I8", "F4", "C64"])),
    st.tuples(st.just("padding"), st.sampled_from(["suffix", "prefix"]),
              st.sampled_from([b" ", b"       ", b"\n", b"\t\r\n ", b"\0", b"\0\0\0", b"x", b" {}", b"\xff"])),
    st.tuples(st.just("length"), st.sampled_from(["+1", "-1", "+8", "0", "file", "2^63", "2^64-1", "100MB+1"])),
    st.tuples(st.just("truncate"), st.sampled_from([0.0, 0.001, 0.1, 0.5, 0.9, 0.999])),
    st.tuples(st.just("drop"), st.integers(0, 40)),
    st.tuples(st.just("duplicate"), st.integers(0, 40), st.booleans()),
    st.tuples(st.just("extra_entry"), HOSTILE_JSON),
    st.tuples(st.just("entry_key"), st.integers(0, 40), st.sampled_from(["dtype", "shape", "data_offsets", "extra"]),
              st.none() | HOSTILE_SCALARS),
    st.tuples(st.just("whole"), st.sampled_from([
        Raw(b"[]"), Raw(b'"x"'), Raw(b"1"), Raw(b"null"), Raw(b"true"), Raw(b"{}"), Raw(b"{"), Raw(b""),
        Raw(b"[" * 100_000 + b"]" * 100_000), Raw(b'{"a":' * 5000 + b"1" + b"}" * 5000), Raw(b"\xef\xbb\xbf{}"),
        Raw(b'{"__metadata__":{"format":"pt"}}'), Raw(b"NaN")])),
    st.tuples(st.just("empty")),
)
_PHASE = {"metadata": 0, "dtype": 0, "rename": 0, "vocab_shape": 0, "vocab_dtype": 0, "drop": 0, "empty": 0,
          "entry_key": 1, "trailing": 1, "gap": 1, "overlap": 1, "field": 1, "dim": 1, "offset": 1, "padding": 1,
          "length": 1, "truncate": 1, "duplicate": 1, "extra_entry": 1, "whole": 1}
_APPLY = {"metadata": _op_metadata, "trailing": _op_trailing, "gap": _op_gap, "overlap": _op_overlap,
          "dtype": lambda s, i, d: _op_field(s, i, "dtype", d), "field": _op_field, "dim": _op_dim,
          "offset": _op_offset, "rename": _op_rename, "vocab_shape": _op_vocab_shape, "vocab_dtype": _op_vocab_dtype,
          "padding": _op_padding, "length": _op_length, "truncate": _op_truncate, "drop": _op_drop,
          "duplicate": _op_duplicate, "extra_entry": _op_extra_entry, "entry_key": _op_entry_key, "whole": _op_whole,
          "empty": _op_empty}


def header_bytes(ops: list[tuple], fmt: str = "specforge") -> bytes:
    """The tiny drafter's safetensors file with ``ops`` applied (see :data:`HEADER_OPS`)."""
    state = _HeaderState.base(fmt)
    state.items = copy.deepcopy(state.items)
    for op in sorted(ops, key=lambda o: _PHASE[o[0]]):
        if _PHASE[op[0]] == 1 and state.relayout:
            state.do_relayout()
            state.relayout = False
        _APPLY[op[0]](state, *op[1:])
    if state.relayout:
        state.do_relayout()
    return state.render()


def _label(op: tuple) -> str:
    parts = [op[0]] + [repr(p) if not isinstance(p, Raw) else repr(p) for p in op[1:]]
    return _short(" ".join(parts), 120)


def header_case(folder: Path, ops: list[tuple], mode: str = "inspect", fmt: str = "specforge") -> Case:
    """Write the mutated file beside a valid config; the oracle is the safetensors library's verdict."""
    drafter = write_tiny_drafter(folder / "drafter", fmt, weights=header_bytes(ops, fmt))
    valid, why = safetensors_verdict(drafter / "model.safetensors")
    if mode == "inspect":
        argv = ["inspect", str(drafter)]
    elif mode == "inspect-json":
        argv = ["inspect", str(drafter), "--json"]
    elif mode == "inspect-file":
        argv = ["inspect", str(drafter / "model.safetensors")]
    else:
        base = write_tiny_drafter(folder / "base", fmt)
        argv = ["compare", str(base), str(drafter)] + (["--json"] if mode == "compare-json" else [])
    note = "safetensors reads it" if valid else f"safetensors refuses it: {why}"
    return Case("header", "; ".join(_label(o) for o in ops), argv, "valid" if valid else "invalid", folder,
                listed=inspect_listed, note=note, kind="+".join(sorted({o[0] for o in ops})))


@st.composite
def header_cases(draw, root: Path) -> Case:
    """A real safetensors file (the tiny drafter, written by ``safetensors.numpy``) with one or two header
    or byte mutations; oracle: ``safe_open`` reading it and every tensor's metadata."""
    ops = draw(st.lists(HEADER_OPS, min_size=1, max_size=2))
    mode = draw(st.sampled_from(["inspect", "inspect-json", "inspect-file", "compare-json", "compare"]))
    fmt = draw(st.sampled_from(["specforge", "speculators"]))
    return header_case(new_dir(root, "header"), ops, mode, fmt)


# --------------------------------------------------------------------------- config: wrong JSON types in config.json

SIZE_REQUIRED = ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
SIZE_OPTIONAL = ("num_key_value_heads", "head_dim", "draft_vocab_size", "target_hidden_size",
                 # multi-head latent attention: one of them makes the tiny drafter an MLA one (the rest then missing)
                 "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
BOOL_FLAGS = ("fc_norm", "norm_before_fc", "norm_output")
ANY_FIELDS = ("architectures", "model_type", "text_config", "max_position_embeddings", "rope_scaling", "rope_parameters",
              "rope_theta", "hidden_act", "torch_dtype", "tie_word_embeddings", "num_hidden_layers", "attention_bias",
              "speculators_config", "initializer_range", "use_aux_hidden_state")
CONFIG_FIELDS = (SIZE_REQUIRED + SIZE_OPTIONAL + BOOL_FLAGS + ANY_FIELDS
                 + ("rms_norm_eps", "eagle_config", "aux_ids", "transformer_layer_config"))
#: The decoder layer's fields, which speculators keeps in transformer_layer_config (the rest is top level).
SPECULATORS_BODY = SIZE_REQUIRED + ("num_key_value_heads", "head_dim", "rms_norm_eps", "hidden_act", "rope_scaling",
                                    "rope_parameters", "rope_theta", "max_position_embeddings", "model_type",
                                    "num_hidden_layers", "attention_bias", "tie_word_embeddings", "initializer_range")

WRONG_TYPES = st.sampled_from([
    "16", "1,3,4", "[1, 3, 4]", 16.0, 16.5, True, False, [16], {"value": 16}, None, -1, 0, 10 ** 30, -(10 ** 30),
    Raw(b"NaN"), Raw(b"Infinity"), Raw(b"1e400"), digits(400), digits(5000), nested_lists(100_000),
    nested_objects(100_000), nested_lists(50), [1.0, 3.0, 4.0], [True, False, True], ["1", "3", "4"], [1, 3, -4],
    [1, 3, 4.5], "", "\ud800", [], {}, [[1], [3], [4]], [1, 3, 4, 10 ** 30], [1, 3, digits(5000)]])


def _is_pos_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _is_layer_ids(v) -> bool:
    return isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v)


def config_field_oracle(key: str, value, fmt: str) -> tuple[str, str]:
    """``(oracle, why)`` for a drafter config whose ``key`` became ``value`` (everything else valid)."""
    ok, v = python_json(value)
    if not ok:
        return "invalid", "Python's json cannot read the value (digit limit / recursion): the file must be refused"
    if key in SIZE_REQUIRED:
        return ("any", "a positive size") if _is_pos_int(v) else ("invalid", f"{key} must be a positive integer")
    if key in SIZE_OPTIONAL:
        if v is None or _is_pos_int(v):
            return "any", "absent / a positive size"
        return "invalid", f"{key} must be a positive integer (or absent)"
    if key in BOOL_FLAGS:
        if v is None or isinstance(v, bool) or v in (0, 1):
            return "any", "a flag"
        return "invalid", f"{key} must be true or false"
    if key == "rms_norm_eps":
        if v is None:
            return "any", "null: the default eps, or refused"
        good = isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1
        return ("any", "eps in (0, 1)") if good else ("invalid", "rms_norm_eps must be a number in (0, 1)")
    if key == "eagle_config":
        if fmt == "speculators":
            return "any", "speculators does not read eagle_config"
        if v is None:
            return "any", "no nested config"
        if not isinstance(v, dict):
            return "invalid", "eagle_config must be an object"
        ids = v.get("eagle_aux_hidden_state_layer_ids")
        if ids in (None, []) or _is_layer_ids(ids):
            return "any", "nested ids absent or a list of layer numbers"
        return "invalid", "aux layer ids must be a list of non-negative integers, not coerced"
    if key == "aux_ids":
        if v in (None, []) or _is_layer_ids(v):
            return "any", "aux ids absent or a list of layer numbers"
        return "invalid", "aux layer ids must be a list of non-negative integers (strings, floats, booleans not coerced)"
    if key == "transformer_layer_config" and fmt == "speculators":
        return ("any", "an object") if isinstance(v, dict) else ("invalid", "transformer_layer_config must be an object")
    return "any", f"{key}: any answer but a crash"


def set_config_field(cfg: dict, key: str, value, fmt: str) -> dict:
    cfg = copy.deepcopy(cfg)
    if key == "aux_ids":
        if fmt == "specforge":
            cfg.setdefault("eagle_config", {})["eagle_aux_hidden_state_layer_ids"] = value
        else:
            cfg["eagle_aux_hidden_state_layer_ids"] = value
    elif fmt == "speculators" and key in SPECULATORS_BODY:
        cfg["transformer_layer_config"][key] = value
    else:
        cfg[key] = value
    return cfg


WHOLE_CONFIGS = [  # (raw text, oracle)
    (b"", "invalid"), (b"[]", "invalid"), (b'"x"', "invalid"), (b"null", "invalid"), (b"1", "invalid"),
    (b"{", "invalid"), (b"\xff\xfe{}", "invalid"), (b"[" * 100_000 + b"]" * 100_000, "invalid"),
    (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "invalid"), (b"{}", "invalid"), (b"NaN", "invalid"),
    (b'{"architectures": ["LlamaForCausalLMEagle3"]}', "invalid"),
]

TARGET_FIELDS = ("num_hidden_layers", "text_config", "language_config", "hidden_size", "vocab_size",
                 "max_position_embeddings", "architectures", "rope_scaling", "rope_theta", "num_attention_heads",
                 "rope_parameters", "model_type", "tie_word_embeddings")
TARGET_VALUES = WRONG_TYPES | st.sampled_from([
    {"num_hidden_layers": "8"}, {"num_hidden_layers": 8.0}, {"num_hidden_layers": 10 ** 30}, {"hidden_size": "16"},
    {"max_position_embeddings": "4096"}, {"text_config": {"text_config": {}}}, {"vocab_size": -1},
    {"rope_scaling": "yarn"}, {"rope_type": "yarn", "factor": "4"}, {"factor": Raw(b"NaN")}])


def target_config(key: str, value, layout: str = "flat") -> dict:
    """The tiny target's config with ``key`` set to ``value``: ``flat`` (a text model) or ``multimodal`` (the
    text model's fields only under ``text_config``, as in Llava / Qwen2.5-VL / Gemma-3 configs)."""
    text = copy.deepcopy(TINY_TARGET)
    if layout == "flat":
        text[key] = value
        return text
    outer = {"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava", "text_config": text}
    if key in ("text_config", "architectures", "model_type", "language_config"):
        outer[key] = value
    else:
        text[key] = value
    return outer


#: RoPE edge values (issue #37 item 8): bases and factors at, below and near 1, beta ramps the wrong way round,
#: llama3 bands inverted or empty, floats near 0 and near the float limit, YaRN attention factors that overflow.
ROPE_NUMBERS = st.sampled_from([0, -1, 1, 1.0, 0.5, 0.999, 1.0000000001, 1e-300, 5e-324, 2, 4.0, 32, 40.0, 64.0,
                                1e10, 1e300, 1.7e308, 10 ** 30, 4096]) | st.floats(1e-3, 1e4)
ROPE_TYPES = st.sampled_from(["yarn", "yarn", "llama3", "llama3", "linear", "default", "deepseek_yarn", "dynamic"])
ROPE_KEYS = ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor", "beta_fast",
             "beta_slow", "mscale", "mscale_all_dim")


@st.composite
def rope_fields(draw) -> tuple[Any, dict[str, Any]]:
    """``(rope_theta, rope_scaling)``: a RoPE type with some of its fields at edge values."""
    theta = draw(ROPE_NUMBERS | st.just(10000.0))
    scaling = {"rope_type": draw(ROPE_TYPES)}
    for key in ROPE_KEYS:
        if draw(st.integers(0, 2)):
            scaling[key] = draw(ROPE_NUMBERS)
    return theta, scaling


def rope_reference(theta, scaling: dict[str, Any], head_dim: int = 8) -> tuple[str, str]:
    """``(oracle, why)`` from transformers' own RoPE arithmetic (``ROPE_INIT_FUNCTIONS``, as the engines compute):
    where it raises or gives a non-finite frequency or attention factor, eaglelab must refuse or list the config."""
    import torch
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        cfg = LlamaConfig(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim,
                          max_position_embeddings=512, rope_parameters={"rope_theta": theta, **scaling})
        kind = cfg.rope_parameters["rope_type"]
        if kind == "default":
            inv, factor = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)), 1.0
        else:
            inv, factor = ROPE_INIT_FUNCTIONS[kind](cfg, "cpu")
    except Exception as exc:  # noqa: BLE001 (any failure of the reference is the finding)
        return "invalid", f"transformers' RoPE raises {type(exc).__name__}: {_short(str(exc), 80)}"
    finally:
        hf_logging.set_verbosity(verbosity)
    if not (bool(torch.isfinite(inv.float()).all()) and math.isfinite(factor) and abs(factor) < 3.4e38):
        return "invalid", f"transformers' RoPE is not finite (attention factor {factor})"
    return "any", "transformers computes it: eaglelab computes it finite, or refuses it in one line"


@st.composite
def config_cases(draw, root: Path) -> Case:
    """A valid tiny drafter's weights beside a config.json with one field given a wrong JSON type (or a
    garbage target config for ``compare --target``, or a whole-file garbage config)."""
    fmt = draw(st.sampled_from(["specforge", "speculators"]))
    kind = draw(st.sampled_from(["field", "field", "field", "target", "whole", "rope"]))
    folder = new_dir(root, "config")
    drafter = folder / "drafter"
    json_flag = draw(st.booleans())
    if kind == "field":
        key = draw(st.sampled_from(CONFIG_FIELDS))
        value = draw(WRONG_TYPES | HOSTILE_JSON)
        oracle, why = config_field_oracle(key, value, fmt)
        write_tiny_drafter(drafter, fmt, config=dump(set_config_field(tiny_config(fmt), key, value, fmt)))
        label = f"{fmt} {key} = {_short(repr(value), 80)}"
        kind = f"{fmt} {key}"
        mode = draw(st.sampled_from(["inspect", "compare-b", "compare-a"]))
    elif kind == "rope":
        theta, scaling = draw(rope_fields())
        oracle, why = rope_reference(theta, scaling)
        cfg = set_config_field(set_config_field(tiny_config(fmt), "rope_theta", theta, fmt), "rope_scaling", scaling, fmt)
        write_tiny_drafter(drafter, fmt, config=dump(cfg))
        label = f"{fmt} rope_theta {theta!r}, rope_scaling {_short(repr(scaling), 120)}"
        kind = f"rope {scaling['rope_type']}"
        mode = draw(st.sampled_from(["inspect", "compare-b"]))
    elif kind == "whole":
        raw, oracle = draw(st.sampled_from(WHOLE_CONFIGS))
        why = "config.json is not a drafter config object"
        write_tiny_drafter(drafter, fmt, config=raw)
        label = f"{fmt} config.json = {_short(repr(raw), 60)}"
        kind = "whole config.json"
        mode = draw(st.sampled_from(["inspect", "compare-b"]))
    else:
        key = draw(st.sampled_from(TARGET_FIELDS))
        value = draw(TARGET_VALUES | HOSTILE_JSON)
        layout = draw(st.sampled_from(["flat", "multimodal"]))
        (folder / "target.json").write_bytes(dump(target_config(key, value, layout)))
        write_tiny_drafter(drafter, fmt)
        ok, _ = python_json(value)
        oracle, why = ("any", "target field garbage: any answer but a crash") if ok else (
            "invalid", "Python's json cannot read the target config: it must be refused")
        label = f"{layout} target {key} = {_short(repr(value), 80)}"
        kind = f"target {key}"
        mode = "compare-target"
    base = write_tiny_drafter(folder / "base", fmt)
    argv = {"inspect": ["inspect", str(drafter)], "compare-b": ["compare", str(base), str(drafter)],
            "compare-a": ["compare", str(drafter), str(base)],
            "compare-target": ["compare", str(base), str(drafter), "--new-target", str(folder / "target.json")]}[mode]
    return Case("config", label, argv + (["--json"] if json_flag else []), oracle, folder, listed=inspect_listed,
                note=why, kind=kind)


# --------------------------------------------------------------------------- index: shard indexes

SECRET = b"1234567890 secret outside the checkpoint folder\n"
SECRET_NUMBER = str(struct.unpack("<Q", SECRET[:8])[0])


def _no_leak(outcome: Outcome) -> tuple[str, str, str] | None:
    text = outcome.stderr + outcome.stdout
    for needle in ("12345678", SECRET_NUMBER, "secret outside"):
        if needle in text:
            return ("garbage", "index: a file outside the checkpoint folder was read (its bytes leak into the output)",
                    _short(outcome.stderr, 300))
    return None


INDEX_OPS = st.one_of(
    st.tuples(st.just("weight_map"), st.sampled_from([[], "x", 1, None, True, {}, ["a", "b"]]) | HOSTILE_JSON),
    st.tuples(st.just("value"), st.integers(0, 40), st.sampled_from(
        [1, None, [], {}, True, 1.5, "", ".", "/", "\u0000", "model.safetensors\u0000x", "x" * 300, "sub", "sub/",
         "config.json", "model.safetensors.index.json", "\ud800", digits(5000), nested_lists(100_000)]) | HOSTILE_JSON),
    st.tuples(st.just("outside"), st.sampled_from(["dotdot", "absolute", "symlink", "dotdot-valid", "absolute-valid",
                                                   "symlink-valid", "nested-dotdot"])),
    st.tuples(st.just("missing_shard"), st.sampled_from(["named", "deleted"])),
    st.tuples(st.just("duplicate_tensor")),
    st.tuples(st.just("wrong_shard")),
    st.tuples(st.just("ghost")),
    st.tuples(st.just("unlisted_shard")),
    st.tuples(st.just("whole"), st.sampled_from([b"", b"[]", b"null", b"{", b"[" * 100_000 + b"]" * 100_000,
                                                 b'{"weight_map": {"a": "' + b"1" * 5000 + b'"}}',
                                                 b'{"weight_map": ' + b"1" * 5000 + b"}", b"\xff{}"])),
    st.tuples(st.just("metadata"), HOSTILE_JSON),
)


def index_case(folder: Path, op: tuple, mode: str = "inspect") -> Case:
    from safetensors.numpy import load_file, save_file

    ckpt = write_sharded_drafter(folder / "ckpt")
    index_path = ckpt / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    wm: dict = index["weight_map"]
    names = sorted(wm)
    shards = sorted(set(wm.values()))
    (folder / "secret.safetensors").write_bytes(SECRET)
    (ckpt / "sub").mkdir()
    oracle, why, check_error, listed = "invalid", "", None, inspect_listed
    kind = op[0]
    raw_index: bytes | None = None
    if kind == "weight_map":
        index["weight_map"] = op[1]
        why = "weight_map must be a non-empty object of tensor -> shard file"
    elif kind == "value":
        name = names[op[1] % len(names)]
        wm[name] = op[2]
        why = "a weight_map value must name a shard file inside the folder"
        check_error = _no_leak
    elif kind == "outside":
        how = op[1]
        check_error, listed = _no_leak, None  # refused outright: listing it as a problem means it was read
        victim = shards[-1]
        if how.endswith("-valid"):  # the outside file is a real shard holding the tensors
            (folder / "secret.safetensors").write_bytes((ckpt / victim).read_bytes())
            how = how[:-len("-valid")]
        if how == "dotdot":
            target = "../secret.safetensors"
        elif how == "nested-dotdot":
            target = "sub/" + "/".join(["..", "..", "secret.safetensors"])
        elif how == "absolute":
            target = str(folder / "secret.safetensors")
        else:  # symlink inside the folder to a file outside it
            target = victim
            (ckpt / victim).unlink()
            (ckpt / victim).symlink_to(folder / "secret.safetensors")
        for n in names:
            if wm[n] == victim:
                wm[n] = target
        why = f"shard path leaves the checkpoint folder ({how}): must be refused, its bytes never shown"
    elif kind == "missing_shard":
        if op[1] == "named":
            wm[names[0]] = "model-00009-of-00009.safetensors"
        else:
            (ckpt / shards[0]).unlink()
        why = "the index names a shard that does not exist"
    elif kind == "duplicate_tensor":
        a, b = (load_file(str(ckpt / s)) for s in shards)
        name = next(iter(a))
        b[name] = a[name]
        save_file(b, str(ckpt / shards[1]))
        why = "the same tensor in two shards"
    elif kind == "wrong_shard":
        name = next(n for n in names if wm[n] == shards[0])
        wm[name] = shards[1]
        why = "weight_map puts a tensor in a shard whose header does not hold it"
    elif kind == "ghost":
        wm["ghost.weight"] = shards[0]
        why = "weight_map names a tensor no shard holds"
    elif kind == "unlisted_shard":
        save_file({"stray": __import__("numpy").zeros(2, "float32")}, str(ckpt / "model-stray.safetensors"))
        oracle, why = "any", "a shard file the index does not name"
    elif kind == "whole":
        raw_index = op[1]
        why = "the index file is not an index"
    elif kind == "metadata":
        index["metadata"] = op[1]
        oracle, why = "any", "index metadata is informational"
    index_path.write_bytes(raw_index if raw_index is not None else dump(index))
    source = str(index_path) if mode == "index-file" else str(ckpt)
    argv = ["inspect", source] + (["--json"] if mode.endswith("json") else [])
    return Case("index", f"{kind} {' '.join(_short(repr(p), 60) for p in op[1:])}".strip(), argv, oracle, folder,
                listed=listed, check_error=check_error, note=why,
                kind=f"{kind} {op[1]}" if kind == "outside" else kind)


@st.composite
def index_cases(draw, root: Path) -> Case:
    """A two-shard tiny drafter (eaglelab's synthetic writer) whose index or shards are broken."""
    op = draw(INDEX_OPS)
    mode = draw(st.sampled_from(["inspect", "inspect-json", "index-file", "index-file-json"]))
    return index_case(new_dir(root, "index"), op, mode)


# --------------------------------------------------------------------------- log: server logs with hostile numbers

SGLANG_OLD = ("[2026-01-01 10:00:00 TP0] Decode batch. #running-req: {req}, #token: 112, token usage: 0.00, "
              "accept len: {accept}, cuda graph: True, gen throughput (token/s): {tps}, #queue-req: 0,")
SGLANG_NEW = ("[2026-01-01 10:00:01 TP0] Decode batch[ 40], #running-req: {req}, #token: 900, token usage: 0.02, "
              "accept len: {accept}, accept rate: {rate}, cuda graph: False, gen throughput (token/s): {tps}, "
              "#queue-req: 2,")
VLLM = ("INFO 11-02 11:00:00 [metrics.py:96] SpecDecoding metrics: Mean acceptance length: {accept}, Accepted "
        "throughput: {tps} tokens/s, Drafted throughput: 96.77 tokens/s, Accepted: 1050 tokens, Drafted: 3000 tokens, "
        "Per-position acceptance rate: {pos}, Avg Draft acceptance rate: {rate}%")

#: field -> [(text, status)]: status ``valid`` (a real value), ``invalid`` (impossible or not a number:
#: the line must not become a record) or ``any`` (an odd spelling either answer may take).
LOG_VALUES = {
    "accept": [("2.19", "valid"), ("1.00", "valid"), ("1", "valid"), ("3.5", "valid"), ("4.00", "valid"),
               ("nan", "invalid"), ("NaN", "invalid"), ("inf", "invalid"), ("-inf", "invalid"), ("-1", "invalid"),
               ("0", "invalid"), ("0.5", "invalid"), ("0.99", "invalid"), ("1e400", "invalid"), ("9" * 400, "invalid"),
               ("9" * 5000, "invalid"), ("abc", "invalid"), ("-2.0", "invalid"), ("0x2", "invalid"), ("", "invalid"),
               ("2_0", "any"), ("+2.0", "any"), ("2.0e0", "any"), ("\u0663", "any"), ("2.19.3", "invalid")],
    "tps": [("258.07", "valid"), ("0.0", "valid"), ("0", "valid"), ("1234.5", "valid"), ("-1", "invalid"),
            ("-0.5", "invalid"), ("nan", "invalid"), ("inf", "invalid"), ("1e400", "invalid"), ("9" * 400, "invalid"),
            ("abc", "invalid"), ("-0.0", "any"), ("1e3", "any"), ("1e300", "invalid"), ("2e9", "invalid")],  # #53
    "rate": [("0.29", "valid"), ("0", "valid"), ("1", "valid"), ("1.0", "valid"), ("1.5", "invalid"),
             ("-0.1", "invalid"), ("nan", "invalid"), ("inf", "invalid"), ("150", "invalid"), ("abc", "invalid")],
    "pct": [("35.0", "valid"), ("0", "valid"), ("100", "valid"), ("100.0", "valid"), ("150.0", "invalid"),
            ("-5", "invalid"), ("nan", "invalid"), ("inf", "invalid"), ("1e400", "invalid")],
    "req": [("1", "valid"), ("4", "valid"), ("128", "valid"), ("-1", "invalid"), ("1.5", "any"), ("abc", "any"),
            ("9" * 5000, "any"), ("0", "any")],
    "pos": [("0.500, 0.330, 0.220", "valid"), ("[0.5, 0.3, 0.2]", "valid"), ("1.0", "valid"), ("0", "valid"),
            ("0.5, 1.5, 0.2", "invalid"), ("-0.1, 0.3", "invalid"), ("nan, 0.5", "invalid"), ("0.5, inf", "invalid"),
            ("1e400", "invalid"), ("0.5, 0.3, " * 2000 + "0.1", "any"), ("0.5, abc, 0.2", "any"), ("", "any"),
            ("0.5,,0.3", "any")],
}
LOG_FIELD_STATUS = {kind: dict(values) for kind, values in LOG_VALUES.items()}
_BREAKS = set(b"\n\r\x0b\x0c\x1c\x1d\x1e\x85\xa8\xa9")


def _value(kind: str):
    """A field value, valid about four times in five (so that whole lines are often valid)."""
    good = [v for v in LOG_VALUES[kind] if v[1] == "valid"]
    bad = [v for v in LOG_VALUES[kind] if v[1] != "valid"]
    return st.sampled_from(good * max(1, (4 * len(bad)) // len(good)) + bad)


def _positions(text: str) -> list[float]:
    return [float(v) for v in text.strip().strip("[]").split(",") if v.strip()]


@st.composite
def log_line(draw) -> tuple[str, str, dict]:
    """``(line, status, expected)``: one log line, whether it must / must not / may become a record, and the
    values a record of it must carry."""
    kind = draw(st.sampled_from(["sglang-old", "sglang-new", "vllm"] * 3 + ["noise", "garbage", "long-noise", "long-valid"]))
    if kind in ("noise", "garbage", "long-noise"):
        if kind == "noise":
            line = draw(st.sampled_from([
                "server starting", 'INFO: 127.0.0.1 - "POST /v1/chat" 200 OK', "Decode batch. #running-req: 1,",
                "accept len: 2.0,", "SpecDecoding metrics:", "Prefill batch. #new-seq: 1", "\x00\x00\x00",
                "Decode batch[ 1], accept len: nan", "SpecDecoding metrics: Mean acceptance length:"]))
            status = "any" if line.startswith(("SpecDecoding", "Decode batch[ 1]")) else "skip"
        elif kind == "garbage":
            blob = draw(st.binary(max_size=200))
            line = bytes(b for b in blob if b not in _BREAKS).decode("utf-8", errors="replace")
            status = "any"
        else:
            n = draw(st.sampled_from([1000, 5000, 20000]))
            line = draw(st.sampled_from(["Decode batch. ", "Decode batch[", "SpecDecoding metrics: ", "accept len: "])) * n
            status = "any"
        return line, status, {}
    fields = {"accept": draw(_value("accept")), "tps": draw(_value("tps")), "req": draw(_value("req"))}
    if kind in ("sglang-old", "long-valid"):
        template = SGLANG_OLD
    elif kind == "sglang-new":
        template, fields["rate"] = SGLANG_NEW, draw(_value("rate"))
    else:  # vLLM logs τ and the per-position rates from the same counters: τ = 1 + their sum
        template, fields["rate"], fields["pos"] = VLLM, draw(_value("pct")), draw(_value("pos"))
        del fields["req"]
        pos_text, pos_status = fields["pos"]
        if pos_status == "valid":
            rates = _positions(pos_text)
            total = 1 + sum(rates)
            if draw(st.booleans()):
                fields["accept"] = (f"{total:.2f}", "valid")
            elif fields["accept"][1] == "valid" and abs(float(fields["accept"][0]) - total) > 0.005:
                fields["accept"] = (fields["accept"][0], "any")  # inconsistent with its own rates
            mean = 100 * sum(rates) / len(rates)
            if draw(st.booleans()):
                fields["rate"] = (f"{mean:.1f}", "valid")
            elif fields["rate"][1] == "valid" and abs(float(fields["rate"][0]) - mean) > 0.05:
                fields["rate"] = (fields["rate"][0], "any")  # the average of the same counters, inconsistent
    line = template.format(**{k: v[0] for k, v in fields.items()})
    if kind == "long-valid":
        line = line + " " + "x" * draw(st.sampled_from([1000, 100_000]))
    statuses = {v[1] for v in fields.values()}
    status = "invalid" if "invalid" in statuses else "any" if "any" in statuses else "valid"
    expected = {"accept_len": float(fields["accept"][0])} if status == "valid" else {}
    return line, status, expected


def check_log_json(lines: list[tuple[str, str, dict]]) -> Callable[[Outcome], tuple[str, str, str] | None]:
    """Invariants of ``perf --log --json``: every record finite and in range, none from an invalid line, every
    valid line a record."""
    status = {i + 1: s for i, (_, s, _) in enumerate(lines)}
    expected = {i + 1: e for i, (_, _, e) in enumerate(lines)}

    def check_ok(outcome: Outcome):
        js = outcome.json
        if js is None:
            return None
        records = js.get("records") if isinstance(js, dict) else None
        if not isinstance(records, list):
            return "bad-output", "log: --json output without a records list", _short(outcome.stdout, 200)
        seen = set()
        for r in records:
            if not isinstance(r, dict):
                return "bad-output", "log: a record is not an object", _short(repr(r), 200)
            n = r.get("line_no")
            seen.add(n)
            tau, tps, rate, pos = r.get("accept_len"), r.get("throughput"), r.get("accept_rate"), r.get("per_position")
            problems = []
            if not (isinstance(tau, (int, float)) and math.isfinite(tau) and tau >= 1):
                problems.append(f"accept_len {tau!r} (must be finite and >= 1)")
            if tps is not None and not (isinstance(tps, (int, float)) and math.isfinite(tps) and tps >= 0):
                problems.append(f"throughput {tps!r} (must be finite and >= 0)")
            if rate is not None and not (isinstance(rate, (int, float)) and 0 <= rate <= 1):
                problems.append(f"accept_rate {rate!r} (must lie in [0, 1])")
            if pos is not None and not (isinstance(pos, list) and all(
                    isinstance(p, (int, float)) and 0 <= p <= 1 for p in pos)):
                problems.append(f"per_position {_short(repr(pos), 80)} (each must lie in [0, 1])")
            if status.get(n) == "invalid":
                problems.append("the line holds an impossible or unreadable value")
            if status.get(n) == "skip":
                problems.append("the line is not a metrics line")
            if problems:
                text = _short(lines[n - 1][0], 160) if isinstance(n, int) and 0 < n <= len(lines) else ""
                fields = sorted({p.split(" ")[0] if not p.startswith("the line") else "impossible line" for p in problems})
                return "garbage", f"log: a record with impossible values was accepted ({', '.join(fields)})", \
                    f"line {n}: {'; '.join(problems)}: {text}"
            want = expected.get(n, {}).get("accept_len")
            if want is not None and tau != want:
                return "garbage", "log: a record's accept_len differs from its line", f"line {n}: {tau} vs {want}"
        missing = [n for n, s in status.items() if s == "valid" and n not in seen]
        if missing:
            return ("refused", "log: a valid metrics line was not parsed",
                    f"line {missing[0]}: {_short(lines[missing[0] - 1][0], 200)}")
        return None

    return check_ok


def log_case(folder: Path, lines: list[tuple[str, str, dict]], mode: str = "perf-json", crlf: bool = False,
             trailing_newline: bool = True) -> Case:
    sep = "\r\n" if crlf else "\n"
    text = sep.join(line for line, _, _ in lines) + (sep if trailing_newline and lines else "")
    path = folder / "server.log"
    path.write_bytes(text.encode("utf-8", errors="surrogateescape"))
    n_valid = sum(1 for _, s, _ in lines if s == "valid")
    n_maybe = sum(1 for _, s, _ in lines if s == "any")
    oracle = "valid" if n_valid else ("invalid" if not n_maybe else "any")
    if mode.startswith("plan"):
        oracle = "invalid" if oracle == "invalid" else "any"
        argv = ["plan", "--log", str(path)]
    else:
        argv = ["perf", "--log", str(path)]
    if mode.endswith("json"):
        argv.append("--json")
    label = f"{len(lines)} lines ({n_valid} valid, {sum(1 for _, s, _ in lines if s == 'invalid')} impossible)"
    bad = [line for line, s, _ in lines if s == "invalid"][:1]
    if bad:
        label += f"; e.g. {_short(bad[0], 100)!r}"
    return Case("log", label, argv, oracle, folder, check_ok=check_log_json(lines) if mode == "perf-json" else None,
                note="a log with at least one valid metrics line must parse; impossible values are malformed lines",
                kind=argv[0])


@st.composite
def log_cases(draw, root: Path) -> Case:
    """A server log of SGLang (old, new) and vLLM metrics lines with hostile numbers, noise, binary garbage
    and long lines."""
    lines = draw(st.lists(log_line(), max_size=6))
    mode = draw(st.sampled_from(["perf-json", "perf-json", "perf", "plan-json"]))
    return log_case(new_dir(root, "log"), lines, mode, crlf=draw(st.booleans()), trailing_newline=draw(st.booleans()))


# --------------------------------------------------------------------------- args: numbers on the command line

#: Values that are not finite numbers, or not numbers at all: invalid for every numeric flag.
HOSTILE_NUMBERS = ["nan", "NaN", "inf", "-inf", "Infinity", "1e309", "-1e309", "", "abc", "0x10", "9" * 400, "9" * 5000,
                   "1,5", "2..0"]
RANGE_NUMBERS = ["-1", "0", "-0", "0.5", "0.999", "1", "-2.5", "1.0001"]
EXTREME_NUMBERS = ["1e-320", "1e-300", "1e300", "1_000", "\uff11\uff12", " 2 ", "1e308"]
NORMAL = {
    "--baseline-tps": ["82", "50", "120.5"], "--cycle-ms": ["30", "45.5", "12"], "--accept-len": ["2.0", "1.5", "2.6"],
    "--goal-tps": ["150", "200", "90"], "--samples": ["37000", "1000"], "--gen-tps": ["82", "400"],
    "--tokens-per-sample": ["512", "256"], "--k": ["3", "4", "2"], "--plugin-tau": ["1.8", "2.2"],
    "--old-samples": ["1400000", "5000"], "--exponent": ["0.1 0.3", "0.2 0.2"], "--transfer": ["0.1 0.5", "0.2 1"],
    "--budgets": ["100000 1000000", "500000"], "--chain": ["0.8,0.6,0.45", "0.5"],
    "--concurrency": ["1 8 64", "1", "4 128"],
}
FLAGS = {
    "perf": ["--baseline-tps", "--cycle-ms", "--accept-len", "--goal-tps", "--k", "--concurrency"],
    "plan": ["--baseline-tps", "--cycle-ms", "--accept-len", "--goal-tps", "--samples", "--gen-tps",
             "--tokens-per-sample", "--k", "--plugin-tau", "--old-samples", "--exponent", "--transfer", "--budgets"],
    "predict": ["--accept-len", "--k", "--chain", "--cycle-ms", "--baseline-tps"],
}
MULTI = {("perf", "--goal-tps"), ("plan", "--budgets"), ("perf", "--concurrency")}  # nargs="+"
PAIRS = {"--exponent", "--transfer"}


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _worst(statuses) -> str:
    statuses = list(statuses)
    return "invalid" if "invalid" in statuses else "any" if "any" in statuses else "valid"


def _range_status(flag: str, text: str, cmd: str, k: int) -> str:
    """valid / invalid / any of one numeric flag value."""
    if flag in ("--k", "--concurrency"):
        n = _int(text)
        if n is None or n < 1:
            return "invalid"
        if flag == "--concurrency" and n > 65536:  # requests in flight on one server: the cost table's bound (#53)
            return "invalid"
        plain = text in NORMAL["--k"] if flag == "--k" else text.isascii() and text.isdigit()
        return "valid" if plain else "any"
    if flag == "--chain":
        parts = [_num(p) for p in text.split(",")]
        if any(p is None or not math.isfinite(p) or not 0 <= p <= 1 for p in parts):
            return "invalid"
        if any(b > a for a, b in zip(parts, parts[1:])):
            return "invalid"
        return "valid" if text in NORMAL["--chain"] else "any"
    x = _num(text)
    if x is None or not math.isfinite(x):
        return "invalid"
    odd = "any" if text in EXTREME_NUMBERS else "valid"
    if flag == "--accept-len" or flag == "--plugin-tau":
        if x < 1:
            return "invalid"
        if cmd == "perf":  # plain perf and --concurrency refuse a τ above k + 1 too (#37 item 11)
            return "invalid" if x > k + 1 else odd
        if x > k + 1:
            return "invalid"
        if x == k + 1 or (flag == "--accept-len" and x == 1):  # τ = 1: no gain to plan or predict from
            return "any"
        return odd
    if flag in ("--old-samples", "--samples"):  # 0 samples: a degenerate edge either answer may take
        return "invalid" if x < 0 else ("any" if x == 0 else odd)
    if flag == "--exponent":
        return "invalid" if x <= 0 else odd
    if flag == "--transfer":  # a share: in [0, 1]; 0 (nothing carried over) is an edge
        return "invalid" if not 0 <= x <= 1 else ("any" if x == 0 else odd)
    return "invalid" if x <= 0 else odd  # tok/s, ms, budgets, tokens per sample


def args_oracle(cmd: str, given: dict[str, list[str] | None], extra: list[str]) -> tuple[str, str]:
    """``(oracle, why)`` of a perf / plan / predict command line (``given``: flag -> values, None = no value)."""
    if extra:
        return "invalid", f"unknown argument(s) {extra}"
    if any(v is None or v == [] for v in given.values()):
        return "invalid", "a flag without its value"
    for flag, values in given.items():
        if flag in PAIRS and len(values) != 2:
            return "invalid", f"{flag} takes two values"
        if flag not in PAIRS and (cmd, flag) not in MULTI and len(values) != 1:
            return "invalid", f"{flag} takes one value"
    kk = _int(given["--k"][0]) if "--k" in given else None
    k = kk if kk is not None and kk >= 1 else 3
    statuses = {flag: _worst(_range_status(flag, v, cmd, k) for v in values) for flag, values in given.items()}
    if cmd == "perf":
        missing = [f for f in FLAGS["perf"][:3] if f not in given]
        if missing:
            return "invalid", f"perf without {missing}"
    if cmd == "predict":
        sources = [f for f in ("--chain", "--accept-len") if f in given]
        if len(sources) != 1:
            return "invalid", "predict needs exactly one of --chain / --accept-len / --log"
        if "--accept-len" in given and "--k" not in given:
            return "invalid", "--accept-len without --k"
        if "--chain" in given and "--k" in given:
            statuses["--k"] = "any"  # --k is ignored with --chain
    if cmd == "plan" and "--exponent" in given and statuses["--exponent"] == "valid":
        lo, hi = (float(v) for v in given["--exponent"])
        if lo > hi:
            statuses["--exponent"] = "any"
    oracle = _worst(statuses.values())
    if cmd in ("perf", "plan") and oracle != "invalid":
        # one setup's numbers: a cycle holds a verify, so it is at least one plain decoding step (#31)
        cycle = _num(given["--cycle-ms"][0]) if "--cycle-ms" in given else 30.0
        base = _num(given["--baseline-tps"][0]) if "--baseline-tps" in given else 82.0
        if cycle is not None and base is not None and cycle / 1e3 * base < 1.0:
            return ("invalid" if oracle == "valid" and not _near_one(cycle / 1e3 * base) else "any",
                    "a cycle shorter than one plain decoding step")
    bad = [f for f, s in statuses.items() if s == "invalid"]
    return oracle, (f"impossible or non-finite {bad}" if bad else "every value in its documented range"
                    if oracle == "valid" else "odd spellings or edge values")


def _near_one(x: float) -> bool:
    """A break-even τ within rounding of 1: either answer is fair."""
    return abs(x - 1.0) < 1e-9


def _check_numbers_finite(outcome: Outcome):
    def walk(x, path):
        if isinstance(x, float) and not math.isfinite(x):
            return path
        if isinstance(x, dict):
            for k, v in x.items():
                p = walk(v, f"{path}.{k}")
                if p:
                    return p
        if isinstance(x, list):
            for i, v in enumerate(x):
                p = walk(v, f"{path}[{i}]")
                if p:
                    return p
        return None

    where = walk(outcome.json, "$")
    if where:
        return "bad-output", "args: non-finite number in --json", where
    return None


def _check_perf_numbers(outcome: Outcome):
    js = outcome.json
    if not isinstance(js, dict):
        return None
    for key in ("effective_tps", "speedup", "break_even_tau", "max_cycle_ms_for_break_even"):
        v = js.get(key)
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)):
            return "garbage", f"args: perf --json {key} is not a finite number for valid inputs", f"{key} = {v!r}"
    return _check_numbers_finite(outcome)


VLLM_HTTP = {"id": "cmpl-abc", "object": "text_completion", "model": "m", "choices": [
    {"index": 0, "text": " I", "logprobs": None, "finish_reason": "length", "token_ids": [358],
     "prompt_logprobs": [None, {"1917": {"logprob": -6.42, "rank": 37, "decoded_token": " world"},
                                "11": {"logprob": -1.2, "rank": 1, "decoded_token": ","},
                                "0": {"logprob": -1.9, "rank": 2, "decoded_token": "!"}},
                         {"0": {"logprob": -0.9, "rank": 1, "decoded_token": "!"},
                          "13": {"logprob": -1.3, "rank": 2, "decoded_token": "."}}],
     "prompt_token_ids": [9906, 1917, 0]}], "usage": {"prompt_tokens": 3}, "count_from": 1}
SGLANG_RESPONSE = {"text": " I", "meta_info": {
    "id": "5f1c", "prompt_tokens": 3, "input_token_logprobs": [[None, 9906, "Hello"], [-6.42, 1917, " world"], [-0.9, 0, "!"]],
    "input_top_logprobs": [None, [[-1.2, 11, ","], [-1.9, 0, "!"]], [[-0.9, 0, "!"], [-1.3, 13, "."]]]}}


def write_engine_files(folder: Path) -> tuple[Path, Path]:
    """Two engine logprob files (vLLM old, SGLang new) on the same text, as ``tests/test_drift.py`` writes them."""
    old, new = folder / "old.jsonl", folder / "new.jsonl"
    old.write_text(json.dumps(VLLM_HTTP) + "\n" + json.dumps(VLLM_HTTP) + "\n")
    new.write_text(json.dumps(SGLANG_RESPONSE) + "\n" + json.dumps(SGLANG_RESPONSE) + "\n")
    return old, new


def args_case(folder: Path | None, cmd: str, given: dict[str, list[str] | None], extra: list[str] | None = None,
              json_flag: bool = True, equals: bool = False) -> Case:
    extra = list(extra or [])
    argv = [cmd]
    if cmd == "predict":
        assert folder is not None
        old, new = write_engine_files(folder)
        argv += ["--old-logprobs", str(old), "--new-logprobs", str(new)]
    for flag, values in given.items():
        if values is None:
            continue
        if equals and len(values) == 1:
            argv.append(f"{flag}={values[0]}")
        else:
            argv += [flag, *values]
    argv += extra
    for flag, values in given.items():  # a flag without its value goes last
        if values is None:
            argv.append(flag)
    if json_flag:
        argv.append("--json")
    oracle, why = args_oracle(cmd, given, extra)
    check_ok = _check_perf_numbers if cmd == "perf" and oracle == "valid" else _check_numbers_finite
    label = " ".join(shorten_argv(argv[1:] if cmd != "predict" else argv[5:], 40))
    return Case("args", f"{cmd} {label}", argv, oracle, folder, check_ok=check_ok if json_flag else None, note=why,
                kind=f"{cmd} {why}")


#: A consistent MoE target for the load model (DeepSeek-V2-Lite's shape: MLA, 64 routed experts, 6 per token).
LOAD_TARGET = {"hidden_size": 2048, "num_hidden_layers": 27, "vocab_size": 102400, "num_attention_heads": 16,
               "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
               "intermediate_size": 10944, "moe_intermediate_size": 1408, "n_routed_experts": 64, "num_experts_per_tok": 6,
               "n_shared_experts": 2, "first_k_dense_replace": 1, "torch_dtype": "bfloat16"}
#: Load-model configs that contradict themselves (#37 item 10): each field set (None: removed) on :data:`LOAD_TARGET`.
IMPOSSIBLE_LOAD_TARGETS = {
    "first_k_dense_replace above the layers": {"first_k_dense_replace": 28},
    "num_experts_per_tok above the experts": {"num_experts_per_tok": 65},
    "no experts per token": {"num_experts_per_tok": 0}, "negative experts": {"n_routed_experts": -64},
    "routed experts without their width": {"moe_intermediate_size": None},
    "num_local_experts negative": {"n_routed_experts": None, "num_local_experts": -2},
    "num_local_experts a string": {"n_routed_experts": None, "num_local_experts": "8"},
    "quantization bits 0": {"quantization_config": {"quant_method": "gptq", "bits": 0}},
    "quantization bits true": {"quantization_config": {"quant_method": "gptq", "bits": True}},
    "more KV heads than heads": {"kv_lora_rank": None, "num_key_value_heads": 32},
    "heads wider than the model": {"kv_lora_rank": None, "num_attention_heads": 4096},
    "2^40 layers (#53)": {"num_hidden_layers": 2 ** 40}, "2^40 routed experts (#53)": {"n_routed_experts": 2 ** 40},
}
#: Numbers no setup gives (#37 items 9 and 11): τ above k + 1, a cycle shorter than a plain step, on every path.
LOAD_REFUSALS = {
    "perf τ above k + 1": ["perf", "--baseline-tps", "82", "--cycle-ms", "30", "--accept-len", "100", "--k", "3"],
    "perf τ just above k + 1": ["perf", "--baseline-tps", "82", "--cycle-ms", "30", "--accept-len", "3.0001", "--k", "2"],
    "perf --concurrency τ above k + 1": ["perf", "--baseline-tps", "82", "--cycle-ms", "30", "--accept-len", "5", "--k", "3",
                                         "--concurrency", "1", "8"],
    "plan τ above k + 1": ["plan", "--accept-len", "4.5", "--k", "3"],
    "perf --concurrency cycle below a step": ["perf", "--baseline-tps", "82", "--cycle-ms", "5", "--accept-len", "2",
                                              "--concurrency", "1", "8", "64"],
    "perf --concurrency cycle below a step at 8": ["perf", "--baseline-tps", "20", "--cycle-ms", "40", "--accept-len", "2",
                                                   "--concurrency", "8", "64", "--at-concurrency", "8"],
    "plan cycle below a step": ["plan", "--cycle-ms", "5"],
    # round four (#53): a tree that verifies fewer than k + 1 tokens, rates and loads no machine has
    "perf a tree below k + 1": ["perf", "--k", "3", "--topk", "4", "--draft-tokens", "2", "--accept-len", "4",
                                "--baseline-tps", "82", "--cycle-ms", "30", "--concurrency", "1", "8", "64"],
    "perf a link of 1e-300 GB/s": ["perf", "--link-gbps", "1e-300", "--concurrency", "1", "8"],
    "perf an aggregate tok/s per request": ["perf", "--baseline-tps", "3000000", "--cycle-ms", "30", "--accept-len", "2"],
    "perf 1e11 requests in flight": ["perf", "--baseline-tps", "82", "--cycle-ms", "30", "--accept-len", "2",
                                     "--concurrency", "1", "100000000000"],
    "plan a cycle of 1e-9 ms": ["plan", "--cycle-ms", "1e-9"],
}


@st.composite
def load_cases(draw, root: Path) -> Case:
    """The load model's inputs (#37 items 9-11): a target config that contradicts itself, τ above k + 1 and a cycle
    shorter than a plain step, each refused in one line; the consistent config, answered."""
    json_flag = draw(st.booleans())
    folder = None
    if draw(st.sampled_from(["numbers", "config", "config"])) == "numbers":
        label = draw(st.sampled_from(sorted(LOAD_REFUSALS)))
        argv, oracle = list(LOAD_REFUSALS[label]), "invalid"
    else:
        label = draw(st.sampled_from(["consistent"] * 3 + sorted(IMPOSSIBLE_LOAD_TARGETS)))
        folder = new_dir(root, "args")
        cfg = {k: v for k, v in {**LOAD_TARGET, **IMPOSSIBLE_LOAD_TARGETS.get(label, {})}.items() if v is not None}
        (folder / "config.json").write_bytes(dump(cfg))
        cmd = draw(st.sampled_from(["perf", "plan"]))
        argv = [cmd, "--target-config", str(folder / "config.json")]
        if cmd == "perf":
            argv += ["--baseline-tps", draw(st.sampled_from(NORMAL["--baseline-tps"])), "--cycle-ms", "45.5",
                     "--accept-len", draw(st.sampled_from(NORMAL["--accept-len"])), "--concurrency", "1", "8", "64"]
        oracle = "valid" if label == "consistent" else "invalid"
    return Case("args", f"load: {label}", argv + (["--json"] if json_flag else []), oracle, folder,
                check_ok=_check_numbers_finite if json_flag else None, kind=f"load: {label}",
                note="the load model answers only a consistent config and one setup's numbers")


@st.composite
def args_cases(draw, root: Path) -> Case:
    """perf / plan / predict flags with hostile, edge and normal numbers, missing values and unknown flags; one case
    in eight the load model's inputs (:func:`load_cases`)."""
    if draw(st.sampled_from(["load"] + ["numbers"] * 7)) == "load":
        return draw(load_cases(root))
    cmd = draw(st.sampled_from(["perf", "perf", "plan", "predict"]))
    flags = FLAGS[cmd]
    chosen = draw(st.lists(st.sampled_from(flags), unique=True, max_size=len(flags)))
    if cmd == "perf" and draw(st.booleans()):
        chosen = list(dict.fromkeys(FLAGS["perf"][:3] + chosen))
    if cmd == "predict" and draw(st.booleans()):
        chosen = list(dict.fromkeys(chosen + list(draw(st.sampled_from([("--chain",), ("--accept-len", "--k")])))))
    given: dict[str, list[str] | None] = {}
    for flag in chosen:
        pool = draw(st.sampled_from(["normal"] * 5 + ["range", "hostile", "extreme", "missing"]))
        if pool == "missing":
            given[flag] = None
            continue
        if pool == "normal":
            given[flag] = draw(st.sampled_from(NORMAL[flag])).split()
            continue
        count = 2 if flag in PAIRS else draw(st.integers(1, 2)) if (cmd, flag) in MULTI else 1
        odd = {"range": RANGE_NUMBERS, "hostile": HOSTILE_NUMBERS, "extreme": EXTREME_NUMBERS}[pool]
        given[flag] = [draw(st.sampled_from(odd)) for _ in range(count)]
    extra = draw(st.sampled_from([[]] * 8 + [["--bogus"], ["--bogus", "1"], ["extra-positional"], ["-x"]]))
    folder = new_dir(root, "args") if cmd == "predict" else None
    return args_case(folder, cmd, given, extra, json_flag=draw(st.booleans()) or cmd == "perf",
                     equals=draw(st.booleans()))


# --------------------------------------------------------------------------- special: files that are not files

SPECIAL_KINDS = ("fifo", "loop", "dir", "long-component", "long-path", "dev-zero", "dev-urandom", "dev-null", "nul",
                 "empty", "unreadable", "non-utf8-name", "newline-name", "missing")
SPECIAL_PLACES = ("source", "config", "weights", "index", "shard", "log", "target", "predict-old", "compare-b")


def _make_special(path: Path, kind: str) -> str:
    """Turn ``path`` into a special file of ``kind``; returns the path string to use (it may differ)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        import shutil

        shutil.rmtree(path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "loop":
        other = path.with_name(path.name + ".loop")
        path.symlink_to(other)
        other.symlink_to(path)
    elif kind == "dir":
        path.mkdir()
    elif kind in ("dev-zero", "dev-urandom", "dev-null"):
        path.symlink_to("/dev/" + kind[4:])
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "unreadable":  # root reads any file: /proc/self/mem fails with EIO at offset 0 instead
        path.symlink_to("/proc/self/mem")
    elif kind == "missing":
        pass
    return str(path)


def _odd_path(base: Path, kind: str) -> str:
    if kind == "long-component":
        return str(base / ("x" * 300))
    if kind == "long-path":
        return str(base) + "/" + "/".join(["y" * 200] * 25)
    if kind == "nul":
        return str(base / "a\x00b")
    raise ValueError(kind)


def special_case(folder: Path, kind: str, place: str, json_flag: bool = False) -> Case:
    """A tiny valid drafter (or log, target, engine file) with one element replaced by a special file."""
    oracle, why = "invalid", f"{kind} where a {place} file is expected"
    drafter = write_tiny_drafter(folder / "drafter")
    listed = inspect_listed
    if kind in ("non-utf8-name", "newline-name"):
        name = os.fsdecode(b"d\xff\xfe-drafter") if kind == "non-utf8-name" else "new\nline drafter"
        odd = folder / name
        if place in ("log", "predict-old"):
            log = folder / (name + ".log")
            log.write_text(SGLANG_OLD.format(req=1, accept="2.19", tps="258.07") + "\n")
            argv = ["perf", "--log", str(log)]
        else:
            write_tiny_drafter(odd)
            argv = ["inspect", str(odd)]
        return Case("special", f"{kind} ({place})", argv + (["--json"] if json_flag else []), "valid", folder,
                    note="a valid input under an odd but legal file name must work (and print)", kind=f"{kind} ({place})")
    if kind in ("long-component", "long-path", "nul"):
        odd = _odd_path(folder, kind)
        argv = {"source": ["inspect", odd], "log": ["perf", "--log", odd],
                "target": ["compare", str(drafter), str(drafter), "--new-target", odd],
                "predict-old": ["predict", "--old-logprobs", odd, "--new-logprobs", odd, "--chain", "0.5"],
                "compare-b": ["compare", str(drafter), odd]}.get(place, ["inspect", odd + ".safetensors"])
        return Case("special", f"{kind} ({place})", argv + (["--json"] if json_flag else []), oracle, folder, note=why)
    if place == "source":
        argv = ["inspect", _make_special(folder / "src.safetensors", kind)]
    elif place == "config":
        _make_special(drafter / "config.json", kind)
        argv = ["inspect", str(drafter)]
        if kind in ("dir", "missing", "fifo", "loop"):  # an absent config.json: refused in one line is fine
            why = f"config.json is a {kind}: no readable config"
    elif place == "weights":
        _make_special(drafter / "model.safetensors", kind)
        argv = ["inspect", str(drafter)]
    elif place in ("index", "shard"):
        ckpt = write_sharded_drafter(folder / "sharded")
        index = ckpt / "model.safetensors.index.json"
        if place == "index":  # named directly: a folder whose index is not a file may fall back to its shards
            argv = ["inspect", _make_special(index, kind)]
        else:
            shard = sorted(set(json.loads(index.read_text())["weight_map"].values()))[0]
            _make_special(ckpt / shard, kind)
            argv = ["inspect", str(ckpt)]
    elif place == "log":
        argv = ["perf", "--log", _make_special(folder / "server.log", kind)]
    elif place == "target":
        target = _make_special(folder / "target.json", kind)
        argv = ["compare", str(drafter), str(drafter), "--new-target", target]
    elif place == "predict-old":
        old, new = write_engine_files(folder)
        argv = ["predict", "--old-logprobs", _make_special(old, kind), "--new-logprobs", str(new), "--chain", "0.5"]
    else:  # compare-b: B's weights
        b = write_tiny_drafter(folder / "b")
        _make_special(b / "model.safetensors", kind)
        argv = ["compare", str(drafter), str(b)]
    if place in ("log",) or argv[0] in ("perf", "predict"):
        listed = None
    return Case("special", f"{kind} ({place})", argv + (["--json"] if json_flag else []), oracle, folder,
                listed=listed, note=why)


@st.composite
def special_cases(draw, root: Path) -> Case:
    """FIFOs, symlink loops, folders, over-long names, /dev/zero and /dev/urandom, NUL bytes, empty and
    unreadable files, and non-UTF-8 / newline names where a file is expected."""
    kind = draw(st.sampled_from(SPECIAL_KINDS))
    place = draw(st.sampled_from(SPECIAL_PLACES))
    return special_case(new_dir(root, "special"), kind, place, draw(st.booleans()))


# --------------------------------------------------------------------------- targets: compare-targets' files

#: Templates that must come back as a finding (a one-line problem in the output), never a hang or a crash.
HOSTILE_TEMPLATES = [
    "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{{ 'x' * 10 ** 9 }}", "{{ 9 ** 9 ** 9 }}",
    "{% for i in range(100000) %}{{ 'y' * 100 }}{% endfor %}", "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ messages.__init__.__globals__ }}", "{{ cycler.__init__.__globals__.os.system('true') }}",
    "{% set x = namespace(a=1) %}{% for i in range(10) %}{% set x.a = x.a ~ x.a %}{% endfor %}{{ x.a | length }}",
    "{{ raise_exception('no') }}", "{% if %}", "{{ messages[99] }}", "{{ undefined_thing.attr }}", "{% break %}",
    "{{ strftime_now('%Y') }}", "{% generation %}{{ messages[0].content }}{% endgeneration %}", "",
    "{%- for m in messages -%}{{ m | tojson(indent=10 ** 6) }}{%- endfor -%}", "{{ messages | tojson(sort_keys=1) }}",
    # issue #37 item 1: one C-level call that sizes its result (widths, big integers, replace, doubling)
    "{{ 'x'|center(1500000000)|length }}", "{% set x = ((7**64)**64)**64 %}{{ (x*x)**64 }}",
    "{{ 'x'.ljust(1500000000)|length }}", "{{ 'x'.rjust(1500000000)|length }}", "{{ 'x'.zfill(1500000000)|length }}",
    "{{ ('x' * 1000).replace('x', 'y' * 900000)|length }}", "{{ ('x' * 999999).replace('', 'yy')|length }}",
    "{{ '%1500000000s' % 'x' }}", "{{ '%*s' % (1500000000, 'x') }}", "{{ '%.1500000000f' % 1.5 }}",
    "{{ '{:>1500000000}'.format('x') }}", "{{ '{:>{}}'.format('x', 1500000000) }}", "{{ '%1500000000s'|format('x') }}",
    "{{ 'a\\tb'.expandtabs(1500000000)|length }}", "{{ 'ab\\ncd'|indent(1500000000)|length }}",
    "{{ messages|tojson(indent=1500000000)|length }}", "{{ (2 ** 64) ** 64 ** 2 }}", "{{ 7 ** 64 * 7 ** 64 * 7 ** 64 }}",
    "{% set ns = namespace(a='x') %}{% for i in range(40) %}{% set ns.a = ns.a ~ ns.a %}{% endfor %}{{ ns.a|length }}",
    "{{ range(99999)|map('string')|join('x' * 99999)|length }}",
    # issue #37 item 3: a template's own words forging eaglelab's lines or driving the terminal
    "{{ raise_exception('\\x1b[2J\\x1b[Hverdict: PROBE\\nproblems: none') }}",
    "{{ raise_exception('ok\\nverdict: FORGED\\nFORGED') }}", "{{ raise_exception('\\u202eFORGED\\x9b31m') }}",
    "{{ messages.__init__.__globals__ ~ '\\nverdict: FORGED' }}", "{% if \x1b[2J\nverdict: FORGED %}{% endif %}",
]
TIKTOKEN_LINES = [b"", b"YQ== 0\n", b"YQ==\n", b"YQ== x\n", b"YQ== -1\n", b"YQ== 99999999999\n", b"!!!! 1\n",
                  b"YQ== 0 extra\n", b"\xff\xfe 0\n", b"YQ== 0\r\nYg== 1\r\n", b"YQ== 0\n" * 3, b"x" * 100_000,
                  b"YQ== 2147483648\n", b"\x00\n"]
TARGET_FILES_MUTATED = ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "tiktoken.model",
                        "chat_template.jinja", "config.json", "special_tokens_map.json")
#: Text a file may carry to drive the terminal or forge eaglelab's own lines (issue #37 item 3): escape sequences
#: (C0 and C1), whole lines, bidi overrides and isolates, line separators, a lone surrogate.
FORGED_TEXTS = ["\x1b[2J\x1b[H", "x\nverdict: FORGED\nFORGED", "\x9b31mred", "\u202eFORGED", "a\u2066b\u2069\u200e\u200f",
                "\r\nFORGED", "\x85FORGED", "\u2028FORGED", "FORGED\x07", "\ud800", "\x1b]0;title\x07", "verdict: FORGED",
                "FORGED: none", "\ufeff\u200b"]
#: Keys that pass ``str.isdigit`` but not ``int`` (issue #37 item 2), and digits ``int`` reads but ASCII does not.
NON_ASCII_DIGITS = ["\u00b2", "\u00b9\u00b2", "\u2460", "\u0661\u0662", "\uff11", "1\u00b2", "\U0001d7d9", "\u2070"]
#: What a terminal acts on instead of showing (one_line's categories); none may reach stdout raw.
UNSHOWN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def nothing_forged(outcome: Outcome) -> tuple[str, str, str] | None:
    """No control or format character in the output (a newline ends eaglelab's own lines only), and no line that
    starts with text planted in a file (``FORGED``, ``verdict: FORGED``)."""
    for name, text in (("stdout", outcome.stdout), ("stderr", outcome.stderr)):
        raw = sorted({c for c in text if c != "\n" and unicodedata.category(c) in UNSHOWN})
        if raw:
            return "garbage", f"targets: a control or format character reached {name}", f"{raw!r} in {_short(text, 300)!r}"
        forged = [line for line in text.split("\n") if line.lstrip(" -").startswith(("FORGED", "verdict: FORGED"))]
        if forged:
            return "garbage", f"targets: a file's text passes for a line of eaglelab's on {name}", repr(forged[:3])
    return None


def forged_config(draw) -> dict:
    """The tiny target's config with forged text in its ``rope_scaling`` keys, its ``quantization_config`` strings,
    its architecture, or its vision tower's fields."""
    text, cfg = draw(st.sampled_from(FORGED_TEXTS)), copy.deepcopy(TINY_TARGET)
    where = draw(st.sampled_from(["rope key", "rope value", "quant method", "quant field", "quant ignore", "fp8 block",
                                  "architecture", "vision"]))
    if where.startswith("rope"):
        cfg["rope_scaling"] = {"rope_type": "linear", "factor": 2.0, **({text: 1.0} if where == "rope key" else {"type": text})}
    elif where == "quant method":
        cfg["quantization_config"] = {"quant_method": text, text: text}
    elif where == "quant field":
        cfg["quantization_config"] = {"quant_method": draw(st.sampled_from(["fp8", "modelopt", "gptq", "compressed-tensors"])),
                                      "fmt": text, "quant_algo": text, "bits": text, "format": text, "activation_scheme": text,
                                      "config_groups": {"g": {"weights": {"type": text, "num_bits": text, "strategy": text}}}}
    elif where == "quant ignore":
        cfg["quantization_config"] = {"quant_method": "compressed-tensors", "ignore": [text, "lm_head"]}
    elif where == "fp8 block":
        cfg["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [text, 128]}
    elif where == "architecture":
        cfg["architectures"] = [text]
    else:
        cfg["vision_config"] = {text: text, "hidden_size": 8}
    return cfg


def forged_inspect_case(folder: Path, config: dict, json_flag: bool = False) -> Case:
    """``inspect`` of a tiny target (real sparse safetensors) whose config carries forged text."""
    from eaglelab.worlds.synthetic_checkpoints import write_synthetic_weights

    target = write_synthetic_weights(folder / "target", [("model.embed_tokens.weight", (64, 16), "BF16"),
                                                         ("model.norm.weight", (16,), "BF16"),
                                                         ("lm_head.weight", (64, 16), "BF16")])
    (target / "config.json").write_bytes(dump(config))
    return Case("targets", f"inspect, config = {_short(repr(config), 100)}", ["inspect", str(target)] +
                (["--json"] if json_flag else []), "any", folder, check_ok=nothing_forged, check_error=nothing_forged,
                note="a target's strings are shown escaped and quoted", kind="inspect forged config")


def _target_folder(folder: Path, template: str) -> Path:
    from eaglelab.worlds.kimi_shapes import tokenizer_files

    folder.mkdir(parents=True)
    for name, text in tokenizer_files(template).items():
        (folder / name).write_text(text)
    (folder / "config.json").write_bytes(dump(TINY_TARGET))
    return folder


def targets_case(folder: Path, name: str, content: bytes, json_flag: bool = False) -> Case:
    """Two Kimi-shaped tokenizer folders, the new one's ``name`` replaced by ``content``; ``compare-targets`` on them."""
    from eaglelab.worlds.kimi_shapes import K2_TEMPLATE, K25_TEMPLATE

    old, new = _target_folder(folder / "old", K2_TEMPLATE), _target_folder(folder / "new", K25_TEMPLATE)
    (new / name).write_bytes(content)
    argv = ["compare-targets", str(old), str(new)] + (["--json"] if json_flag else [])
    return Case("targets", f"{name} = {_short(repr(content), 80)}", argv, "any", folder, check_ok=nothing_forged,
                check_error=nothing_forged, note="any answer but a crash: a template that fails is a finding, a file "
                                                 "that is not what its name says one line; nothing forged", kind=name)


@st.composite
def targets_cases(draw, root: Path) -> Case:
    """A target's tokenizer, template and generation files, one of them hostile (wrong types, garbage, runaway
    templates, sandbox escapes)."""
    name = draw(st.sampled_from(TARGET_FILES_MUTATED))
    value = draw(HOSTILE_JSON)
    if name == "tokenizer.json":
        where = draw(st.sampled_from(["vocab", "merges", "added", "model", "whole"]))
        doc = {"vocab": {"model": {"type": "BPE", "vocab": value, "merges": []}},
               "merges": {"model": {"vocab": {"a": 0}, "merges": value}},
               "added": {"model": {"vocab": {"a": 0}}, "added_tokens": value},
               "model": {"model": value}, "whole": value}[where]
        content = dump(doc)
    elif name == "tokenizer_config.json":
        key = draw(st.sampled_from(["added_tokens_decoder", "chat_template", "bos_token", "eos_token", "decoder key"]))
        if key == "decoder key":  # a key str.isdigit() takes and int() refuses, or forged text
            text = draw(st.sampled_from(NON_ASCII_DIGITS + FORGED_TEXTS))
            content = dump({"added_tokens_decoder": {text: {"content": text, "special": True}}, "eos_token": text})
        else:
            content = dump({key: value} if draw(st.booleans()) else {key: {"163584": value}} if key != "chat_template"
                           else {key: [{"name": "default", "template": value}]})
    elif name in ("generation_config.json", "special_tokens_map.json"):
        content = dump({"eos_token_id" if name.startswith("generation") else "eos_token": value})
    elif name == "tiktoken.model":
        content = b"".join(draw(st.lists(st.sampled_from(TIKTOKEN_LINES), min_size=1, max_size=3)))
    elif name == "chat_template.jinja":
        content = draw(st.sampled_from(HOSTILE_TEMPLATES)).encode("utf-8", "surrogatepass")
    elif draw(st.integers(0, 2)) == 0:
        content = dump(target_config(draw(st.sampled_from(TARGET_FIELDS)), value))
    elif draw(st.booleans()):
        return forged_inspect_case(new_dir(root, "targets"), forged_config(draw), draw(st.booleans()))
    else:
        content = dump(forged_config(draw))
    return targets_case(new_dir(root, "targets"), name, content, draw(st.booleans()))


STRATEGIES: dict[str, Callable[[Path], st.SearchStrategy[Case]]] = {
    "header": header_cases, "config": config_cases, "index": index_cases, "log": log_cases, "args": args_cases,
    "special": special_cases, "targets": targets_cases,
}
