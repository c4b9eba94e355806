"""ipywidgets wrappers around pure functions (ipywidgets is imported lazily).

Each widget's logic lives in a plain function that notebooks also call directly, so a
headless run exercises it: :func:`find_checkpoints` behind :func:`checkpoint_picker`, and
:func:`eaglelab.serving.perf.diagnose` behind :func:`perf_explorer`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path


def find_checkpoints(root: str | Path, max_depth: int = 4) -> list[str]:
    """EAGLE-3 drafter folders under ``root``: a config.json naming an Eagle3 architecture plus weights.

    Returns:
        sorted folder paths (strings), speculators exports included.
    """
    from eaglelab.checkpoints.schema import is_eagle3_config

    root = Path(root)
    found = []
    if not root.is_dir():
        return found
    for cfg in root.rglob("config.json"):
        if len(cfg.relative_to(root).parts) > max_depth + 1 or any(p.startswith(".") for p in cfg.parts):
            continue
        try:
            obj = json.loads(cfg.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(obj, dict) and is_eagle3_config(obj) and any(cfg.parent.glob("*.safetensors")):
            found.append(str(cfg.parent))
    return sorted(found)


def checkpoint_picker(root: str | Path, description: str, value: str = ""):
    """A combobox of the drafters found under ``root`` that also takes a typed path or hub id."""
    import ipywidgets as w

    options = find_checkpoints(root)
    return w.Combobox(value=value or (options[0] if options else ""), options=options, description=description,
                      placeholder="folder, .safetensors file or hub id", ensure_option=False,
                      layout=w.Layout(width="95%"), style={"description_width": "initial"})


def perf_explorer(render: Callable[[float, float, float], object], baseline_tps: float, cycle_ms: float,
                  accept_len: float):
    """Sliders for baseline tok/s, cycle ms and accept length driving ``render(...) -> figure``.

    Args:
        render: draws a figure (and may print) from the three values.
    """
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    b = w.FloatSlider(value=baseline_tps, min=5, max=max(400, 2 * baseline_tps), step=1, description="baseline tok/s")
    c = w.FloatSlider(value=cycle_ms, min=2, max=max(100, 2 * cycle_ms), step=0.5, description="cycle ms")
    a = w.FloatSlider(value=accept_len, min=1, max=8, step=0.05, description="accept len")
    out = w.Output()

    def update(*_):
        with out:
            out.clear_output(wait=True)
            fig = render(b.value, c.value, a.value)
            display(fig)
            plt.close(fig)

    for s in (b, c, a):
        s.style.description_width = "initial"
        s.observe(update, names="value")
    update()
    return w.VBox([w.HBox([b, c, a]), out])
