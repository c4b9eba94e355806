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
Pickles are read with ``torch.load(weights_only=True)`` only; a ``.ckpt.gz`` is decompressed as a
stream, refused as soon as it grows past :data:`GZIP_RATIO` times its own size. A symlinked folder
that stays inside the dump folder is read at its target, once, and named; one leading outside it is
refused: no sample is skipped without a word.
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open

from eaglelab.checkpoints.files.headers import read_safetensors_header
from eaglelab.errors import DumpError, EaglelabError
from eaglelab.inputs import open_regular, path_kind, printable

LAYOUTS = ("specforge", "vllm")
#: Largest sample file read (compressed or not): a 128k-token Kimi sample is ~7 GB in bf16.
MAX_SAMPLE_BYTES = 16 * 1024**3
#: Most a ``.ckpt.gz`` may decompress to, per byte of the file: hidden states are floats, which gzip (level 6,
#: SpecForge's ``--compress``) shrinks by under 2x in bf16 or fp32; 8x leaves room for int64 ids and masks,
#: and a file past it is no sample but a bomb (gzip reaches 1000x on zeros: 1 MB claimed 2.4 GB).
GZIP_RATIO = 8
#: Bytes a ``.ckpt.gz`` may decompress to on top of that: ``torch.save``'s zip records and padding, which
#: dominate a tiny sample and compress far better than its floats.
GZIP_SLACK = 1 << 20
#: Bytes decompressed per read: the most a refused bomb holds past its cap.
_GZIP_CHUNK = 1 << 22
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
        bytes: the sample files' total size.
        links: each symlinked folder inside ``root`` (``"link -> target"``, relative) and how many samples lie
            in its target (read there, once).
    """

    root: Path
    layout: str
    files: dict[int, Path]
    hidden_size: int | None = None
    vocab_size: int | None = None
    bytes: int = field(default=0)
    links: dict[str, int] = field(default_factory=dict)

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


def _walk(root: Path) -> tuple[list[Path], dict[Path, Path]]:
    """Every file under ``root`` (links to folders not followed), and each symlinked folder with its target.

    A symlinked folder that resolves inside ``root`` holds files the walk reaches at their real place,
    so they are read there, once; one that leads outside ``root`` is refused: never skipped in silence.

    Raises:
        DumpError: a symlinked folder leading outside ``root``.
    """
    real_root = root.resolve()
    out, links = [], {}
    for dirpath, dirs, names in os.walk(root):
        here = Path(dirpath)
        for sub in (here / name for name in dirs if (here / name).is_symlink()):
            real = sub.resolve()
            if real != real_root and real_root not in real.parents:
                raise DumpError(printable(str(sub)), f"is a link to a folder outside the dump folder "
                                                     f"({printable(str(real))}): eaglelab reads samples only under "
                                                     "the folder given; move or copy them inside it")
            links[sub] = real
        out += [here / n for n in names]
    return sorted(out), links


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

    root = Path(path).expanduser()
    where = printable(str(root))
    if path_kind(root, DumpError) != "folder":
        raise DumpError(where, "not a folder of hidden-state dumps")
    if layout is not None and layout not in LAYOUTS:
        raise DumpError(where, f"layout must be one of {', '.join(LAYOUTS)}, got {printable(repr(layout))}")
    files, links = _walk(root)
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
    total = sum(_size(f) for f in indexed.values())
    under = {f"{link.relative_to(root)} -> {real.relative_to(root.resolve()) if real != root.resolve() else '.'}":
             sum(1 for f in indexed.values() if real in f.resolve().parents) for link, real in links.items()}
    return DumpFolder(root, layout, dict(sorted(indexed.items())), hidden_size, vocab_size, total, under)


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else 0


def _read_capped(fh, where: str, what: str, cap: int = MAX_SAMPLE_BYTES, why: str = "") -> io.BytesIO:
    """Everything ``fh`` holds, read in chunks into one buffer, refused as soon as it passes ``cap`` bytes.

    No chunk reads more than one byte past the cap, so a refused stream never holds more than ``cap + 1``.
    """
    buf, size = io.BytesIO(), 0
    while True:
        chunk = fh.read(min(_GZIP_CHUNK, cap + 1 - size))
        if not chunk:
            buf.seek(0)
            return buf
        size += len(chunk)
        if size > cap:
            raise DumpError(where, f"{what} over {cap:,} bytes{why}")
        buf.write(chunk)


def gzip_cap(compressed: int) -> int:
    """Most a ``.ckpt.gz`` of ``compressed`` bytes may decompress to (:data:`GZIP_RATIO`, :data:`GZIP_SLACK`)."""
    return min(MAX_SAMPLE_BYTES, GZIP_RATIO * compressed + GZIP_SLACK)


def _gzip_footer_size(fh) -> int:
    """The size a gzip stream's footer claims (ISIZE, modulo 2**32): a hint to refuse early, never trusted."""
    fh.seek(max(fh.seek(0, io.SEEK_END) - 4, 0))
    claimed = int.from_bytes(fh.read(4), "little")
    fh.seek(0)
    return claimed


def _read_bounded(path: Path, where: str) -> io.BytesIO:
    """A sample file's bytes; a ``.gz`` decompressed as a stream, capped near its own size (:func:`gzip_cap`)."""

    with open_regular(path, DumpError) as fh:
        try:
            if not path.name.endswith(".gz"):
                return _read_capped(fh, where, "is", why=", the cap on one sample")
            size = os.fstat(fh.fileno()).st_size
            cap = gzip_cap(size)
            why = (f" ({GZIP_RATIO} x its {size:,} compressed bytes + {GZIP_SLACK:,}: float states do not compress "
                   "that far; a gzip bomb?)")
            claimed = _gzip_footer_size(fh)
            if claimed > cap:
                raise DumpError(where, f"its gzip footer claims {claimed:,} bytes decompressed, over {cap:,}{why}")
            with gzip.GzipFile(fileobj=fh) as gz:
                return _read_capped(gz, where, "decompresses to", cap, why)
        except (EOFError, ValueError, zlib.error, gzip.BadGzipFile) as exc:
            raise DumpError(where, f"not a readable gzip file ({printable(str(exc)) or type(exc).__name__})") from None
        except OSError as exc:
            raise DumpError(where, f"cannot read ({printable(exc.strerror or str(exc)) or type(exc).__name__})") from None


#: The one line for a pickle that ``torch.load(weights_only=True)`` refuses because it names a global.
NEEDS_PICKLE = "not a tensors-only file: it needs pickled objects eaglelab refuses to load"


def _torch_load_problem(exc: Exception) -> str:
    """eaglelab's own words for why ``torch.load(weights_only=True)`` failed: torch's text (its advice to load
    with ``weights_only=False``) is never quoted."""
    if isinstance(exc, pickle.UnpicklingError) and "GLOBAL" in str(exc):
        return NEEDS_PICKLE
    return ("not a SpecForge sample torch.load(weights_only=True) reads (a truncated or corrupt torch.save file, "
            "or not one)")


def _read_specforge(index: int, path: Path) -> DumpSample:
    where = printable(str(path))
    raw = _read_bounded(path, where)
    try:
        d = torch.load(raw, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise DumpError(where, _torch_load_problem(exc)) from None
    finally:
        raw.close()
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

    def counts(self) -> str:
        """How many samples each folder holds, how many are probed, and how many are skipped and why."""
        return (f"{len(self.indices)} paired samples probed of {len(self.a)} in A and {len(self.b)} in B; skipped: "
                f"{self.only_a} only in A, {self.only_b} only in B, {self.paired - len(self.indices)} past --sequences")

    def notes(self) -> list[str]:
        out = []
        if self.only_a or self.only_b:
            out.append(f"{self.only_a} samples only in {printable(str(self.a.root))} and {self.only_b} only in "
                       f"{printable(str(self.b.root))} were skipped (a producer drops samples with NaN)")
        for name, folder in (("A", self.a), ("B", self.b)):
            for link, n in folder.links.items():
                out.append(f"{name}: {printable(link)} is a symlinked folder inside the dump folder: its {n} samples "
                           "were read once, at the target")
        return out


#: Paired samples whose files are compared when two folders might be one target's dumps twice.
SAME_CHECKED = 2


def pair_dumps(a: DumpFolder, b: DumpFolder, limit: int | None = None) -> DumpPairs:
    """Pair two folders by sample index; ``limit``: at most this many pairs (the first ones).

    Raises:
        DumpError: the folders share no sample index, or are one target's dumps twice (the same
            folder, the same files, or byte-identical first samples: :func:`same_dumps`).
    """
    where = f"{printable(str(a.root))} vs {printable(str(b.root))}"
    common = sorted(set(a.files) & set(b.files))
    same = same_dumps(a, b, common)
    if same:
        raise DumpError(where, f"{same}: the probe compares two targets' dumps (A's and B's); give each target's folder")
    if not common:
        raise DumpError(where, "no sample index in both folders: were they captured on the same data?")
    only_a, only_b = len(set(a.files) - set(common)), len(set(b.files) - set(common))
    return DumpPairs(a, b, common[:limit] if limit else common, only_a, only_b)


def same_dumps(a: DumpFolder, b: DumpFolder, common: list[int]) -> str | None:
    """Why A and B are one target's dumps twice, or None: the same folder (resolved), the same files (device and
    inode) or byte-identical files for the first :data:`SAME_CHECKED` paired samples (every one checked)."""
    if a.root.resolve() == b.root.resolve():
        return "--old-states and --new-states are the same folder"
    first = common[:SAME_CHECKED]
    if not first:
        return None
    try:
        if all(os.path.samefile(a.files[i], b.files[i]) for i in first):
            return f"the two folders hold the same files (samples {', '.join(map(str, first))})"
    except OSError:
        return None  # a file that cannot be opened is named when it is read
    if all(_same_bytes(a.files[i], b.files[i]) for i in first):
        return f"the two folders' first {len(first)} samples are byte-identical (one target's dumps twice?)"
    return None


def _same_bytes(x: Path, y: Path) -> bool:
    """Whether two files hold the same bytes, read in step and stopped at the first difference."""

    try:
        with open_regular(x, DumpError) as fx, open_regular(y, DumpError) as fy:
            while (cx := fx.read(1 << 20)) == fy.read(1 << 20):
                if not cx:
                    return True
            return False
    except (OSError, DumpError):
        return False  # unreadable here: named when the sample is read
