"""Reading from a Hugging Face hub (or a mirror at ``HF_ENDPOINT``): bounded waits, capped bodies, one commit, one-line errors.

Hub ids are read as metadata only: ``config.json`` in one GET, safetensors headers by range request
(the first 100,001 bytes, as huggingface_hub reads them; a second range only for a larger header),
and, for a target's heads, the bytes of three tensors by range. Every request goes through
:func:`hub_fetch`:

- **one deadline for the whole request**, ``HF_HUB_DOWNLOAD_TIMEOUT`` seconds (10 by default, read at
  each call): connect, headers, redirects and every byte of the body; a server that trickles a byte
  every few seconds, each read within the socket timeout, is cut off at the deadline all the same;
- **a size cap before the body is held**: ``Content-Length`` is checked first, and the body is
  streamed and counted (after decompression), so a 1 GiB ``config.json`` is refused after the cap,
  not after the download;
- **no request of the library's own**: the user agent and token are built here, because
  huggingface_hub's ``build_hf_headers`` fetches ``{HF_ENDPOINT}/api/agent-harnesses`` uncapped and
  outside any deadline (and may exchange or refresh a token over the network) to name the agent running it.

A repository is read through one :class:`HubRepo`: **one commit** (the first answer's
``X-Repo-Commit``; every later request asks ``/resolve/<commit>/``), and **one header per file** (read
once, every tensor's bytes placed from it). A later answer from another commit, or a file whose ETag
or length changed, is refused in one line rather than read as the same file.

huggingface_hub's session (its proxies and endpoint) and typed errors are used: one line says whether
the repository, the revision or a file is missing, access is refused, or the hub did not answer in time.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any
from urllib.parse import unquote

from eaglelab.checkpoints.files.config_types import check_config_types
from eaglelab.checkpoints.files.headers import MAX_HEADER_BYTES, parse_header_json
from eaglelab.errors import ConfigError, EaglelabError, HeaderError, HubError, SourceError
from eaglelab.inputs import MAX_JSON_BYTES, is_ascii_digits, loads_json_object, printable, read_bytes, shown


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` is set (read at every call: tests and notebooks change it)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_timeout() -> float:
    """Seconds to wait for each answer from the hub: ``HF_HUB_DOWNLOAD_TIMEOUT`` (huggingface_hub's variable), else 10.

    Read at every call, unlike huggingface_hub's defaults, which are fixed when it is imported.
    """
    try:
        value = float(os.environ.get("HF_HUB_DOWNLOAD_TIMEOUT") or 10)
    except ValueError:
        return 10.0
    return value if 0 < value < 1e6 else 10.0  # nan, inf and negatives fail every comparison here


def hub_problem(exc: Exception, revision: str | None, timeout: float) -> str:
    """One line saying what went wrong with a hub request, from huggingface_hub's typed errors."""
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(exc, GatedRepoError):  # a subclass of RepositoryNotFoundError
        return "gated repository: accept its terms on the hub, then log in or set HF_TOKEN"
    if isinstance(exc, RepositoryNotFoundError):
        return "repository not found on the hub (or private: log in or set HF_TOKEN)"
    if isinstance(exc, RevisionNotFoundError):
        return f"revision {revision!r} not found"
    if isinstance(exc, EntryNotFoundError) and not isinstance(exc, LocalEntryNotFoundError):
        url = str(getattr(getattr(exc, "response", None), "url", "") or "")
        name = unquote(url.split("/resolve/", 1)[1].split("/", 1)[-1]) if "/resolve/" in url else "a file"
        return f"{printable(name)} not found in the repository"
    if any("Timeout" in cls.__name__ for cls in type(exc).__mro__):
        return f"no answer from the hub within {timeout:g} s (HF_HUB_DOWNLOAD_TIMEOUT sets the wait)"
    text = str(exc).strip()
    return "cannot read from the hub: " + (printable(text.splitlines()[0]) if text else type(exc).__name__)


class HubDeadlineTimeout(TimeoutError):
    """A hub request outlived its overall deadline (read by :func:`hub_problem` as "no answer within")."""


class HubBodyTooLarge(ValueError):
    """A hub answer's body is over the cap for what was asked (a config, an index, a header)."""

    def __init__(self, size: int, cap: int):
        super().__init__(f"{size:,} bytes, over the {cap:,}-byte cap")
        self.size, self.cap = size, cap


#: The most bytes of a token file read (a hub token is about 40 characters).
MAX_TOKEN_BYTES = 4096


def _token() -> str | None:
    """The token huggingface_hub would send: ``HF_TOKEN`` (or ``HUGGING_FACE_HUB_TOKEN``), else its token file.

    Read here rather than by ``huggingface_hub.get_token``, which may exchange an OIDC token or refresh
    an OAuth one over the network (uncapped); ``HF_HUB_DISABLE_IMPLICIT_TOKEN`` sends none, as there.
    """
    from huggingface_hub import constants

    if constants.HF_HUB_DISABLE_IMPLICIT_TOKEN:
        return None
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if not token and os.path.lexists(constants.HF_TOKEN_PATH):
        token = read_bytes(constants.HF_TOKEN_PATH, SourceError, MAX_TOKEN_BYTES, "token file").decode("utf-8", "replace")
    token = (token or "").replace("\r", "").replace("\n", "").strip()
    return token or None


@functools.cache
def _user_agent() -> str:
    """``eaglelab/<version>; hf_hub/<version>; python/<version>``, as huggingface_hub writes its own."""
    from huggingface_hub import __version__ as hub_version

    try:
        own = version("eaglelab")
    except PackageNotFoundError:  # run from a checkout that was never installed
        own = "unknown"
    return f"eaglelab/{own}; hf_hub/{hub_version}; python/{platform.python_version()}"


def hub_request_headers() -> dict[str, str]:
    """The user agent and authorization of every hub request, built without any request of huggingface_hub's own.

    ``huggingface_hub.utils.build_hf_headers`` would name the agent running it from a registry it
    fetches from ``{HF_ENDPOINT}/api/agent-harnesses`` with no cap (a mirror's 1 GiB answer: GBs of memory).
    """
    from huggingface_hub import constants

    agent = _user_agent()
    if constants.HF_HUB_USER_AGENT_ORIGIN:
        agent += f"; origin/{constants.HF_HUB_USER_AGENT_ORIGIN}"
    token = _token()
    return {"user-agent": agent, **({"authorization": f"Bearer {token}"} if token else {})}


def quiet_hub_library() -> None:
    """Turn off huggingface_hub's telemetry for this process, so that its own downloads make no uncapped request.

    A drafter or target that eaglelab hands to ``snapshot_download`` / ``from_pretrained`` is read by the
    library itself; with telemetry on, its user agent fetches the agent registry first (see
    :func:`hub_request_headers`). The library reads the setting at each request, the environment for
    the processes eaglelab starts.
    """
    from huggingface_hub import constants

    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    constants.HF_HUB_DISABLE_TELEMETRY = True


def hub_fetch(url: str, max_bytes: int, timeout: float | None = None, headers: dict[str, str] | None = None,
              truncate: bool = False):
    """GET ``url`` through huggingface_hub's session under one deadline, the body streamed and capped.

    Args:
        url: the file's resolve URL.
        max_bytes: the most body bytes held.
        timeout: the deadline for the whole request, seconds (default :func:`hub_timeout`).
        headers: extra headers (``Range``); the user agent and token (:func:`hub_request_headers`) are added.
        truncate: keep the first ``max_bytes`` of a longer body instead of refusing it (a server that
            ignores ``Range`` and sends a whole weights file: only its header is needed).

    Returns:
        the session's response object with ``content`` read (pass it to ``hf_raise_for_status``) and
        ``history`` kept (the redirects followed: the hub's own answer to an LFS file is the first).

    Raises:
        HubDeadlineTimeout: the deadline passed before the body was complete.
        HubBodyTooLarge: ``Content-Length`` or the streamed body is over ``max_bytes`` (unless ``truncate``).
        Exception: the HTTP client's own errors (connection refused, TLS...).
    """
    from huggingface_hub import get_session

    quiet_hub_library()
    timeout = hub_timeout() if timeout is None else timeout
    deadline = time.monotonic() + timeout
    session = get_session()
    request_headers = {**hub_request_headers(), **(headers or {})}
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            with session.stream("GET", url, headers=request_headers, timeout=timeout, follow_redirects=True) as r:
                length = r.headers.get("Content-Length", "")
                if r.status_code < 400 and is_ascii_digits(length) and int(length) > max_bytes and not truncate:
                    raise HubBodyTooLarge(int(length), max_bytes)
                chunks, size = [], 0
                cap = max_bytes if r.status_code < 400 else 64 * 1024  # an error page: its first 64 KB say enough
                for chunk in r.iter_bytes():
                    if time.monotonic() > deadline:
                        raise HubDeadlineTimeout(f"the hub's answer did not arrive within {timeout:g} s")
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > cap:
                        if truncate or r.status_code >= 400:
                            break
                        raise HubBodyTooLarge(size, max_bytes)
                body = b"".join(chunks)[:cap]
                response = type(r)(r.status_code, headers=r.headers, content=body, request=r.request)
                response.history = list(r.history)
                box["response"] = response
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=work, name="eaglelab-hub-fetch", daemon=True)
    worker.start()
    worker.join(max(deadline - time.monotonic(), 0.0) + 0.05)
    if worker.is_alive():  # the daemon thread ends at its own socket timeout; nobody waits for it
        raise HubDeadlineTimeout(f"the hub's answer did not arrive within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box["response"]


#: Bytes of a safetensors file read first: huggingface_hub's one range request, enough for most headers.
FIRST_RANGE = 100_001
_COMMIT = re.compile(r"[0-9a-f]{40}")
_CONTENT_RANGE = re.compile(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*")


def _content_range(response) -> tuple[int, int, int | None] | None:
    """``(first, last, total)`` of a ``Content-Range`` header (total None when ``*``), None when absent or malformed."""
    m = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", ""))
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), None if m.group(3) == "*" else int(m.group(3))


def _file_size(response) -> int | None:
    """The whole file's length as an answer states it: its ``Content-Range`` total, else a full body's length."""
    span = _content_range(response)
    if span is not None:
        return span[2]
    if response.status_code == 200:
        length = response.headers.get("Content-Length", "")
        return int(length) if is_ascii_digits(length) else None
    return None


def open_repo(repo_id: str, revision: str | None = None) -> HubRepo:
    """The one way eaglelab opens a hub repository: refused in one line when ``HF_HUB_OFFLINE`` is set.

    Raises:
        HubError: the hub is off (``HF_HUB_OFFLINE``).
    """
    if hub_offline():
        raise HubError(repo_id, "HF_HUB_OFFLINE is set, so hub ids cannot be read; pass a local folder")
    return HubRepo(repo_id, revision, hub_timeout())


class HubRepo:
    """One hub repository read at one commit, each file's safetensors header read once.

    The commit is the revision when it is a commit id, else the first answer's ``X-Repo-Commit``
    (the hub sends it with every file, and with a missing file's 404); every later request asks
    ``/resolve/<commit>/``, so a branch that moves while a checkpoint is read is not followed. Each
    file's ETag and length are kept from its first answer; every later answer must agree.

    Args:
        repo_id: ``owner/name``.
        revision: branch, tag or commit (None: ``main``).
        timeout: the deadline of each request (default :func:`hub_timeout`).
    """

    def __init__(self, repo_id: str, revision: str | None = None, timeout: float | None = None):
        self.repo_id, self.revision = repo_id, revision
        self.timeout = hub_timeout() if timeout is None else timeout
        self.commit = revision if revision and _COMMIT.fullmatch(revision) else None
        self._stamps: dict[str, tuple[str | None, int | None]] = {}
        self._headers: dict[str, tuple[dict[str, Any], int]] = {}

    @contextmanager
    def reading(self, what: str | None = None) -> Iterator[None]:
        """Any failure of the hub inside the block as one :class:`HubError` line naming the repository.

        eaglelab's own errors pass as they are; huggingface_hub's and the HTTP client's become
        :func:`hub_problem`'s line, after ``what`` (for instance ``reading tokenizer.json``).
        """
        try:
            yield
        except EaglelabError:
            raise
        except Exception as exc:  # network, auth, missing repo, revision or file: one line
            problem = hub_problem(exc, self.revision, self.timeout)
            raise HubError(self.repo_id, f"{what}: {problem}" if what else problem) from None

    def where(self, filename: str) -> str:
        """``owner/name/file@revision`` for messages, printable."""
        return printable(f"{self.repo_id}/{filename}" + (f"@{self.revision}" if self.revision else ""))

    def get(self, filename: str, max_bytes: int, headers: dict[str, str] | None = None, truncate: bool = False):
        """GET one file of the repository at its commit (:func:`hub_fetch`), the answer checked against the earlier ones.

        Raises:
            HubError: the answer comes from another commit, names none, or the file changed since its first answer.
            Exception: :func:`hub_fetch`'s errors.
        """
        from huggingface_hub import hf_hub_url

        url = hf_hub_url(self.repo_id, filename, revision=self.commit or self.revision)
        response = hub_fetch(url, max_bytes, self.timeout, headers, truncate)
        self._check_commit(filename, response)
        if response.status_code < 300:
            self._check_file(filename, response)
        return response

    def _check_commit(self, filename: str, response) -> None:
        """Pin the commit on the first answer that names one; refuse an answer from any other."""
        named = {a.headers["X-Repo-Commit"] for a in (*response.history, response) if "X-Repo-Commit" in a.headers}
        for commit in sorted(named):
            if not _COMMIT.fullmatch(commit):
                raise HubError(self.repo_id, f"{printable(filename)}: the hub named commit {shown(commit)}, not a "
                                             "40-hex commit id")
            if self.commit is None:
                self.commit = commit
            elif commit != self.commit:
                raise HubError(self.repo_id, f"{printable(filename)}: the hub answered from commit {commit[:12]} after "
                                             f"{self.commit[:12]}: the repository changed while it was read (read it "
                                             "again, or pass a commit as the revision)")
        if self.commit is None and response.status_code < 300:
            raise HubError(self.repo_id, f"{printable(filename)}: the hub's answer names no commit (no X-Repo-Commit "
                                         "header): eaglelab reads a repository at one commit")

    def _check_file(self, filename: str, response) -> None:
        """Keep a file's ETag and length from its first answer; refuse a later answer that disagrees."""
        own = response.history[0] if response.history else response  # the hub's answer, before a CDN's
        etag, size = own.headers.get("X-Linked-Etag") or own.headers.get("ETag"), _file_size(response)
        old_etag, old_size = self._stamps.setdefault(filename, (etag, size))
        if etag and old_etag and etag != old_etag:
            raise HubError(self.repo_id, f"{printable(filename)} changed between two answers of the hub (ETag "
                                         f"{shown(old_etag, 30)}, then {shown(etag, 30)}): it is not read as one file")
        if size is not None and old_size is not None and size != old_size:
            raise HubError(self.repo_id, f"{printable(filename)} changed between two answers of the hub ({old_size:,} "
                                         f"bytes, then {size:,}): it is not read as one file")
        self._stamps[filename] = (old_etag or etag, size if old_size is None else old_size)

    def file_size(self, filename: str) -> int | None:
        """The file's length as its first answer stated it (None: not stated)."""
        return self._stamps.get(filename, (None, None))[1]

    def read_file(self, filename: str, max_bytes: int, error: type[EaglelabError] = SourceError) -> bytes | None:
        """One small file in one GET, or None when the repo has no such file.

        Not ``hf_hub_download``: when its HEAD times out it retries with a 60 s timeout and backoff (minutes),
        and it reports every failed HEAD (403, timeout, a server that is not a hub) as
        ``LocalEntryNotFoundError``, a subclass of ``EntryNotFoundError``, which would read as "no such file".

        Raises:
            error: the file is over ``max_bytes``.
            Exception: huggingface_hub's and the HTTP client's errors (see :func:`hub_problem`).
        """
        from huggingface_hub.errors import EntryNotFoundError
        from huggingface_hub.utils import hf_raise_for_status

        try:
            response = self.get(filename, max_bytes)
        except HubBodyTooLarge as exc:
            raise error(self.where(filename), f"is {exc}") from None
        try:
            hf_raise_for_status(response)
        except EntryNotFoundError:  # raised here only for the hub's 404 EntryNotFound
            return None
        return response.content

    def read_json(self, filename: str, error: type[EaglelabError] = SourceError) -> dict[str, Any] | None:
        """A JSON object file (strict JSON, capped), or None when the repo has no such file."""
        raw = self.read_file(filename, MAX_JSON_BYTES, error)
        return None if raw is None else loads_json_object(raw, self.where(filename), error)

    def read_config(self) -> tuple[dict[str, Any] | None, str | None]:
        """``config.json``: ``(config, where)``, or ``(None, None)`` when the repo has none.

        Raises:
            ConfigError: the config is not valid JSON or has fields of the wrong type.
        """
        where = f"{self.repo_id}/config.json" + (f"@{self.revision}" if self.revision else "")
        obj = self.read_json("config.json", ConfigError)
        if obj is None:
            return None, None
        return check_config_types(obj, where), where

    def header(self, filename: str) -> tuple[dict[str, Any], int]:
        """A safetensors file's decoded header and its length ``n`` (the data start at ``8 + n``), read once.

        Raises:
            HeaderError: a header safetensors itself would refuse (its length, its JSON).
            Exception: huggingface_hub's typed errors and :func:`hub_fetch`'s (see :func:`hub_problem`).
        """
        from huggingface_hub.utils import hf_raise_for_status

        if filename in self._headers:
            return self._headers[filename]
        where = printable(f"{self.repo_id}/{filename}")
        first = self.get(filename, FIRST_RANGE, {"Range": f"bytes=0-{FIRST_RANGE - 1}"}, truncate=True)
        hf_raise_for_status(first)
        if len(first.content) < 8:
            raise HeaderError(where, f"truncated file ({len(first.content)} bytes; a safetensors file starts with an "
                                     "8-byte length)")
        (n,) = struct.unpack("<Q", first.content[:8])
        if n > MAX_HEADER_BYTES:
            raise HeaderError(where, f"not a safetensors file: its header length is over the {MAX_HEADER_BYTES:,}-byte "
                                     "limit")
        if 8 + n <= len(first.content):
            raw = first.content[8:8 + n]
        else:
            rest = self.get(filename, n, {"Range": f"bytes=8-{n + 7}"}, truncate=True)
            hf_raise_for_status(rest)
            raw = rest.content
            if len(raw) != n:
                raise HeaderError(where, f"the header is {n:,} bytes but the hub sent {len(raw):,}")
        self._headers[filename] = (parse_header_json(raw, where), n)
        return self._headers[filename]

    def read_range(self, filename: str, start: int, size: int) -> bytes:
        """``size`` bytes of a file from ``start``, in one range request (each under the deadline).

        Raises:
            SourceError: the hub answered with another range or another number of bytes.
            HubError: the answer comes from another commit or the file changed (:meth:`get`).
            Exception: :func:`hub_fetch`'s errors.
        """
        from huggingface_hub.utils import hf_raise_for_status

        response = self.get(filename, size, {"Range": f"bytes={start}-{start + size - 1}"})
        hf_raise_for_status(response)
        span = _content_range(response)
        if response.status_code != 206 or len(response.content) != size or \
                (span is not None and span[:2] != (start, start + size - 1)):
            sent = f"bytes {span[0]}-{span[1]}" if span else f"{len(response.content):,} bytes"
            raise SourceError(printable(f"{self.repo_id}/{filename}"), f"the hub answered a range request with {sent} "
                                                                       f"(status {response.status_code}), bytes "
                                                                       f"{start}-{start + size - 1} asked")
        return response.content

    def read_into(self, filename: str, start: int, out: memoryview, chunk: int) -> None:
        """Fill ``out`` with the file's bytes from ``start``, in range requests of at most ``chunk`` bytes each."""
        for lo in range(0, len(out), chunk):
            n = min(chunk, len(out) - lo)
            out[lo:lo + n] = self.read_range(filename, start + lo, n)

    def snapshot(self, patterns: tuple[str, ...]) -> str:
        """The files matching ``patterns`` downloaded at this repository's commit (huggingface_hub's cache): their folder.

        The commit is the one the earlier reads pinned (a checkpoint's config and headers), so the weights
        downloaded are those that were checked, not whatever the branch holds by now. Every request waits at most
        the hub deadline; a failure is one :class:`HubError` line.
        """
        from huggingface_hub import snapshot_download

        with self.reading("downloading"):
            return snapshot_download(self.repo_id, revision=self.commit or self.revision, allow_patterns=list(patterns),
                                     etag_timeout=self.timeout)
