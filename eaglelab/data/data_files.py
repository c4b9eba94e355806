"""What a user's data file holds, told from its head: the formats the probe and the fine-tune read, others refused.

Two formats are read. JSONL, one object a line: ``{"text": ...}``, or a conversation, SpecForge's
``{"conversations": [{"role", "content"}, ...]}`` (ShareGPT's ``{"from", "value"}`` turns too). And plain UTF-8
text, paragraphs apart by a blank line. A conversation is rendered with the target's own chat template (in the
sandboxed renderer, :mod:`eaglelab.checkpoints.targets.chat_templates`) and kept as one row whose last reply is
counted, as the worlds' conversations are (:mod:`eaglelab.data.conversations`), so a drafter meets the token
stream it is served on and is judged on what it drafts; text is packed as it is. Anything else (a ``.json``
document, a binary file such as ``.safetensors`` or ``.parquet``) is refused in one line that says what to give,
before a target is loaded: the picker checks the same head (:func:`data_file`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglelab.errors import SourceError

#: Bytes of a file's head read to tell its format (the picker reads no more).
HEAD_BYTES = 64 * 1024
#: Suffixes of files that are not text: refused by name, whatever their first bytes.
BINARY_SUFFIXES = frozenset({".safetensors", ".parquet", ".arrow", ".feather", ".bin", ".pt", ".pth", ".ckpt", ".npy",
                             ".npz", ".gz", ".zip", ".bz2", ".xz", ".zst", ".tar", ".pkl", ".pickle", ".gguf", ".h5"})
#: What to give instead, in every refusal.
GIVE = ('give a .jsonl with one conversation a line ({"conversations": [{"role": ..., "content": ...}, ...]}) or '
        '{"text": ...} a line, or a plain .txt')
#: ShareGPT's speakers, as chat-template roles.
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}


@dataclass(frozen=True)
class DataFile:
    """A data file's format, from its head.

    Attributes:
        path: the file.
        kind: ``conversations`` (JSONL of chats: rendered with the target's template), ``texts`` (JSONL of
            ``text`` fields) or ``text`` (plain text).
        rows: the JSONL lines checked in the head (0 for plain text).
        size: bytes.
    """

    path: Path
    kind: str
    rows: int
    size: int

    @property
    def line(self) -> str:
        """What the picker says about it."""
        mb = f"{self.size / 1e6:.2f} MB"
        if self.kind == "conversations":
            return (f"JSONL of conversations, {mb}: each rendered with the target's chat template and kept as one row, "
                    "its last reply counted, as the world's are")
        if self.kind == "texts":
            return f"JSONL of texts, {mb}: packed into rows as written (no chat template)"
        return f"plain text, {mb}: paragraphs packed into rows as written (no chat template)"


def data_file(path: str | Path) -> DataFile:
    """The format of ``path`` from its first :data:`HEAD_BYTES` bytes, or one line saying why it cannot be read.

    Raises:
        SourceError: no such file, a binary or ``.json`` file, text that is not UTF-8, or a JSONL line in the head
            that is not an object with ``text`` or ``conversations`` (its line number named).
    """
    p = Path(path)
    if not p.is_file():
        raise SourceError(p, "no such data file")
    suffix = p.suffix.lower()
    with open(p, "rb") as f:
        head = f.read(HEAD_BYTES)
    size = p.stat().st_size
    if suffix in BINARY_SUFFIXES or b"\x00" in head:
        raise SourceError(p, f"a {suffix or 'binary'} file is not text the probe or the fine-tune can read: {GIVE}")
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3 or size <= HEAD_BYTES:  # not a character cut at the head's end
            raise SourceError(p, f"data is not UTF-8 text (byte {exc.start}): {GIVE}") from None
        text = head[:exc.start].decode("utf-8")
    if suffix == ".json":
        raise SourceError(p, f"a .json file is one document, not rows the probe can read (it would be packed as raw "
                             f"JSON text): {GIVE}")
    if suffix != ".jsonl":
        return DataFile(p, "text", 0, size)
    lines = text.splitlines()
    if size > len(head) and lines:
        lines = lines[:-1]  # the head's last line may be cut
    kinds = set()
    for n, line in enumerate(lines, 1):
        if line.strip():
            kinds.add(read_row(line, p, n)[0])
    if not kinds:
        raise SourceError(p, f"no JSONL row in its first {len(head)} bytes: {GIVE}")
    return DataFile(p, "conversations" if "conversations" in kinds else "texts", len(lines), size)


def read_row(line: str, path: Path, n: int) -> tuple[str, dict[str, Any]]:
    """Line ``n`` of a JSONL file, parsed once: ``("text", row)`` or ``("conversations", row)``, or one line saying
    why it is neither."""
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise SourceError(path, f"line {n} is not JSON ({getattr(exc, 'msg', 'nested too deeply')})") from None
    if not isinstance(obj, dict):
        raise SourceError(path, f"line {n} is not a JSON object: {GIVE}")
    if "text" in obj:
        return "text", obj
    if "conversations" in obj:
        turns(obj["conversations"], path, n)
        return "conversations", obj
    raise SourceError(path, f"line {n} has neither 'text' nor 'conversations': {GIVE}")


def turns(conversation: Any, path: Path, n: int) -> list[dict[str, str]]:
    """A conversation's turns as chat messages (``role``, ``content``): SpecForge's as they are, ShareGPT's mapped."""
    if not isinstance(conversation, list) or not conversation or not all(isinstance(t, dict) for t in conversation):
        raise SourceError(path, f"line {n}: 'conversations' is not a non-empty list of turns (objects)")
    out = []
    for t in conversation:
        role = t.get("role", SHAREGPT_ROLES.get(str(t.get("from", "")).lower()))
        content = t.get("content", t.get("value"))
        if not isinstance(role, str) or not role or not isinstance(content, str):
            raise SourceError(path, f"line {n}: a turn without a 'role' and a text 'content' (or ShareGPT's 'from' "
                                    "and 'value')")
        out.append({"role": role, "content": content})
    return out
