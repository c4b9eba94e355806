"""A target's own responses as drafter training data: generate, store, capture.

EAGLE-3 drafters accept most when trained on what the serving target itself writes (SpecForge
regenerates its data sets with the target for this reason): the drafter then sees, in training,
the token stream it must predict when it runs. This module

- generates greedy replies to chat prompts in batches, stopping each at the end of its turn;
- stores them as one safetensors file (prompt and response ids, ragged rows padded, with lengths);
- captures the target's states on prompt + response, keeping only the last ``context`` prompt
  tokens in the training rows (the states were computed with the whole prompt, so what they
  carry of it is kept; the drafter's own attention sees the cropped window). On a CPU this
  halves the cost per useful token, since replies are about as long as prompts.

Loss-mask convention (:func:`eaglelab.train.ttt.ttt_forward`): ``loss_mask[t]`` marks a
position whose *next* token is a response token, i.e. where the target's prediction counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from eaglelab.atomic import atomic_path
from eaglelab.data.states import HiddenStates, capture_hidden_states
from eaglelab.data.tokens import encode_prompts
from eaglelab.errors import SourceError
from eaglelab.progress import progress


@dataclass
class Responses:
    """Chat prompts (template applied) and the target's replies, as token ids.

    Attributes:
        prompts: one list of ids per row (the chat template up to the assistant's turn).
        replies: the target's greedy reply per row, ending with the end-of-turn token when it
            stopped before the token limit.
    """

    prompts: list[list[int]]
    replies: list[list[int]]

    def __len__(self) -> int:
        return len(self.prompts)

    @property
    def reply_tokens(self) -> int:
        return sum(map(len, self.replies))

    def subset(self, n: int) -> Responses:
        return Responses(self.prompts[:n], self.replies[:n])

    def save(self, path: str | Path) -> Path:
        """One safetensors file: ``prompt_ids`` / ``reply_ids`` [N, max] padded with -1, and lengths."""


        def padded(rows):
            out = torch.full((len(rows), max(map(len, rows), default=0)), -1, dtype=torch.int64)
            for i, r in enumerate(rows):
                out[i, : len(r)] = torch.tensor(r, dtype=torch.int64)
            return out

        tensors = {"prompt_ids": padded(self.prompts), "reply_ids": padded(self.replies),
                   "prompt_lengths": torch.tensor(list(map(len, self.prompts)), dtype=torch.int64),
                   "reply_lengths": torch.tensor(list(map(len, self.replies)), dtype=torch.int64)}
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            save_file(tensors, str(tmp))
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> Responses:
        try:
            d = load_file(str(path))
            rows = [[r[:n].tolist() for r, n in zip(d[k + "_ids"], d[k + "_lengths"].tolist())]
                    for k in ("prompt", "reply")]
        except Exception as exc:  # noqa: BLE001 - any unreadable file is the same problem for the user
            raise SourceError(path, f"not a responses file ({exc})") from None
        return cls(*rows)


def end_of_turn_ids(tokenizer) -> list[int]:
    """Token ids that end an assistant turn: the chat template's ``<|im_end|>`` / ``<|eot_id|>`` and EOS."""
    ids = []
    for name in ("<|im_end|>", "<|eot_id|>", "<|end|>"):
        tid = tokenizer.convert_tokens_to_ids(name)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id:
            ids.append(tid)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


def _generate(model, tokenizer, encoded: list[list[int]], max_new_tokens: int, batch_size: int, desc: str,
              on_batch=None) -> list[list[int]]:
    """Greedy replies to encoded prompts, batched by length; ``on_batch(rows, width, replies)`` after each batch."""
    stop = end_of_turn_ids(tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop[0]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))  # similar lengths: less padding
    replies: list[list[int]] = [[] for _ in encoded]
    dev = next(model.parameters()).device
    for start in progress(range(0, len(order), batch_size), desc=desc):
        rows = order[start: start + batch_size]
        width = max(len(encoded[i]) for i in rows)
        ids = torch.tensor([[pad] * (width - len(encoded[i])) + encoded[i] for i in rows], device=dev)
        attn = torch.tensor([[0] * (width - len(encoded[i])) + [1] * len(encoded[i]) for i in rows], device=dev)
        out = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=pad, eos_token_id=stop)
        batch_replies = []
        for j, i in enumerate(rows):
            reply = out[j, width:].tolist()
            end = next((n for n, t in enumerate(reply) if t in stop), None)
            replies[i] = reply if end is None else reply[: end + 1]
            batch_replies.append(replies[i])
        if on_batch is not None:
            on_batch(rows, width, batch_replies)
    return replies


@torch.no_grad()
def generate_responses(model, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int = 32,
                       desc: str = "responses") -> Responses:
    """Greedy replies to chat prompts, in batches of similar length (less padding).

    Args:
        model: a transformers causal LM.
        tokenizer: its tokenizer (chat template used when it has one).
        prompts: user messages.
        max_new_tokens: reply length limit.
        batch_size: prompts per ``generate`` call.

    Returns:
        Responses in the order of ``prompts``.
    """
    encoded = encode_prompts(tokenizer, prompts)
    return Responses(encoded, _generate(model, tokenizer, encoded, max_new_tokens, batch_size, desc))


@torch.no_grad()
def generate_training_data(target, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int = 32,
                           context: int | None = 16, desc: str = "replies + states"):
    """Greedy replies and the drafter's training states from the same forward passes.

    The target's aux and last hidden states are recorded during generation (prefill, then one
    position per step), so no second pass over prompt + reply is needed; rows keep the last
    ``context`` prompt tokens, as in :func:`capture_response_states`.

    Args:
        target: :class:`eaglelab.model.targets.Target` capturing the drafter's layers.
        tokenizer, prompts, max_new_tokens, batch_size: as in :func:`generate_responses`.
        context: prompt tokens kept before each reply (None: all).

    Returns:
        (Responses, HiddenStates [N, S, ...]). ``target_ids`` is the target's greedy token where
        the loss mask is set (the reply itself); elsewhere it is the data's next token.
    """
    encoded = encode_prompts(tokenizer, prompts)
    kept: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # row -> its window's (aux, last)

    def on_batch(rows, width, batch_replies):
        aux = torch.cat([a for a, _ in records], dim=1).cpu()  # [B, width + steps, 3H]
        last = torch.cat([h for _, h in records], dim=1).cpu()
        records.clear()
        for j, (i, reply) in enumerate(zip(rows, batch_replies)):
            c = len(encoded[i]) if context is None else min(context, len(encoded[i]))
            # the final reply token's state exists only when another step ran; it stays zero otherwise
            kept[i] = (aux[j, width - c: width + len(reply)], last[j, width - c: width + len(reply)])

    with target.recording() as records:
        data = Responses(encoded, _generate(target.model, tokenizer, encoded, max_new_tokens, batch_size, desc, on_batch))
    ids, mask, _ = response_rows(data, context)  # the same windows as kept above
    n, S = ids.shape
    aux = torch.zeros(n, S, kept[0][0].shape[1] if n else 0)
    last = torch.zeros(n, S, kept[0][1].shape[1] if n else 0)
    for i, (a, h) in kept.items():
        aux[i, : a.shape[0]], last[i, : h.shape[0]] = a, h
    target_ids = torch.cat([ids[:, 1:], ids[:, -1:]], dim=1)  # greedy replies: the next token is the argmax
    return data, HiddenStates(ids, mask, aux, last, target_ids, tuple(target.aux_layer_outputs))


def response_rows(data: Responses, context: int | None = None) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Right-padded prompt + reply rows and their loss masks.

    Args:
        data: prompts and replies.
        context: keep only the last ``context`` prompt tokens (None: all).

    Returns:
        ids [N, S], loss_mask [N, S] (positions whose next token is a reply token), and the
        number of prompt tokens dropped from the front of each row.
    """
    kept, dropped = [], []
    for p, r in zip(data.prompts, data.replies):
        cut = 0 if context is None else max(len(p) - context, 0)
        kept.append((p[cut:], r))
        dropped.append(cut)
    S = max((len(p) + len(r) for p, r in kept), default=0)
    ids = torch.zeros(len(kept), S, dtype=torch.int64)
    mask = torch.zeros(len(kept), S, dtype=torch.bool)
    for i, (p, r) in enumerate(kept):
        row = p + r
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, max(len(p) - 1, 0): len(row) - 1] = True
    return ids, mask, dropped


def capture_response_states(target, data: Responses, context: int | None = 16, batch_size: int = 8,
                            progress: bool = True):
    """The target's states on prompt + reply, rows cropped to ``context`` prompt tokens.

    The forward runs over the whole prompt; only the kept window is stored.

    Returns:
        :class:`eaglelab.data.states.HiddenStates` [N, S_kept, ...] with the target's greedy ids.
    """
    full_ids, _, _ = response_rows(data, None)
    ids, mask, dropped = response_rows(data, context)
    full = capture_hidden_states(target, full_ids, batch_size=batch_size, progress=progress)
    S = ids.shape[1]
    index = torch.stack([torch.arange(S) + d for d in dropped]).clamp(max=full_ids.shape[1] - 1)  # [N, S]

    def take(x):
        return x.gather(1, index.view(*index.shape, *([1] * (x.dim() - 2))).expand(-1, -1, *x.shape[2:]))

    return HiddenStates(ids, mask, take(full.aux), take(full.last_hidden), take(full.target_ids), full.aux_layers)
