"""One progress-bar helper: tqdm.auto (widgets in Jupyter, text in a terminal).

Set ``EAGLELAB_PROGRESS=0`` to silence every bar (the test suite does).
"""

from __future__ import annotations

import os


def progress(iterable=None, desc: str = "", total: int | None = None, **kwargs):
    """``tqdm.auto.tqdm`` with eaglelab's defaults (transient bars, ETA shown)."""
    from tqdm.auto import tqdm

    disable = bool(kwargs.pop("disable", False)) or os.environ.get("EAGLELAB_PROGRESS", "1") == "0"
    return tqdm(iterable, desc=desc, total=total, leave=kwargs.pop("leave", False), disable=disable, **kwargs)
