"""A Hugging Face Hub-compatible HTTP server on 127.0.0.1, for testing hub ids offline and end to end.

``huggingface_hub`` (the real client, unpatched) talks to it over real sockets: the tests point
``HF_ENDPOINT`` at it. It serves a folder of repositories laid out as::

    root/<owner>/<name>/<revision>/<files>        e.g. root/acme/drafter/main/model.safetensors

Each revision folder is a branch or tag name; its commit id is a sha1 of the revision name and its
file listing (name, size, mtime), so ``--revision <40-hex commit>`` resolves too.

What it answers: exactly the calls ``huggingface_hub`` 2.4.0 makes for ``hf_hub_download`` and
``get_safetensors_metadata``, with the headers and error codes the Hub sends:

* ``HEAD`` / ``GET /{owner}/{name}/resolve/{revision}/{path}``: ``X-Repo-Commit``, a quoted ``ETag``
  (git blob sha1, or sha256 for LFS files), ``Content-Length``, ``Accept-Ranges: bytes``, and single
  ``Range`` requests (206 / 416). Like the Hub, LFS files (``*.safetensors`` and other weight
  suffixes) answer with a 302 to a CDN on another origin (a second port) carrying ``X-Linked-Size``
  and ``X-Linked-Etag``, so the client reads the metadata off the redirect and follows it for bytes.
* ``GET /api/models/{owner}/{name}`` and ``.../revision/{revision}`` (``model_info``): ``sha`` and
  ``siblings`` (with ``size`` / ``lfs`` when ``?blobs=true``).
* ``GET /api/models/{owner}/{name}/tree/{revision}[/{path}]`` (``list_repo_tree``, which
  ``snapshot_download`` lists a commit with): every file, one page.
* Errors as JSON with ``X-Error-Code`` / ``X-Error-Message``, so the client raises its typed errors:
  ``RepoNotFound`` (401 without a token, 404 with one, as the Hub does, so private repos do not
  leak), ``RevisionNotFound`` (404), ``EntryNotFound`` (404, with ``X-Repo-Commit``). Anything else
  (``/api/agent-harnesses`` and other routes the client may probe) is a plain 404.

For the tests it adds a log of every request with the bytes sent (to show that reading a header
moved about a header's worth of bytes, not the file), a ``stall`` switch (the connection is accepted
and never answered: timeouts), and a ``fault`` hook (answer chosen requests with a status of your
choice: 403, 500...).

Why not olah (the self-hosted mirror on PyPI, tried at 0.5.4 in a separate venv)? It does serve
local git repositories offline (``mirrors-path`` + ``offline = true``), but not the way the Hub does,
so tests against it would pass or fail for the wrong reasons:

* ``Range`` is ignored for local mirrors: a ``bytes=0-100000`` GET of a 4 MB file answers 200 with
  all 4,194,384 bytes (``server_file_routes.file_get_common`` returns ``StreamingResponse`` of the
  whole blob, ``mirror/repos.py`` ``get_file`` reads it into memory), so header-only reading cannot
  be tested.
* A missing file, or a missing revision, in an existing repo answers ``401 RepoNotFound`` instead
  of ``404 EntryNotFound`` / ``RevisionNotFound`` (the local lookup returns None and offline
  ``resolve_requested_commit`` falls back to ``repo_not_found``); so a repo without ``config.json``
  reads as a missing repo.
* ``GET /api/models/{repo}`` without a revision answers ``401 RepoNotFound`` offline; only
  ``.../revision/{rev}`` works.
* It wants each repo as a git repository and brings FastAPI, uvicorn, GitPython, peewee and about
  50 packages (and its own ``huggingface_hub>=1.27``), plus a subprocess to start and stop.

This module is the standard library only: one process, an ephemeral port, started and stopped
with ``with HubServer(root) as hub:``.
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
import os
import re
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

#: Suffixes the Hub's default ``.gitattributes`` stores in LFS (the ones drafter repos use).
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx")

_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_CHUNK = 64 * 1024


@dataclass
class RequestRecord:
    """One request the server received.

    Attributes:
        server: ``hub`` or ``cdn``.
        method: ``GET`` / ``HEAD`` / ...
        path: the raw request path, query included.
        range: the ``Range`` header, if any.
        repo_id: ``owner/name`` when the path names a repo.
        revision: the revision asked for (resolve, model info, CDN).
        filename: the file asked for (resolve, CDN).
        status: the status sent (None while pending, or when stalled).
        header_bytes: bytes of the status line and headers sent.
        body_bytes: bytes of body sent.
        stalled: the request was held without an answer.
    """

    server: str
    method: str
    path: str
    range: str | None = None
    repo_id: str | None = None
    revision: str | None = None
    filename: str | None = None
    status: int | None = None
    header_bytes: int = 0
    body_bytes: int = 0
    stalled: bool = False

    @property
    def sent_bytes(self) -> int:
        return self.header_bytes + self.body_bytes


#: A fault answer: (status, headers, body). A body that is not bytes is an iterable of chunks, each
#: written and flushed as it comes (a trickle, a body larger than memory); its headers then say the
#: ``Content-Length`` (or leave it out), true or not.
Fault = tuple[int, dict[str, str], Any]


def trickle(data: bytes, every_s: float):
    """A fault body sent one byte every ``every_s`` seconds (each read answers within any socket timeout)."""
    import time

    for i in range(len(data)):
        time.sleep(every_s)
        yield data[i:i + 1]


def zeros(total: int, chunk: int = 1 << 20):
    """A fault body of ``total`` bytes generated on the fly (a 1 GiB config.json without a 1 GiB file)."""
    sent = 0
    while sent < total:
        n = min(chunk, total - sent)
        yield b" " * n
        sent += n


class HubServer:
    """The server, as a context manager: ``with HubServer(root) as hub: ... hub.endpoint``.

    Args:
        root: folder of repositories (``root/<owner>/<name>/<revision>/<files>``); created if absent.
        lfs_redirect: answer LFS files with a 302 to the CDN origin, as the Hub does; False serves
            every file from the resolve URL itself, like a plain git blob.
        stall: True to hold every request unanswered, or a predicate on the RequestRecord to hold
            some (settable while running).
        fault: a function of the RequestRecord returning ``(status, headers, body)`` to answer
            instead, or None to answer normally (settable while running).
    """

    def __init__(self, root: str | Path, *, lfs_redirect: bool = True,
                 stall: bool | Callable[[RequestRecord], bool] = False,
                 fault: Callable[[RequestRecord], Fault | None] | None = None):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.lfs_redirect = lfs_redirect
        self.stall = stall
        self.fault = fault
        self._requests: list[RequestRecord] = []
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._etags: dict[tuple[str, int, int], str] = {}
        self._servers: list[_Server] = []
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> HubServer:
        """Listen on two ephemeral ports of 127.0.0.1 (the hub, and the CDN LFS files redirect to)."""
        self._release.clear()
        for role in ("hub", "cdn"):
            srv = _Server(("127.0.0.1", 0), _Handler, hub=self, role=role)
            thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                                      name=f"test-{role}-server", daemon=True)
            thread.start()
            self._servers.append(srv)
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Release stalled requests, close every open connection and the listening sockets."""
        self._release.set()
        for srv in self._servers:
            srv.shutdown()
            srv.close_connections()
            srv.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._servers.clear()
        self._threads.clear()

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``: the value for ``HF_ENDPOINT``."""
        return self._url("hub")

    @property
    def cdn_endpoint(self) -> str:
        return self._url("cdn")

    def _url(self, role: str) -> str:
        for srv in self._servers:
            if srv.role == role:
                return f"http://127.0.0.1:{srv.server_address[1]}"
        raise RuntimeError("the server is not running")

    # ------------------------------------------------------------------ repos

    def revision_dir(self, repo_id: str, revision: str = "main") -> Path:
        """The folder holding ``repo_id`` at ``revision`` (created): write the repo's files there."""
        owner, name = repo_id.split("/")
        path = self.root / owner / name / revision
        path.mkdir(parents=True, exist_ok=True)
        return path

    def commit(self, repo_id: str, revision: str = "main") -> str:
        """The 40-hex commit id ``revision`` resolves to (as sent in ``X-Repo-Commit``)."""
        return _commit_of(self.root.joinpath(*repo_id.split("/"), revision))

    # ------------------------------------------------------------------ request log

    @property
    def requests(self) -> list[RequestRecord]:
        """Every request so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    def clear_log(self) -> None:
        with self._lock:
            self._requests.clear()

    def body_bytes(self, filename: str | None = None, repo_id: str | None = None) -> int:
        """Body bytes sent for ``filename`` (hub and CDN together), or for everything."""
        return sum(r.body_bytes for r in self.requests
                   if (filename is None or r.filename == filename) and (repo_id is None or r.repo_id == repo_id))

    def _log(self, record: RequestRecord) -> None:
        with self._lock:
            self._requests.append(record)

    def _stalls(self, record: RequestRecord) -> bool:
        stall = self.stall
        return bool(stall(record)) if callable(stall) else bool(stall)

    def _etag(self, path: Path, lfs: bool) -> str:
        """sha256 of the content for LFS files, else the git blob sha1 (cached per size and mtime)."""
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns)
        if key not in self._etags:
            h = hashlib.sha256() if lfs else hashlib.sha1(f"blob {st.st_size}\0".encode())
            with open(path, "rb") as fh:
                while block := fh.read(1 << 20):
                    h.update(block)
            self._etags[key] = h.hexdigest()
        return self._etags[key]


def _commit_of(revision_dir: Path) -> str:
    """A stable 40-hex id for a revision folder: changes whenever a file is added, removed or rewritten."""
    h = hashlib.sha1(revision_dir.name.encode())
    for f in sorted(_files(revision_dir)):
        st = (revision_dir / f).stat()
        h.update(f"\0{f}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()


def _files(revision_dir: Path) -> list[str]:
    return [p.relative_to(revision_dir).as_posix() for p in revision_dir.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(revision_dir).parts)]


def _parse_range(value: str | None, size: int) -> tuple[int, int] | str | None:
    """``(start, end)`` inclusive for one satisfiable byte range, ``"unsatisfiable"``, or None (serve all).

    Malformed and multi-range headers are ignored (a server may always answer 200 with everything).
    """
    m = re.fullmatch(r"\s*bytes=(\d*)-(\d*)\s*", value or "")
    if not m or m.group(1) == m.group(2) == "":
        return None
    if m.group(1) == "":  # suffix range: the last n bytes
        n = int(m.group(2))
        return (max(0, size - n), size - 1) if n and size else "unsatisfiable"
    start = int(m.group(1))
    end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
    if start >= size or (m.group(2) and int(m.group(2)) < start):
        return "unsatisfiable"
    return start, end


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a stalled or idle keep-alive handler never blocks stop()

    def __init__(self, address, handler, *, hub: HubServer, role: str):
        self.hub, self.role = hub, role
        self._connections: set[socket.socket] = set()
        self._conn_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        with self._conn_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self._conn_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return  # a client that hung up or went quiet is not a server bug
        super().handle_error(request, client_address)

    def close_connections(self) -> None:
        """Hang up on every client still connected (keep-alive or stalled), so their threads end."""
        with self._conn_lock:
            conns = list(self._connections)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _CountingWriter:
    """Wraps the handler's socket writer to count what actually went out."""

    def __init__(self, raw):
        self.raw = raw
        self.count = 0

    def write(self, data) -> int:
        n = self.raw.write(data)
        self.count += len(data) if n is None else n
        return n

    def flush(self) -> None:
        self.raw.flush()

    def close(self) -> None:
        self.raw.close()

    @property
    def closed(self) -> bool:
        return self.raw.closed


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the client pools connections
    server_version = "eaglelab-test-hub/1"
    timeout = 60  # an idle keep-alive connection ends eventually even if nobody closes it
    server: _Server

    def setup(self):
        super().setup()
        self.wfile = _CountingWriter(self.wfile)

    def log_message(self, format, *args):
        pass  # the request log replaces stderr noise

    def do_GET(self):
        self._handle(head=False)

    def do_HEAD(self):
        self._handle(head=True)

    def do_POST(self):
        self._handle(head=False)

    # ------------------------------------------------------------------ routing

    def _handle(self, head: bool) -> None:
        hub = self.server.hub
        rec = RequestRecord(self.server.role, self.command, self.path, self.headers.get("Range"))
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/")[1:]]
        route = self._route(parts, rec)
        hub._log(rec)
        if hub._stalls(rec):
            rec.stalled = True
            self.close_connection = True
            hub._release.wait()  # accepted, never answered, until the server stops
            return
        if hub.fault is not None and (answer := hub.fault(rec)) is not None:
            status, headers, body = answer
            if isinstance(body, (bytes, bytearray)):
                self._send(rec, status, headers, body, head)
            else:
                self._stream(rec, status, headers, body, head)
            return
        if self.command == "POST":
            self._send_json(rec, 405, {"error": "this test hub answers GET and HEAD only"}, head)
        elif route == "resolve":
            self._resolve(rec, head)
        elif route == "model_info":
            self._model_info(rec, parse_qs(url.query), head)
        elif route == "tree":
            self._tree(rec, head)
        elif route == "cdn":
            self._cdn(rec, head)
        else:
            self._send_json(rec, 404, {"error": "Not Found"}, head)

    def _route(self, parts: list[str], rec: RequestRecord) -> str | None:
        """Fill the record's repo, revision and file from the path; return which route it is."""
        if self.server.role == "cdn":
            if len(parts) >= 5 and parts[0] == "lfs":
                rec.repo_id, rec.revision, rec.filename = f"{parts[1]}/{parts[2]}", parts[3], "/".join(parts[4:])
                return "cdn"
            return None
        if len(parts) >= 5 and parts[2] == "resolve":
            rec.repo_id, rec.revision, rec.filename = f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:])
            return "resolve"
        if len(parts) in (4, 6) and parts[:2] == ["api", "models"] and (len(parts) == 4 or parts[4] == "revision"):
            rec.repo_id = f"{parts[2]}/{parts[3]}"
            rec.revision = parts[5] if len(parts) == 6 else "main"
            return "model_info"
        if len(parts) >= 6 and parts[:2] == ["api", "models"] and parts[4] == "tree":
            rec.repo_id, rec.revision, rec.filename = f"{parts[2]}/{parts[3]}", parts[5], "/".join(parts[6:])
            return "tree"
        return None

    def _revision(self, rec: RequestRecord, head: bool) -> tuple[Path, str] | None:
        """The revision folder and its commit, or None after sending the Hub's error."""
        owner, name = rec.repo_id.split("/")
        repo = self.server.hub.root / owner / name
        if not (_SEGMENT.match(owner) and _SEGMENT.match(name) and repo.is_dir()):
            status = 404 if self.headers.get("Authorization") else 401  # the Hub hides private repos
            self._send_error(rec, status, "RepoNotFound", "Repository not found", head)
            return None
        rev = rec.revision or "main"
        if _SEGMENT.match(rev) and (repo / rev).is_dir():
            return repo / rev, _commit_of(repo / rev)
        if _COMMIT.match(rev):
            for d in sorted(p for p in repo.iterdir() if p.is_dir()):
                if _commit_of(d) == rev:
                    return d, rev
        self._send_error(rec, 404, "RevisionNotFound", f"Invalid rev id: {rev}", head)
        return None

    # ------------------------------------------------------------------ routes

    def _resolve(self, rec: RequestRecord, head: bool) -> None:
        found = self._revision(rec, head)
        if found is None:
            return
        rev_dir, commit = found
        path = rev_dir / rec.filename
        inside = path.resolve().is_relative_to(rev_dir.resolve())
        if not inside or not path.is_file() or any(p.startswith(".") for p in Path(rec.filename).parts):
            self._send_error(rec, 404, "EntryNotFound", "Entry not found", head, {"X-Repo-Commit": commit})
            return
        hub = self.server.hub
        lfs = path.name.endswith(LFS_SUFFIXES)
        etag = f'"{hub._etag(path, lfs)}"'
        if lfs and hub.lfs_redirect:
            location = f"{hub.cdn_endpoint}/lfs/{quote(rec.repo_id)}/{commit}/{quote(rec.filename)}"
            self._send(rec, 302, {"Location": location, "X-Repo-Commit": commit, "ETag": etag,
                                  "X-Linked-Etag": etag, "X-Linked-Size": str(path.stat().st_size)}, b"", head)
            return
        self._send_file(rec, path, head, {"X-Repo-Commit": commit, "ETag": etag})

    def _cdn(self, rec: RequestRecord, head: bool) -> None:
        owner, name = rec.repo_id.split("/")
        repo = self.server.hub.root / owner / name
        rev_dir = next((d for d in sorted(repo.iterdir()) if d.is_dir() and _commit_of(d) == rec.revision), None) \
            if _SEGMENT.match(owner) and _SEGMENT.match(name) and repo.is_dir() else None
        path = rev_dir / rec.filename if rev_dir is not None else None
        if path is None or not path.is_file() or not path.resolve().is_relative_to(rev_dir.resolve()):
            self._send(rec, 404, {"Content-Type": "text/plain"}, b"NoSuchKey", head)  # a CDN, not the Hub
            return
        self._send_file(rec, path, head, {"ETag": f'"{self.server.hub._etag(path, True)}"'})

    def _model_info(self, rec: RequestRecord, query: dict[str, list[str]], head: bool) -> None:
        found = self._revision(rec, head)
        if found is None:
            return
        rev_dir, commit = found
        blobs = query.get("blobs", ["false"])[0].lower() == "true"
        siblings: list[dict[str, Any]] = []
        for f in sorted(_files(rev_dir)):
            entry: dict[str, Any] = {"rfilename": f}
            if blobs:
                path = rev_dir / f
                lfs = f.endswith(LFS_SUFFIXES)
                size = path.stat().st_size
                entry.update(size=size, blobId=hashlib.sha1(f"{rec.repo_id}/{f}".encode()).hexdigest())
                if lfs:
                    entry["lfs"] = {"sha256": self.server.hub._etag(path, True), "size": size, "pointerSize": 134}
            siblings.append(entry)
        mtimes = [(rev_dir / f).stat().st_mtime for f in _files(rev_dir)] or [rev_dir.stat().st_mtime]
        stamp = datetime.fromtimestamp(max(mtimes), UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        owner = rec.repo_id.split("/")[0]
        self._send_json(rec, 200, {
            "_id": hashlib.sha1(rec.repo_id.encode()).hexdigest()[:24], "id": rec.repo_id, "modelId": rec.repo_id,
            "author": owner, "sha": commit, "lastModified": stamp, "createdAt": stamp, "private": False,
            "gated": False, "disabled": False, "downloads": 0, "likes": 0, "tags": [], "siblings": siblings,
        }, head)

    def _tree(self, rec: RequestRecord, head: bool) -> None:
        """``list_repo_tree`` (what ``snapshot_download`` lists): every file under the path, one page."""
        found = self._revision(rec, head)
        if found is None:
            return
        rev_dir, _ = found
        entries: list[dict[str, Any]] = []
        for f in sorted(_files(rev_dir)):
            if rec.filename and not f.startswith(rec.filename.rstrip("/") + "/"):
                continue
            path = rev_dir / f
            size = path.stat().st_size
            entry: dict[str, Any] = {"type": "file", "path": f, "size": size,
                                     "oid": hashlib.sha1(f"{rec.repo_id}/{f}".encode()).hexdigest()}
            if f.endswith(LFS_SUFFIXES):
                entry["lfs"] = {"oid": self.server.hub._etag(path, True), "size": size, "pointerSize": 134}
            entries.append(entry)
        self._send_json(rec, 200, entries, head)

    # ------------------------------------------------------------------ responses

    def _send_error(self, rec, status: int, code: str, message: str, head: bool, extra: dict | None = None) -> None:
        headers = {"X-Error-Code": code, "X-Error-Message": message, **(extra or {})}
        self._send_json(rec, status, {"error": message}, head, headers)

    def _send_json(self, rec, status: int, obj: Any, head: bool, headers: dict | None = None) -> None:
        body = json.dumps(obj).encode()
        self._send(rec, status, {"Content-Type": "application/json; charset=utf-8", **(headers or {})}, body, head)

    def _send(self, rec, status: int, headers: dict[str, str], body: bytes, head: bool) -> None:
        self._start(rec, status, {**headers, "Content-Length": str(len(body))})
        if not head and body:
            self.wfile.write(body)
        self._finish(rec)

    def _stream(self, rec, status: int, headers: dict[str, str], chunks, head: bool) -> None:
        """Send a fault body chunk by chunk, flushed, until the client hangs up."""
        self.close_connection = True
        self._start(rec, status, headers)
        if not head:
            for block in chunks:
                try:
                    self.wfile.write(block)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError, OSError):
                    break
        self._finish(rec)

    def _send_file(self, rec, path: Path, head: bool, headers: dict[str, str]) -> None:
        size = path.stat().st_size
        span = _parse_range(self.headers.get("Range"), size)
        base = {"Accept-Ranges": "bytes", "Content-Type": mimetypes.guess_type(path.name)[0] or "application/octet-stream",
                **headers}
        if span == "unsatisfiable":
            self._send(rec, 416, {**base, "Content-Range": f"bytes */{size}"}, b"", head)
            return
        start, end = span if span else (0, size - 1)
        length = max(0, end - start + 1)
        if span:
            base["Content-Range"] = f"bytes {start}-{end}/{size}"
        self._start(rec, 206 if span else 200, {**base, "Content-Length": str(length)})
        if not head:
            with open(path, "rb") as fh:
                fh.seek(start)
                left = length
                while left > 0:
                    block = fh.read(min(_CHUNK, left))
                    if not block:
                        break
                    try:
                        self.wfile.write(block)
                    except (BrokenPipeError, ConnectionResetError):
                        self.close_connection = True  # the client hung up: stop, and count what went out
                        break
                    left -= len(block)
        self._finish(rec)

    def _start(self, rec: RequestRecord, status: int, headers: dict[str, str]) -> None:
        rec.status = status
        before = self.wfile.count
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        rec.header_bytes = self.wfile.count - before
        self._body_start = self.wfile.count

    def _finish(self, rec: RequestRecord) -> None:
        rec.body_bytes = self.wfile.count - self._body_start


def client_env(endpoint: str, home: str | Path, base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """Environment for a subprocess whose ``huggingface_hub`` must use ``endpoint`` and nothing global.

    Args:
        endpoint: the server's ``endpoint``.
        home: folder for ``HF_HOME`` (cache, token, registries).
        base: environment to start from (default: this process's).
        extra: more variables (``HF_HUB_ETAG_TIMEOUT="1"``...).
    """
    env = dict(os.environ if base is None else base)
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN",
                "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_XET_CACHE", "HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT"):
        env.pop(key, None)
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
               HF_HUB_DISABLE_UPDATE_CHECK="1", **extra)
    return env


def point_client_at(monkeypatch, endpoint: str, home: str | Path) -> None:
    """Make this process's ``huggingface_hub`` talk to ``endpoint`` and keep its files under ``home``.

    Sets the environment variables, and the values ``huggingface_hub`` copied from them when it was
    imported (``constants.ENDPOINT``, ``constants.HF_HUB_OFFLINE``, the cache and token paths, and
    the module-level ``HfApi`` behind ``get_safetensors_metadata``, whose ``endpoint`` was fixed at
    import). Configuration only: no client function is replaced. ``monkeypatch`` undoes it all.
    """
    import huggingface_hub.hf_api
    from huggingface_hub import constants

    home = Path(home)
    for key, value in client_env(endpoint, home, base={}).items():
        monkeypatch.setenv(key, value)
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_CACHE"):
        monkeypatch.delenv(key, raising=False)
    settings = {
        "HF_HUB_OFFLINE": False,
        "ENDPOINT": endpoint,
        "HUGGINGFACE_CO_URL_TEMPLATE": endpoint + "/{repo_id}/resolve/{revision}/{filename}",
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HF_ASSETS_CACHE": str(home / "assets"),
        "HF_TOKEN_PATH": str(home / "token"),
        "HF_STORED_TOKENS_PATH": str(home / "stored_tokens"),
        "AGENT_HARNESSES_PATH": str(home / ".agent_harnesses.json"),
        "CHECK_FOR_UPDATE_DONE_PATH": str(home / ".check_for_update_done"),
        "HF_HUB_DISABLE_TELEMETRY": True,
    }
    for key, value in settings.items():
        if hasattr(constants, key):
            monkeypatch.setattr(constants, key, value)
    monkeypatch.setattr(huggingface_hub.hf_api.api, "endpoint", endpoint)
