"""Checkpoint sources and header-only safetensors reading. Knows nothing of EAGLE.

A *source* is a folder (``config.json`` + ``model.safetensors`` or a sharded set with
``model.safetensors.index.json``), a single ``.safetensors`` file, a shard index file, or a
hub id (``owner/name``). Tensor names, shapes and dtypes come from the safetensors header
alone; no tensor is materialised. Only numpy and the standard library are imported here, so
metadata commands start fast.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eaglelab.errors import ConfigError, HeaderError, HubError, SourceError, UnsafeFormatError

#: Bytes per element of each safetensors dtype eaglelab understands.
DTYPE_SIZES: dict[str, int] = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1,
    "U64": 8, "U32": 4, "U16": 2, "U8": 1,
    "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
}

#: Largest header accepted (the safetensors library itself refuses more than 100 MB).
MAX_HEADER_BYTES = 100 * 1024 * 1024

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.ckpt")


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
        return self.numel * DTYPE_SIZES[self.dtype]


@dataclass
class Checkpoint:
    """What a source holds, read from metadata only.

    Attributes:
        source: the string the user gave.
        kind: ``folder``, ``file``, ``index`` or ``hub``.
        config: parsed ``config.json`` (None when the source has none).
        config_path: where the config came from (None when absent).
        weight_files: the safetensors files (local paths, or hub file names).
        tensors: name -> TensorInfo across all shards.
        local: whether tensor bytes can be read from local files.
    """

    source: str
    kind: str
    config: dict[str, Any] | None
    config_path: str | None
    weight_files: list[str]
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    local: bool = True

    @property
    def total_parameters(self) -> int:
        return sum(t.numel for t in self.tensors.values())

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())


def parse_header_json(raw: bytes, where: str) -> dict[str, Any]:
    """Decode a safetensors header's JSON, raising HeaderError on anything malformed."""
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HeaderError(where, f"safetensors header is not valid JSON ({exc})") from None
    if not isinstance(header, dict):
        raise HeaderError(where, "safetensors header is not a JSON object")
    return header


def validate_header_entries(
    header: dict[str, Any], where: str, data_size: int | None, data_start: int = 0
) -> dict[str, TensorInfo]:
    """Check every entry of a decoded header and return its tensors.

    Args:
        header: the decoded header (``__metadata__`` is skipped).
        where: file name for error messages.
        data_size: bytes in the data area, or None when unknown (hub headers).
        data_start: absolute offset of the data area in the file.

    Raises:
        HeaderError: unknown dtype, bad shape, span not equal to shape x dtype size, span
            outside the data area, or two spans overlapping.
    """
    tensors: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= entry.keys():
            raise HeaderError(where, f"tensor {name!r}: entry lacks dtype, shape or data_offsets")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in DTYPE_SIZES:
            raise HeaderError(where, f"tensor {name!r}: unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise HeaderError(where, f"tensor {name!r}: shape {shape!r} is not a list of sizes")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]
        ):
            raise HeaderError(where, f"tensor {name!r}: data_offsets {offsets!r} are not [begin, end]")
        nbytes = math.prod(shape) * DTYPE_SIZES[dtype]
        if offsets[1] - offsets[0] != nbytes:
            raise HeaderError(
                where,
                f"tensor {name!r}: byte span {offsets[1] - offsets[0]} does not match shape "
                f"{list(shape)} x {dtype} ({nbytes} bytes)",
            )
        if data_size is not None and offsets[1] > data_size:
            raise HeaderError(
                where, f"tensor {name!r}: span {offsets} ends past the data area ({data_size} bytes)"
            )
        tensors[name] = TensorInfo(name, tuple(shape), dtype, where, (offsets[0], offsets[1]), data_start)
    spans = sorted((t.span, t.name) for t in tensors.values() if t.span[1] > t.span[0])
    for (prev, prev_name), (cur, cur_name) in zip(spans, spans[1:]):
        if cur[0] < prev[1]:
            raise HeaderError(where, f"tensors {prev_name!r} and {cur_name!r} overlap in the data area")
    return tensors


def read_safetensors_header(path: str | Path) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """Read and validate a local safetensors file's header without touching tensor data.

    Args:
        path: the ``.safetensors`` file.

    Returns:
        ``(tensors, metadata)``: name -> TensorInfo, and the ``__metadata__`` strings.

    Raises:
        SourceError: the file does not exist.
        HeaderError: truncated file, header length beyond the file or over the cap,
            malformed JSON, unknown dtype, or spans that do not fit.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            prefix = fh.read(8)
            if len(prefix) < 8:
                raise HeaderError(path, f"truncated file ({size} bytes, a header needs at least 8)")
            (n,) = struct.unpack("<Q", prefix)
            if n > MAX_HEADER_BYTES:
                raise HeaderError(path, f"header claims {n} bytes, over the {MAX_HEADER_BYTES}-byte cap")
            if 8 + n > size:
                raise HeaderError(path, f"header length {n} runs past the end of the file ({size} bytes)")
            raw = fh.read(n)
    except FileNotFoundError:
        raise SourceError(path, "no such file") from None
    except IsADirectoryError:
        raise SourceError(path, "is a folder, expected a .safetensors file") from None
    header = parse_header_json(raw, str(path))
    metadata = header.get("__metadata__") or {}
    tensors = validate_header_entries(header, str(path), data_size=size - 8 - n, data_start=8 + n)
    return tensors, metadata


def read_json(path: str | Path, error: type[Exception] = ConfigError) -> dict[str, Any]:
    """Read a JSON object from ``path``, raising a typed error naming the file."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(path, "no such file") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(path, f"not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise error(path, "expected a JSON object")
    return obj


def is_hub_id(source: str) -> bool:
    """True when ``source`` looks like ``owner/name`` and is not an existing local path."""
    return bool(_HUB_ID.match(source)) and not Path(source).exists()


def _read_index(index_path: Path) -> list[Path]:
    index = read_json(index_path, SourceError)
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise SourceError(index_path, "shard index has no weight_map")
    shards = sorted(set(weight_map.values()))
    missing = [s for s in shards if not (index_path.parent / s).is_file()]
    if missing:
        raise SourceError(index_path, f"shard index names missing files: {', '.join(missing[:5])}")
    return [index_path.parent / s for s in shards]


def _folder_weights(folder: Path) -> tuple[list[Path], str]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return _read_index(index), "index"
    single = folder / "model.safetensors"
    if single.is_file():
        return [single], "folder"
    others = sorted(folder.glob("*.safetensors"))
    if others:
        return others, "folder"
    pickles = [p for p in _PICKLE_WEIGHTS if (folder / p).exists()]
    if pickles:
        raise UnsafeFormatError(
            folder,
            f"weights only as {pickles[0]} (pickle); eaglelab never unpickles checkpoints. "
            "Convert once in a trusted environment: "
            "`python -c \"import torch, safetensors.torch as st; "
            "st.save_file(torch.load('pytorch_model.bin', weights_only=True), 'model.safetensors')\"`",
        )
    raise SourceError(folder, "folder holds no weights (no model.safetensors, shard index or *.safetensors)")


def _local_checkpoint(source: str) -> Checkpoint:
    path = Path(source).expanduser()
    if path.is_dir():
        files, kind = _folder_weights(path)
        config_path = path / "config.json"
    elif path.name.endswith(".safetensors.index.json"):
        files, kind = _read_index(path), "index"
        config_path = path.parent / "config.json"
    elif path.suffix == ".safetensors":
        if not path.is_file():
            raise SourceError(path, "no such file")
        files, kind = [path], "file"
        config_path = path.parent / "config.json"
    elif path.suffix in (".bin", ".pt", ".pth", ".ckpt"):
        raise UnsafeFormatError(path, "pickle-based weights; eaglelab reads safetensors only")
    elif path.exists():
        raise SourceError(path, "not a folder, .safetensors file or shard index")
    else:
        raise SourceError(path, "no such file or folder (and not a hub id of the form owner/name)")
    tensors: dict[str, TensorInfo] = {}
    for f in files:
        shard_tensors, _ = read_safetensors_header(f)
        for name, info in shard_tensors.items():
            if name in tensors:
                raise HeaderError(f, f"tensor {name!r} also appears in {tensors[name].file}")
            tensors[name] = info
    config = read_json(config_path) if config_path.is_file() else None
    return Checkpoint(
        source=source,
        kind=kind,
        config=config,
        config_path=str(config_path) if config is not None else None,
        weight_files=[str(f) for f in files],
        tensors=tensors,
    )


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _hub_checkpoint(repo_id: str, revision: str | None = None) -> Checkpoint:
    """Read a hub checkpoint's config and safetensors headers only (HTTP range requests)."""
    if _hub_offline():
        raise HubError(repo_id, "HF_HUB_OFFLINE is set, so hub ids cannot be read; pass a local folder")
    try:
        from huggingface_hub import get_safetensors_metadata, hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError
    except ImportError as exc:  # pragma: no cover - dependency of the package
        raise HubError(repo_id, f"huggingface_hub is not installed ({exc})") from None
    try:
        try:
            config_path = hf_hub_download(repo_id, "config.json", revision=revision, etag_timeout=10)
            config = read_json(config_path)
        except EntryNotFoundError:
            config_path, config = None, None
        meta = get_safetensors_metadata(repo_id, revision=revision)
    except (ConfigError, SourceError):
        raise
    except Exception as exc:  # network, auth, missing repo: one clear line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise HubError(repo_id, f"cannot read from the hub: {first}") from None
    tensors: dict[str, TensorInfo] = {}
    for fname, fmeta in meta.files_metadata.items():
        header = {
            name: {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": list(t.data_offsets)}
            for name, t in fmeta.tensors.items()
        }
        tensors.update(validate_header_entries(header, f"{repo_id}/{fname}", data_size=None))
    return Checkpoint(
        source=repo_id,
        kind="hub",
        config=config,
        config_path=config_path,
        weight_files=sorted(meta.files_metadata),
        tensors=tensors,
        local=False,
    )


def load_checkpoint(source: str | Path, revision: str | None = None) -> Checkpoint:
    """Resolve ``source`` and read its config and tensor table, metadata only.

    Args:
        source: folder, ``.safetensors`` file, shard index, or hub id ``owner/name``.
        revision: hub revision (branch, tag or commit) for hub ids.

    Raises:
        SourceError and subclasses, ConfigError: the source cannot be read; the message names
            the file and the problem.
    """
    source = str(source)
    if is_hub_id(source):
        return _hub_checkpoint(source, revision)
    return _local_checkpoint(source)


def read_small_tensor(info: TensorInfo, max_bytes: int = 64 * 1024 * 1024):
    """Read one small tensor's bytes into a numpy array (for d2t / t2d invariants).

    Args:
        info: a TensorInfo from a local file.
        max_bytes: refuse larger tensors; this is not a weight loader.

    Returns:
        numpy array of ``info.shape`` (int64 for I64, bool for BOOL...).
    """
    import numpy as np

    np_dtypes = {"I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?",
                 "F32": "<f4", "F64": "<f8", "F16": "<f2"}
    if info.dtype not in np_dtypes:
        raise SourceError(info.file, f"tensor {info.name!r}: dtype {info.dtype} not readable as numpy")
    if info.nbytes > max_bytes:
        raise SourceError(info.file, f"tensor {info.name!r} is {info.nbytes} bytes, too large to read here")
    arr = np.empty(info.shape, dtype=np_dtypes[info.dtype])  # aligned: frombuffer views can be unaligned and slow
    with open(info.file, "rb") as fh:
        fh.seek(info.data_start + info.span[0])
        got = fh.readinto(memoryview(arr).cast("B")) if info.nbytes else 0
    if got != info.nbytes:
        raise HeaderError(info.file, f"tensor {info.name!r}: file ends inside its data")
    return arr
