"""Full-size checkpoints with real headers and empty (sparse) weights: drafters, and samples of targets.

For inspecting and benchmarking at production shapes (a Kimi-K2 drafter is ~4.7 GB in bf16, a Kimi
target ~1 TB) without the disk or the time: the safetensors header is real, ``d2t`` / ``t2d`` hold a
valid identity vocabulary map, and the float weights are a hole in a sparse file (zeros when read).
No torch needed.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from eaglelab.atomic import atomic_path, write_json_atomic
from eaglelab.checkpoints.drafters.spec import drafter_spec_from_config
from eaglelab.checkpoints.drafters.tensor_table import expected_eagle3_tensors
from eaglelab.checkpoints.files.sources import DTYPE_SIZES

#: The Kimi-K2 EAGLE-3 drafter's shape (``docs/EAGLE3_FORMAT.md``), SpecForge style.
KIMI_K2_DRAFTER_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "num_hidden_layers": 1,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "head_dim": 128,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-05,
    "rope_theta": 50000.0,
    "max_position_embeddings": 131072,
    "vocab_size": 163840,
    "draft_vocab_size": 32000,
    "tie_word_embeddings": False,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_aux_hidden_state": True},
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
}


def write_sparse_safetensors(path: Path, entries: list[tuple[str, tuple[int, ...], str]],
                             contents: dict[str, bytes] | None = None) -> None:
    """One safetensors file at ``path`` (written in place: the caller makes it atomic), the data a hole.

    Args:
        entries: (name, shape, dtype) of each tensor, in file order.
        contents: raw bytes for some tensors, written at their offsets.
    """
    header: dict[str, Any] = {"__metadata__": {"format": "pt", "producer": "eaglelab.worlds.synthetic_checkpoints"}}
    offset = 0
    for name, shape, dtype in entries:
        n = DTYPE_SIZES[dtype]
        for s in shape:
            n *= s
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # align the data area to 8 bytes
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        data_start = 8 + len(raw)
        for name, blob in (contents or {}).items():
            if name in header:
                fh.seek(data_start + header[name]["data_offsets"][0])
                fh.write(blob)
        fh.truncate(data_start + offset)  # the rest is a hole: no disk used


def _write_shard(path: Path, entries: list[tuple[str, tuple[int, ...], str]], vocab: dict[str, bytes]) -> None:
    with atomic_path(path) as tmp:
        write_sparse_safetensors(tmp, entries, vocab)


def synthetic_drafter_entries(config: dict[str, Any], dtype: str = "BF16", include_embedding: bool = True,
                              include_head: bool = True, vocab_maps: bool | None = None
                              ) -> tuple[list[tuple[str, tuple[int, ...], str]], dict[str, bytes]]:
    """The tensors (name, shape, dtype) a drafter config implies, and the bytes of its identity vocabulary map.

    Args:
        include_head: write ``lm_head.weight`` (a full-vocabulary drafter may ship none).
        vocab_maps: write ``d2t`` / ``t2d`` (None: when the config needs them, i.e. a reduced draft vocabulary).
    """
    spec = drafter_spec_from_config(config)
    maps = not spec.full_vocab if vocab_maps is None else vocab_maps
    keep = {"embed_tokens.weight": include_embedding, "lm_head.weight": include_head, "d2t": maps, "t2d": maps}
    entries = [(n, e.shape, dtype if e.dtype == "float" else e.dtype)
               for n, e in expected_eagle3_tensors(spec).items() if keep.get(n, True)]
    Vd, V = spec.draft_vocab_size, spec.vocab_size
    t2d = bytearray(V)
    t2d[:Vd] = b"\x01" * Vd
    return entries, {"d2t": bytes(8 * Vd), "t2d": bytes(t2d)}  # identity map: d2t = 0, t2d[:Vd] = True


def write_synthetic_drafter(out_dir: str | Path, config: dict[str, Any] | None = None, dtype: str = "BF16",
                            include_embedding: bool = True, shards: int = 1, include_head: bool = True,
                            vocab_maps: bool | None = None) -> Path:
    """Write ``config.json`` + weights with the config's expected tensors, as a sparse file.

    Args:
        out_dir: folder to create.
        config: drafter config (default: :data:`KIMI_K2_DRAFTER_CONFIG`).
        dtype: safetensors dtype of the float weights.
        include_embedding: write ``embed_tokens.weight`` too.
        shards: > 1 writes ``model-0000i-of-0000n.safetensors`` files and an index.
        include_head, vocab_maps: see :func:`synthetic_drafter_entries`.
    """
    cfg = dict(config or KIMI_K2_DRAFTER_CONFIG)
    entries, vocab = synthetic_drafter_entries(cfg, dtype, include_embedding, include_head, vocab_maps)
    out = write_synthetic_weights(out_dir, entries, shards, vocab)
    write_json_atomic(out / "config.json", cfg)
    return out


def write_synthetic_weights(out_dir: str | Path, entries: list[tuple[str, tuple[int, ...], str]], shards: int = 1,
                            contents: dict[str, bytes] | None = None) -> Path:
    """Write tensors (name, shape, dtype) as sparse safetensors, one file or ``shards`` files + index.

    Args:
        contents: raw bytes for some tensors (written at their offsets); the rest is a hole.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    contents = contents or {}
    if shards <= 1:
        _write_shard(out / "model.safetensors", entries, contents)
        return out
    groups = [g for g in (entries[i::shards] for i in range(shards)) if g]
    weight_map = {}
    for i, group in enumerate(groups):
        fname = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        _write_shard(out / fname, group, contents)
        weight_map.update({name: fname for name, _, _ in group})
    write_json_atomic(out / "model.safetensors.index.json", {"metadata": {}, "weight_map": weight_map})
    return out
