"""Hidden-state dumps the serving engines write, read sample by sample: SpecForge's and vLLM's layouts.

How a team at 1T-parameter scale gets a target's states: the engine that serves it runs over a data
set and dumps, per conversation, the states at the drafter's layers. Two producers, two layouts
(``docs/EAGLE3_FORMAT.md``, "Hidden-state dumps", says where each comes from):

- **SpecForge** (``scripts/prepare_hidden_states.py`` on SGLang): ``<out>/rows_{g}-{g+2000}/data_{idx}.ckpt``
  (``.ckpt.gz`` with ``--compress``: gzip of the ``torch.save`` bytes), one dict per sample:
  ``input_ids`` [S], ``loss_mask`` [S] (1 where the *token* is a response token), ``aux_hidden_state``
  [1, S, 3H], ``hidden_state`` [1, S, H], the last one **after** the final norm (SGLang's logits
  processor input; SpecForge's ``TargetHead`` applies ``lm_head`` only). Rows are right-padded to
  their batch's longest; the padding carries states and ``loss_mask`` 0. Samples with NaN are
  skipped, so ``idx`` has gaps.
- **vLLM** (``extract_hidden_states`` with the hidden-state connector; speculators'
  ``generate-offline-data`` names them ``hs_{i}.safetensors``): one safetensors file per request,
  ``hidden_states`` [S, 4, H] (the drafter's three layers, then the last layer **before** the final
  norm) and ``token_ids`` [S]. The loss mask stays in speculators' data set; a ``loss_mask`` [S]
  tensor in the file is used when present, else every position counts.

Both become :class:`DumpSample` in eaglelab's conventions: ``loss_mask[t]`` says the token *after* t
is a response token (SpecForge's mask moved one left), and the trailing run of positions that count
for nothing (padding, a last prompt token) is cut: causal attention means no counted quantity reads
them, so a padded and a clean file give the same numbers. Every file is checked as it is read
(keys, ranks, widths, layer count, NaN / Inf, token ids, truncation) and refused in one line naming it.
Pickles are read with ``torch.load(weights_only=True)`` only.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from eaglelab.errors import DumpError
from eaglelab.inputs import printable

LAYOUTS = ("specforge", "vllm")
#: Largest sample file read (compressed or not): a 128k-token Kimi sample is ~7 GB in bf16.
MAX_SAMPLE_BYTES = 16 * 1024**3
_SPECFORGE_NAME = re.compile(r"^data_(\d+)\.ckpt(\.gz)?$")
_NUMBERED = re.compile(r"(\d+)\.safetensors$")
_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_INTS = (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8)


@dataclass
class DumpSample:
    """One sequence's states, in eaglelab's conventions.

    Attributes:
        index: the sample's number in its folder (the producer's ``idx``).
        path: the file.
        input_ids: [S] int64.
        loss_mask: [S] bool, the token after each position is a response token.
        aux: [S, 3H] the drafter's three layers, concatenated (low, mid, high).
        last: [S, H] the last layer; after the final norm when ``last_normed``.
        last_normed: False for vLLM's dumps (the norm is applied from the target's head).
    """

    index: int
    path: Path
    input_ids: torch.Tensor
    loss_mask: torch.Tensor
    aux: torch.Tensor
    last: torch.Tensor
    last_normed: bool

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


@dataclass
class DumpFolder:
    """A folder of one producer's dumps, listed (sample index -> file), read lazily.

    Attributes:
        root: the folder.
        layout: ``specforge`` or ``vllm``.
        files: sample index -> file, in index order.
        hidden_size: H every sample must have (None: the first sample's).
        vocab_size: token ids must lie below it (None: unchecked).
    """

    root: Path
    layout: str
    files: dict[int, Path]
    hidden_size: int | None = None
    vocab_size: int | None = None
    bytes: int = field(default=0)

    def __len__(self) -> int:
        return len(self.files)

    def read(self, index: int) -> DumpSample:
        """Sample ``index``, checked; the first one read fixes ``hidden_size`` when it was not given."""
        path = self.files[index]
        reader = _read_specforge if self.layout == "specforge" else _read_vllm
        sample = reader(index, path)
        check_sample(sample, self.hidden_size, self.vocab_size)
        if self.hidden_size is None:
            self.hidden_size = int(sample.last.shape[-1])
        return trimmed(sample)

    def __iter__(self) -> Iterator[DumpSample]:
        for index in self.files:
            yield self.read(index)


def _walk(root: Path) -> list[Path]:
    out = []
    for dirpath, _dirs, names in os.walk(root):
        out += [Path(dirpath) / n for n in names]
    return sorted(out)


def open_dumps(path: str | Path, hidden_size: int | None = None, vocab_size: int | None = None,
               layout: str | None = None) -> DumpFolder:
    """List a dump folder and tell its layout (SpecForge ``data_*.ckpt[.gz]`` or vLLM ``*.safetensors``).

    Args:
        path: the folder the producer wrote (SpecForge's ``--output-path``, with its ``rows_*``
            subfolders; vLLM's shared storage path or speculators' ``hidden_states``).
        hidden_size: the targets' H (each sample is checked against it).
        vocab_size: the targets' V (token ids are checked against it).
        layout: force a layout (None: from the file names).

    Raises:
        DumpError: not a folder, no sample files, both layouts at once, two files for one index.
    """
    from eaglelab.inputs import path_kind

    root = Path(path).expanduser()
    where = printable(str(root))
    if path_kind(root, DumpError) != "folder":
        raise DumpError(where, "not a folder of hidden-state dumps")
    if layout is not None and layout not in LAYOUTS:
        raise DumpError(where, f"layout must be one of {', '.join(LAYOUTS)}, got {printable(repr(layout))}")
    files = _walk(root)
    specforge = [f for f in files if _SPECFORGE_NAME.match(f.name)]
    vllm = [f for f in files if f.name.endswith(".safetensors")]
    if layout is None:
        if specforge and vllm:
            raise DumpError(where, f"holds both SpecForge files ({printable(specforge[0].name)}) and safetensors "
                                   f"({printable(vllm[0].name)}): one producer's dumps per folder")
        layout = "specforge" if specforge else "vllm" if vllm else None
    if layout is None:
        raise DumpError(where, "holds no hidden-state dumps (SpecForge data_{idx}.ckpt / .ckpt.gz, or vLLM "
                               "*.safetensors)")
    chosen = specforge if layout == "specforge" else vllm
    indexed: dict[int, Path] = {}
    if layout == "specforge":
        pairs = [(int(_SPECFORGE_NAME.match(f.name).group(1)), f) for f in chosen]
    elif all(_NUMBERED.search(f.name) for f in chosen):
        pairs = [(int(_NUMBERED.search(f.name).group(1)), f) for f in chosen]
    else:  # request-id names: their sorted order is the sample order
        pairs = list(enumerate(sorted(chosen, key=lambda f: str(f.relative_to(root)))))
    for index, f in pairs:
        if index in indexed:
            raise DumpError(where, f"two files for sample {index}: {printable(str(indexed[index].relative_to(root)))} "
                                   f"and {printable(str(f.relative_to(root)))}")
        indexed[index] = f
    if not indexed:
        raise DumpError(where, f"holds no {layout} hidden-state files")
    total = 0
    for f in indexed.values():
        try:
            total += f.stat().st_size
        except OSError:
            pass
    return DumpFolder(root, layout, dict(sorted(indexed.items())), hidden_size, vocab_size, total)


def _read_capped(fh, where: str, what: str) -> bytes:
    """Everything ``fh`` holds, in chunks (no buffer of the cap's size), refused past :data:`MAX_SAMPLE_BYTES`."""
    chunks, size = [], 0
    while True:
        chunk = fh.read(1 << 26)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_SAMPLE_BYTES:
            raise DumpError(where, f"{what} over the {MAX_SAMPLE_BYTES:,}-byte cap on one sample")
        chunks.append(chunk)


def _read_bounded(path: Path, where: str) -> bytes:
    from eaglelab.inputs import open_regular

    with open_regular(path, DumpError) as fh:
        try:
            raw = _read_capped(fh, where, "is")
        except OSError as exc:
            raise DumpError(where, f"cannot read ({exc.strerror or type(exc).__name__})") from None
    if path.name.endswith(".gz"):
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as gz:
                raw = _read_capped(gz, where, "decompresses to")
        except (OSError, EOFError, ValueError, zlib.error) as exc:
            raise DumpError(where, f"not a readable gzip file ({printable(str(exc)) or type(exc).__name__})") from None
    return raw


def _read_specforge(index: int, path: Path) -> DumpSample:
    where = printable(str(path))
    raw = _read_bounded(path, where)
    try:
        d = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DumpError(where, f"not a SpecForge sample torch.load(weights_only=True) reads "
                               f"({printable(first[:200])})") from None
    if not isinstance(d, dict):
        raise DumpError(where, f"holds a {type(d).__name__}, not SpecForge's dict of tensors")
    need = ("input_ids", "loss_mask", "aux_hidden_state", "hidden_state")
    missing = [k for k in need if not isinstance(d.get(k), torch.Tensor)]
    if missing:
        raise DumpError(where, f"lacks the tensors {missing} of a SpecForge sample")
    ids, mask, aux, last = (d[k] for k in need)
    if aux.dim() == 3 and aux.shape[0] == 1:
        aux = aux[0]
    if last.dim() == 3 and last.shape[0] == 1:
        last = last[0]
    if ids.dim() == 2 and ids.shape[0] == 1:
        ids, mask = ids[0], mask.reshape(-1)
    if ids.dim() != 1 or mask.shape != ids.shape:
        raise DumpError(where, f"input_ids {list(ids.shape)} and loss_mask {list(mask.shape)}: expected two [S]")
    if mask.dtype not in _INTS + (torch.bool,):
        raise DumpError(where, f"loss_mask is {mask.dtype}, not an integer or bool mask")
    return DumpSample(index, path, ids, counted_from_tokens(mask), aux, last, last_normed=True)


def _read_vllm(index: int, path: Path) -> DumpSample:
    from safetensors import safe_open

    from eaglelab.checkpoints.headers import read_safetensors_header
    from eaglelab.errors import EaglelabError

    where = printable(str(path))
    try:
        infos, _ = read_safetensors_header(path)  # a hostile header is refused before safetensors maps it
    except EaglelabError as exc:
        raise DumpError(where, exc.problem) from None
    for key in ("hidden_states", "token_ids"):
        if key not in infos:
            raise DumpError(where, f"lacks {key!r} (vLLM's hidden-state files hold hidden_states [S, layers, H] and "
                                   "token_ids [S])")
    size = sum(i.nbytes for i in infos.values())
    if size > MAX_SAMPLE_BYTES:
        raise DumpError(where, f"holds {size:,} bytes, over the {MAX_SAMPLE_BYTES:,}-byte cap on one sample")
    try:
        with safe_open(str(path), "pt") as fh:
            states, ids = fh.get_tensor("hidden_states"), fh.get_tensor("token_ids")
            mask = fh.get_tensor("loss_mask") if "loss_mask" in infos else None
    except Exception as exc:
        raise DumpError(where, f"not readable as safetensors ({printable(str(exc))[:200]})") from None
    if ids.dim() == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if states.dim() != 3 or ids.dim() != 1 or states.shape[0] != ids.shape[0]:
        raise DumpError(where, f"hidden_states {list(states.shape)} and token_ids {list(ids.shape)}: expected "
                               "[S, layers, H] and [S]")
    if states.shape[1] != 4:
        raise DumpError(where, f"holds {states.shape[1]} layers; the probe needs 4 (the drafter's three, then the "
                               "last): capture with eagle_aux_hidden_state_layer_ids = the drafter's + [num layers]")
    if mask is None:
        counted = torch.ones_like(ids, dtype=torch.bool)
        counted[-1:] = False  # nothing follows the last token
    else:
        if mask.shape != ids.shape or mask.dtype not in _INTS + (torch.bool,):
            raise DumpError(where, f"loss_mask {list(mask.shape)} {mask.dtype}: expected an integer mask [S]")
        counted = counted_from_tokens(mask)
    aux = states[:, :3].reshape(states.shape[0], -1)
    return DumpSample(index, path, ids, counted, aux, states[:, 3], last_normed=False)


def counted_from_tokens(token_mask: torch.Tensor) -> torch.Tensor:
    """The engines' mask (token t is a response token) as eaglelab's (the token after t is one). [S] -> [S] bool."""
    counted = torch.zeros(token_mask.shape, dtype=torch.bool)
    counted[:-1] = token_mask[1:] != 0
    return counted


def tokens_from_counted(counted: torch.Tensor) -> torch.Tensor:
    """eaglelab's mask as the engines' token mask (int64, the first token never counts). [S] -> [S]."""
    token_mask = torch.zeros(counted.shape, dtype=torch.long)
    token_mask[1:] = counted[:-1].long()
    return token_mask


def counted_length(counted: torch.Tensor) -> int:
    """Positions a sample needs: up to its last counted one and the token it predicts (all when none counts)."""
    on = torch.nonzero(counted).reshape(-1)
    return min(int(on[-1]) + 2, len(counted)) if len(on) else len(counted)


def check_sample(s: DumpSample, hidden_size: int | None, vocab_size: int | None) -> None:
    """Refuse a sample eaglelab cannot use, naming its file: widths, ranks, dtypes, NaN / Inf, token ids."""
    where = printable(str(s.path))
    S = len(s)
    if S == 0:
        raise DumpError(where, "holds an empty sequence")
    if s.input_ids.dtype not in _INTS:
        raise DumpError(where, f"token ids are {s.input_ids.dtype}, not integers")
    if s.last.dim() != 2 or s.aux.dim() != 2 or s.last.shape[0] != S or s.aux.shape[0] != S:
        raise DumpError(where, f"states {list(s.aux.shape)} / {list(s.last.shape)} do not cover the {S} tokens")
    H = int(s.last.shape[1])
    if s.aux.shape[1] != 3 * H:
        raise DumpError(where, f"aux states are {s.aux.shape[1]} wide, not 3 x {H} (the drafter's three layers)")
    if hidden_size is not None and H != hidden_size:
        raise DumpError(where, f"hidden size {H}, but the targets' is {hidden_size}")
    if s.aux.dtype not in _FLOATS or s.last.dtype not in _FLOATS:
        raise DumpError(where, f"states are {s.aux.dtype} / {s.last.dtype}, not floating point")
    for name, t in (("aux", s.aux), ("last", s.last)):
        # max and min propagate NaN and reach ±Inf: two reductions, no [S, H] mask
        if not (bool(torch.isfinite(t.amax())) and bool(torch.isfinite(t.amin()))):
            raise DumpError(where, f"{name} states hold NaN or Inf")
    lo, hi = int(s.input_ids.min()), int(s.input_ids.max())
    if lo < 0 or (vocab_size is not None and hi >= vocab_size):
        raise DumpError(where, f"token ids span {lo}..{hi}, outside the vocabulary of {vocab_size}")


def trimmed(s: DumpSample) -> DumpSample:
    """The sample without its trailing positions that count for nothing (padding, a last prompt token)."""
    keep = counted_length(s.loss_mask) if bool(s.loss_mask.any()) else 1
    if keep == len(s):
        return s
    return DumpSample(s.index, s.path, s.input_ids[:keep].long(), s.loss_mask[:keep], s.aux[:keep], s.last[:keep],
                      s.last_normed)


@dataclass
class DumpPairs:
    """Two dump folders paired sample by sample (the index both have).

    Attributes:
        a, b: the folders.
        indices: sample indices present in both, in order.
        only_a, only_b: how many samples one folder has and the other lacks (skipped, e.g. NaN gaps).
    """

    a: DumpFolder
    b: DumpFolder
    indices: list[int]
    only_a: int
    only_b: int

    @property
    def paired(self) -> int:
        """Sample indices both folders hold (``indices`` may be capped below it)."""
        return len(self.a) - self.only_a

    def read(self, index: int) -> tuple[DumpSample, DumpSample]:
        """Sample ``index`` of A and of B, which must hold the same tokens and counted positions."""
        sa, sb = self.a.read(index), self.b.read(index)
        if len(sa) != len(sb) or not torch.equal(sa.input_ids.long(), sb.input_ids.long()):
            raise DumpError(f"{printable(str(sa.path))} vs {printable(str(sb.path))}",
                            f"sample {index} holds different token ids ({len(sa)} vs {len(sb)} tokens counted): "
                            "both targets must be captured on the same tokenized conversations")
        if not torch.equal(sa.loss_mask, sb.loss_mask):
            raise DumpError(f"{printable(str(sa.path))} vs {printable(str(sb.path))}",
                            f"sample {index} counts different positions (loss masks differ)")
        return sa, sb

    def notes(self) -> list[str]:
        out = []
        if self.only_a or self.only_b:
            out.append(f"{self.only_a} samples only in {self.a.root} and {self.only_b} only in {self.b.root} were "
                       "skipped (a producer drops samples with NaN)")
        return out


def pair_dumps(a: DumpFolder, b: DumpFolder, limit: int | None = None) -> DumpPairs:
    """Pair two folders by sample index; ``limit``: at most this many pairs (the first ones).

    Raises:
        DumpError: the folders share no sample index.
    """
    common = sorted(set(a.files) & set(b.files))
    if not common:
        raise DumpError(f"{printable(str(a.root))} vs {printable(str(b.root))}",
                        "no sample index in both folders: were they captured on the same data?")
    only_a, only_b = len(set(a.files) - set(common)), len(set(b.files) - set(common))
    return DumpPairs(a, b, common[:limit] if limit else common, only_a, only_b)


# --------------------------------------------------------------------------- writers (small targets, the demo world)

def specforge_payload(input_ids: torch.Tensor, loss_mask: torch.Tensor, aux: torch.Tensor,
                      last: torch.Tensor) -> dict[str, torch.Tensor]:
    """One sample as SpecForge saves it, from eaglelab's convention.

    Args:
        input_ids: [S]; loss_mask: [S] bool (the token after t is a response token);
        aux: [S, 3H]; last: [S, H] after the final norm.
    """
    return {"input_ids": input_ids.long().clone(), "loss_mask": tokens_from_counted(loss_mask),
            "hidden_state": last[None].clone(), "aux_hidden_state": aux[None].clone()}


def vllm_payload(input_ids: torch.Tensor, loss_mask: torch.Tensor, aux: torch.Tensor,
                 last_before_norm: torch.Tensor) -> dict[str, torch.Tensor]:
    """One request as vLLM's hidden-state connector writes it, plus the token loss mask speculators keeps apart.

    Args:
        aux: [S, 3H]; last_before_norm: [S, H] the last decoder layer's output (before the final norm).
    """
    S, H = last_before_norm.shape
    states = torch.cat([aux.reshape(S, 3, H), last_before_norm[:, None]], 1).contiguous()
    return {"hidden_states": states, "token_ids": input_ids.long().contiguous(),
            "loss_mask": tokens_from_counted(loss_mask)}


@torch.no_grad()
def capture_dumps(model, drafter_spec, ids: torch.Tensor, counted: torch.Tensor, out, layout: str = "specforge",
                  batch_size: int = 8, dtype: torch.dtype = torch.float32, compress: bool = False,
                  progress: bool = True) -> int:
    """Run a (small) target over sequences and write the dumps its serving engine would, into ``out``.

    What a team's engine writes at scale, made here for targets that load in one process: the demo
    world's, the tests'. SpecForge rows keep their padding (as its script writes them); vLLM requests
    are written unpadded, with the token loss mask beside the states.

    Args:
        model: a transformers causal LM.
        drafter_spec: the drafter whose three layers are dumped.
        ids: [N, S] token ids; counted: [N, S] eaglelab's loss mask.
        out: an :class:`eaglelab.outputs.OutputFolder` (each file written atomically and recorded).
        layout: ``specforge`` or ``vllm``.
        dtype: storage dtype (the engines write the model's, bf16 at scale).
        compress: SpecForge's ``--compress`` (``.ckpt.gz``).

    Returns:
        the number of samples written.
    """
    from safetensors.torch import save_file

    from eaglelab.model.targets import Target, decoder_layers
    from eaglelab.progress import progress as bar

    if layout not in LAYOUTS:
        raise DumpError("layout", f"must be one of {', '.join(LAYOUTS)}, got {printable(repr(layout))}")
    target = Target.for_drafter(model, drafter_spec)
    box = {}
    hook = decoder_layers(model)[-1].register_forward_hook(
        lambda _m, _i, o: box.__setitem__("raw", o[0] if isinstance(o, tuple) else o))
    try:
        for start in bar(range(0, len(ids), batch_size), desc=f"dump ({layout})", disable=not progress):
            batch = ids[start: start + batch_size]
            got = target.forward(batch.to(target.device))
            for j in range(len(batch)):
                i = start + j
                sample = (batch[j].cpu(), counted[i].bool().cpu(), got.aux[j].to("cpu", dtype),
                          (got.last_hidden if layout == "specforge" else box["raw"])[j].to("cpu", dtype))
                group = (i // 2000) * 2000
                if layout == "specforge":
                    name = f"rows_{group}-{group + 2000}/data_{i}.ckpt" + (".gz" if compress else "")
                    buf = io.BytesIO()
                    torch.save(specforge_payload(*sample), buf)
                    raw = gzip.compress(buf.getvalue(), compresslevel=6) if compress else buf.getvalue()
                    with out.writing(name) as tmp:
                        Path(tmp).write_bytes(raw)
                else:
                    n = counted_length(sample[1])  # a request is unpadded
                    with out.writing(f"hs_{i}.safetensors") as tmp:
                        save_file(vllm_payload(*(t[:n] for t in sample)), str(tmp))
    finally:
        hook.remove()
        target.close()
    return len(ids)
