"""A target's tokenizer read from its files, without transformers or tokenizers: vocabulary, special tokens, templates.

What a drafter depends on in a tokenizer is which string each id names (its ``d2t`` map and its
``lm_head`` rows are per id), which ids are special, and the chat template that shapes every
training and serving prompt. Two layouts are read:

- a Hugging Face fast tokenizer, ``tokenizer.json`` (``model.vocab``: token -> id, ``model.merges``,
  ``added_tokens``);
- a tiktoken tokenizer, ``tiktoken.model`` (one ``base64-token rank`` pair a line; Kimi's, which ship
  no ``tokenizer.json``), with the special tokens in ``tokenizer_config.json``'s ``added_tokens_decoder``.

Chat templates are found where transformers looks: ``chat_template.jinja`` (and
``additional_chat_templates/<name>.jinja``), which win over ``tokenizer_config.json``'s ``chat_template``
(a string, or a list of ``{name, template}``). Every file is read through :mod:`eaglelab.inputs` (regular
files, capped, strict JSON) or from a hub repo under its one deadline; every field is type-checked; a file
that cannot be used is a :class:`~eaglelab.errors.SourceError` naming it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass, field
from typing import Any

from eaglelab.checkpoints.files.hub import open_repo
from eaglelab.checkpoints.files.sources import is_hub_id, local_path
from eaglelab.errors import SourceError
from eaglelab.inputs import (
    MAX_JSON_BYTES,
    is_ascii_digits,
    loads_json_object,
    path_kind,
    printable,
    read_bytes,
    shown,
)

#: The small files of a target eaglelab reads beside its config (none of them is code).
TARGET_FILES = ("tokenizer_config.json", "tokenizer.json", "tiktoken.model", "special_tokens_map.json",
                "chat_template.jinja", "chat_template.json", "generation_config.json", "hf_quant_config.json")
#: Caps: a tokenizer file (a large ``tokenizer.json`` is ~30 MB), a template, an id.
MAX_TOKENIZER_BYTES = MAX_JSON_BYTES
MAX_TEMPLATE_BYTES = 1024 * 1024
MAX_TOKEN_ID = 2**31 - 1
SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


@dataclass
class TargetFiles:
    """A target's small files, as bytes, keyed by name (a file the target lacks is absent).

    Attributes:
        source: the target as the user named it.
        files: file name -> bytes, for the names of :data:`TARGET_FILES` found.
        extra_templates: ``additional_chat_templates/<name>.jinja`` -> name -> bytes (local folders only).
    """

    source: str
    files: dict[str, bytes] = field(default_factory=dict)
    extra_templates: dict[str, bytes] = field(default_factory=dict)

    def where(self, name: str) -> str:
        return printable(f"{self.source}/{name}")

    def json(self, name: str) -> dict[str, Any] | None:
        """A file as a strict JSON object (None when absent)."""
        raw = self.files.get(name)
        return None if raw is None else loads_json_object(raw, self.where(name), SourceError)

    def text(self, name: str, raw: bytes | None = None) -> str | None:
        raw = self.files.get(name) if raw is None else raw
        if raw is None:
            return None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SourceError(self.where(name), f"not valid UTF-8 (byte {exc.start})") from None


def _cap(name: str) -> int:
    return MAX_TEMPLATE_BYTES if name.endswith(".jinja") else MAX_TOKENIZER_BYTES


def read_target_files(source: str, revision: str | None = None) -> TargetFiles:
    """Read a target's tokenizer, template and generation files (local folder, or hub id by name).

    Raises:
        SourceError, HubError: a file that cannot be read or is over its cap, naming it.
    """
    path = local_path(source)
    if path_kind(path, SourceError) is None and is_hub_id(source):
        return _hub_files(source, revision)
    if path_kind(path, SourceError) != "folder":
        path = path.parent  # a config.json, a weights file or a shard index: the files sit beside it
    out = TargetFiles(source)
    for name in TARGET_FILES:
        if path_kind(path / name, SourceError) is not None:
            out.files[name] = read_bytes(path / name, SourceError, _cap(name), name)
    extra = path / "additional_chat_templates"
    if path_kind(extra, SourceError) == "folder":
        for f in sorted(extra.glob("*.jinja"))[:64]:
            out.extra_templates[f.stem] = read_bytes(f, SourceError, MAX_TEMPLATE_BYTES, "template")
    return out


def _hub_files(repo_id: str, revision: str | None) -> TargetFiles:
    repo = open_repo(repo_id, revision)  # every file from one commit
    out = TargetFiles(repo_id)
    for name in TARGET_FILES:
        with repo.reading(f"reading {name}"):
            raw = repo.read_file(name, _cap(name))
        if raw is not None:
            out.files[name] = raw
    return out


# --------------------------------------------------------------------------- the tokenizer

@dataclass
class Tokenizer:
    """What a tokenizer's files say, per id.

    Attributes:
        kind: ``tokenizer.json``, ``tiktoken.model`` or ``none`` (only a config, or nothing).
        tokens: id -> the token it names (text for ``tokenizer.json``; the raw bytes for tiktoken).
        merges: the BPE merges in order (``tokenizer.json``), empty otherwise.
        added: id -> (content, special) of the added / special tokens.
        specials: ``bos_token``, ``eos_token``, ... -> content, from ``tokenizer_config.json`` and
            ``special_tokens_map.json``.
        eos_ids: the ids ``generation_config.json`` stops on.
        templates: template name (``default``, ``tool_use``, ...) -> Jinja source.
        template_file: where the default template came from (None: no template).
        model_type: the tokenizer model's type (``BPE``, ``Unigram``, ``WordPiece``, ``tiktoken``).
    """

    kind: str
    tokens: dict[int, str | bytes] = field(default_factory=dict)
    merges: list[str] = field(default_factory=list)
    added: dict[int, tuple[str, bool]] = field(default_factory=dict)
    specials: dict[str, str] = field(default_factory=dict)
    eos_ids: tuple[int, ...] = ()
    templates: dict[str, str] = field(default_factory=dict)
    template_file: str | None = None
    model_type: str = ""

    def token(self, i: int) -> str | bytes | None:
        """What id ``i`` names: an added token's content first, then the base vocabulary's entry."""
        if i in self.added:
            return self.added[i][0]
        return self.tokens.get(i)

    @property
    def vocabulary_digest(self) -> str:
        """A short hash of the base vocabulary and merges (equal digests: the same base tokenizer)."""
        h = hashlib.sha256(self.kind.encode())
        for i in sorted(self.tokens):
            t = self.tokens[i]
            h.update(f"{i}\0".encode() + (t if isinstance(t, bytes) else t.encode("utf-8", "surrogatepass")) + b"\1")
        for m in self.merges:
            h.update(m.encode("utf-8", "surrogatepass") + b"\2")
        return h.hexdigest()[:16]

    @property
    def size(self) -> int:
        """Ids the tokenizer names (base vocabulary and added tokens)."""
        return len(set(self.tokens) | set(self.added))


def _id(value: Any, where: str, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_TOKEN_ID:
        raise SourceError(where, f"{what} must be a token id (an integer in [0, {MAX_TOKEN_ID}]), got {shown(value)}")
    return value


def _content(value: Any, where: str, what: str) -> str:
    """A special token as written: a string, or an AddedToken object with ``content``."""
    if isinstance(value, dict):
        value = value.get("content")
    if not isinstance(value, str):
        raise SourceError(where, f"{what} must be a string or an object with a string 'content', got {shown(value)}")
    return value


def _read_tokenizer_json(obj: dict[str, Any], where: str, tok: Tokenizer) -> None:
    model = obj.get("model")
    if not isinstance(model, dict):
        raise SourceError(where, "has no 'model' object")
    tok.model_type = str(model.get("type") or "")
    vocab = model.get("vocab")
    if isinstance(vocab, dict):
        for token, i in vocab.items():
            tok.tokens[_id(i, where, f"model.vocab[{printable(repr(token))[:40]}]")] = token
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...], the id is the position
        for i, entry in enumerate(vocab):
            if not isinstance(entry, list) or not entry or not isinstance(entry[0], str):
                raise SourceError(where, f"model.vocab[{i}] must be [piece, score], got {shown(entry)}")
            tok.tokens[i] = entry[0]
    elif vocab is not None:
        raise SourceError(where, f"model.vocab must be an object or a list, got {shown(vocab)}")
    merges = model.get("merges") or []
    if not isinstance(merges, list):
        raise SourceError(where, f"model.merges must be a list, got {shown(merges)}")
    for j, m in enumerate(merges):
        if isinstance(m, list) and len(m) == 2 and all(isinstance(x, str) for x in m):
            m = " ".join(m)  # tokenizers 0.20 writes pairs
        if not isinstance(m, str):
            raise SourceError(where, f"model.merges[{j}] must be a string or a pair of strings, got {shown(m)}")
        tok.merges.append(m)
    added = obj.get("added_tokens") or []
    if not isinstance(added, list):
        raise SourceError(where, f"added_tokens must be a list, got {shown(added)}")
    for j, a in enumerate(added):
        if not isinstance(a, dict):
            raise SourceError(where, f"added_tokens[{j}] must be an object, got {shown(a)}")
        special = a.get("special", False)
        tok.added[_id(a.get("id"), where, f"added_tokens[{j}].id")] = (
            _content(a.get("content"), where, f"added_tokens[{j}].content"), special is True)


def _read_tiktoken(raw: bytes, where: str, tok: Tokenizer) -> None:
    tok.model_type = "tiktoken"
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not is_ascii_digits(parts[1].decode("ascii", "replace")) or len(parts[1]) > 10:
            raise SourceError(where, f"line {n} is not 'base64-token rank'")
        try:
            token = base64.b64decode(parts[0], validate=True)
        except (binascii.Error, ValueError):
            raise SourceError(where, f"line {n}: the token is not valid base64") from None
        tok.tokens[_id(int(parts[1]), where, f"line {n}'s rank")] = token


def _templates(files: TargetFiles, config: dict[str, Any] | None, tok: Tokenizer) -> None:
    """Templates where transformers looks, its precedence kept: the ``.jinja`` files win over the config's."""
    where = files.where("tokenizer_config.json")
    inline = (config or {}).get("chat_template")
    if isinstance(inline, str):
        tok.templates["default"], tok.template_file = inline, "tokenizer_config.json"
    elif isinstance(inline, list):
        for j, entry in enumerate(inline):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or \
                    not isinstance(entry.get("template"), str):
                raise SourceError(where, f"chat_template[{j}] must be an object with string 'name' and 'template'")
            tok.templates[entry["name"]] = entry["template"]
        tok.template_file = "tokenizer_config.json" if "default" in tok.templates else None
    elif inline is not None:
        raise SourceError(where, f"chat_template must be a string or a list, got {shown(inline)}")
    legacy = files.json("chat_template.json")  # a processor's file: {"chat_template": "..."}
    if legacy is not None and "default" not in tok.templates:
        if not isinstance(legacy.get("chat_template"), str):
            raise SourceError(files.where("chat_template.json"), "has no string 'chat_template'")
        tok.templates["default"], tok.template_file = legacy["chat_template"], "chat_template.json"
    if "chat_template.jinja" in files.files:
        tok.templates["default"], tok.template_file = files.text("chat_template.jinja"), "chat_template.jinja"
    for name, raw in files.extra_templates.items():
        tok.templates[name] = files.text(f"additional_chat_templates/{name}.jinja", raw)


def read_tokenizer(files: TargetFiles) -> Tokenizer:
    """The tokenizer a target's files describe (``kind`` ``none`` when it has neither vocabulary file).

    Raises:
        SourceError: a file that is not what its name says (bad JSON, ids out of range, bad base64), naming it.
    """
    kind = "tokenizer.json" if "tokenizer.json" in files.files else \
        "tiktoken.model" if "tiktoken.model" in files.files else "none"
    tok = Tokenizer(kind)
    if kind == "tokenizer.json":
        _read_tokenizer_json(files.json("tokenizer.json"), files.where("tokenizer.json"), tok)
    elif kind == "tiktoken.model":
        _read_tiktoken(files.files["tiktoken.model"], files.where("tiktoken.model"), tok)
    config = files.json("tokenizer_config.json")
    where = files.where("tokenizer_config.json")
    decoder = (config or {}).get("added_tokens_decoder") or {}
    if not isinstance(decoder, dict):
        raise SourceError(where, f"added_tokens_decoder must be an object, got {shown(decoder)}")
    for key, entry in decoder.items():
        if not is_ascii_digits(key) or len(key) > 10:
            raise SourceError(where, f"added_tokens_decoder key {printable(repr(key))[:40]} is not a token id")
        special = entry.get("special", False) if isinstance(entry, dict) else False
        tok.added.setdefault(_id(int(key), where, "an added_tokens_decoder key"),
                             (_content(entry, where, f"added_tokens_decoder[{key}]"), special is True))
    for source in (files.json("special_tokens_map.json") or {}, config or {}):
        for name in SPECIAL_NAMES:
            value = source.get(name)
            if value is not None:
                tok.specials[name] = _content(value, files.where("tokenizer_config.json"), name)
    generation = files.json("generation_config.json") or {}
    eos = generation.get("eos_token_id")
    eos = [eos] if isinstance(eos, int) and not isinstance(eos, bool) else eos
    if eos is not None:
        if not isinstance(eos, list):
            raise SourceError(files.where("generation_config.json"), f"eos_token_id must be an id or a list, got {shown(eos)}")
        tok.eos_ids = tuple(_id(e, files.where("generation_config.json"), "eos_token_id") for e in eos)
    _templates(files, config, tok)
    return tok


def describe(text: str | bytes | None) -> str:
    """A token as one printable string (tiktoken's bytes decoded where they are UTF-8)."""
    if text is None:
        return "(none)"
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            return "0x" + text.hex()
    return printable(repr(text))

