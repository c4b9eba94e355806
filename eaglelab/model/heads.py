"""A target's head and embedding without the target: three tensors read by name from its shard index.

The probe from hidden-state dumps (:func:`eaglelab.probe.dumps.run_dump_probe`) needs of each target
only what turns a last hidden state into next-token logits (the final norm and ``lm_head``) and what
the drafter reads for the tokens (``embed_tokens``). At Kimi size that is a few GB out of a TB: they
are read by name, from local safetensors or from a hub repository by range requests (at the commit
and from the headers its checkpoint was read with), and nothing else of the target is touched.

The names follow the checkpoint: a text model's ``model.embed_tokens.weight``, a multimodal one's
``language_model.model.embed_tokens.weight`` (Kimi-K2.5) or ``model.language_model.embed_tokens.weight``
(Qwen2.5-VL in transformers 4.52+); the norm and ``lm_head`` are looked up beside the embedding found,
and a tied ``lm_head`` (``tie_word_embeddings``) is the embedding.

What is read is checked before it is used: the shapes before any byte (one hidden size; rows padded
beyond the config's ``vocab_size`` read as the first ``vocab_size``, as SGLang and vLLM read them; fewer
rows refused), and every value as it is read (a NaN or infinity refused, naming the file and tensor).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from eaglelab.checkpoints.files.sources import Checkpoint, TensorInfo, load_checkpoint
from eaglelab.checkpoints.targets.config import head_names as target_heads
from eaglelab.checkpoints.targets.config import target_field, text_config
from eaglelab.errors import CheckpointMismatchError, SourceError, is_whole
from eaglelab.inputs import printable
from eaglelab.model.attention import rms_norm
from eaglelab.model.drafter_files import read_tensor

_TORCH_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}
#: Bytes per hub range request when reading a tensor (each request under the hub's deadline).
HUB_CHUNK_BYTES = 64 * 1024 * 1024
#: Elements checked for finite values at a time (a 4 MB mask, never a copy of the tensor).
FINITE_CHUNK = 1 << 22


@dataclass
class TargetHeads:
    """What the probe needs of one target: final norm, ``lm_head`` and input embedding.

    Attributes:
        source: the target as the user named it.
        norm_weight: [H] the final RMSNorm's weight.
        eps: its epsilon (``rms_norm_eps`` of the text config).
        lm_head: [V, H].
        embedding: [V, H] ``embed_tokens`` (the same tensor as ``lm_head`` when tied).
        names: the checkpoint's name of each of the three (``norm``, ``lm_head``, ``embed_tokens``).
        notes: what was read other than as stored (rows padded beyond the vocabulary left out), one line each.
    """

    source: str
    norm_weight: torch.Tensor
    eps: float
    lm_head: torch.Tensor
    embedding: torch.Tensor
    names: dict[str, str]
    notes: list[str] = field(default_factory=list)

    @property
    def hidden_size(self) -> int:
        return int(self.lm_head.shape[1])

    @property
    def vocab_size(self) -> int:
        return int(self.lm_head.shape[0])

    def to(self, device: str | torch.device, dtype: torch.dtype | None = None) -> TargetHeads:
        """On ``device``, the norm and ``lm_head`` in ``dtype`` (the head products' dtype).

        The embedding keeps its stored dtype: the drafter looks up a few rows and casts them, so a
        163,840 x 7,168 table is not copied into float32 (4.7 GB per target).
        """
        head = self.lm_head.to(device, dtype or self.lm_head.dtype)
        embedding = self.embedding.to(device)
        return TargetHeads(self.source, self.norm_weight.to(device, dtype or self.norm_weight.dtype), self.eps, head,
                           embedding, self.names, list(self.notes))

    def norm(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's final RMSNorm (:func:`~eaglelab.model.attention.rms_norm`), in float32 for the head products."""
        return rms_norm(hidden, self.norm_weight.to(hidden.device, torch.float32), self.eps, keep_float32=True)


def _where(ck: Checkpoint, info: TensorInfo) -> str:
    """The file holding a tensor, for messages: its local path, or ``owner/name/file`` on the hub."""
    return printable(info.file if ck.local else f"{ck.source}/{info.file}")


def _head_infos(ck: Checkpoint, names: dict[str, str]) -> tuple[dict[str, TensorInfo], list[str]]:
    """The three tensors as they will be read, from their headers alone, and the notes on them.

    One hidden size for the three. With the config's ``vocab_size`` V: an embedding or head of more rows
    is padded (SGLang and vLLM pad the vocabulary for tensor parallelism and ignore the padded rows), and
    only its first V rows are read; fewer rows than V are refused. Without V, the two must have the
    same rows.

    Raises:
        SourceError: a tensor not stored in floating point (a quantized head).
        CheckpointMismatchError: the shapes do not fit, naming the file, the tensor and both sizes.
    """
    infos = {key: ck.tensors[name] for key, name in names.items()}
    for info in infos.values():
        if info.dtype not in _TORCH_DTYPES:
            raise SourceError(_where(ck, info), f"tensor {printable(info.name)} is {info.dtype}; a head is read in "
                                                f"floating point ({', '.join(_TORCH_DTYPES)})")
    embed, head, norm = infos["embed_tokens"], infos["lm_head"], infos["norm"]
    if len(embed.shape) != 2 or len(head.shape) != 2 or len(norm.shape) != 1 or \
            not (embed.shape[1] == head.shape[1] == norm.shape[0]):
        raise CheckpointMismatchError(ck.source, f"embed_tokens {list(embed.shape)}, lm_head {list(head.shape)} and "
                                                 f"norm {list(norm.shape)} do not share one hidden size")
    vocab = target_field(ck.config, "vocab_size")
    if not is_whole(vocab):
        if embed.shape[0] != head.shape[0]:
            raise CheckpointMismatchError(_where(ck, head), f"tensor {printable(head.name)} has {head.shape[0]:,} rows "
                                                            f"and {printable(embed.name)} {embed.shape[0]:,}, and the "
                                                            "config names no vocab_size to say which rows are the "
                                                            "vocabulary")
        return infos, []
    notes = []
    for key in ("embed_tokens", "lm_head"):
        info = infos[key]
        rows = info.shape[0]
        if rows < vocab:
            raise CheckpointMismatchError(_where(ck, info), f"tensor {printable(info.name)} has {rows:,} rows, fewer than "
                                                            f"the config's vocab_size {vocab:,}")
        if rows > vocab:
            row_bytes = info.nbytes // rows
            infos[key] = replace(info, shape=(vocab, info.shape[1]), span=(info.span[0], info.span[0] + vocab * row_bytes))
            if key == "embed_tokens" or names["lm_head"] != names["embed_tokens"]:
                notes.append(f"{printable(info.name)} in {_where(ck, info)} has {rows:,} rows, padded beyond the "
                             f"config's vocab_size {vocab:,} (as SGLang and vLLM pad it for tensor parallelism): its "
                             f"first {vocab:,} rows are read, the padding is ignored")
    return infos, notes


def _check_finite(tensor: torch.Tensor, info: TensorInfo, where: str) -> None:
    """Refuse a tensor holding a NaN or an infinity: its two ends first, then, only when one is not finite, the first
    such row, found in chunks (no second copy of a GB head).

    Raises:
        CheckpointMismatchError: naming the file, the tensor and the first row that is not finite.
    """
    flat = tensor.reshape(-1)
    if flat.numel() == 0 or not flat.is_floating_point():
        return
    low, high = torch.aminmax(flat)  # NaN propagates, +-inf is an end: 30x faster than isfinite on bf16
    if bool(torch.isfinite(low)) and bool(torch.isfinite(high)):
        return
    width = int(tensor.shape[-1]) if tensor.dim() > 1 else 1
    for lo in range(0, flat.numel(), FINITE_CHUNK):
        ok = torch.isfinite(flat[lo:lo + FINITE_CHUNK])
        if not bool(ok.all()):
            first = lo + int(ok.logical_not_().to(torch.uint8).argmax())
            at = f"row {first // width:,}" if tensor.dim() > 1 else f"index {first:,}"
            raise CheckpointMismatchError(where, f"tensor {printable(info.name)} holds a non-finite value (NaN or "
                                                 f"infinity) at {at}: a head must be finite to give any verdict")


def _tensor(info: TensorInfo) -> torch.Tensor:
    """An empty tensor of the stored dtype (one :func:`_head_infos` accepted) and shape, for the bytes to be read into."""
    return torch.empty(info.shape, dtype=_TORCH_DTYPES[info.dtype])


def _bytes_of(tensor: torch.Tensor) -> memoryview:
    return memoryview(tensor.view(torch.uint8).reshape(-1).numpy()) if tensor.numel() else memoryview(bytearray())


def _read_hub(ck: Checkpoint, info: TensorInfo) -> torch.Tensor:
    """One tensor's bytes by range requests of :data:`HUB_CHUNK_BYTES` into its tensor, at the checkpoint's commit.

    The data start is the one the checkpoint's header read gave (one header per file): nothing is
    re-read to place a tensor, and an answer from another commit or of another file length is refused.
    """
    out = _tensor(info)
    with ck.hub.reading(f"reading {printable(info.name)}"):
        ck.hub.read_into(info.file, info.data_start + info.span[0], _bytes_of(out), HUB_CHUNK_BYTES)
    return out


@dataclass
class HeadsPlan:
    """A target's final norm, ``lm_head`` and embedding as they will be read: headers only, no byte read yet.

    What the probe from dumps sizes before it allocates (:meth:`nbytes`), then reads (:meth:`read`), from
    one read of the headers.

    Attributes:
        checkpoint: the target, as its config and headers were read.
        infos: ``norm``, ``lm_head`` and ``embed_tokens`` as they will be read (padded rows left out).
        notes: what is read other than as stored, one line each.
    """

    checkpoint: Checkpoint
    infos: dict[str, TensorInfo]
    notes: list[str]

    @property
    def tied(self) -> bool:
        return self.infos["lm_head"].name == self.infos["embed_tokens"].name

    @property
    def hidden_size(self) -> int:
        return int(self.infos["lm_head"].shape[1])

    def nbytes(self, dtype: torch.dtype | None = None) -> tuple[int, int]:
        """``(held, passing)``: bytes the three take once read and put in ``dtype`` (:meth:`TargetHeads.to`), and
        bytes more while they are cast (the stored head, let go after the cast).

        The embedding keeps its stored dtype; the norm's few bytes are counted as stored.
        """
        embed, head, norm = (self.infos[k] for k in ("embed_tokens", "lm_head", "norm"))
        stored = _TORCH_DTYPES[head.dtype]
        cast = dtype is not None and dtype != stored
        head_cast = head.numel * (dtype.itemsize if cast else stored.itemsize)
        held = embed.nbytes + norm.nbytes + (head_cast if cast or not self.tied else 0)
        return held, (head.nbytes if cast and not self.tied else 0)

    def read_one(self, key: str) -> torch.Tensor:
        """One of the three (``norm``, ``lm_head``, ``embed_tokens``), read by name and checked finite."""
        ck, info = self.checkpoint, self.infos[key]
        tensor = read_tensor(info) if ck.local or ck.hub is None else _read_hub(ck, info)
        _check_finite(tensor, info, _where(ck, info))
        return tensor

    def read(self) -> TargetHeads:
        """The three tensors (a tied head read once, as the embedding)."""
        names = {key: info.name for key, info in self.infos.items()}
        tensors = {key: self.read_one(key) for key in ("norm", "embed_tokens") + (() if self.tied else ("lm_head",))}
        tensors.setdefault("lm_head", tensors["embed_tokens"])
        eps = text_config(self.checkpoint.config).get("rms_norm_eps", 1e-6)
        return TargetHeads(self.checkpoint.source, tensors["norm"], float(eps), tensors["lm_head"],
                           tensors["embed_tokens"], names, list(self.notes))


def plan_target_heads(source: str, revision: str | None = None) -> HeadsPlan:
    """A target's heads as they will be read, from its config and headers (checked; nothing else read).

    Raises:
        SourceError, HubError, HeaderError, ConfigError: the files cannot be read.
        CheckpointMismatchError: the tensors are missing, or do not fit one another or the vocabulary.
    """
    ck = load_checkpoint(source, revision)
    infos, notes = _head_infos(ck, target_heads(ck.tensors, ck.config, ck.source, ck.weight_files).as_dict())
    return HeadsPlan(ck, infos, notes)


def read_target_embedding(source: str, revision: str | None = None) -> torch.Tensor:
    """A target's input embedding [V, H] alone, read by name (prefixes followed), nothing else of the target.

    What an export that carries the embedding needs (vLLM keeps a shipped one): 2.3 GB of a 1 TB Kimi
    target in bf16, without loading the model. Rows padded beyond the config's ``vocab_size`` are left out.

    Raises:
        SourceError, HubError, HeaderError, ConfigError: the files cannot be read.
        CheckpointMismatchError: the target has no language-model embedding, or one that is not finite.
    """
    return plan_target_heads(source, revision).read_one("embed_tokens")


def read_target_heads(source: str, revision: str | None = None) -> TargetHeads:
    """The final norm, ``lm_head`` and ``embed_tokens`` of a target, read by name and nothing else.

    Args:
        source: a target folder, shard index or hub id (its config and safetensors headers say where
            the three tensors are).
        revision: hub revision.

    Raises:
        SourceError, HubError, HeaderError, ConfigError: the files cannot be read.
        CheckpointMismatchError: the tensors are missing, do not fit one another or the vocabulary (checked
            before any is read), or hold a NaN or an infinity.
    """
    return plan_target_heads(source, revision).read()
