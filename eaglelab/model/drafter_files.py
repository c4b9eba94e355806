"""Drafter checkpoints on disk, safetensors only: a drafter is written in the format it was read in.

SpecForge / SGLang layout: ``midlayer.*`` keys and a flat config. speculators / vLLM layout:
``layers.0.*`` keys and a ``transformer_layer_config``. Loading accepts either, and SGLang-prefixed
(``model.*``) keys; converting between them is :mod:`eaglelab.checkpoints.drafters.export`'s job.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from safetensors.torch import save_file

from eaglelab.checkpoints.drafters.tensor_table import check_vocab_maps
from eaglelab.checkpoints.files.headers import TensorInfo
from eaglelab.checkpoints.files.sources import Checkpoint, load_checkpoint, read_tensor_into
from eaglelab.errors import CheckpointMismatchError, ConfigError, SourceError
from eaglelab.inputs import printable
from eaglelab.model.drafter import Eagle3Drafter
from eaglelab.model.vocab import identity_vocab_map
from eaglelab.outputs import open_output_folder

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def drafter_state_dict(model: Eagle3Drafter, include_embedding: bool = False,
                       dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """State dict in the key names of the drafter's own format (RoPE buffers excluded; d2t / t2d kept exact).

    A full-vocabulary drafter leaves out what its file did not hold: ``lm_head`` when it serves the
    target's, the vocabulary maps when it had none (they are the identity); so does any drafter the
    embedding it does not hold (a placeholder, :meth:`Eagle3Drafter.holds`).
    """
    sd = {}
    prefix = model.spec.layer_prefix + "."
    left_out = {"embed_tokens.weight"} if not include_embedding else set()
    left_out |= set() if model.has_head else {"lm_head.weight"}
    left_out |= set() if model.has_vocab_map else {"d2t", "t2d"}
    for k, v in model.state_dict().items():
        if k.endswith("inv_freq") or k in left_out or v.is_meta:
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
    with open_output_folder(out_dir, "drafter", force=overwrite) as out:
        write_drafter(out, model, include_embedding, dtype, extra_config)
    return out.path


def write_drafter(out, model: Eagle3Drafter, include_embedding: bool = False, dtype: str | None = None,
                  extra_config: dict | None = None) -> None:
    """Write the drafter's two files into an open :class:`eaglelab.outputs.OutputFolder`."""
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


def check_drafter_tensors(model: Eagle3Drafter, shapes: dict[str, tuple[int, ...]], where: str) -> None:
    """Every tensor a drafter needs present with its shape and nothing unknown, from names and shapes alone.

    ``shapes``: normalised name -> shape (a state dict's, or the headers' before any byte is read).
    ``embed_tokens.weight`` may be absent, and so may a full-vocabulary drafter's ``lm_head`` and maps.

    Raises:
        CheckpointMismatchError: listing every missing, unexpected and wrong-shaped key.
    """
    own = {k: tuple(v.shape) for k, v in model.state_dict().items() if not k.endswith("inv_freq")}
    optional = {"embed_tokens.weight"} | ({"lm_head.weight", "d2t", "t2d"} if model.spec.full_vocab else set())
    missing = [k for k in own if k not in shapes and k not in optional]
    unexpected = [k for k in shapes if k not in own]
    wrong = [f"{k} {list(shapes[k])} (expected {list(own[k])})"
             for k in own if k in shapes and tuple(shapes[k]) != own[k]]
    if missing or unexpected or wrong:
        parts = []
        if missing:
            parts.append("missing " + ", ".join(missing))
        if unexpected:
            parts.append("unexpected " + ", ".join(unexpected))
        if wrong:
            parts.append("wrong shape " + ", ".join(wrong))
        raise CheckpointMismatchError(where, "; ".join(parts))
    if ("d2t" in shapes) != ("t2d" in shapes):
        raise CheckpointMismatchError(where, "holds one vocabulary map without the other (d2t and t2d go together)")


def _check_maps(model: Eagle3Drafter, sd: dict[str, torch.Tensor], where: str) -> None:
    if "d2t" not in sd:
        return
    problems = check_vocab_maps(sd["d2t"].numpy(), sd["t2d"].numpy(), model.spec.draft_vocab_size)
    if problems:
        raise CheckpointMismatchError(where, "; ".join(problems))


def _mark_held(model: Eagle3Drafter, names) -> None:
    model.has_embedding = "embed_tokens.weight" in names
    model.has_head = "lm_head.weight" in names
    model.has_vocab_map = "d2t" in names or not model.spec.full_vocab


#: safetensors dtype -> torch dtype, for what a drafter file holds (floats, the maps' integers and booleans).
_STORED = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool}


def read_tensor(info: TensorInfo) -> torch.Tensor:
    """One tensor of a local safetensors file, by its header's span, into a new tensor of its stored dtype.

    Raises:
        SourceError: a dtype eaglelab does not read, or the file cannot be read; HeaderError: it ends early.
    """
    if info.dtype not in _STORED:
        raise SourceError(printable(info.file), f"tensor {printable(repr(info.name))} is {info.dtype}, which eaglelab "
                                                f"does not read ({', '.join(_STORED)})")
    out = torch.empty(info.shape, dtype=_STORED[info.dtype])
    if out.numel():
        read_tensor_into(info, memoryview(out.reshape(-1).view(torch.uint8).numpy()))
    return out


def load_drafter(source: str | Path | Checkpoint, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                 embedding: bool = True) -> Eagle3Drafter:
    """Load a drafter folder (SpecForge / SGLang layout, or speculators) into :class:`Eagle3Drafter`.

    Weights are read with their headers' spans (never unpickled), one tensor at a time, each assigned in
    ``dtype`` on ``device`` as it is read: nothing is allocated before it is read, nothing is randomly
    initialised, and a Kimi-K2-sized drafter (embedding left to the target) takes its 2.4 GB in bf16 and
    not the 14 GB of a float32 build plus the file. Names and shapes are checked from the headers before
    any byte is read. A missing ``embed_tokens`` is allowed: take it from the target with
    :meth:`Eagle3Drafter.set_embedding`, or lend it with :meth:`Eagle3Drafter.serving_embedding`.

    Args:
        source: folder, safetensors file, shard index or hub id; or the checkpoint a pre-flight check already opened
            (:func:`~eaglelab.checkpoints.drafters.preflight.check_opened_drafter`), read, not opened again.
        dtype: the floating-point weights' dtype (the vocabulary maps stay integer / boolean).
        device: where the weights go.
        embedding: False leaves the file's ``embed_tokens`` unread (a placeholder, :meth:`Eagle3Drafter.holds`):
            for a drafter that only ever serves with the target's embedding lent (the probes), which would
            otherwise hold a second [V, H] table.

    Raises:
        SourceError / ConfigError: unreadable folder or config.
        CheckpointMismatchError: missing, unexpected or wrong-shaped tensors, or bad d2t / t2d.
    """
    ck = source if isinstance(source, Checkpoint) else load_checkpoint(str(source))
    source = ck.source if isinstance(source, Checkpoint) else source
    if ck.kind == "hub" and ck.hub is not None:  # the weights at the commit whose headers were just checked
        ck = load_checkpoint(ck.hub.snapshot(("*.json", "*.safetensors")))
    if ck.config is None:
        raise ConfigError(source, "no config.json beside the weights")
    model = Eagle3Drafter.unallocated(ck.config, str(ck.config_path or source), list(ck.tensors), dtype)
    infos = normalise_drafter_keys(ck.tensors)
    check_drafter_tensors(model, {k: tuple(info.shape) for k, info in infos.items()}, str(source))
    maps = {k: read_tensor(infos[k]) for k in ("d2t", "t2d") if k in infos}
    _check_maps(model, maps, str(source))
    own = model.state_dict()
    sd = {}
    for k, info in infos.items():
        if k == "embed_tokens.weight" and not embedding:
            continue
        v = maps[k] if k in maps else read_tensor(info)
        sd[k] = v.to(device, dtype if own[k].is_floating_point() else own[k].dtype)
        del v
    held = set(sd)
    model.load_state_dict(sd, strict=False, assign=True)  # what is not read stays a placeholder
    del sd
    if "d2t" not in held:  # a full-vocabulary file without maps: the identity
        model.d2t, model.t2d = identity_vocab_map(model.spec.vocab_size, model.spec.draft_vocab_size)
    model.to(device)
    _mark_held(model, held)
    return model
