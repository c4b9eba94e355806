"""Everything eaglelab reads from outside passes here first: files, JSON, numbers, fields.

The rules, one place for all readers (configs, shard indexes, safetensors headers, logs, engine
files, command-line numbers):

- only regular files are opened, and never with a blocking open (a FIFO or device where a file is
  expected is refused at once, not waited on); symlink loops, over-long names, NUL bytes and
  permission problems become one-line errors naming the path;
- sizes are capped before reading, JSON nesting depth and integer length are capped while parsing;
- JSON is strict: ``NaN`` / ``Infinity`` are not JSON and are refused;
- a field is checked for its type and range before use (a boolean is not an integer, a string is
  not a list of layer ids) and never silently coerced;
- a message never echoes a file's bytes, and is always one line.

Only the standard library is imported, so metadata commands start fast.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from eaglelab.errors import EaglelabError

#: Deepest JSON nesting accepted in configs and indexes (real configs nest three or four levels).
MAX_JSON_DEPTH = 64
#: Longest integer literal accepted in a config (digits); sizes fit in far fewer.
MAX_INT_DIGITS = 40
#: Largest config, shard index or calibration file read.
MAX_JSON_BYTES = 64 * 1024 * 1024
#: Largest integer field accepted (sizes, layer counts, token ids): 2^53, exact as a float.
MAX_FIELD_INT = 2**53

#: Unicode categories a terminal acts on instead of showing: controls (C0, DEL, C1: escape sequences, line
#: breaks), format characters (bidi overrides and isolates, zero-width marks), line and paragraph
#: separators, lone surrogates.
_UNSHOWN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
#: A plain name (a config key, a tensor name, a method): shown bare, it cannot pass for a line of eaglelab's.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.+/-]+")


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def one_line(text: str) -> str:
    """``text`` with line breaks and other control characters escaped, so it prints as one line.

    Escaped: C0 and C1 controls, DEL, Unicode format characters (bidi overrides such as U+202E, the
    isolates U+2066-2069, U+200E/F), line and paragraph separators, lone surrogates, as ``\\x1b`` /
    ``\\u202e``; every other character stays as it is.
    """
    text = str(text)
    if text.isprintable():
        return text
    return "".join(_escape(c) if unicodedata.category(c) in _UNSHOWN else c for c in text)


def unshown_character(text: str) -> tuple[int, str] | None:
    """The first character of ``text`` a terminal or an editor acts on instead of showing (a control, format,
    separator character or lone surrogate: a line break, ESC, a bidi override), with its position; None if none.

    What a generated script or a notebook's checkpoint name refuses: quoted, such a character is still data to
    bash, but a reader sees another line or another order of letters than the program runs.
    """
    text = str(text)
    if text.isprintable():
        return None
    return next(((i, c) for i, c in enumerate(text) if unicodedata.category(c) in _UNSHOWN), None)


def printable(text: str) -> str:
    """``text`` safe for a terminal: control, format and separator characters and lone surrogates escaped."""
    text = one_line(text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def quoted(value: Any, limit: int | None = None) -> str:
    """A value read from a file, for a line eaglelab prints: escaped, and quoted unless it is a plain name.

    A string of name characters only (letters, digits, ``_ . + / -``) is shown as it is; any other string in
    Python's quotes (``'verdict: PROBE'``), so that no file's text can pass for a line, a verdict or a word of
    eaglelab's own; other values as JSON. Control and format characters are escaped (:func:`printable`).
    ``limit``: cut to that many characters (``...`` marks the cut).
    """
    if isinstance(value, str):
        text = value if _PLAIN_NAME.fullmatch(value) else repr(value)
    else:
        text = json.dumps(value, default=str)
    if limit is not None and len(text) > limit:
        text = text[: max(limit - 3, 0)] + "..."
    return printable(text)


def is_ascii_digits(text: Any) -> bool:
    """Whether ``text`` is a string of ASCII digits ``0-9`` only (``str.isdigit`` also takes ``²``, ``٣``, ...,
    which ``int`` refuses): the check before ``int()`` of a number read from outside."""
    return isinstance(text, str) and text.isascii() and text.isdigit()


def _os_problem(exc: OSError | ValueError) -> str:
    """A short description of why a path cannot be opened."""
    if isinstance(exc, UnicodeError):
        return "the path cannot be encoded as a file name (a lone surrogate?)"
    if isinstance(exc, ValueError):  # os functions refuse an embedded NUL byte this way
        return "the path contains a NUL byte"
    return {
        errno.ENOENT: "no such file",
        errno.EISDIR: "is a folder, expected a file",
        errno.ENOTDIR: "a part of the path is not a folder",
        errno.ELOOP: "too many levels of symbolic links (a symlink loop?)",
        errno.ENAMETOOLONG: "file name too long",
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.ENXIO: "no device behind this special file",
    }.get(exc.errno, exc.strerror or type(exc).__name__)


def path_kind(path: str | Path, error: type[EaglelabError]) -> str | None:
    """What ``path`` is: ``"file"`` (regular), ``"folder"``, ``"other"`` (FIFO, device, socket), or None.

    Symlinks are followed (a hub cache's files are symlinks into its blob store).

    Raises:
        error: the path cannot be examined (symlink loop, name too long, NUL byte, no permission).
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    except (OSError, ValueError) as exc:
        raise error(printable(str(path)), _os_problem(exc)) from None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    return "other"


def _special_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: str | Path, error: type[EaglelabError]):
    """Open ``path`` for binary reading, only if it is a regular file, without ever blocking.

    The open itself is non-blocking (a FIFO with no writer would otherwise wait forever); the
    file type is checked on the open descriptor, so nothing can swap the file in between.

    Returns:
        a binary file object (the caller closes it; use it in a ``with``).

    Raises:
        error: missing, a folder, a FIFO / device / socket, a symlink loop, an over-long name,
            a NUL byte in the path, or no permission; the message names the path.
    """
    where = printable(str(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError) as exc:
        raise error(where, _os_problem(exc)) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise error(where, "is a folder, expected a file")
        if not stat.S_ISREG(mode):
            raise error(where, f"is {_special_kind(mode)}, expected a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | Path, error: type[EaglelabError], limit: int, what: str = "file") -> bytes:
    """The whole of a regular file, refused when larger than ``limit`` bytes."""
    with open_regular(path, error) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > limit:
            raise error(printable(str(path)), f"{what} is {size:,} bytes, over the {limit:,}-byte cap")
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise error(printable(str(path)), f"cannot read ({_os_problem(exc)})") from None
    if len(data) > limit:  # grew while reading
        raise error(printable(str(path)), f"{what} is over the {limit:,}-byte cap")
    return data


def iter_lines(path: str | Path, error: type[EaglelabError], max_line: int) -> Iterator[tuple[int, bytes, bool]]:
    """The lines of a regular file as bytes, streamed: ``(line_no, line, cut)``.

    A line longer than ``max_line`` bytes is returned cut to its first ``max_line`` bytes with
    ``cut=True`` (the rest is skipped), so one enormous line costs time linear in its length
    and memory bounded by ``max_line``.
    """
    def readline(fh, size: int) -> bytes:
        try:
            return fh.readline(size)
        except OSError as exc:  # a file that stats as regular but cannot be read (/proc, a failing disk)
            raise error(printable(str(path)), f"cannot read ({_os_problem(exc)})") from None

    with open_regular(path, error) as fh:
        n = 0
        while line := readline(fh, max_line + 1):
            n += 1
            cut = len(line) > max_line and not line.endswith(b"\n")
            if cut:
                while (rest := readline(fh, 1 << 20)) and not rest.endswith(b"\n"):
                    pass
                line = line[:max_line]
            yield n, line, cut


# --------------------------------------------------------------------------- JSON

class _JsonLimit(ValueError):
    """A JSON document beyond eaglelab's caps (raised while parsing)."""


def _reject_constant(name: str):
    raise _JsonLimit(f"{name} is not valid JSON (numbers must be finite)")


def _parse_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _JsonLimit(f"an integer with {digits} digits")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _JsonLimit(f"number {text[:40]} is out of range")
    return value


def json_depth(obj: Any) -> int:
    """Nesting depth of a parsed JSON value (a scalar is 0, ``[]`` is 1), without recursion."""
    depth, stack = 0, [(obj, 1)]
    while stack:
        value, d = stack.pop()
        if isinstance(value, dict):
            depth = max(depth, d)
            stack.extend((v, d + 1) for v in value.values())
        elif isinstance(value, list):
            depth = max(depth, d)
            stack.extend((v, d + 1) for v in value)
    return depth


def loads_json(data: bytes | str, where: str, error: type[EaglelabError], max_depth: int = MAX_JSON_DEPTH,
               allow_nan: bool = False) -> Any:
    """Strict JSON: UTF-8, finite numbers, integers of at most 40 digits, nesting at most ``max_depth``.

    ``allow_nan``: also take ``NaN`` / ``Infinity``, as Python's json writes them: only for a cache of
    eaglelab's own whose records hold "no value reached" as NaN (the drift sweep's), never for a
    file a user or another program hands in.

    Raises:
        error: naming ``where`` and the problem (never the document's bytes beyond the parser's
            own position message).
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        obj = json.loads(text, parse_constant=float if allow_nan else _reject_constant, parse_int=_parse_int,
                         parse_float=float if allow_nan else _parse_float)
    except UnicodeDecodeError as exc:
        raise error(where, f"not valid UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise error(where, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except _JsonLimit as exc:
        raise error(where, f"not usable JSON: {exc}") from None
    except RecursionError:
        raise error(where, f"JSON nested deeper than {max_depth} levels") from None
    if json_depth(obj) > max_depth:
        raise error(where, f"JSON nested deeper than {max_depth} levels")
    return obj


def loads_json_object(data: bytes | str, where: str, error: type[EaglelabError], allow_nan: bool = False) -> dict[str, Any]:
    """Strict JSON (:func:`loads_json`) that must be an object.

    Raises:
        error: not strict JSON, or not an object.
    """
    obj = loads_json(data, where, error, allow_nan=allow_nan)
    if not isinstance(obj, dict):
        raise error(where, f"expected a JSON object, found {json_type(obj)}")
    return obj


def read_json_object(path: str | Path, error: type[EaglelabError], limit: int = MAX_JSON_BYTES,
                     allow_nan: bool = False) -> dict[str, Any]:
    """A JSON object from a regular file (configs, shard indexes, calibration files).

    Raises:
        error: the file cannot be read, is over ``limit`` bytes, is not strict JSON, or is not an object.
    """
    where = printable(str(path))
    return loads_json_object(read_bytes(path, error, limit, "JSON file"), where, error, allow_nan=allow_nan)


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type (for messages that must not echo the value)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def shown(value: Any, limit: int = 60) -> str:
    """A value for a message: short, one line, printable."""
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return printable(text if len(text) <= limit else text[: limit - 3] + "...")


# --------------------------------------------------------------------------- typed fields

_ABSENT = object()


def field_int(obj: dict[str, Any], key: str, where: str, error: type[EaglelabError], default: Any = _ABSENT,
              low: int = 1, high: int = MAX_FIELD_INT) -> Any:
    """An integer field in ``[low, high]`` (JSON ``true`` is not an integer); ``default`` when absent or null.

    Raises:
        error: the field is missing without a default, or not an integer in range.
    """
    value = obj.get(key)
    if value is None:
        if default is _ABSENT:
            raise error(where, f"field {key!r} is missing (an integer is needed)")
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise error(where, f"field {key!r} must be an integer in [{low}, {high:.3g}], got {shown(value)}")
    return value


def field_number(obj: dict[str, Any], key: str, where: str, error: type[EaglelabError], default: Any = _ABSENT,
                 low: float = 0.0, high: float = math.inf, low_open: bool = True) -> Any:
    """A finite number field (integer or float, not boolean) above ``low`` (or at it when not ``low_open``)."""
    value = obj.get(key)
    if value is None:
        if default is _ABSENT:
            raise error(where, f"field {key!r} is missing (a number is needed)")
        return default
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and \
        (value > low if low_open else value >= low) and value <= high
    if not ok:
        bound = f"({low:g}" if low_open else f"[{low:g}"
        raise error(where, f"field {key!r} must be a number in {bound}, {high:g}], got {shown(value)}")
    return float(value)
