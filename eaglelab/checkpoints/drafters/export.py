"""Export a drafter for serving: the SGLang / SpecForge folder and the vLLM (speculators) folder.

SGLang reads the SpecForge layout (``midlayer.*``, a flat config, nested ``eagle_config`` aux ids
as layer outputs). vLLM reads the speculators format: ``layers.0.*`` keys, a
``transformer_layer_config``, a ``speculators_config`` naming the verifier, and top-level
``eagle_aux_hidden_state_layer_ids`` in vLLM's convention (layer *inputs*, one more than SGLang's).
Both directions carry every tensor (``fc_norm.*``, ``input_norm``, the vocabulary maps) and every
flag in the destination's own meaning, or refuse with one line when the destination cannot express
one (:mod:`eaglelab.checkpoints.drafters.variants`): an export is the same model, never a near one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eaglelab.checkpoints.drafters.spec import drafter_spec_from_config
from eaglelab.checkpoints.drafters.tensor_table import canonical_tensor_name, check_tensors_against_spec
from eaglelab.checkpoints.drafters.variants import to_specforge_config, to_speculators_config
from eaglelab.checkpoints.files.sources import is_hub_id, load_checkpoint
from eaglelab.errors import CheckpointMismatchError, ConfigError
from eaglelab.outputs import open_output_folder
from eaglelab.settings import DEFAULT_K

FORMATS = ("speculators", "specforge")


def export_drafter(drafter_dir: str | Path, out_dir: str | Path, to: str = "speculators",
                   target_cfg: dict[str, Any] | None = None, verifier: str | None = None,
                   target_embedding=None, overwrite: bool = False, k: int = DEFAULT_K,
                   drop_embedding: bool = False) -> Path:
    """Write a drafter checkpoint in another format: the same model, every tensor carried over.

    Args:
        drafter_dir: drafter folder, SpecForge or speculators layout.
        out_dir: new folder to write.
        to: ``speculators`` (vLLM) or ``specforge`` (SGLang).
        target_cfg: the target's config dict (required for ``speculators``: layer count, verifier).
        verifier: target name or path recorded in a speculators config; a local path is written
            absolute, so the export serves from any working directory (hub ids as given).
        target_embedding: [V, H] tensor written as ``embed_tokens.weight`` when the drafter has none
            (speculators models carry the embedding).
        overwrite: replace an export eaglelab wrote in ``out_dir`` (``--force``); other files are never replaced.
        k: drafts per cycle of a speculators config's default proposal method (its ``num_speculative_tokens``).
        drop_embedding: leave ``embed_tokens`` out, so the engine shares the target's (how SGLang
            always serves, and how the workbook measures a drafter on a target it was not trained on).

    Raises:
        UnsupportedDrafterError: the destination cannot express a flag of this drafter.
        CheckpointMismatchError: the source's tensors do not fit its own config.
        OverwriteError: ``out_dir`` holds an export and ``overwrite`` is False, or files eaglelab did not write.
    """
    import torch
    from safetensors.torch import load_file, save_file

    if to not in FORMATS:
        raise ConfigError(str(out_dir), f"unknown export format {to!r} (choose {' or '.join(FORMATS)})")
    ck = load_checkpoint(str(drafter_dir))
    if ck.config is None:
        raise ConfigError(drafter_dir, "no config.json beside the weights")
    where = str(ck.config_path or drafter_dir)
    if verifier and not is_hub_id(verifier) and Path(verifier).exists():
        verifier = str(Path(verifier).resolve())
    if to == "speculators":
        if target_cfg is None:
            raise ConfigError(where, "a speculators export needs the target's config (--target)")
        cfg = to_speculators_config(ck.config, target_cfg, verifier or "", k, where)
    else:
        cfg = to_specforge_config(ck.config, where)
    spec = drafter_spec_from_config(cfg, where)
    sd: dict[str, torch.Tensor] = {}
    for f in ck.weight_files:
        sd.update(load_file(f))
    prefix = spec.layer_prefix + "."
    renamed = {}
    for k, v in sd.items():
        k = canonical_tensor_name(k)
        renamed[prefix + k[len("midlayer."):] if k.startswith("midlayer.") else k] = v.contiguous()
    if drop_embedding:
        renamed.pop("embed_tokens.weight", None)
    elif "embed_tokens.weight" not in renamed and target_embedding is not None:
        renamed["embed_tokens.weight"] = target_embedding.detach().to("cpu", renamed["fc.weight"].dtype).contiguous()
    problems = check_tensors_against_spec(spec, {k: (tuple(v.shape), _dtype(v)) for k, v in renamed.items()})
    if problems:
        raise CheckpointMismatchError(drafter_dir, "; ".join(problems))
    with open_output_folder(out_dir, "drafter", force=overwrite) as out:
        with out.writing("model.safetensors") as tmp:
            save_file(renamed, str(tmp), metadata={"format": "pt", "producer": "eaglelab"})
        out.write_json("config.json", cfg)
    return out.path


def _dtype(t) -> str:
    """safetensors' dtype name of a tensor (``F32``, ``BF16``, ``I64``, ``BOOL``, ...)."""
    import torch

    names = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
             torch.int64: "I64", torch.int32: "I32", torch.bool: "BOOL"}
    return names.get(t.dtype, str(t.dtype))
