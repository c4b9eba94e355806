"""Reading from a Hugging Face hub (or a mirror at ``HF_ENDPOINT``): bounded waits, capped bodies, one-line errors.

Hub ids are read as metadata only: ``config.json`` in one GET, safetensors headers by range request
(the first 100,001 bytes, as huggingface_hub reads them; a second range only for a larger header).
Every request goes through :func:`hub_fetch`:

- **one deadline for the whole request**, ``HF_HUB_DOWNLOAD_TIMEOUT`` seconds (10 by default, read at
  each call): connect, headers, redirects and every byte of the body; a server that trickles a byte
  every few seconds, each read within the socket timeout, is cut off at the deadline all the same;
- **a size cap before the body is held**: ``Content-Length`` is checked first, and the body is
  streamed and counted (after decompression), so a 1 GiB ``config.json`` is refused after the cap,
  not after the download.

huggingface_hub's session (its headers, token, proxies and endpoint) and typed errors are used:
one line says whether the repository, the revision or a file is missing, access is refused, or the
hub did not answer in time.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from eaglelab.checkpoints.config_types import check_config_types
from eaglelab.errors import ConfigError, EaglelabError, SourceError
from eaglelab.inputs import MAX_JSON_BYTES, loads_json, printable


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
    from urllib.parse import unquote

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


def hub_fetch(url: str, max_bytes: int, timeout: float | None = None, headers: dict[str, str] | None = None,
              truncate: bool = False):
    """GET ``url`` through huggingface_hub's session under one deadline, the body streamed and capped.

    Args:
        url: the file's resolve URL.
        max_bytes: the most body bytes held.
        timeout: the deadline for the whole request, seconds (default :func:`hub_timeout`).
        headers: extra headers (``Range``); huggingface_hub's own (token, user agent) are added.
        truncate: keep the first ``max_bytes`` of a longer body instead of refusing it (a server that
            ignores ``Range`` and sends a whole weights file: only its header is needed).

    Returns:
        the session's response object with ``content`` read (pass it to ``hf_raise_for_status``).

    Raises:
        HubDeadlineTimeout: the deadline passed before the body was complete.
        HubBodyTooLarge: ``Content-Length`` or the streamed body is over ``max_bytes`` (unless ``truncate``).
        Exception: the HTTP client's own errors (connection refused, TLS...).
    """
    from huggingface_hub import get_session
    from huggingface_hub.utils import build_hf_headers

    timeout = hub_timeout() if timeout is None else timeout
    deadline = time.monotonic() + timeout
    session = get_session()
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            with session.stream("GET", url, headers={**build_hf_headers(), **(headers or {})}, timeout=timeout,
                                follow_redirects=True) as r:
                length = r.headers.get("Content-Length", "")
                if r.status_code < 400 and length.isdigit() and int(length) > max_bytes and not truncate:
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
                box["response"] = type(r)(r.status_code, headers=r.headers, content=body, request=r.request)
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


def read_hub_file(repo_id: str, filename: str, revision: str | None, timeout: float, max_bytes: int,
                  error: type[EaglelabError] = SourceError) -> bytes | None:
    """One small file of a hub repo in one GET bounded by ``timeout``, or None when the repo has no such file.

    Not ``hf_hub_download``: when its HEAD times out it retries with a 60 s timeout and backoff (minutes), and
    it reports every failed HEAD (403, timeout, a server that is not a hub) as ``LocalEntryNotFoundError``,
    a subclass of ``EntryNotFoundError``, which would read as "the repo has no such file".

    Raises:
        error: the file is over ``max_bytes``.
        Exception: huggingface_hub's and the HTTP client's errors (see :func:`hub_problem`).
    """
    from huggingface_hub import hf_hub_url
    from huggingface_hub.errors import EntryNotFoundError
    from huggingface_hub.utils import hf_raise_for_status

    where = printable(f"{repo_id}/{filename}" + (f"@{revision}" if revision else ""))
    try:
        response = hub_fetch(hf_hub_url(repo_id, filename, revision=revision), max_bytes, timeout)
    except HubBodyTooLarge as exc:
        raise error(where, f"is {exc}") from None
    try:
        hf_raise_for_status(response)
    except EntryNotFoundError:  # raised here only for the hub's 404 EntryNotFound
        return None
    return response.content


def read_hub_json(repo_id: str, filename: str, revision: str | None, timeout: float,
                  error: type[EaglelabError] = SourceError) -> dict[str, Any] | None:
    """A hub repo's JSON object file (strict JSON, capped), or None when the repo has no such file."""
    raw = read_hub_file(repo_id, filename, revision, timeout, MAX_JSON_BYTES, error)
    if raw is None:
        return None
    where = printable(f"{repo_id}/{filename}" + (f"@{revision}" if revision else ""))
    obj = loads_json(raw, where, error)
    if not isinstance(obj, dict):
        raise error(where, "expected a JSON object")
    return obj


def read_hub_config(repo_id: str, revision: str | None = None,
                    timeout: float | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """A hub repo's ``config.json`` in one GET bounded by ``timeout``: ``(config, where)``, or ``(None, None)``.

    Raises:
        ConfigError: the config is not valid JSON or has fields of the wrong type.
        Exception: huggingface_hub's and the HTTP client's errors (see :func:`hub_problem`).
    """
    timeout = hub_timeout() if timeout is None else timeout
    where = f"{repo_id}/config.json" + (f"@{revision}" if revision else "")
    obj = read_hub_json(repo_id, "config.json", revision, timeout, ConfigError)
    if obj is None:
        return None, None
    return check_config_types(obj, where), where


#: Bytes of a safetensors file read first: huggingface_hub's one range request, enough for most headers.
FIRST_RANGE = 100_001


def read_hub_header(repo_id: str, filename: str, revision: str | None, timeout: float) -> dict[str, Any]:
    """The decoded safetensors header of one hub file, from range requests only (never the tensors).

    Raises:
        HeaderError: a header safetensors itself would refuse (its length, its JSON).
        Exception: huggingface_hub's typed errors and :func:`hub_fetch`'s (see :func:`hub_problem`).
    """
    import struct

    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import hf_raise_for_status

    from eaglelab.checkpoints.headers import MAX_HEADER_BYTES, parse_header_json
    from eaglelab.errors import HeaderError

    where = printable(f"{repo_id}/{filename}")
    url = hf_hub_url(repo_id, filename, revision=revision)
    first = hub_fetch(url, FIRST_RANGE, timeout, {"Range": f"bytes=0-{FIRST_RANGE - 1}"}, truncate=True)
    hf_raise_for_status(first)
    if len(first.content) < 8:
        raise HeaderError(where, f"truncated file ({len(first.content)} bytes; a safetensors file starts with an "
                                 "8-byte length)")
    (n,) = struct.unpack("<Q", first.content[:8])
    if n > MAX_HEADER_BYTES:
        raise HeaderError(where, f"not a safetensors file: its header length is over the {MAX_HEADER_BYTES:,}-byte limit")
    if 8 + n <= len(first.content):
        raw = first.content[8:8 + n]
    else:
        rest = hub_fetch(url, n, timeout, {"Range": f"bytes=8-{n + 7}"}, truncate=True)
        hf_raise_for_status(rest)
        raw = rest.content
        if len(raw) != n:
            raise HeaderError(where, f"the header is {n:,} bytes but the hub sent {len(raw):,}")
    return parse_header_json(raw, where)


def read_hub_index(repo_id: str, revision: str | None, timeout: float) -> dict[str, Any] | None:
    """The repo's ``model.safetensors.index.json`` (None when it has none), strict JSON, capped."""
    return read_hub_json(repo_id, "model.safetensors.index.json", revision, timeout)
