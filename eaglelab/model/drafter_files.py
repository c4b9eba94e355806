"""Drafter checkpoints on disk, safetensors only: a drafter is written in the format it was read in.

SpecForge / SGLang layout: ``midlayer.*`` keys and a flat config. speculators / vLLM layout:
``layers.0.*`` keys and a ``transformer_layer_config``. Loading accepts either, and SGLang-prefixed
(``model.*``) keys; converting between them is :mod:`eaglelab.checkpoints.export`'s job.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from eaglelab.checkpoints.tensor_table import check_vocab_maps
from eaglelab.errors import CheckpointMismatchError, ConfigError
from eaglelab.model.drafter import Eagle3Drafter

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def drafter_state_dict(model: Eagle3Drafter, include_embedding: bool = False,
                       dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """State dict in the key names of the drafter's own format (RoPE buffers excluded; d2t / t2d kept exact).

    A full-vocabulary drafter leaves out what its file did not hold: ``lm_head`` when it serves the
    target's, the vocabulary maps when it had none (they are the identity).
    """
    sd = {}
    prefix = model.spec.layer_prefix + "."
    left_out = {"embed_tokens.weight"} if not include_embedding else set()
    left_out |= set() if model.has_head else {"lm_head.weight"}
    left_out |= set() if model.has_vocab_map else {"d2t", "t2d"}
    for k, v in model.state_dict().items():
        if k.endswith("inv_freq") or k in left_out:
            continue
        k = prefix + k[len("midlayer."):] if k.startswith("midlayer.") else k
        v = v.detach()
        if dtype is not None and v.is_floating_point():
            v = v.to(dtype)
        sd[k] = v.contiguous().cpu()
    return sd


def save_drafter(model: Eagle3Drafter, out_dir: str | Path, include_embedding: bool = False,
                 dtype: str | None = None, overwrite: bool = False, extra_config: dict | None = None) -> Path:
    """Write ``config.json`` + ``model.safetensors`` in the drafter's own format, atomically.

    Args:
        model: the drafter.
        out_dir: a new or empty folder, or one holding a drafter eaglelab wrote (:mod:`eaglelab.outputs`).
        include_embedding: also save ``embed_tokens.weight`` (SGLang ignores it either way).
        dtype: ``float32`` / ``bfloat16`` / ``float16`` for the saved weights (default: as is).
        overwrite: replace what eaglelab wrote in ``out_dir`` before (``--force``); files eaglelab did
            not write are never replaced.
        extra_config: keys merged into the written config.

    Raises:
        OverwriteError: ``out_dir`` holds a drafter and ``overwrite`` is False, or files eaglelab did not write.
        OutputError: the folder cannot be written.
    """
    from eaglelab.outputs import open_output_folder

    with open_output_folder(out_dir, "drafter", force=overwrite) as out:
        write_drafter(out, model, include_embedding, dtype, extra_config)
    return out.path


def write_drafter(out, model: Eagle3Drafter, include_embedding: bool = False, dtype: str | None = None,
                  extra_config: dict | None = None) -> None:
    """Write the drafter's two files into an open :class:`eaglelab.outputs.OutputFolder`."""
    from safetensors.torch import save_file

    sd = drafter_state_dict(model, include_embedding, _DTYPES[dtype] if dtype else None)
    with out.writing("model.safetensors") as tmp:
        save_file(sd, str(tmp), metadata={"format": "pt", "producer": "eaglelab"})
    cfg = copy.deepcopy(model.config)
    cfg["torch_dtype"] = dtype or str(next(iter(v for v in sd.values() if v.is_floating_point())).dtype)[6:]
    cfg.update(extra_config or {})
    out.write_json("config.json", cfg)


def normalise_drafter_keys(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Accept SpecForge (``midlayer.*``), SGLang-prefixed (``model.*``) and speculators (``layers.0.*``) names."""
    out = {}
    for k, v in sd.items():
        k = k[len("model."):] if k.startswith("model.") else k
        k = "midlayer." + k[len("layers.0."):] if k.startswith("layers.0.") else k
        out[k] = v
    return out


def load_drafter_state(model: Eagle3Drafter, sd: dict[str, torch.Tensor], where: str) -> None:
    """Load a state dict strictly: every required key present with the right shape, nothing unknown.

    ``embed_tokens.weight`` may be absent (``model.has_embedding`` then stays False); so may a
    full-vocabulary drafter's ``lm_head`` (``model.has_head`` False: it serves the target's) and its
    vocabulary maps (the identity).

    Raises:
        CheckpointMismatchError: listing every missing, unexpected and wrong-shaped key.
    """
    sd = normalise_drafter_keys(sd)
    own = {k: v for k, v in model.state_dict().items() if not k.endswith("inv_freq")}
    optional = {"embed_tokens.weight"} | ({"lm_head.weight", "d2t", "t2d"} if model.spec.full_vocab else set())
    missing = [k for k in own if k not in sd and k not in optional]
    unexpected = [k for k in sd if k not in own]
    wrong = [f"{k} {list(sd[k].shape)} (expected {list(own[k].shape)})"
             for k in own if k in sd and sd[k].shape != own[k].shape]
    if missing or unexpected or wrong:
        parts = []
        if missing:
            parts.append("missing " + ", ".join(missing))
        if unexpected:
            parts.append("unexpected " + ", ".join(unexpected))
        if wrong:
            parts.append("wrong shape " + ", ".join(wrong))
        raise CheckpointMismatchError(where, "; ".join(parts))
    if ("d2t" in sd) != ("t2d" in sd):
        raise CheckpointMismatchError(where, "holds one vocabulary map without the other (d2t and t2d go together)")
    problems = check_vocab_maps(sd["d2t"].numpy(), sd["t2d"].numpy(), model.spec.draft_vocab_size) if "d2t" in sd else []
    if problems:
        raise CheckpointMismatchError(where, "; ".join(problems))
    with torch.no_grad():
        for k, v in sd.items():
            target = own[k]
            target.copy_(v.to(target.dtype))
    model.has_embedding = "embed_tokens.weight" in sd
    model.has_head = "lm_head.weight" in sd
    model.has_vocab_map = "d2t" in sd or not model.spec.full_vocab


def load_drafter(source: str | Path, dtype: torch.dtype = torch.float32) -> Eagle3Drafter:
    """Load a drafter folder (SpecForge / SGLang layout, or speculators) into :class:`Eagle3Drafter`.

    Weights are read with safetensors (never unpickled). A missing ``embed_tokens`` is
    allowed: take it from the target with :meth:`Eagle3Drafter.set_embedding`.

    Raises:
        SourceError / ConfigError: unreadable folder or config.
        CheckpointMismatchError: missing, unexpected or wrong-shaped tensors, or bad d2t / t2d.
    """
    from safetensors.torch import load_file

    from eaglelab.checkpoints.sources import load_checkpoint

    ck = load_checkpoint(str(source))
    if ck.kind == "hub":
        from huggingface_hub import snapshot_download

        # the weights at the commit whose headers were just checked, not whatever the branch holds now
        commit = ck.hub.commit if ck.hub is not None else None
        ck = load_checkpoint(snapshot_download(str(source), revision=commit, allow_patterns=["*.json", "*.safetensors"]))
    if ck.config is None:
        raise ConfigError(source, "no config.json beside the weights")
    sd: dict[str, torch.Tensor] = {}
    for f in ck.weight_files:
        sd.update(load_file(f))
    model = Eagle3Drafter(ck.config, where=str(ck.config_path or source), tensor_names=sd)
    load_drafter_state(model, sd, str(source))
    return model.to(dtype)
