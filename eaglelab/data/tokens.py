"""Text into token rows: packing, chat prompts, and the user's text / JSONL files.

The built-in offline text (standard-library docstrings and code, :mod:`eaglelab.data.corpus`)
and a user's file go through the same packing, so every consumer sees rows built one way.
"""

from __future__ import annotations

from pathlib import Path

import torch

from eaglelab.checkpoints.targets.chat_templates import render_all, template_context
from eaglelab.data.corpus import code_blocks, docstrings, split_held_out
from eaglelab.data.data_files import data_file, read_row, turns
from eaglelab.errors import SourceError
from eaglelab.inputs import read_bytes

#: Largest training / probe data file read into memory.
MAX_DATA_BYTES = 4 * 1024**3


def sequences_from_file(path: str | Path, tokenizer, seq_len: int, max_sequences: int | None = None) -> torch.Tensor:
    """Token sequences [N, seq_len] from a text file or a JSONL file (:mod:`eaglelab.data.data_files`).

    JSONL lines are ``{"text": ...}`` (packed as written) or a conversation (SpecForge's ``{"conversations":
    [{"role", "content"}...]}``, ShareGPT's turns too), rendered with the tokenizer's chat template in the
    sandboxed renderer, as the worlds' conversations are (joined by lines where the tokenizer has none).
    ``max_sequences``: stop reading once about that many rows are filled.
    """
    p = Path(path)
    data_file(p)  # the format from the head first: a binary or .json file is one line, not a half-read probe
    raw = read_data_text(p)
    if p.suffix.lower() == ".jsonl":
        texts = _jsonl_texts(p, raw, tokenizer, None if max_sequences is None else max_sequences * seq_len)
    else:
        texts = [t for t in raw.split("\n\n") if t.strip()]
    seqs = pack_sequences(tokenizer, texts, seq_len, max_sequences)
    if len(seqs) == 0:
        raise SourceError(p, f"fewer than {seq_len} tokens of data")
    return seqs


def read_data_text(p: Path) -> str:
    """A data file's whole text (at most :data:`MAX_DATA_BYTES`), or one line saying why it cannot be read."""
    try:
        return read_bytes(p, SourceError, MAX_DATA_BYTES, "data file").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(p, f"data is not UTF-8 text (byte {exc.start})") from None


#: Conversations rendered per call of the sandboxed renderer (one child process each).
RENDER_CHUNK = 256


def _jsonl_texts(p: Path, raw: str, tokenizer, tokens_wanted: int | None) -> list[str]:
    """Each JSONL row's text: ``text`` as written, a conversation through the chat template; until about
    ``tokens_wanted`` tokens' worth of characters (four a token, twice over) are in hand."""
    template = getattr(tokenizer, "chat_template", None)
    template = template if isinstance(template, str) else None
    specials = {k: v for k, v in getattr(tokenizer, "special_tokens_map", {}).items() if isinstance(v, str)}
    texts: list[str] = []
    pending: list[tuple[int, list[dict[str, str]]]] = []

    def flush() -> None:
        jobs = [(template, template_context(messages, specials, add_generation_prompt=False)) for _, messages in pending]
        for (n, _), done in zip(pending, render_all(jobs)):
            if done.text is None:
                raise SourceError(p, f"line {n}: the target's chat template does not render it: {done.problem}")
            texts.append(done.text)
        pending.clear()

    chars = 0  # rendered so far (a running sum: a long file is read once)
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        kind, row = read_row(line, p, n)
        if kind == "text":
            texts.append(str(row["text"]))
            chars += len(texts[-1])
        else:
            messages = turns(row["conversations"], p, n)
            if template is None:
                texts.append("\n".join(m["content"] for m in messages))
                chars += len(texts[-1])
            else:
                pending.append((n, messages))
                chars += sum(len(m["content"]) for m in messages)
                if len(pending) == RENDER_CHUNK:
                    flush()
        if tokens_wanted is not None and chars > 8 * tokens_wanted:
            break
    if pending:
        flush()
    return texts


def builtin_sequences(tokenizer, seq_len: int, split: str = "train", n: int | None = None) -> torch.Tensor:
    """The built-in offline text: stdlib docstrings and code, alternated, [N, seq_len].

    ``split`` ``train`` or ``held_out`` (every tenth docstring and code block, never trained on):
    the probe set and every held-out evaluation use the latter.
    """
    pick = 0 if split == "train" else 1
    half = None if n is None else (n + 1) // 2
    a = pack_sequences(tokenizer, split_held_out(docstrings())[pick], seq_len, half)
    b = pack_sequences(tokenizer, split_held_out(code_blocks())[pick], seq_len, half)
    m = min(len(a), len(b))
    mixed = torch.stack([a[:m], b[:m]], dim=1).reshape(-1, seq_len)  # alternate the two domains
    return mixed[:n] if n else mixed


def pack_sequences(tokenizer, texts: list[str], seq_len: int, max_sequences: int | None = None):
    """Concatenate tokenised texts (separated by EOS) and cut into [N, seq_len] chunks.

    Texts are tokenised in batches and only until ``max_sequences`` chunks are filled.
    """
    ids: list[int] = []
    eos = tokenizer.eos_token_id
    want = None if max_sequences is None else max_sequences * seq_len
    for i in range(0, len(texts), 256):
        for row in tokenizer(texts[i: i + 256])["input_ids"]:
            ids.extend(row + ([eos] if eos is not None else []))
        if want is not None and len(ids) >= want:
            break
    n = len(ids) // seq_len if want is None else min(len(ids) // seq_len, max_sequences)
    return torch.tensor(ids[: n * seq_len], dtype=torch.long).view(n, seq_len)


def chat_texts(tokenizer, prompts: list[str]) -> list[str]:
    """Each prompt as a one-turn user chat, ready for the assistant's reply (the tokenizer's template)."""
    return [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
            for p in prompts]


def encode_prompts(tokenizer, prompts: list[str]) -> list[list[int]]:
    """Token ids of prompts: through the chat template when the tokenizer has one (chat models), else plain."""
    if not getattr(tokenizer, "chat_template", None):
        return [tokenizer(p)["input_ids"] for p in prompts]
    return [tokenizer(c, add_special_tokens=False)["input_ids"] for c in chat_texts(tokenizer, prompts)]
