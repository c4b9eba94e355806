"""The one data layer: every token set the notebooks, the command line and the benchmarks use.

Each set is built one way, whoever asks, with the same precedence:

1. the user's file (text or JSONL), when given;
2. else the world's own conversations, when the targets belong to a built world that keeps
   them (the demo world): a target's own replies, as the serving target would write them;
3. else the built-in offline text (held-out standard-library docstrings and code).

Every set says where it came from (:class:`DataSource`), so findings can quote it. The probe's data
is resolved by :func:`eaglelab.data.probe_data.probe_data_choice` (metadata only), which the pickers
and the command line also call to say, before anything loads, what text the probe will use and
whether a verdict can be read from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from eaglelab.data.conversations import conversation_responses
from eaglelab.data.corpus import docstrings, prompts_from_docstrings, split_held_out
from eaglelab.data.data_files import data_file as read_data_file
from eaglelab.data.probe_data import (
    FILE,
    WORLD,
    DataChoice,
    probe_data_choice,
    world_of,  # noqa: F401 (callers import it from here, as before)
)
from eaglelab.data.responses import Responses, capture_response_states, response_rows
from eaglelab.data.states import FinetuneData, capture_data
from eaglelab.data.tokens import builtin_sequences, encode_prompts, sequences_from_file
from eaglelab.data.world import World
from eaglelab.errors import SourceError
from eaglelab.model.targets import Target


@dataclass(frozen=True)
class DataSource:
    """Where a token set came from.

    Attributes:
        kind: ``file`` (the user's), ``world-replies`` (a world's own conversations) or
            ``built-in`` (stdlib text shipped with Python).
        description: one line for findings, e.g. "target B's own replies: 64 train / 32 held-out".
    """

    kind: str
    description: str

    def __str__(self) -> str:
        return self.description


@dataclass
class ProbeSet:
    """Sequences both targets see, the positions that count, and their source.

    Attributes:
        ids: [N, S] token ids (right-padded conversations, or packed text rows).
        counted: [N, S] bool: positions whose next token counts (a reply token, or every one).
        source: where the sequences came from.
        choice: the resolution it was loaded from: what the text is, and whether a verdict can be read
            from it (:class:`~eaglelab.data.probe_data.DataChoice`; the probe's verdict reads it).
    """

    ids: torch.Tensor
    counted: torch.Tensor
    source: DataSource
    choice: DataChoice | None = None

    @property
    def positions(self) -> int:
        return int(self.counted.sum())


def probe_set(tokenizer, n: int = 24, seq_len: int = 64, world: World | None = None,
              data_file: str | Path | None = None, old_target: str | None = None) -> ProbeSet:
    """What the plug-in probe runs on: the sequences both targets see and the positions counted.

    The text is the one :func:`eaglelab.data.probe_data.probe_data_choice` resolves (the same call the
    pickers make before anything loads), and the set carries that choice.

    Args:
        tokenizer: the targets' tokenizer (both targets must share it).
        n: sequences (at most; a small file or world may give fewer).
        seq_len: tokens per row for packed text (file or built-in).
        world: a world whose conversations to use (see :func:`world_of`); ignored when
            ``data_file`` is given or the world keeps no replies (the tiny world).
        data_file: the user's text / JSONL file.
        old_target: the old target, when known (built-in text is a world's own kind of text only for
            the world's own target; None: the world was found from the old target).

    Returns:
        With a world that keeps its targets' replies: the first ``n`` held-out conversations of
        target A whole (prompt + A's own reply, right-padded), counted where the next token is
        A's reply (what the old drafter serves; a user's prompt is not drafted). A file of conversations
        the same way, each a row of at most ``seq_len`` tokens (:mod:`eaglelab.data.conversations`).
        Otherwise ``seq_len``-token rows, every position counted but the last (no token of the row follows it;
        an engine's dump cannot say what would).
    """
    choice = probe_data_choice(data_file, world, old_target)
    if choice.kind == FILE and read_data_file(data_file).kind == "conversations":
        ids, counted, _ = response_rows(conversation_responses(data_file, tokenizer, seq_len, n))
        return ProbeSet(ids, counted, DataSource("file", f"{data_file}: {len(ids)} conversations, one a row of at most "
                                                         f"{seq_len} tokens, counted at the last reply"), choice)
    if choice.kind == FILE:
        ids = sequences_from_file(data_file, tokenizer, seq_len, n)[:n]
        return ProbeSet(ids, _all_but_last(ids), DataSource("file", f"{data_file}: {len(ids)} rows of {seq_len} tokens"),
                        choice)
    if choice.kind == WORLD:
        ids, counted, _ = response_rows(Responses.load(world.replies_a / "held_out.safetensors").subset(n))
        return ProbeSet(ids, counted, DataSource(
            "world-replies", f"target A's own replies to {len(ids)} held-out prompts ({world.root.name} world)"), choice)
    ids = builtin_sequences(tokenizer, seq_len, "held_out", n)
    return ProbeSet(ids, _all_but_last(ids),
                    DataSource("built-in", f"{choice.line} ({len(ids)} held-out rows of {seq_len} tokens)"), choice)


def _all_but_last(ids: torch.Tensor) -> torch.Tensor:
    counted = torch.ones_like(ids, dtype=torch.bool)
    counted[:, -1:] = False
    return counted


def finetune_set(model, tokenizer, aux_spec, data_file: str | Path | None = None, world: World | None = None,
                 seq_len: int = 64, train_sequences: int = 128, eval_sequences: int = 32,
                 progress: bool = True) -> tuple[FinetuneData, DataSource]:
    """The new target's training and held-out states for a fine-tune.

    Args:
        model, tokenizer: the new target.
        aux_spec: the drafter spec whose aux layers are captured.
        data_file: the user's JSONL of conversations (the target's states on each prompt + reply, as the world's
            replies; the file's last conversations held out), or text / JSONL of texts (packed into ``seq_len``
            rows; held out: built-in text).
        world: a world whose target B replies to use (see :func:`world_of`); the drafter then reads
            the layers they were captured at.
        seq_len, train_sequences, eval_sequences: sizes of the file / built-in sets (and caps for
            the world's replies).

    Returns:
        (the captured states, where they came from).
    """
    if data_file is None and world is not None and world.has_replies():
        data = FinetuneData.from_files(world.replies_b / "train-states.safetensors",
                                       world.replies_b / "held_out-states.safetensors")
        data = FinetuneData(data.train.batch(range(min(train_sequences, len(data.train)))),
                            data.held_out.batch(range(min(eval_sequences, len(data.held_out)))), data.aux_layer_outputs)
        return data, DataSource("world-replies", f"target B's own replies: {len(data.train)} train / "
                                                 f"{len(data.held_out)} held-out conversations "
                                                 f"({int(data.train.loss_mask.sum())} reply tokens)")
    if data_file is not None and read_data_file(data_file).kind == "conversations":
        return _conversation_set(model, aux_spec, data_file, tokenizer, seq_len, train_sequences, eval_sequences,
                                 progress)
    if data_file is not None:
        train_ids = sequences_from_file(data_file, tokenizer, seq_len, train_sequences)[:train_sequences]
        kind, where = "file", str(data_file)
    else:
        train_ids = builtin_sequences(tokenizer, seq_len, "train", train_sequences)
        kind, where = "built-in", "built-in stdlib text"
    eval_ids = builtin_sequences(tokenizer, seq_len, "held_out", eval_sequences)
    data = capture_data(model, aux_spec, train_ids, eval_ids, progress=progress)
    return data, DataSource(kind, f"{where}: {len(train_ids)} train rows, {len(eval_ids)} held-out rows "
                                  f"of {seq_len} tokens")


def _conversation_set(model, aux_spec, path, tokenizer, seq_len: int, train_sequences: int, eval_sequences: int,
                      progress: bool) -> tuple[FinetuneData, DataSource]:
    """A file of conversations as the world's replies are trained on: the target's states on each prompt + reply,
    the reply counted, the file's last conversations held out (a quarter of it at most)."""
    data = conversation_responses(path, tokenizer, seq_len, train_sequences + eval_sequences)
    if len(data) < 2:
        raise SourceError(path, "one conversation with a reply: at least two are needed (one to train, one held out)")
    held = min(eval_sequences, max(1, len(data) // 4))
    n_train = min(train_sequences, len(data) - held)
    train = Responses(data.prompts[:n_train], data.replies[:n_train])
    held_out = Responses(data.prompts[len(data) - held:], data.replies[len(data) - held:])
    target = Target.for_drafter(model, aux_spec)
    try:
        states = FinetuneData(capture_response_states(target, train, progress=progress),
                              capture_response_states(target, held_out, progress=progress), target.aux_layer_outputs)
    finally:
        target.close()
    return states, DataSource("file", f"{path}: {len(train)} train / {len(held_out)} held-out conversations of the "
                                      f"file ({train.reply_tokens} reply tokens), each a row of at most {seq_len} tokens")


def measure_prompts(tokenizer, n: int, world: World | None = None) -> list[list[int]]:
    """Held-out prompts for measured speculative decoding, encoded (chat template when the tokenizer has one).

    The world's held-out prompts when given (those its drafters never saw), else prompts made
    from held-out stdlib docstrings.
    """
    if world is not None and world.prompts.is_file():
        prompts = world.held_out_prompts()[:n]
    else:
        prompts = prompts_from_docstrings(split_held_out(docstrings())[1], n)
    return encode_prompts(tokenizer, prompts)
