"""Checkpoint sources and header-only safetensors reading. Knows nothing of EAGLE.

A *source* is a folder (``config.json`` + ``model.safetensors`` or a sharded set with
``model.safetensors.index.json``), a single ``.safetensors`` file, a shard index file, or a
hub id (``owner/name``). Tensor names, shapes and dtypes come from the safetensors header
alone; no tensor is materialised. Only numpy and the standard library are imported here, so
metadata commands start fast.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from eaglelab.checkpoints.files.config_types import check_config_types
from eaglelab.checkpoints.files.headers import (  # noqa: F401 (re-exported: the reader's public names)
    DTYPE_BITS,
    DTYPE_SIZES,
    MAX_HEADER_BYTES,
    TensorInfo,
    read_safetensors_header,
    validate_header_entries,
)
from eaglelab.checkpoints.files.hub import HubRepo, open_repo
from eaglelab.errors import ConfigError, EaglelabError, HeaderError, HubError, SourceError, UnsafeFormatError
from eaglelab.inputs import open_regular, path_kind, printable, read_json_object, shown

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.ckpt")


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
        hub: for a hub id, the repository as it was read (its commit, each file's header and length):
            tensor bytes are read through it, from the same commit and headers.
    """

    source: str
    kind: str
    config: dict[str, Any] | None
    config_path: str | None
    weight_files: list[str]
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    local: bool = True
    hub: HubRepo | None = field(default=None, repr=False, compare=False)

    @property
    def total_parameters(self) -> int:
        return sum(t.numel for t in self.tensors.values())

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())


def read_json(path: str | Path, error: type[EaglelabError] = ConfigError) -> dict[str, Any]:
    """A JSON object from a regular file (strict JSON, size and depth capped), errors naming the file."""
    return read_json_object(path, error)


def read_config(path: str | Path, where: str | None = None) -> dict[str, Any]:
    """A ``config.json``: strict JSON, and every field eaglelab reads of the right type
    (:func:`eaglelab.checkpoints.files.config_types.check_config_types`)."""
    return check_config_types(read_json(path), where or str(path))


def is_hub_id(source: str) -> bool:
    """True when ``source`` looks like ``owner/name`` (each part at most 96 characters, as on the hub)
    and is not an existing local path."""
    if not _HUB_ID.match(source) or any(len(part) > 96 for part in source.split("/")):
        return False
    try:
        return path_kind(source, SourceError) is None
    except SourceError:
        return False


def shard_path(index_path: Path, name: Any) -> Path:
    """The shard an index names, confined to the index's folder.

    A name must be a relative path without ``..``, and the file it names, symlinks followed, must
    lie inside the folder: an index cannot send eaglelab to read files elsewhere. The one exception
    is a hub cache snapshot (``.../snapshots/<commit>/``), whose files are symlinks into the same
    repository's ``blobs/``.

    Raises:
        SourceError: a name that is not a string, is absolute, climbs out of the folder, or is a
            symlink to a file outside it.
    """
    where = printable(str(index_path))
    try:
        usable = isinstance(name, str) and bool(name) and "\0" not in name and bool(os.fsencode(name))
    except UnicodeEncodeError:
        usable = False
    if not usable:
        raise SourceError(where, f"weight_map value {shown(name)} is not a file name")
    parts = PurePosixPath(name).parts
    if PurePosixPath(name).is_absolute() or ".." in parts or name.startswith("~"):
        raise SourceError(where, f"weight_map names {shown(name)}, outside the index's folder; shards must sit "
                                 "beside their index")
    shard = index_path.parent / name
    try:
        real = shard.resolve()
        roots = [index_path.parent.resolve()]
        if index_path.parent.parent.name == "snapshots":
            roots.append((index_path.parent.parent.parent / "blobs").resolve())
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
        raise SourceError(where, f"weight_map names {shown(name)}, a symlink loop") from None
    if not any(real.is_relative_to(root) for root in roots):
        raise SourceError(where, f"weight_map names {shown(name)}, a symlink to a file outside the index's folder; "
                                 "shards must sit beside their index")
    return shard


def _read_index(index_path: Path) -> tuple[list[Path], dict[str, Path]]:
    """The shards of an index and where it says each tensor is."""
    where = printable(str(index_path))
    index = read_json(index_path, SourceError)
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise SourceError(where, "shard index has no weight_map object")
    placed = {name: shard_path(index_path, shard) for name, shard in weight_map.items()}
    shards = sorted(set(placed.values()))
    missing = [s.name for s in shards if path_kind(s, SourceError) is None]
    if missing:
        raise SourceError(where, f"shard index names missing files: {printable(', '.join(missing[:5]))}")
    return shards, placed


def _folder_weights(folder: Path, optional: bool = False) -> tuple[list[Path], str, dict[str, Path]]:
    index = folder / "model.safetensors.index.json"
    if path_kind(index, SourceError) is not None:
        shards, placed = _read_index(index)
        return shards, "index", placed
    single = folder / "model.safetensors"
    if path_kind(single, SourceError) is not None:
        return [single], "folder", {}
    others = sorted(folder.glob("*.safetensors"))
    if others:
        return others, "folder", {}
    pickles = [p for p in _PICKLE_WEIGHTS if path_kind(folder / p, SourceError) is not None]
    if pickles:
        raise UnsafeFormatError(
            folder,
            f"weights only as {pickles[0]} (pickle); eaglelab never unpickles checkpoints. "
            "Convert once in a trusted environment: "
            "`python -c \"import torch, safetensors.torch as st; "
            "st.save_file(torch.load('pytorch_model.bin', weights_only=True), 'model.safetensors')\"`",
        )
    if optional:
        return [], "folder", {}
    raise SourceError(folder, "folder holds no weights (no model.safetensors, shard index or *.safetensors)")


def local_path(source: str, error: type[EaglelabError] = SourceError) -> Path:
    """A user's path as a :class:`Path`, ``~`` expanded; ``~user`` naming nobody is one line, not a traceback."""
    try:
        return Path(source).expanduser()
    except RuntimeError:
        raise error(printable(source), "names the home folder of a user this machine does not know") from None


def _local_checkpoint(source: str, weights_optional: bool = False) -> Checkpoint:
    path = local_path(source)
    where = printable(str(path))
    what = path_kind(path, SourceError)
    placed: dict[str, Path] = {}
    if what == "folder":
        files, kind, placed = _folder_weights(path, weights_optional)
        config_path = path / "config.json"
    elif what is None:
        raise SourceError(where, "no such file or folder (and not a hub id of the form owner/name)")
    elif path.name.endswith(".safetensors.index.json"):
        (files, placed), kind = _read_index(path), "index"
        config_path = path.parent / "config.json"
    elif path.suffix == ".safetensors":
        files, kind = [path], "file"
        config_path = path.parent / "config.json"
    elif path.suffix in (".bin", ".pt", ".pth", ".ckpt"):
        raise UnsafeFormatError(where, "pickle-based weights; eaglelab reads safetensors only")
    else:
        raise SourceError(where, "not a folder, .safetensors file or shard index")
    tensors: dict[str, TensorInfo] = {}
    for f in files:
        shard_tensors, _ = read_safetensors_header(f)
        for name, info in shard_tensors.items():
            if name in tensors:
                raise HeaderError(printable(str(f)), f"tensor {printable(repr(name))} also appears in "
                                                     f"{printable(tensors[name].file)}")
            tensors[name] = info
    for name, shard in placed.items():
        if name not in tensors or Path(tensors[name].file) != shard:
            held = "no shard" if name not in tensors else printable(Path(tensors[name].file).name)
            raise SourceError(where, f"shard index places tensor {printable(repr(name))} in "
                                     f"{printable(shard.name)}, but {held} holds it")
    config = read_config(config_path) if path_kind(config_path, ConfigError) is not None else None
    return Checkpoint(
        source=source,
        kind=kind,
        config=config,
        config_path=str(config_path) if config is not None else None,
        weight_files=[str(f) for f in files],
        tensors=tensors,
    )


def _hub_checkpoint(repo_id: str, revision: str | None = None, weights_optional: bool = False) -> Checkpoint:
    """Read a hub checkpoint's config and safetensors headers only (range requests, each under one deadline).

    Every file is read through one :class:`~eaglelab.checkpoints.files.hub.HubRepo`: at one commit, each header once.
    """
    repo = open_repo(repo_id, revision)
    with repo.reading():
        from huggingface_hub.errors import EntryNotFoundError

        config, config_path = repo.read_config()
        try:
            files = ["model.safetensors"]
            repo.header("model.safetensors")
        except EntryNotFoundError:  # no single file: a sharded checkpoint, or no weights at all
            index = repo.read_json("model.safetensors.index.json")
            if index is None and weights_optional:
                index = {"weight_map": {}}
            elif index is None:
                raise HubError(repo_id, "holds no model.safetensors or model.safetensors.index.json: no safetensors "
                                        "weights to read") from None
            weight_map = index.get("weight_map")
            if not isinstance(weight_map, dict) or (not weight_map and not weights_optional) or \
                    not all(isinstance(f, str) and f and "/" not in f and f != ".." for f in weight_map.values()):
                raise SourceError(f"{repo_id}/model.safetensors.index.json", "shard index has no usable weight_map "
                                                                             "(file names beside the index)") from None
            files = sorted(set(weight_map.values()))
            for f in files:
                repo.header(f)
    tensors: dict[str, TensorInfo] = {}
    for fname in files:
        header, n = repo.header(fname)
        size = repo.file_size(fname)
        if size is not None and 8 + n > size:
            raise HeaderError(printable(f"{repo_id}/{fname}"), f"not a safetensors file, or truncated: its header length "
                                                               f"runs past the end of the file ({size:,} bytes)")
        for name, info in validate_header_entries(header, printable(f"{repo_id}/{fname}"),
                                                  data_size=None if size is None else size - 8 - n, data_start=8 + n,
                                                  file=fname).items():
            if name in tensors:
                raise HeaderError(printable(f"{repo_id}/{fname}"), f"tensor {printable(repr(name))} also appears in "
                                                                   f"{printable(tensors[name].file)}")
            tensors[name] = info
    return Checkpoint(
        source=repo_id,
        kind="hub",
        config=config,
        config_path=config_path,
        weight_files=files,
        tensors=tensors,
        local=False,
        hub=repo,
    )


def load_checkpoint(source: str | Path, revision: str | None = None, weights_optional: bool = False) -> Checkpoint:
    """Resolve ``source`` and read its config and tensor table, metadata only.

    Args:
        source: folder, ``.safetensors`` file, shard index, or hub id ``owner/name``.
        revision: hub revision (branch, tag or commit) for hub ids.
        weights_optional: a folder or repo with no safetensors weights at all reads as an empty tensor
            table (a target's config and tokenizer files alone); pickled weights are refused all the same.

    Raises:
        SourceError and subclasses, ConfigError: the source cannot be read; the message names
            the file and the problem.
    """
    source = str(source)
    if is_hub_id(source):
        return _hub_checkpoint(source, revision, weights_optional)
    return _local_checkpoint(source, weights_optional)


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
    where = printable(info.file)
    if info.dtype not in np_dtypes:
        raise SourceError(where, f"tensor {printable(repr(info.name))}: dtype {info.dtype} not readable as numpy")
    if info.nbytes > max_bytes or len(info.shape) > 8 or any(d > max_bytes for d in info.shape):
        raise SourceError(where, f"tensor {printable(repr(info.name))} ({info.nbytes} bytes, {len(info.shape)} "
                                 "dimensions) is not a small table; not read here")
    arr = np.empty(info.shape, dtype=np_dtypes[info.dtype])  # aligned: frombuffer views can be unaligned and slow
    if arr.size:  # an empty view cannot be cast to bytes, and there is nothing to read
        read_tensor_into(info, memoryview(arr).cast("B"))
    return arr


#: One read of a tensor's bytes: the kernel's cached copy of each piece is dropped once it is copied out.
READ_CHUNK_BYTES = 256 * 1024 * 1024


def _forget_pages(fh, offset: int, length: int) -> None:
    """Drop the kernel's cached copy of bytes just copied into our own buffer (Linux; a no-op elsewhere).

    A target's heads are several GB (Kimi's two [163840, 7168] heads 4.7 GB in bf16): kept in the page cache beside
    the tensors read from them, they double what the read costs the machine, and the kernel's reclaim of them under
    pressure is what a probe on a 24 GB machine spends its time on.
    """
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None:
        try:
            advise(fh.fileno(), offset, length, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass  # advice only: a file system that refuses it still reads right


def read_tensor_into(info: TensorInfo, buffer: memoryview) -> None:
    """Read one tensor's bytes from its local file into ``buffer`` (``info.nbytes`` long), nothing else of the file.

    Raises:
        SourceError: the file cannot be read; HeaderError: it ends inside the tensor's data.
    """
    where = printable(info.file)
    start, got = info.data_start + info.span[0], 0
    with open_regular(info.file, SourceError) as fh:
        try:
            fh.seek(start)
            while got < info.nbytes:
                n = fh.readinto(buffer[got:got + READ_CHUNK_BYTES])
                if not n:
                    break
                _forget_pages(fh, start + got, n)
                got += n
        except OSError as exc:
            raise SourceError(where, f"cannot read ({exc.strerror or type(exc).__name__})") from None
    if got != info.nbytes:
        raise HeaderError(where, f"tensor {printable(repr(info.name))}: file ends inside its data")
