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


def verify_manifest(folder: Path, params: dict[str, Any]) -> tuple[bool, str]:
    """(ok, reason): parameters equal and every file present with its recorded size and hash."""
    path = folder / MANIFEST
    if not path.is_file():
        return False, "no manifest"
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError:
        return False, "manifest unreadable"
    if json.loads(json.dumps(params)) != manifest.get("params"):
        return False, "built with other parameters"
    for rel, meta in manifest.get("files", {}).items():
        p = folder / rel
        if not p.is_file():
            return False, f"{rel} missing"
        if p.stat().st_size != meta["size"] or sha256_file(p) != meta["sha256"]:
            return False, f"{rel} corrupted (size or sha256 differs)"
    return True, "ok"


def cached_build(folder: str | Path, params: dict[str, Any], build: Callable[[Path], dict | None],
                 force: bool = False, log: Callable[[str], None] = print) -> Path:
    """Return ``folder``, building it with ``build(tmp_folder)`` unless a valid copy exists.

    Args:
        folder: where the artefact lives.
        params: everything that determines its content (JSON-serialisable).
        build: fills the given empty folder; may return extra manifest fields.
        force: rebuild even when valid.
        log: where to say what happened.
    """
    folder = Path(folder)
    if not force and folder.exists():
        ok, why = verify_manifest(folder, params)
        if ok:
            return folder
        log(f"rebuilding {folder}: {why}")
    _remove_abandoned_builds(folder)
    tmp = folder.with_name(f".{folder.name}.building-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        extra = build(tmp)
        write_manifest(tmp, params, extra if isinstance(extra, dict) else None)
        old = folder.with_name(f".{folder.name}.old-{os.getpid()}")
        if folder.exists():
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
        if pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)
