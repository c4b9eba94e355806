"""Reading from a Hugging Face hub (or a mirror at ``HF_ENDPOINT``): bounded waits, one-line errors.

Hub ids are read as metadata only: ``config.json`` in one GET, safetensors headers by range request
(:func:`huggingface_hub.get_safetensors_metadata`). Every request waits at most
``HF_HUB_DOWNLOAD_TIMEOUT`` seconds (10 by default), read at each call; huggingface_hub's typed errors
become one line saying whether the repository, the revision or a file is missing, access is refused,
or the hub did not answer.
"""

from __future__ import annotations

import os
from typing import Any

from eaglelab.checkpoints.config_types import check_config_types
from eaglelab.errors import ConfigError
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


def read_hub_config(repo_id: str, revision: str | None = None,
                    timeout: float | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """A hub repo's ``config.json`` in one GET bounded by ``timeout``: ``(config, where)``, or ``(None, None)``.

    Not ``hf_hub_download``: when its HEAD times out it retries with a 60 s timeout and backoff (minutes), and
    it reports every failed HEAD (403, timeout, a server that is not a hub) as ``LocalEntryNotFoundError``,
    a subclass of ``EntryNotFoundError``, which would read as "the repo has no config.json".

    Raises:
        ConfigError: the config is not valid JSON or has fields of the wrong type.
        Exception: huggingface_hub's and the HTTP client's errors (see :func:`hub_problem`).
    """
    from huggingface_hub import get_session, hf_hub_url
    from huggingface_hub.errors import EntryNotFoundError
    from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

    timeout = hub_timeout() if timeout is None else timeout
    url = hf_hub_url(repo_id, "config.json", revision=revision)
    response = get_session().get(url, headers=build_hf_headers(), timeout=timeout)
    try:
        hf_raise_for_status(response)
    except EntryNotFoundError:  # raised here only for the hub's 404 EntryNotFound
        return None, None
    where = f"{repo_id}/config.json" + (f"@{revision}" if revision else "")
    if len(response.content) > MAX_JSON_BYTES:
        raise ConfigError(where, f"over {MAX_JSON_BYTES} bytes")
    obj = loads_json(response.content, where, ConfigError)
    if not isinstance(obj, dict):
        raise ConfigError(where, "expected a JSON object")
    return check_config_types(obj, where), where
