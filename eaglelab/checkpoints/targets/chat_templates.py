"""Chat templates rendered as transformers renders them, without transformers: Jinja's sandbox and nothing else.

A target's chat template decides the token stream its drafter meets: the same drafter measured on
raw and on chat-templated prompts can accept far fewer drafts on the second. Comparing two targets'
templates means rendering both on one conversation. transformers (``utils/chat_template_utils.py``)
renders in Jinja's ``ImmutableSandboxedEnvironment`` with ``trim_blocks`` and ``lstrip_blocks``, the
``loopcontrols`` extension, its own ``tojson`` (no HTML escaping, ``ensure_ascii=False``), the globals
``raise_exception`` and ``strftime_now``, and the variables ``messages``, ``tools``, ``documents``,
``add_generation_prompt`` and the special tokens; :func:`render` does the same.

A template is code from outside. The sandbox keeps it from Python's internals; its renderings run in a
child process (:mod:`eaglelab.checkpoints.targets.template_child`) that caps its own address space and CPU time
before it reads a template, checks a deadline on every template line and an output cap on every chunk,
and bounds the operations that size their result (repetitions, big integers, widths); this process kills
it at the deadline, so no single C-level call (``'x'|center(1500000000)``, a power of a huge integer)
can hold memory or time past the caps. The renderings of one command share one child.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglelab.inputs import quoted

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
#: Largest integer a template may compute (bits: about 20,000 decimal digits).
MAX_INT_BITS = 65_536
#: Address space the renderer's child may add to what it holds once started (Python and jinja2: ~25 MB).
CHILD_MEMORY_BYTES = 256 << 20
#: Seconds the child may take to start (Python and jinja2: ~60 ms), and past a rendering's deadline before
#: it is killed (the child's own line-level deadline usually answers first).
CHILD_START_SECONDS = 10.0
KILL_GRACE_SECONDS = 0.5
_CHILD = Path(__file__).with_name("template_child.py")


@dataclass(frozen=True)
class Rendering:
    """One template rendered on a conversation.

    Attributes:
        text: the rendered prompt (None when the template failed).
        problem: why it failed, one line (None when it rendered); what came from the template is quoted.
    """

    text: str | None
    problem: str | None = None


def template_context(messages=SAMPLE_CONVERSATION, specials: dict[str, str] | None = None,
                     add_generation_prompt: bool = True, **variables: Any) -> dict[str, Any]:
    """The variables a template sees, as transformers passes them (keyword arguments over special tokens)."""
    return {**(specials or {}), **variables, "messages": [dict(m) for m in messages], "tools": None,
            "documents": None, "add_generation_prompt": add_generation_prompt}


def render(template: str, messages=SAMPLE_CONVERSATION, specials: dict[str, str] | None = None,
           add_generation_prompt: bool = True, seconds: float = RENDER_SECONDS, **variables: Any) -> Rendering:
    """Render ``template`` on ``messages`` as transformers' ``apply_chat_template(tokenize=False)`` would.

    Args:
        template: the Jinja source.
        messages: the conversation (role / content dicts).
        specials: the tokenizer's special tokens by name (``bos_token``, ``eos_token``, ...), passed as
            variables; ``variables`` override them, as transformers' keyword arguments do (JSON values).
        add_generation_prompt: end with the assistant's opening.
        seconds: the deadline.

    Returns:
        the rendered text, or the one-line reason it failed (a syntax error, ``raise_exception``, a
        sandbox refusal, a runaway): a template that does not render is a finding, not a crash.
    """
    return render_all([(template, template_context(messages, specials, add_generation_prompt, **variables))],
                      seconds)[0]


def render_all(jobs: Sequence[tuple[str, dict[str, Any]]], seconds: float = RENDER_SECONDS) -> list[Rendering]:
    """Several templates, each with its variables (:func:`template_context`), rendered in one child process.

    A rendering the child does not finish (killed at its deadline, or by its limits) is a finding, and the
    renderings after it get a fresh child.
    """
    out: list[Rendering] = []
    while len(out) < len(jobs):
        answers, why = _run_child(jobs[len(out):], seconds)
        out += [_rendering(a) for a in answers]
        if len(out) < len(jobs):
            out.append(Rendering(None, why))
    return out


def _rendering(answer: dict[str, Any]) -> Rendering:
    """The child's answer for one template as a :class:`Rendering`, its own words quoted."""
    if isinstance(answer.get("text"), str):
        return Rendering(answer["text"])
    kind, detail = answer.get("kind"), quoted(str(answer.get("detail", "")), 200)
    if kind == "runaway":
        return Rendering(None, str(answer.get("detail", ""))[:200])
    if kind == "syntax":
        return Rendering(None, f"syntax error at line {int(answer.get('line') or 0)}: {detail}")
    if kind == "sandbox":
        return Rendering(None, f"refused by the sandbox: {detail}")
    if kind == "raised":
        return Rendering(None, f"the template raised: {detail}")
    return Rendering(None, f"{quoted(str(answer.get('type', 'error')), 60)}: {detail}")


def _run_child(jobs: Sequence[tuple[str, dict[str, Any]]], seconds: float) -> tuple[list[dict[str, Any]], str]:
    """Render ``jobs`` in one child; its answers in order (possibly fewer), and why it stopped early."""
    request = {"renders": [{"template": t, "context": c} for t, c in jobs], "seconds": seconds,
               "max_chars": MAX_RENDERED_CHARS, "max_int_bits": MAX_INT_BITS, "memory_bytes": CHILD_MEMORY_BYTES,
               "paths": _jinja_paths()}
    cap = len(jobs) * (12 * MAX_RENDERED_CHARS + 4096) + 4096  # JSON of the largest renderings, \u-escaped
    answers: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryFile() as stdin:  # a file, not a pipe: the child reads it whenever it is ready
            stdin.write(json.dumps(request, ensure_ascii=True, default=str).encode())
            stdin.seek(0)
            proc = subprocess.Popen([sys.executable, "-I", str(_CHILD)], stdin=stdin, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL)
    except (OSError, ValueError) as exc:
        return [], f"the template was not rendered: the renderer could not start ({type(exc).__name__})"
    why = ""
    try:
        why = _read_answers(proc, answers, len(jobs), seconds, cap)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
    if len(answers) < len(jobs) and not why:
        why = _death(proc.returncode)
    return answers, why


@functools.cache
def _jinja_paths() -> list[str]:
    """Where this interpreter finds jinja2 and markupsafe (found, not imported): the child, started isolated
    (``-I``: no user site, no ``PYTHONPATH``), appends them to its path."""
    specs = [importlib.util.find_spec(name) for name in ("jinja2", "markupsafe")]
    return sorted({str(Path(spec.origin).parent.parent) for spec in specs if spec is not None and spec.origin})


def _read_answers(proc: subprocess.Popen, answers: list, wanted: int, seconds: float, cap: int) -> str:
    """Read the child's JSON lines into ``answers`` until it gave ``wanted`` of them; "" or why it stopped."""
    deadline, ready, size, pending = time.monotonic() + CHILD_START_SECONDS, False, 0, bytearray()
    fd = proc.stdout.fileno()
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while len(answers) < wanted:
            left = deadline - time.monotonic()
            if left <= 0:
                return f"rendering took longer than {seconds:g} s (the renderer was stopped)" if ready else \
                    f"the template was not rendered: the renderer did not start within {CHILD_START_SECONDS:g} s"
            if not sel.select(left):
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return ""
            size += len(chunk)
            if size > cap:
                return f"the rendering passed {MAX_RENDERED_CHARS:,} characters"
            pending += chunk
            while (end := pending.find(b"\n")) >= 0:
                try:
                    answer = json.loads(bytes(pending[:end]))
                except ValueError:
                    return "the template was not rendered: the renderer's answer is not JSON"
                del pending[: end + 1]
                if not isinstance(answer, dict):
                    return "the template was not rendered: the renderer's answer is not JSON"
                if answer.get("ready"):
                    ready = True
                else:
                    answers.append(answer)
                deadline = time.monotonic() + seconds + KILL_GRACE_SECONDS
    return ""


def _death(returncode: int | None) -> str:
    """Why the child ended before its last rendering, one line."""
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        if name == "SIGXCPU":
            return "the template ran past the renderer's CPU time limit (the renderer was killed)"
        return f"the template ran away (the renderer died of {name})"
    return f"the template was not rendered: the renderer stopped (exit {returncode})"


#: Pieces a rendering is compared in: special-token markers (``<|im_end|>``, ``<think>``), words, spaces, signs.
_PIECE = r"<\|[^<>|]{0,40}\|>|</?[A-Za-z_]{1,20}>|\w+|\s+|[^\w\s]"


def text_diff(old: str, new: str, limit: int = 40, context: int = 3) -> list[str]:
    """What changes from one rendering to the other, one line per change (``-`` removed, ``+`` added).

    A rendered prompt is often one long line, so the change is located by pieces (special-token markers
    such as ``<|im_middle|>`` or ``<think>`` whole, words, spaces, signs): each removed or added stretch is
    shown with the few pieces before it. Renderings are compared on their first 20,000 characters (the
    sample conversation is far shorter).
    """
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
