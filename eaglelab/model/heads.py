"""A target's head and embedding without the target: three tensors read by name from its shard index.

The probe from hidden-state dumps (:func:`eaglelab.probe.dumps.run_dump_probe`) needs of each target
only what turns a last hidden state into next-token logits (the final norm and ``lm_head``) and what
the drafter reads for the tokens (``embed_tokens``). At Kimi size that is a few GB out of a TB: they
are read by name, from local safetensors or from a hub repository by range requests, and nothing
else of the target is touched.

The names follow the checkpoint: a text model's ``model.embed_tokens.weight``, a multimodal one's
``language_model.model.embed_tokens.weight`` (Kimi-K2.5) or ``model.language_model.embed_tokens.weight``
(Qwen2.5-VL in transformers 4.52+); the norm and ``lm_head`` are looked up beside the embedding found,
and a tied ``lm_head`` (``tie_word_embeddings``) is the embedding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from eaglelab.checkpoints.sources import Checkpoint, TensorInfo, is_hub_id, load_checkpoint, read_tensor_into
from eaglelab.checkpoints.target_config import head_names as target_heads
from eaglelab.checkpoints.target_config import text_config
from eaglelab.errors import CheckpointMismatchError, HubError, SourceError
from eaglelab.inputs import printable

_TORCH_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}
#: Bytes per hub range request when reading a tensor (each request under the hub's deadline).
HUB_CHUNK_BYTES = 64 * 1024 * 1024


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
    """

    source: str
    norm_weight: torch.Tensor
    eps: float
    lm_head: torch.Tensor
    embedding: torch.Tensor
    names: dict[str, str]

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
                           embedding, self.names)

    def norm(self, hidden: torch.Tensor) -> torch.Tensor:
        """The final RMSNorm as Llama / DeepSeek compute it (float32 variance, weight after the cast back)."""
        x = hidden.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.norm_weight.to(hidden.device, torch.float32) * x


def head_names(ck: Checkpoint) -> dict[str, str]:
    """The checkpoint's names of ``embed_tokens``, the final ``norm`` and ``lm_head`` (prefixes followed).

    Raises:
        CheckpointMismatchError: no language-model embedding, or no norm / lm_head beside it.
    """
    return target_heads(ck.tensors, ck.config, ck.source).as_dict()


def _decode(raw: bytes | bytearray, info: TensorInfo, where: str) -> torch.Tensor:
    if info.dtype not in _TORCH_DTYPES:
        raise SourceError(where, f"tensor {printable(info.name)} is {info.dtype}; a head is read in floating point "
                                 f"({', '.join(_TORCH_DTYPES)})")
    if len(raw) != info.nbytes:
        raise SourceError(where, f"tensor {printable(info.name)}: {len(raw):,} bytes read, {info.nbytes:,} expected")
    return torch.frombuffer(bytearray(raw) if isinstance(raw, bytes) else raw,
                            dtype=_TORCH_DTYPES[info.dtype]).reshape(info.shape).clone()


def _read_local(info: TensorInfo) -> torch.Tensor:
    if info.dtype not in _TORCH_DTYPES:
        return _decode(b"", info, printable(info.file))
    out = torch.empty(info.shape, dtype=_TORCH_DTYPES[info.dtype])
    read_tensor_into(info, memoryview(out.view(torch.uint8).reshape(-1).numpy()) if out.numel() else memoryview(b""))
    return out


def _read_hub(repo_id: str, info: TensorInfo, revision: str | None) -> torch.Tensor:
    """One tensor's bytes by range requests of :data:`HUB_CHUNK_BYTES`, each under the hub's deadline."""
    import struct

    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import hf_raise_for_status

    from eaglelab.checkpoints.hub import hub_fetch, hub_problem, hub_timeout

    where = printable(f"{repo_id}/{info.file}")
    url = hf_hub_url(repo_id, info.file, revision=revision)
    buf = bytearray()
    timeout = hub_timeout()
    try:
        first = hub_fetch(url, 8, timeout, {"Range": "bytes=0-7"}, truncate=True)  # the header's length
        hf_raise_for_status(first)
        if len(first.content) != 8:
            raise SourceError(where, "the hub sent no safetensors header length")
        start = 8 + struct.unpack("<Q", first.content)[0] + info.span[0]
        while len(buf) < info.nbytes:
            n = min(HUB_CHUNK_BYTES, info.nbytes - len(buf))
            lo = start + len(buf)
            r = hub_fetch(url, n, timeout, {"Range": f"bytes={lo}-{lo + n - 1}"})
            hf_raise_for_status(r)
            if r.status_code != 206 or len(r.content) != n:
                raise SourceError(where, f"the hub answered a range request with {len(r.content):,} bytes "
                                         f"(status {r.status_code}), {n:,} asked")
            buf += r.content
    except SourceError:
        raise
    except Exception as exc:
        raise HubError(repo_id, f"reading {printable(info.name)}: {hub_problem(exc, revision, timeout)}") from None
    return _decode(buf, info, where)


def _reader(source: str, revision: str | None):
    """The checkpoint, its head names, and a function reading one tensor by name (locally or by hub ranges)."""
    ck = load_checkpoint(source, revision)
    names = head_names(ck)
    hub = is_hub_id(str(source)) and not ck.local

    def read(name: str) -> torch.Tensor:
        info = ck.tensors[name]
        return _read_hub(str(source), info, revision) if hub else _read_local(info)

    return ck, names, read


def read_target_embedding(source: str, revision: str | None = None) -> torch.Tensor:
    """A target's input embedding [V, H] alone, read by name (prefixes followed), nothing else of the target.

    What an export that carries the embedding needs (vLLM keeps a shipped one): 2.3 GB of a 1 TB Kimi
    target in bf16, without loading the model.

    Raises:
        SourceError, HubError, HeaderError, ConfigError: the files cannot be read.
        CheckpointMismatchError: the target has no language-model embedding.
    """
    _, names, read = _reader(source, revision)
    return read(names["embed_tokens"])


def read_target_heads(source: str, revision: str | None = None) -> TargetHeads:
    """The final norm, ``lm_head`` and ``embed_tokens`` of a target, read by name and nothing else.

    Args:
        source: a target folder, shard index or hub id (its config and safetensors headers say where
            the three tensors are).
        revision: hub revision.

    Raises:
        SourceError, HubError, HeaderError, ConfigError: the files cannot be read.
        CheckpointMismatchError: the tensors are missing or do not fit one another.
    """
    ck, names, read = _reader(source, revision)
    tensors = {key: read(name) for key, name in names.items() if key != "lm_head" or name != names["embed_tokens"]}
    tensors.setdefault("lm_head", tensors["embed_tokens"])
    cfg = text_config(ck.config)
    eps = cfg.get("rms_norm_eps", 1e-6)
    embed, head, norm = tensors["embed_tokens"], tensors["lm_head"], tensors["norm"]
    if embed.dim() != 2 or head.dim() != 2 or norm.dim() != 1 or not (embed.shape[1] == head.shape[1] == norm.shape[0]):
        raise CheckpointMismatchError(source, f"embed_tokens {list(embed.shape)}, lm_head {list(head.shape)} and norm "
                                              f"{list(norm.shape)} do not share one hidden size")
    return TargetHeads(str(source), norm, float(eps), head, embed, names)
