"""Build (or reuse) a world by name: the tiny world or the demo world."""

from __future__ import annotations

from pathlib import Path

from eaglelab.data.world import World
from eaglelab.errors import ParameterError


def build_world(kind: str = "tiny", root: str | Path | None = None, force: bool = False) -> World:
    """Build (or reuse) a world: ``tiny`` (two tiny Llamas, ~70 s) or ``demo`` (the SmolLM2-135M pair, ~25 min)."""
    if kind == "tiny":
        from eaglelab.worlds.tiny import build_tiny_world

        return build_tiny_world(root, force=force)
    if kind == "demo":
        from eaglelab.worlds.demo import build_demo_world

        return build_demo_world(root, force=force)
    raise ParameterError("world", f"unknown world {kind!r}; choose tiny or demo")
