"""Fine-tune a drafter for a new target: warm start from an old drafter, or from scratch.

Joins the pieces the notebook and ``eaglelab finetune`` share: token data (a text / JSONL file
or the built-in offline set), the new target's states captured on it, the initial drafter
(warm: the old drafter with its own d2t / t2d; scratch: fresh weights with a vocabulary map
from the data), and :func:`eaglelab.training.train_drafter`.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from eaglelab.drafter import Eagle3Drafter, build_vocab_map, count_tokens, load_drafter
from eaglelab.errors import SourceError
from eaglelab.evaluation import HiddenStates, capture_hidden_states
from eaglelab.targets import Target
from eaglelab.training import TrainConfig, TrainResult, train_drafter


def sequences_from_file(path: str | Path, tokenizer, seq_len: int) -> torch.Tensor:
    """Token sequences [N, seq_len] from a text file or a JSONL conversation file.

    JSONL lines may be ``{"text": ...}`` or SpecForge's ``{"id", "conversations": [{"role",
    "content"}...]}`` (contents joined with newlines; use the target's chat template upstream
    if you need exact formatting).
    """
    from eaglelab.worlds import pack_sequences

    p = Path(path)
    try:
        raw = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SourceError(p, f"cannot read data ({exc.strerror})") from None
    if p.suffix == ".jsonl":
        texts = []
        for n, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SourceError(p, f"line {n} is not JSON ({exc.msg})") from None
            if "text" in obj:
                texts.append(str(obj["text"]))
            elif "conversations" in obj:
                texts.append("\n".join(str(t.get("content", t.get("value", ""))) for t in obj["conversations"]))
            else:
                raise SourceError(p, f"line {n} has neither 'text' nor 'conversations'")
    else:
        texts = [t for t in raw.split("\n\n") if t.strip()]
    seqs = pack_sequences(tokenizer, texts, seq_len)
    if len(seqs) == 0:
        raise SourceError(p, f"fewer than {seq_len} tokens of data")
    return seqs


def builtin_sequences(tokenizer, seq_len: int, split: str = "train", n: int | None = None) -> torch.Tensor:
    """The built-in offline data: stdlib docstrings and code, alternated ([N, seq_len])."""
    from eaglelab.corpus import code_blocks, docstrings, split_held_out
    from eaglelab.worlds import pack_sequences

    pick = 0 if split == "train" else 1
    half = None if n is None else (n + 1) // 2
    a = pack_sequences(tokenizer, split_held_out(docstrings())[pick], seq_len, half)
    b = pack_sequences(tokenizer, split_held_out(code_blocks())[pick], seq_len, half)
    m = min(len(a), len(b))
    mixed = torch.stack([a[:m], b[:m]], dim=1).reshape(-1, seq_len)  # alternate the two domains
    return mixed[:n] if n else mixed


def initial_drafter(model, init: str | Path | None, train_ids: torch.Tensor, draft_vocab_size: int | None = None,
                    rebuild_vocab: bool = False, seed: int = 0) -> Eagle3Drafter:
    """Warm start from ``init`` (keeping its d2t / t2d) or a fresh drafter with a data-built map.

    Args:
        model: the new target.
        init: old drafter folder, or None for scratch.
        train_ids: training tokens, [N, S] or a list of rows (for the scratch vocabulary map).
        rebuild_vocab: warm start but rebuild d2t / t2d from the data (warns: lm_head rows then
            mean other tokens).
    """
    vocab = model.config.vocab_size
    if init is None:
        drafter = Eagle3Drafter.from_target_config(model.config.to_dict(), draft_vocab_size=draft_vocab_size,
                                                   seed=seed)
        drafter.set_vocab_map(*build_vocab_map(count_tokens(train_ids, vocab), drafter.spec.draft_vocab_size))
    else:
        drafter = load_drafter(init)
        if rebuild_vocab:
            warnings.warn("rebuilding d2t / t2d of a warm-started drafter: its lm_head rows now stand for other "
                          "tokens and must be re-learned", stacklevel=2)
            drafter.set_vocab_map(*build_vocab_map(count_tokens(train_ids, vocab), drafter.spec.draft_vocab_size))
    drafter.set_embedding(model.get_input_embeddings().weight.detach().to(drafter.fc.weight.dtype))
    return drafter.to(next(model.parameters()).device)


@dataclass
class FinetuneData:
    """Captured states of the new target: training and held-out, and the layers they come from."""

    train: HiddenStates
    held_out: HiddenStates
    aux_layer_outputs: tuple[int, ...]

    @classmethod
    def from_files(cls, train: str | Path, held_out: str | Path) -> FinetuneData:
        """States saved by :meth:`HiddenStates.save` (e.g. a world's ``replies-b/*-states.safetensors``)."""
        from eaglelab.errors import ConfigError

        tr, ho = HiddenStates.load(train), HiddenStates.load(held_out)
        if tr.aux_layers is None or tr.aux_layers != ho.aux_layers:
            raise ConfigError(str(train), f"training and held-out states must name the same aux layers "
                                          f"(got {tr.aux_layers} and {ho.aux_layers})")
        return cls(tr, ho, tr.aux_layers)

    def subset(self, n: int) -> FinetuneData:
        """The first ``n`` training sequences (same held-out set), for data-budget sweeps."""
        return FinetuneData(self.train.batch(range(min(n, len(self.train)))), self.held_out, self.aux_layer_outputs)


def capture_data(model, aux_spec, train_ids: torch.Tensor, eval_ids: torch.Tensor, progress: bool = True) -> FinetuneData:
    """Run the new target once over training and held-out tokens (states cached in memory)."""
    target = Target.for_drafter(model, aux_spec)
    try:
        return FinetuneData(capture_hidden_states(target, train_ids, progress=progress),
                            capture_hidden_states(target, eval_ids, progress=progress), target.aux_layer_outputs)
    finally:
        target.close()


def finetune(model, init: str | Path | None, data: FinetuneData, cfg: TrainConfig, run_dir: str | Path | None = None,
             resume: bool = False, overwrite: bool = False, rebuild_vocab: bool = False,
             draft_vocab_size: int | None = None, progress: bool = True, stop_after: int | None = None) -> TrainResult:
    """Train a drafter for ``model`` from ``init`` (warm) or from scratch (``init=None``)."""
    from eaglelab.errors import ConfigError
    from eaglelab.schema import aux_ids_as_layer_outputs

    drafter = initial_drafter(model, init, data.train.input_ids, draft_vocab_size, rebuild_vocab, cfg.seed)
    L = model.config.num_hidden_layers
    wanted = aux_ids_as_layer_outputs(drafter.spec.aux_layer_ids, drafter.spec.aux_convention, L)
    if tuple(wanted) != tuple(data.aux_layer_outputs):
        raise ConfigError(str(init or "scratch drafter"), f"reads layer outputs {list(wanted)} but the data was "
                                                          f"captured at {list(data.aux_layer_outputs)}")
    return train_drafter(drafter, data.train, model.lm_head, cfg, run_dir=run_dir, eval_states=data.held_out,
                         resume=resume, overwrite=overwrite, progress=progress, stop_after=stop_after)


def new_target_data(model, tokenizer, aux_spec, data_file: str | Path | None = None, world=None, seq_len: int = 64,
                    train_sequences: int = 128, eval_sequences: int = 32, progress: bool = True) -> tuple[FinetuneData, str]:
    """The new target's training data, first of: the user's file, the world's replies of the new target, built-in text.

    Args:
        model, tokenizer: the new target.
        aux_spec: the drafter spec whose aux layers are captured.
        data_file: a text / JSONL file (packed into ``seq_len`` rows; held out: built-in text).
        world: a :class:`eaglelab.worlds.World`; its target B's own replies and states are used
            when it has them (the demo world), and the drafter reads the layers they were captured at.
        seq_len, train_sequences, eval_sequences: sizes of the file / built-in sets (and caps
            for the world's replies).

    Returns:
        (data, a one-line description of where it came from).
    """
    if data_file is None and world is not None and world.has_replies():
        data = FinetuneData.from_files(world.replies_b / "train-states.safetensors",
                                       world.replies_b / "held_out-states.safetensors")
        data = FinetuneData(data.train.batch(range(min(train_sequences, len(data.train)))),
                            data.held_out.batch(range(min(eval_sequences, len(data.held_out)))), data.aux_layer_outputs)
        return data, (f"target B's own replies: {len(data.train)} train / {len(data.held_out)} held-out conversations "
                      f"({int(data.train.loss_mask.sum())} reply tokens)")
    if data_file is not None:
        train_ids, where = sequences_from_file(data_file, tokenizer, seq_len)[:train_sequences], str(data_file)
    else:
        train_ids, where = builtin_sequences(tokenizer, seq_len, "train", train_sequences), "built-in stdlib text"
    eval_ids = builtin_sequences(tokenizer, seq_len, "held_out", eval_sequences)
    data = capture_data(model, aux_spec, train_ids, eval_ids, progress=progress)
    return data, f"{where}: {tuple(train_ids.shape)} train, {tuple(eval_ids.shape)} held out"
