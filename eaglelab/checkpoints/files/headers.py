"""The safetensors header, read exactly as strictly as the safetensors library reads it.

A file is valid here if and only if ``safetensors.safe_open`` accepts it (the property tests hold
the two to each other on generated and mutated files). The library's rules (its Rust reader,
``serde_json`` underneath), in eaglelab's words:

- an 8-byte little-endian header length ``n`` of at most 100,000,000, then ``n`` bytes of UTF-8
  JSON, then the data area; the file ends exactly where the last tensor's bytes end;
- the JSON is one object; ``__metadata__`` (at most once) is null or an object of strings; every
  other key is a tensor whose entry is ``{"dtype", "shape", "data_offsets"}`` (unknown keys
  ignored, the three at most once each) or the same three as a list, in that order;
- ``dtype`` is one of the library's names (or ``{"NAME": null}``, serde's other spelling of it);
  sizes and offsets are integers in ``[0, 2^64)``: no floats, no ``-0``, no booleans;
- strings hold no lone surrogate, numbers are finite (as doubles), nesting is under 128 levels;
- sorted by offsets, the tensors tile the data area from byte 0 with no gap and no overlap, each
  span exactly ``prod(shape) x bits(dtype) / 8`` bytes, computed without overflowing 64 bits.

Only the standard library is used: metadata commands never import torch.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglelab.errors import HeaderError, SourceError
from eaglelab.inputs import json_type, open_regular, printable, shown

#: Bits per element of every dtype safetensors knows (sub-byte types pack several per byte).
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8,
    "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
    "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}
#: Bytes per element, for the dtypes of whole bytes.
DTYPE_SIZES: dict[str, int] = {k: v // 8 for k, v in DTYPE_BITS.items() if v % 8 == 0}

#: Largest header safetensors accepts (its own constant, 10^8 bytes, not 100 MiB).
MAX_HEADER_BYTES = 100_000_000
#: Deepest nesting serde_json accepts as safetensors calls it (its recursion limit is 128).
MAX_HEADER_DEPTH = 127
_U64 = 2**64
_FIELDS = ("dtype", "shape", "data_offsets")


@dataclass(slots=True)
class TensorInfo:
    """One tensor as its safetensors header describes it.

    Attributes:
        name: key in the state dict.
        shape: tensor shape.
        dtype: safetensors dtype string (``BF16``, ``I64``, ``BOOL``...).
        file: the file (or hub file name) holding it.
        span: ``(begin, end)`` byte offsets relative to the start of the data area.
        data_start: absolute file offset of the data area (8 + header length).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    file: str
    span: tuple[int, int]
    data_start: int = 0

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BITS[self.dtype] // 8


class _Object(dict):
    """A JSON object that remembers which of its keys appeared more than once (the last value is kept) and the
    values it replaced: serde reads every one of them, so a malformed earlier value fails the file."""

    repeated: frozenset[str] = frozenset()
    shadowed: tuple[tuple[str, Any], ...] = ()


class _Invalid(ValueError):
    pass


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        obj.repeated = frozenset(k for k, _ in pairs if k in seen or seen.add(k))
        obj.shadowed = tuple((k, v) for k, v in pairs if k in obj.repeated and obj[k] is not v)
    return obj


def _integer(text: str) -> int | float:
    # serde_json reads -0 as a float, and an integer beyond 64 bits as a double (which then is not a size)
    if text == "-0" or len(text) > 21:
        return _finite(text)
    value = int(text)
    return value if -(2**63) <= value < _U64 else float(text)


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _Invalid(f"number {text[:30]} out of range")
    return value


def _no_constant(name: str):
    raise _Invalid(f"{name} is not JSON")


def _check_tree(obj: Any) -> None:
    """Nesting depth and lone surrogates, anywhere in the document (serde_json refuses both everywhere)."""
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise _Invalid("a string holds a lone surrogate escape") from None
        elif isinstance(value, (dict, list)):
            if depth > MAX_HEADER_DEPTH:
                raise _Invalid(f"JSON nested deeper than {MAX_HEADER_DEPTH} levels")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack.extend((k, depth) for k in (value if isinstance(value, dict) else ()))
            stack.extend((v, depth + 1) for _, v in items)


def parse_header_json(raw: bytes, where: str) -> dict[str, Any]:
    """Decode a safetensors header's JSON exactly as strictly as safetensors.

    Raises:
        HeaderError: not UTF-8, not JSON, a NaN / infinite / out-of-range number, a lone
            surrogate, nesting of 128 levels or more, or not an object.
    """
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_object, parse_int=_integer,
                            parse_float=_finite, parse_constant=_no_constant)
        _check_tree(header)
    except UnicodeDecodeError as exc:
        raise HeaderError(where, f"safetensors header is not valid UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise HeaderError(where, f"safetensors header is not valid JSON ({exc.msg} at column {exc.colno})") from None
    except _Invalid as exc:
        raise HeaderError(where, f"safetensors header is not valid JSON ({exc})") from None
    except RecursionError:
        raise HeaderError(where, f"safetensors header nests deeper than {MAX_HEADER_DEPTH} levels") from None
    if not isinstance(header, dict):
        raise HeaderError(where, f"safetensors header is {json_type(header)}, not a JSON object")
    return header


def _size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _U64


def _entry(name: str, entry: Any, where: str) -> tuple[str, list[int], list[int]]:
    """``(dtype, shape, data_offsets)`` of one tensor entry, in either of serde's spellings."""
    label = f"tensor {printable(repr(name))}"
    if isinstance(entry, list):
        if len(entry) != 3:
            raise HeaderError(where, f"{label}: entry is a list of {len(entry)}, not [dtype, shape, data_offsets]")
        dtype, shape, offsets = entry
    elif isinstance(entry, dict):
        missing = [k for k in _FIELDS if k not in entry]
        if missing:
            raise HeaderError(where, f"{label}: entry lacks {', '.join(missing)}")
        twice = [k for k in _FIELDS if k in getattr(entry, "repeated", ())]
        if twice:
            raise HeaderError(where, f"{label}: field {twice[0]!r} appears twice")
        dtype, shape, offsets = (entry[k] for k in _FIELDS)
    else:
        raise HeaderError(where, f"{label}: entry is {json_type(entry)}, not an object")
    if isinstance(dtype, dict) and len(dtype) == 1 and next(iter(dtype.values())) is None:
        dtype = next(iter(dtype))  # serde's map spelling of a unit variant: {"F32": null}
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise HeaderError(where, f"{label}: unknown dtype {shown(dtype)}")
    if not isinstance(shape, list) or not all(map(_size, shape)):
        raise HeaderError(where, f"{label}: shape {shown(shape)} is not a list of sizes")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_size, offsets)):
        raise HeaderError(where, f"{label}: data_offsets {shown(offsets)} are not [begin, end]")
    return dtype, shape, offsets


def _span_bytes(shape: list[int], dtype: str, label: str, where: str) -> int:
    numel = 1
    for dim in shape:  # left to right, as safetensors multiplies: an overflow before a 0 still counts
        numel *= dim
        if numel >= _U64:
            raise HeaderError(where, f"{label}: shape {shown(shape)} overflows 64 bits")
    bits = numel * DTYPE_BITS[dtype]
    if bits >= _U64:
        raise HeaderError(where, f"{label}: shape {shown(shape)} x {dtype} overflows 64 bits")
    if bits % 8:
        raise HeaderError(where, f"{label}: {numel} x {dtype} is not a whole number of bytes")
    return bits // 8


def validate_header_entries(header: dict[str, Any], where: str, data_size: int | None,
                            data_start: int = 0, file: str | None = None) -> dict[str, TensorInfo]:
    """Check every entry of a decoded header, and the tiling of the data area, as safetensors does.

    Args:
        header: the decoded header.
        where: file name for messages (printable: control characters escaped).
        data_size: bytes in the data area, or None when unknown (a hub header read by range).
        data_start: absolute offset of the data area in the file.
        file: the file's path as the file system knows it, kept in each TensorInfo to read it
            later (default ``where``: a hub file name). Never the printable form: a path with a
            tab or a non-UTF-8 byte names another file once escaped.

    Returns:
        name -> TensorInfo.

    Raises:
        HeaderError: a malformed ``__metadata__`` or entry, a span that is not shape x dtype,
            a gap or overlap between tensors, or data bytes after the last tensor.
    """
    if "__metadata__" in getattr(header, "repeated", ()):
        raise HeaderError(where, "'__metadata__' appears twice in the safetensors header")
    meta = header.get("__metadata__")
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise HeaderError(where, "'__metadata__' is not an object of strings")
    for name, entry in getattr(header, "shadowed", ()):  # a repeated name: each value is read, the last kept
        _entry(name, entry, where)
    tensors: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, offsets = _entry(name, entry, where)
        label = f"tensor {printable(repr(name))}"
        nbytes = _span_bytes(shape, dtype, label, where)
        if offsets[1] < offsets[0] or offsets[1] - offsets[0] != nbytes:
            raise HeaderError(where, f"{label}: byte span {shown(offsets)} does not hold shape {shown(shape)} x "
                                     f"{dtype} ({nbytes} bytes)")
        tensors[name] = TensorInfo(name, tuple(shape), dtype, where if file is None else file,
                                   (offsets[0], offsets[1]), data_start)
    end = 0
    for info in sorted(tensors.values(), key=lambda t: t.span):
        if info.span[0] != end:
            what = "overlaps the tensor before it" if info.span[0] < end else f"leaves a gap of {info.span[0] - end} bytes"
            raise HeaderError(where, f"tensor {printable(repr(info.name))} {what} in the data area")
        end = info.span[1]
    if data_size is not None and end != data_size:
        extra = f"{data_size - end} bytes after the last tensor" if end < data_size else \
            f"tensors need {end} bytes, the file holds {data_size}"
        raise HeaderError(where, f"data area does not match the header: {extra}")
    return tensors


def read_safetensors_header(path: str | Path) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """Read and validate a local safetensors file's header without touching tensor data.

    Args:
        path: the ``.safetensors`` file (a regular file; anything else is refused without blocking).

    Returns:
        ``(tensors, metadata)``: name -> TensorInfo, and the ``__metadata__`` strings.

    Raises:
        SourceError: the file cannot be opened (missing, special file, symlink loop...).
        HeaderError: anything safetensors itself would refuse; the message never quotes the
            file's bytes (an 8-byte length that is really text is not printed as a number).
    """
    where = printable(str(path))
    with open_regular(path, SourceError) as fh:
        try:
            size, n, raw = _read_header_bytes(fh, where)
        except OSError as exc:  # a file that stats as regular but cannot be read (/proc, a failing disk)
            raise SourceError(where, f"cannot read ({exc.strerror or type(exc).__name__})") from None
    header = parse_header_json(raw, where)
    tensors = validate_header_entries(header, where, data_size=size - 8 - n, data_start=8 + n, file=str(path))
    return tensors, dict(header.get("__metadata__") or {})


def _read_header_bytes(fh, where: str) -> tuple[int, int, bytes]:
    """``(file size, header length n, the n header bytes)``, checking the length field as safetensors does."""
    size = fh.seek(0, 2)
    fh.seek(0)
    prefix = fh.read(8)
    if len(prefix) < 8:
        raise HeaderError(where, f"truncated file ({size} bytes; a safetensors file starts with an 8-byte length)")
    (n,) = struct.unpack("<Q", prefix)
    if n > MAX_HEADER_BYTES:  # the number itself is not printed: it may be any 8 bytes of a file that is not ours
        raise HeaderError(where, f"not a safetensors file: its header length is over the {MAX_HEADER_BYTES:,}-byte limit")
    if 8 + n > size:
        raise HeaderError(where, f"not a safetensors file, or truncated: its header length runs past the end of the "
                                 f"file ({size:,} bytes)")
    return size, n, fh.read(n)
