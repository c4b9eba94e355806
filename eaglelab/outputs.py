"""The write side: which files eaglelab may replace or delete, and how a write fails (one line).

The rules, one place for every command that writes (drafters, exports, recipes, fine-tune runs,
worlds, figures, executed notebooks, the game plan):

- a folder is eaglelab's when it holds :data:`MARKER`, which names the kind of output and every
  file eaglelab wrote there (relative paths); a new or empty folder becomes eaglelab's;
- a non-empty folder without the marker is not eaglelab's: commands that fill a folder (a drafter,
  a recipe, a run) refuse it, with or without ``--force``; commands that only add their own files
  (figures, executed notebooks: ``shared=True``) may write beside the user's files, never over one;
- a file eaglelab did not write is never replaced or deleted, ``--force`` or not;
- what eaglelab wrote is replaced only with ``force`` (or, in a ``shared`` folder, freely: the
  workbook regenerates its figures), and ``force`` removes exactly the files the marker lists, plus
  the folders they leave empty;
- one writer at a time: an open :class:`OutputFolder` holds an exclusive lock on the folder itself
  (``flock`` on its descriptor; no lock file); a second writer gets one line, not interleaved files;
- every ``OSError`` (a read-only place, a path under a file, no space left) is an
  :class:`~eaglelab.errors.OutputError` naming the path.

Only the standard library is imported, so metadata commands (``recipe``, ``report``) stay fast.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from eaglelab.atomic import atomic_path
from eaglelab.errors import EaglelabError, OutputError, OverwriteError
from eaglelab.inputs import MAX_JSON_BYTES, field_int, loads_json, open_regular, path_kind, printable, read_bytes

#: The marker file of a folder eaglelab writes: ``{"eaglelab": 1, "kind": ..., "files": [...]}``.
MARKER = ".eaglelab-output.json"
#: Files a folder may hold without making it someone else's (a repository's placeholder).
PLACEHOLDERS = frozenset({".gitkeep", ".gitignore", ".DS_Store"})


def finite_json(obj: Any) -> tuple[Any, dict[str, str]]:
    """``obj`` as strict JSON can hold it: a number that is not finite becomes null.

    Returns:
        ``(clean, replaced)``: the cleaned value and, by JSON path, what each null stood for
        (``{"plan.rows[2].samples": "inf"}``). Every JSON file eaglelab writes for others to read
        (findings, ``--json`` output, records) is strict, so a strict reader (its own included) takes it.
    """
    replaced: dict[str, str] = {}

    def walk(v: Any, path: str) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            replaced[path or "value"] = repr(v)
            return None
        if isinstance(v, dict):
            return {k: walk(x, f"{path}.{k}" if path else str(k)) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(x, f"{path}[{i}]") for i, x in enumerate(v)]
        return v

    return walk(obj, ""), replaced


def strict_json_text(obj: Any, indent: int | None = 2) -> str:
    """``obj`` as strict JSON text; a dict records its replaced non-finite numbers under ``non_finite``."""
    clean, replaced = finite_json(obj)
    if replaced and isinstance(clean, dict):
        clean["non_finite"] = {**(clean.get("non_finite") or {}), **replaced}
    return json.dumps(clean, indent=indent, default=str, allow_nan=False)


def where(path: str | Path) -> str:
    """A path for a message: one printable line."""
    return printable(str(path))


def os_problem(exc: OSError) -> str:
    """A short description of why a write failed."""
    return {
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.EROFS: "read-only file system",
        errno.ENOSPC: "no space left on the device",
        errno.EDQUOT: "disk quota exceeded",
        errno.ENOTDIR: "a part of the path is a file, not a folder",
        errno.EISDIR: "is a folder, expected a file",
        errno.EEXIST: "already exists",
        errno.ENAMETOOLONG: "file name too long",
        errno.ELOOP: "too many levels of symbolic links",
        errno.ENOTEMPTY: "folder not empty",
    }.get(exc.errno, exc.strerror or type(exc).__name__)


def output_path(path: str | Path, what: str = "--out") -> Path:
    """A user's output path as a :class:`Path`: ``~`` expanded, refused in one line when it cannot be a path.

    Raises:
        OutputError: an empty path, a NUL byte, a name the file system cannot encode, or ``~user``
            naming nobody.
    """
    text = os.fspath(path)
    if not str(text).strip():
        raise OutputError(what, "an empty path")
    if "\0" in str(text):
        raise OutputError(what, "the path contains a NUL byte")
    try:
        os.fsencode(text)
        return Path(text).expanduser()
    except UnicodeError:
        raise OutputError(where(text), "the path cannot be encoded as a file name") from None
    except RuntimeError:  # ~nosuchuser
        raise OutputError(where(text), "names the home folder of a user this machine does not know") from None


def resolved(path: Path) -> Path:
    """``path.resolve()``, a symlink loop or an unreadable part one line instead of a traceback."""
    try:
        return path.resolve()
    except RuntimeError:  # a symlink loop (Python before 3.13)
        raise OutputError(where(path), "too many levels of symbolic links (a symlink loop?)") from None
    except OSError as exc:
        raise OutputError(where(path), f"cannot resolve the path ({os_problem(exc)})") from None


def make_folder(path: Path) -> None:
    """``mkdir -p``, every failure one line."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(where(path), "exists and is not a folder") from None
    except OSError as exc:
        raise OutputError(where(path), f"cannot create the folder ({os_problem(exc)})") from None


@contextlib.contextmanager
def writing(target: Path) -> Iterator[Path]:
    """:func:`eaglelab.atomic.atomic_path` with every ``OSError`` turned into one line naming ``target``."""
    try:
        with atomic_path(target) as tmp:
            yield tmp
    except EaglelabError:
        raise
    except OSError as exc:
        raise OutputError(where(target), f"cannot write ({os_problem(exc)})") from None


def _relative(rel: str | Path) -> str:
    """A file's name inside an output folder: relative, no ``..``, POSIX separators."""
    p = PurePosixPath(Path(rel).as_posix())
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise OutputError(str(rel), "not a path inside the output folder")
    return p.as_posix()


def read_marker(folder: Path) -> dict[str, Any] | None:
    """The folder's marker (None when it has none).

    Raises:
        OverwriteError: the marker is there but unreadable, so eaglelab cannot tell its files from others.
    """
    path = folder / MARKER
    if not path.exists() and not path.is_symlink():
        return None
    try:
        obj = loads_json(read_bytes(path, OverwriteError, MAX_JSON_BYTES, "marker"), where(path), OverwriteError)
        if not isinstance(obj, dict) or not isinstance(obj.get("kind"), str) or not isinstance(obj.get("files"), list) \
                or not all(isinstance(f, str) for f in obj["files"]):
            raise OverwriteError(where(path), "is not an eaglelab marker (kind and files)")
        field_int(obj, "eaglelab", where(path), OverwriteError, low=1, high=1)
        obj["files"] = [_relative(f) for f in obj["files"]]
    except OutputError:
        raise OverwriteError(where(path), "lists a file outside its folder") from None
    except OverwriteError as exc:
        raise OverwriteError(where(folder), f"its eaglelab marker is unreadable ({exc.problem}), so eaglelab cannot tell "
                                            "its own files from yours; move the folder away or choose another") from None
    return obj


def _foreign(folder: Path, own: set[str], limit: int = 4) -> list[str]:
    """Top-level entries of ``folder`` holding a file eaglelab did not write there (placeholders aside), at most ``limit``."""
    def holds_foreign(path: Path, rel: str) -> bool:
        if path.is_dir() and not path.is_symlink():
            return any(holds_foreign(c, f"{rel}/{c.name}") for c in sorted(path.iterdir()))
        return rel not in own

    out = []
    try:
        for entry in sorted(folder.iterdir()):
            if entry.name == MARKER or entry.name in PLACEHOLDERS:
                continue
            if holds_foreign(entry, entry.name):
                out.append(entry.name + ("/" if entry.is_dir() else ""))
                if len(out) >= limit:
                    break
    except OSError as exc:
        raise OutputError(where(folder), f"cannot list the folder ({os_problem(exc)})") from None
    return out


class OutputFolder:
    """A folder eaglelab writes into, locked for the writer's life (use it in a ``with``).

    Get one with :func:`open_output_folder`. Every file goes through :meth:`writing` (or
    :meth:`write_text` / :meth:`write_json`), which writes atomically and records the file in the
    marker, so a later ``--force`` removes exactly it.
    """

    def __init__(self, path: Path, kind: str, files: list[str], lock_fd: int | None):
        self.path, self.kind, self._files, self._lock_fd = path, kind, list(dict.fromkeys(files)), lock_fd

    # -- bookkeeping
    @property
    def files(self) -> list[str]:
        """The files eaglelab wrote here, relative to the folder."""
        return list(self._files)

    def _save_marker(self) -> None:
        marker = {"eaglelab": 1, "kind": self.kind, "files": self._files,
                  "updated": time.strftime("%Y-%m-%dT%H:%M:%S")}
        with writing(self.path / MARKER) as tmp:
            tmp.write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")

    def record(self, *rels: str | Path) -> None:
        """Note files written here by other means (a folder renamed into place, a tool's output)."""
        new = [r for r in map(_relative, rels) if r not in self._files]
        if new:
            self._files += new
            self._save_marker()

    def record_tree(self, rel: str | Path) -> None:
        """Note every file under the sub-folder ``rel`` (after renaming a finished folder into place)."""
        base = self.path / _relative(rel)
        self.record(*(p.relative_to(self.path).as_posix() for p in sorted(base.rglob("*")) if p.is_file()))

    def owns(self, rel: str | Path) -> bool:
        return _relative(rel) in self._files

    # -- writing
    def file(self, rel: str | Path) -> Path:
        """The path of ``rel`` inside the folder (checked to stay inside)."""
        return self.path / _relative(rel)

    def _check_replace(self, rel: str) -> None:
        p = self.path / rel
        if (p.exists() or p.is_symlink()) and rel not in self._files:
            raise OverwriteError(where(p), "exists and eaglelab did not write it; not replacing it (move it away "
                                           "or choose another folder)")

    def claim(self, rel: str | Path) -> Path:
        """The path of ``rel`` for a tool that writes it itself (papermill's executed notebook), recorded as eaglelab's.

        Raises:
            OverwriteError: ``rel`` exists and eaglelab did not write it.
        """
        rel = _relative(rel)
        self._check_replace(rel)
        make_folder((self.path / rel).parent)
        self.record(rel)
        return self.path / rel

    @contextlib.contextmanager
    def writing(self, rel: str | Path) -> Iterator[Path]:
        """Yield a temporary path for ``rel``; on success it replaces ``rel`` atomically and is recorded."""
        rel = _relative(rel)
        self._check_replace(rel)
        target = self.path / rel
        make_folder(target.parent)
        with writing(target) as tmp:
            yield tmp
        self.record(rel)

    def write_text(self, rel: str | Path, text: str) -> Path:
        with self.writing(rel) as tmp:
            tmp.write_text(text, encoding="utf-8")
        return self.file(rel)

    def write_json(self, rel: str | Path, obj: Any) -> Path:
        """Strict JSON (:func:`strict_json_text`): a NaN or infinity is written as null and named under ``non_finite``."""
        return self.write_text(rel, strict_json_text(obj) + "\n")

    def append_line(self, rel: str | Path, line: str) -> None:
        """Append one line to ``rel`` (a run's log), flushed to disk before returning."""
        rel = _relative(rel)
        self._check_replace(rel)
        try:
            with open(self.path / rel, "a", encoding="utf-8") as fh:
                fh.write(line.rstrip("\n") + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise OutputError(where(self.path / rel), f"cannot write ({os_problem(exc)})") from None
        self.record(rel)

    def remove(self, rel: str | Path) -> None:
        """Delete a file (or a sub-folder's files) eaglelab wrote here; anything else there stays."""
        rel = _relative(rel)
        mine = [f for f in self._files if f == rel or f.startswith(rel + "/")]
        for f in mine:
            with contextlib.suppress(FileNotFoundError):
                try:
                    (self.path / f).unlink()
                except OSError as exc:
                    raise OutputError(where(self.path / f), f"cannot delete ({os_problem(exc)})") from None
        self._prune({PurePosixPath(f).parent for f in mine})
        self._files = [f for f in self._files if f not in set(mine)]
        self._save_marker()

    def clear(self) -> None:
        """Delete every file eaglelab wrote here (``--force``); the user's files stay."""
        for f in self._files:
            with contextlib.suppress(FileNotFoundError):
                try:
                    (self.path / f).unlink()
                except IsADirectoryError:
                    pass
                except OSError as exc:
                    raise OutputError(where(self.path / f), f"cannot delete ({os_problem(exc)})") from None
        self._prune({PurePosixPath(f).parent for f in self._files})
        self._files = []
        self._save_marker()

    def _prune(self, folders: set[PurePosixPath]) -> None:
        """Remove the given sub-folders (and their parents) where they are left empty."""
        chain = {p for f in folders for p in [f, *f.parents] if str(p) != "."}
        for rel in sorted(chain, key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                (self.path / rel).rmdir()  # only empty folders go

    # -- life
    def close(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> OutputFolder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"OutputFolder({str(self.path)!r}, kind={self.kind!r}, files={len(self._files)})"


def _lock(folder: Path) -> int:
    """An exclusive, non-blocking lock on the folder (its own descriptor: nothing is left behind)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise OutputError(where(folder), f"cannot open the folder ({os_problem(exc)})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise OverwriteError(where(folder), "is in use by another eaglelab run (it holds the folder's lock); wait for "
                                            "it to finish or choose another folder") from None
    return fd


def open_output_folder(path: str | Path, kind: str, *, force: bool = False, resume: bool | None = False,
                       shared: bool = False, lock: bool = True) -> OutputFolder:
    """Claim ``path`` for eaglelab's ``kind`` of output, under the rules of this module.

    Args:
        path: the folder (created, parents too, when missing).
        kind: what eaglelab writes there (``drafter``, ``recipe``, ``finetune run``, ``figures``...).
        force: replace what eaglelab wrote there before: its listed files are removed first.
        resume: keep what eaglelab wrote there before (a run continued); the kind must match. None:
            not asked, but possible (a run folder): the refusal then names ``--resume`` too.
        shared: the folder may hold the user's files beside eaglelab's (figures, executed notebooks);
            eaglelab's own files are then replaced without ``force``, the user's never.
        lock: hold the folder's lock while the folder is open (off for a second reader of one run).

    Raises:
        OutputError: the path is a file, cannot be created, or cannot be locked.
        OverwriteError: the folder is someone else's (non-empty, no marker), holds eaglelab output
            and neither ``force`` nor ``resume`` is given, or is in use by another writer.
    """
    folder = output_path(path)
    kind_now = path_kind(folder, OutputError)  # a name too long or a symlink loop is one line here
    if kind_now not in (None, "folder"):
        raise OutputError(where(folder), "exists and is not a folder" + (" (a file)" if kind_now == "file" else ""))
    make_folder(folder)
    fd = _lock(folder) if lock else None
    try:
        marker = read_marker(folder)
        files = [f for f in (marker["files"] if marker else []) if (folder / f).exists() or (folder / f).is_symlink()]
        if not shared:
            foreign = _foreign(folder, set(files))
            if foreign:
                raise OverwriteError(where(folder), f"is not empty and eaglelab did not write {', '.join(foreign)}; "
                                                    f"write the {kind} to a new or empty folder (--force never "
                                                    "replaces files eaglelab did not write)")
        out = OutputFolder(folder, marker["kind"] if marker and shared else kind, files, fd)
        if files and not shared:
            if resume:
                if marker["kind"] != kind:
                    raise OverwriteError(where(folder), f"holds an eaglelab {marker['kind']}, not a {kind} to continue")
            elif force:
                out.clear()
            else:
                how = "pass --resume to continue it, or --force to start over" if resume is None else \
                    "pass --force to replace it"
                raise OverwriteError(where(folder), f"already holds an eaglelab {marker['kind']}; {how} (--force "
                                                    "removes only the files eaglelab wrote there)")
        out._save_marker()
        return out
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise


def write_owned_file(path: str | Path, text: str, signature: str, what: str) -> Path:
    """Write a single generated file (the game plan) that carries ``signature`` as its first line.

    An existing file is replaced only when it carries the signature too (eaglelab wrote it);
    a file of the user's is never replaced.

    Raises:
        OverwriteError: the file exists and eaglelab did not write it.
        OutputError: the path is a folder, or the write fails.
    """
    target = output_path(path)
    kind_now = path_kind(target, OutputError)
    if kind_now == "folder":
        raise OutputError(where(target), f"is a folder; give the {what}'s file name")
    if kind_now is not None or target.is_symlink():
        try:
            with open_regular(target, OverwriteError) as fh:  # a FIFO or device is refused, never waited on
                head = fh.read(len(signature.encode()) + 1)
        except OSError as exc:
            raise OutputError(where(target), f"cannot read it to check who wrote it ({os_problem(exc)})") from None
        if not head.startswith(signature.encode()):
            raise OverwriteError(where(target), f"exists and is not a {what} eaglelab wrote; not replacing it (choose "
                                                "another file)")
    make_folder(target.parent)
    with writing(target) as tmp:
        tmp.write_text(signature + "\n" + text, encoding="utf-8")
    return target


def table(rows: list[list], headers: list[str]) -> str:
    """Rows as aligned columns; cells are made printable (a name from a file cannot move the cursor)."""
    cells = [headers] + [[printable(str(c)) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
