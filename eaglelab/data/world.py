"""A built world's paths, and where worlds live. Knows nothing of how they are built (see ``worlds.build``)."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from eaglelab.errors import ConfigError
from eaglelab.inputs import printable, read_json_object


@dataclass(frozen=True)
class World:
    """Paths of a built world (tiny or demo).

    Attributes:
        root: the world's folder.
        target_a, target_b: transformers folders (config, weights, tokenizer).
        drafter_a, drafter_b_small: drafter folders (SpecForge layout).
        prompts: JSON file with ``train`` and ``held_out`` prompt lists.
        data_a, data_b: token-id sequences (safetensors, key ``input_ids`` [N, S]) from each domain
            (tiny world).
        replies_a, replies_b: folders with each target's own replies to the train / held-out
            prompts (``train.safetensors``, ``held_out.safetensors``, see
            :class:`eaglelab.data.responses.Responses`; demo world).
        conversations_a, conversations_b: the same replies as JSONL conversations a user can pick as DATA
            (demo world): A's to the held-out prompts (what notebook 03 probes), B's to the train prompts,
            then the held-out ones (what notebook 04 trains on and holds out).
    """

    root: Path
    target_a: Path
    target_b: Path
    drafter_a: Path
    drafter_b_small: Path
    prompts: Path
    data_a: Path
    data_b: Path
    replies_a: Path
    replies_b: Path
    conversations_a: Path
    conversations_b: Path

    @classmethod
    def at(cls, root: str | Path) -> World:
        r = Path(root)
        return cls(r, r / "target-a", r / "target-b", r / "drafter-a", r / "drafter-b-small",
                   r / "prompts.json", r / "data" / "domain-a.safetensors", r / "data" / "domain-b.safetensors",
                   r / "data" / "replies-a", r / "data" / "replies-b", r / "data" / "conversations-a.jsonl",
                   r / "data" / "conversations-b.jsonl")

    def has_replies(self) -> bool:
        """Whether the world keeps its targets' own replies (the demo world does)."""
        return (self.replies_a / "held_out.safetensors").is_file() and (self.replies_b / "train.safetensors").is_file()

    def held_out_prompts(self) -> list[str]:
        """The world's held-out prompts, read back as hostile input (strict JSON, a list of texts)."""
        held = read_json_object(self.prompts, ConfigError).get("held_out")
        if not isinstance(held, list) or not all(isinstance(p, str) and p for p in held):
            raise ConfigError(printable(str(self.prompts)), "its 'held_out' is not a list of prompt texts")
        return held

    def to_json(self) -> dict:
        return {k: str(v) for k, v in asdict(self).items()}


def default_world_dir(kind: str = "tiny") -> Path:
    """``data/worlds/<kind>`` under the checkout (gitignored), or ``$EAGLELAB_WORLDS/<kind>``."""
    base = os.environ.get("EAGLELAB_WORLDS")
    if base:
        return Path(base) / kind
    return Path(__file__).resolve().parents[2] / "data" / "worlds" / kind


