"""Atomic writes: a temp file in the same folder, fsync, then rename over the target."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; rename it onto ``target`` on success.

    On an exception the temporary file is removed and ``target`` is left untouched.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; give the file normal permissions
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text_atomic(target: str | Path, text: str) -> Path:
    """Write ``text`` to ``target`` atomically and return the path."""
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(target)


def write_json_atomic(target: str | Path, obj: Any) -> Path:
    """Write ``obj`` as indented JSON to ``target`` atomically."""
    return write_text_atomic(target, json.dumps(obj, indent=2, sort_keys=False) + "\n")
