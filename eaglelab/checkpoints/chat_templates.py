"""Chat templates rendered as transformers renders them, without transformers: Jinja's sandbox and nothing else.

A target's chat template decides the token stream its drafter meets: the same drafter measured on
raw and on chat-templated prompts can accept far fewer drafts on the second. Comparing two targets'
templates means rendering both on one conversation. transformers (``utils/chat_template_utils.py``)
renders in Jinja's ``ImmutableSandboxedEnvironment`` with ``trim_blocks`` and ``lstrip_blocks``, the
``loopcontrols`` extension, its own ``tojson`` (no HTML escaping, ``ensure_ascii=False``), the globals
``raise_exception`` and ``strftime_now``, and the variables ``messages``, ``tools``, ``documents``,
``add_generation_prompt`` and the special tokens; :func:`render` does the same.

A template is code from outside: the sandbox keeps it from Python's internals, and a deadline and an
output cap keep it from running forever or filling memory (:class:`TemplateRunaway`).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

#: The conversation both targets' templates are rendered on.
SAMPLE_CONVERSATION: tuple[dict[str, str], ...] = (
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is speculative decoding?"},
    {"role": "assistant", "content": "A small model drafts tokens; the large model checks them in one pass."},
    {"role": "user", "content": "Why does the chat template matter to the drafter?"},
)
#: Seconds one rendering may take, and characters it may write.
RENDER_SECONDS = 1.0
MAX_RENDERED_CHARS = 1_000_000


class TemplateRunaway(Exception):
    """A template that ran past :data:`RENDER_SECONDS` or wrote more than :data:`MAX_RENDERED_CHARS`."""


@dataclass(frozen=True)
class Rendering:
    """One template rendered on a conversation.

    Attributes:
        text: the rendered prompt (None when the template failed).
        problem: why it failed, one line (None when it rendered).
    """

    text: str | None
    problem: str | None = None


def _environment():
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """transformers' ``{% generation %}`` block (it marks assistant spans); its body renders as is."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.Scope(body, lineno=lineno)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # transformers' own filter: Jinja's escapes HTML characters
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    class Sandbox(ImmutableSandboxedEnvironment):
        """The sandbox, with ``*`` and ``**`` bounded: one operation must not allocate gigabytes."""

        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context, operator, left, right):
            if operator == "*" and any(isinstance(x, (str, list, tuple)) for x in (left, right)):
                count = right if isinstance(left, (str, list, tuple)) else left
                if isinstance(count, int) and count * max(len(left if count is right else right), 1) > \
                        MAX_RENDERED_CHARS:
                    raise TemplateRunaway(f"a repetition past {MAX_RENDERED_CHARS:,} items")
            if operator == "**" and isinstance(right, (int, float)) and abs(right) > 64 and \
                    isinstance(left, (int, float)) and abs(left) not in (0, 1):
                raise TemplateRunaway(f"a power with exponent {right}")
            return super().call_binop(context, operator, left, right)

    env = Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(template: str, messages=SAMPLE_CONVERSATION, specials: dict[str, str] | None = None,
           add_generation_prompt: bool = True, seconds: float = RENDER_SECONDS, **variables: Any) -> Rendering:
    """Render ``template`` on ``messages`` as transformers' ``apply_chat_template(tokenize=False)`` would.

    Args:
        template: the Jinja source.
        messages: the conversation (role / content dicts).
        specials: the tokenizer's special tokens by name (``bos_token``, ``eos_token``, ...), passed as
            variables; ``variables`` override them, as transformers' keyword arguments do.
        add_generation_prompt: end with the assistant's opening.
        seconds: the deadline.

    Returns:
        the rendered text, or the one-line reason it failed (a syntax error, ``raise_exception``, a
        sandbox refusal, a runaway): a template that does not render is a finding, not a crash.
    """
    import jinja2

    deadline = time.monotonic() + seconds

    def watch(frame, event, arg):  # a line-level deadline inside the template's compiled code
        if time.monotonic() > deadline:
            raise TemplateRunaway(f"rendering took longer than {seconds:g} s")
        return watch

    context = {**(specials or {}), **variables, "messages": [dict(m) for m in messages], "tools": None,
               "documents": None, "add_generation_prompt": add_generation_prompt}
    before = sys.gettrace()
    try:
        compiled = _environment().from_string(template)
        chunks, size = [], 0
        sys.settrace(watch)
        try:
            for chunk in compiled.generate(**context):
                size += len(chunk)
                if size > MAX_RENDERED_CHARS:
                    raise TemplateRunaway(f"the rendering passed {MAX_RENDERED_CHARS:,} characters")
                chunks.append(chunk)
        finally:
            sys.settrace(before)
        return Rendering("".join(chunks))
    except TemplateRunaway as exc:
        return Rendering(None, str(exc))
    except jinja2.exceptions.TemplateSyntaxError as exc:
        return Rendering(None, f"syntax error at line {exc.lineno}: {exc.message}")
    except jinja2.exceptions.SecurityError as exc:
        return Rendering(None, f"refused by the sandbox: {exc}")
    except jinja2.exceptions.TemplateError as exc:
        return Rendering(None, f"the template raised: {exc}")
    except (RecursionError, MemoryError) as exc:
        return Rendering(None, f"the template ran away ({type(exc).__name__})")
    except Exception as exc:  # a template is someone else's program: any failure is a finding about it
        return Rendering(None, f"{type(exc).__name__}: {exc}")


#: Pieces a rendering is compared in: special-token markers (``<|im_end|>``, ``<think>``), words, spaces, signs.
_PIECE = r"<\|[^<>|]{0,40}\|>|</?[A-Za-z_]{1,20}>|\w+|\s+|[^\w\s]"


def text_diff(old: str, new: str, limit: int = 40, context: int = 3) -> list[str]:
    """What changes from one rendering to the other, one line per change (``-`` removed, ``+`` added).

    A rendered prompt is often one long line, so the change is located by pieces (special-token markers
    such as ``<|im_middle|>`` or ``<think>`` whole, words, spaces, signs): each removed or added stretch is
    shown with the few pieces before it. Renderings are compared on their first 20,000 characters (the
    sample conversation is far shorter).
    """
    import difflib
    import re

    a, b = re.findall(_PIECE, old[:20_000]), re.findall(_PIECE, new[:20_000])
    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        before = "".join(a[max(i1 - context, 0): i1])
        where = f"after {'...' if i1 > context else ''}{before!r}" if before else "at the start"
        if tag in ("replace", "delete"):
            out.append(f"- {''.join(a[i1:i2])!r} ({where})")
        if tag in ("replace", "insert"):
            out.append(f"+ {''.join(b[j1:j2])!r} ({where})")
    return out[:limit] + ([f"... ({len(out) - limit} more changes)"] if len(out) > limit else [])
