"""A user's JSONL of conversations read as the worlds' own: each conversation one row, its last reply counted.

A drafter is served on conversations: the chat template's prompt, then the assistant's reply, and it drafts the
reply only. The demo world probes and trains on exactly that (:func:`eaglelab.data.responses.response_rows`:
prompt + reply, the positions whose next token is a reply token counted). A user's conversations are read the
same way, not packed into rows where the prompt's tokens and the template's markup count as much as the reply:

- the prompt is every turn before the last assistant turn, rendered with the target's chat template up to the
  assistant's turn (``add_generation_prompt``), in the sandboxed renderer; the reply is what the template adds
  for that last turn (its end-of-turn token included, as a served reply ends); without a template, the turns'
  texts a line apart;
- a row holds at most ``seq_len`` tokens: the prompt's last tokens (at most half the row while the reply needs
  the rest) and the reply's first; a conversation with no assistant turn has nothing to draft and is skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

from eaglelab.atomic import write_text_atomic
from eaglelab.checkpoints.targets.chat_templates import render_all, template_context
from eaglelab.data.data_files import read_row, turns
from eaglelab.data.responses import Responses
from eaglelab.data.tokens import read_data_text
from eaglelab.errors import SourceError

#: Conversations rendered per call of the sandboxed renderer (one child process each; two renderings each).
RENDER_CHUNK = 128


def conversation_responses(path: str | Path, tokenizer, seq_len: int, max_rows: int | None = None) -> Responses:
    """The file's conversations as prompt and reply token ids, rows of at most ``seq_len`` tokens.

    Args:
        path: a JSONL file of conversations (:func:`eaglelab.data.data_files.data_file` says so).
        tokenizer: the target's (its chat template, when it has one).
        seq_len: tokens per row at most (the prompt cut from the front, the reply at the end).
        max_rows: stop after this many rows (None: the whole file).

    Raises:
        SourceError: the file cannot be read, a line is not a conversation, the template does not render one,
            or no conversation has an assistant turn.
    """
    p = Path(path)
    raw = read_data_text(p)
    template = getattr(tokenizer, "chat_template", None)
    template = template if isinstance(template, str) else None
    specials = {k: v for k, v in getattr(tokenizer, "special_tokens_map", {}).items() if isinstance(v, str)}
    chats = _chats(p, raw, max_rows)
    texts: list[tuple[str, str]] = []
    for start in range(0, len(chats), RENDER_CHUNK):
        texts += _render(p, chats[start:start + RENDER_CHUNK], template, specials)
    prompts, replies = [], []
    for prompt, reply in texts:
        p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        r_ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
        kept_p, kept_r = _fit(len(p_ids), len(r_ids), seq_len)
        if kept_r:
            prompts.append(p_ids[len(p_ids) - kept_p:])
            replies.append(r_ids[:kept_r])
    if not replies:
        raise SourceError(p, "no conversation has an assistant turn with text: there is no reply to draft")
    return Responses(prompts, replies)


def _chats(p: Path, raw: str, max_rows: int | None) -> list[tuple[int, list[dict[str, str]], int]]:
    """Each conversation's line number, turns, and the index of its last assistant turn (those with one)."""
    chats = []
    for n, line in enumerate(raw.splitlines(), 1):
        if max_rows is not None and len(chats) >= max_rows:
            break
        if not line.strip():
            continue
        kind, row = read_row(line, p, n)
        if kind != "conversations":
            raise SourceError(p, f"line {n} is a text row in a file of conversations: give one kind a file")
        messages = turns(row["conversations"], p, n)
        last = max((i for i, m in enumerate(messages) if m["role"] == "assistant" and m["content"]), default=None)
        if last is not None:
            chats.append((n, messages, last))
    return chats


def _render(p: Path, chats, template: str | None, specials: dict[str, str]) -> list[tuple[str, str]]:
    """(prompt, reply) texts: the template's up to the assistant's turn, and what it adds for the reply."""
    if template is None:
        return [("\n".join(m["content"] for m in messages[:last]) + "\n", messages[last]["content"])
                for _, messages, last in chats]
    jobs = []
    for _, messages, last in chats:
        jobs.append((template, template_context(messages[:last], specials, add_generation_prompt=True)))
        jobs.append((template, template_context(messages[:last + 1], specials, add_generation_prompt=False)))
    done = render_all(jobs)
    out = []
    for (n, messages, last), prompt, whole in zip(chats, done[0::2], done[1::2]):
        for r in (prompt, whole):
            if r.text is None:
                raise SourceError(p, f"line {n}: the target's chat template does not render it: {r.problem}")
        # a template that renders the reply inside what came before it (not as a suffix): the reply's own text
        reply = whole.text[len(prompt.text):] if whole.text.startswith(prompt.text) else messages[last]["content"]
        out.append((prompt.text, reply))
    return out


def _fit(prompt: int, reply: int, seq_len: int) -> tuple[int, int]:
    """Tokens kept of a prompt and a reply in a row of ``seq_len``: the reply first, the prompt at least half."""
    kept_r = min(reply, seq_len - min(prompt, seq_len // 2))
    return min(prompt, seq_len - kept_r), kept_r


def write_conversations(path: str | Path, prompts: list[str], replies: list[str]) -> Path:
    """A JSONL of one-turn conversations (SpecForge's ``conversations`` rows), written atomically: what a world
    ships of its own text, for a user to pick as DATA (read back by :func:`conversation_responses`)."""
    rows = ({"conversations": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
            for q, a in zip(prompts, replies, strict=True))
    return write_text_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
