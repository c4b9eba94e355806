"""Built artefacts with a manifest: build once, verify on reuse, rebuild when corrupt or stale.

A manifest (``manifest.json`` in the artefact folder) records the parameters that made the
artefact and each file's size and sha256. :func:`cached_build` reuses the folder only when
the parameters are equal and every file checks out; otherwise it rebuilds into a temporary
folder and renames it into place, so a crash never leaves a half-built artefact behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eaglelab.atomic import write_json_atomic
from eaglelab.errors import ConfigError, OutputError, OverwriteError
from eaglelab.inputs import is_ascii_digits, read_json_object
from eaglelab.outputs import PLACEHOLDERS, make_folder, output_path, where

MANIFEST = "manifest.json"


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def write_manifest(folder: Path, params: dict[str, Any], extra: dict[str, Any] | None = None) -> dict:
    """Record params and every file's size and sha256 under ``folder``."""
    files = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            files[str(p.relative_to(folder))] = {"size": p.stat().st_size, "sha256": sha256_file(p)}
    manifest = {"params": params, "files": files, "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                **(extra or {})}
    write_json_atomic(folder / MANIFEST, manifest)
    return manifest


def read_manifest(folder: Path) -> dict | None:
    """The folder's manifest (None when it has none or it is unreadable), read through :mod:`eaglelab.inputs`."""

    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = read_json_object(path, ConfigError)
    except ConfigError:
        return None
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(isinstance(m, dict) and isinstance(m.get("size"), int)
                                              and isinstance(m.get("sha256"), str) for m in files.values()):
        return None
    return manifest


def verify_manifest(folder: Path, params: dict[str, Any]) -> tuple[bool, str]:
    """(ok, reason): parameters equal and every file present with its recorded size and hash."""
    if not (folder / MANIFEST).is_file():
        return False, "no manifest"
    manifest = read_manifest(folder)
    if manifest is None:
        return False, "manifest unreadable"
    if json.loads(json.dumps(params)) != manifest.get("params"):
        return False, "built with other parameters"
    for rel, meta in manifest["files"].items():
        p = folder / rel
        if not p.is_file():
            return False, f"{rel} missing"
        if p.stat().st_size != meta["size"] or sha256_file(p) != meta["sha256"]:
            return False, f"{rel} corrupted (size or sha256 differs)"
    return True, "ok"


def check_replaceable(folder: Path) -> None:
    """Refuse to replace a folder that holds files a build did not write (a user's folder given as ``--out``).

    A build replaces only a folder it made: missing, empty, or with a manifest listing every file
    in it. Anything else (a folder without a manifest, an unreadable manifest, files the manifest
    does not list) is one line, and nothing is moved or deleted.

    Raises:
        OverwriteError: naming the folder and what in it is not the build's.
        OutputError: the path is a file.
    """

    if not folder.exists() and not folder.is_symlink():
        return
    if not folder.is_dir() or folder.is_symlink():
        raise OutputError(where(folder), "exists and is not a folder eaglelab built; choose another place")
    entries = [p for p in folder.iterdir() if p.name not in PLACEHOLDERS]
    if not entries:
        return
    manifest = read_manifest(folder)
    if manifest is None:
        why = "its manifest is unreadable" if (folder / MANIFEST).exists() else "it has no eaglelab manifest"
        raise OverwriteError(where(folder), f"is not empty and {why}, so it is not a build eaglelab can replace; "
                                            "choose a new or empty folder (nothing was changed)")
    listed = set(manifest["files"]) | {MANIFEST}
    foreign = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                     if not p.is_dir() and p.relative_to(folder).as_posix() not in listed)
    if foreign:
        raise OverwriteError(where(folder), f"holds files its build did not write ({', '.join(foreign[:3])}"
                                            f"{' ...' if len(foreign) > 3 else ''}); move them out before rebuilding")


def cached_build(folder: str | Path, params: dict[str, Any], build: Callable[[Path], dict | None],
                 force: bool = False, log: Callable[[str], None] = print) -> Path:
    """Return ``folder``, building it with ``build(tmp_folder)`` unless a valid copy exists.

    A rebuild replaces only a folder eaglelab built (:func:`check_replaceable`): a user's folder is
    never moved aside or deleted.

    Args:
        folder: where the artefact lives.
        params: everything that determines its content (JSON-serialisable).
        build: fills the given empty folder; may return extra manifest fields (``build_seconds``, how long
            it took, is added to them).
        force: rebuild even when valid.
        log: where to say what happened.
    """

    folder = output_path(folder)
    if not force and folder.exists():
        ok, why = verify_manifest(folder, params)
        if ok:
            return folder
        log(f"rebuilding {folder}: {why}")
    check_replaceable(folder)
    make_folder(folder.parent)
    _remove_abandoned_builds(folder)
    tmp = folder.with_name(f".{folder.name}.building-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        start = time.perf_counter()
        extra = build(tmp)
        took = {"build_seconds": round(time.perf_counter() - start, 1)}  # the workbook's profile reads it
        write_manifest(tmp, params, {**extra, **took} if isinstance(extra, dict) else took)
        old = folder.with_name(f".{folder.name}.old-{os.getpid()}")
        if folder.exists():
            check_replaceable(folder)  # again: nothing may have been added while it built
            os.replace(folder, old)
        os.replace(tmp, folder)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _remove_abandoned_builds(folder: Path) -> None:
    """Delete half-built copies left by killed builds (their process is gone); a live build's copy stays."""
    for tmp in folder.parent.glob(f".{folder.name}.building-*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        if is_ascii_digits(pid) and not _pid_alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)
