"""The one escaping rule for text that reaches Markdown (the game plan, the findings shown in a notebook, the
READMEs a recipe writes): applied where the text is rendered, so no producer can forget it.

Two kinds of text meet there:

- a **value** (a path, a hub id, a name read from a file): :func:`md_text` shows it as it is, one printable line,
  every character Markdown or HTML acts on backslash-escaped: it can add no column, line, emphasis, link or tag;
- a **line of eaglelab's own Markdown** with values formatted into it (a findings bullet, a verdict sentence):
  :func:`md_line` keeps its emphasis and code spans, and takes from it everything a value could use to forge
  structure or reach a reader's browser: line breaks and other control or format characters (a bullet of its
  own, a heading, bidi overrides) are escaped as ``\\x0a`` / ``\\u202e``; raw HTML and autolinks (``<img ...>``,
  ``<https://...>``) lose their ``<``; link and image syntax (``[text](url)``, ``![x](y)``, ``[x][ref]``, and a
  reference definition ``[x]: url``, which must open its line) loses its brackets' meaning. Text that uses none
  of these reads the same.

Standard library only.
"""

from __future__ import annotations

import re

from eaglelab.inputs import printable

#: Longest text shown in a table cell, and in a sentence, before it is cut in the middle / at the end.
CELL_CHARS, SENTENCE_CHARS = 72, 600
#: Characters Markdown acts on inside a table cell or a list item: backslash-escaped in a value.
_MARKDOWN = set("\\`*_[]<>|~#!$&")
#: ``<`` opening raw HTML (a tag, a comment, a declaration, a processing instruction) or an autolink (``<x:...>``).
_HTML_OPEN = re.compile(r"<(?=[A-Za-z/!?])")
#: A bracket that closes link text (followed by a destination or a reference) or an image's opening ``!``.
_LINK = re.compile(r"\](?=[(\[])|!(?=\[)")


def md_text(text: str, limit: int = SENTENCE_CHARS, middle: bool = False) -> str:
    """``text`` for one markdown table cell or list item: one printable line, cut to ``limit`` characters
    (in the middle when ``middle``: a path's end names the file), and every character markdown or HTML acts
    on backslash-escaped, so no value can add a column, a line, a link or a tag."""
    text = printable(str(text))
    if len(text) > limit:
        keep = max(limit - 1, 2)
        text = text[: keep // 3] + "…" + text[-(keep - keep // 3):] if middle else text[:keep] + "…"
    return "".join("\\" + c if c in _MARKDOWN else c for c in text)


def md_line(markup: str) -> str:
    """One line of eaglelab's Markdown, values formatted in, made safe to render (the module's rule).

    Emphasis, code spans and ``[tag]`` brackets stay as written; a line break or a control or format character
    becomes its printable escape (so a value cannot start a bullet, a heading or a table of its own); ``<``
    before a tag or autolink becomes ``&lt;``; a ``]`` that would close link text becomes ``\\]``, an image's
    ``!`` becomes ``\\!``, and a leading ``[`` (what a reference definition ``[x]: url`` needs) ``\\[``.
    """
    text = printable(str(markup))
    text = _HTML_OPEN.sub("&lt;", text)
    text = _LINK.sub(lambda m: "\\" + m.group(0), text)
    return "\\" + text if text.startswith("[") else text


def md_bullets(bullets: list[str]) -> list[str]:
    """Findings bullets as rendered lines: each one bullet (``- `` added where it is missing), safe (:func:`md_line`)."""
    return [f"- {md_line(b[2:] if b.startswith('- ') else b)}" for b in bullets]
