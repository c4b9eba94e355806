"""The process a chat template is rendered in: Jinja's sandbox under the kernel's memory and CPU limits.

A template is someone else's program. Jinja's sandbox keeps it from Python's internals, and the checks
here (a line-level deadline, an output cap, bounded ``*`` / ``**`` / widths) stop most runaways between two
Python lines; but a single C-level call (``'x'|center(1500000000)``, a power of a huge integer) runs to its
end between two lines. So :mod:`eaglelab.checkpoints.targets.chat_templates` runs this file as a child process
(``python -I template_child.py``): it lowers its own address-space and CPU limits before it reads a
template, renders each one it is given, and writes one JSON line per rendering; the parent kills it at
the deadline. The file imports the standard library and jinja2 only (never eaglelab), so the child starts
in tens of milliseconds and from any checkout.

The request (stdin, JSON): ``{"renders": [{"template": str, "context": {...}}], "seconds": float,
"max_chars": int, "max_int_bits": int, "memory_bytes": int, "paths": [str]}`` (``paths``: where the parent
finds jinja2, appended to this isolated interpreter's path). The answer (stdout): ``{"ready": true}``
once jinja2 is imported, then per rendering ``{"text": str}`` or ``{"kind": ..., "detail": str}`` (kinds:
``runaway``, ``syntax`` with ``line``, ``sandbox``, ``raised``, ``error`` with ``type``).
"""

from __future__ import annotations

import json
import math
import re
import resource
import sys
import time
from datetime import datetime
from typing import Any

#: Methods of ``str`` whose first argument is the width of the result.
WIDTH_METHODS = frozenset({"center", "ljust", "rjust", "zfill"})
#: Widths and precisions written in a ``%`` or ``{:...}`` format string, and widths taken from the arguments.
_WRITTEN = re.compile(r"%[-#0 +]*(\d*)(?:\.(\d*))?|\{[^{}]*:[^{}\d]*(\d*)(?:\.(\d*))?")
_FROM_ARGS = re.compile(r"%[-#0 +\d.]*\*|\{[^{}]*:[^{}]*\{")


class TemplateRunaway(Exception):
    """A template that ran past its deadline, wrote past the output cap, or asked for one huge value."""


def _bounded(limits: dict[str, Any]):
    """The checks run before an operation that sizes its result, as closures over the request's limits."""
    max_chars, max_bits = limits["max_chars"], limits["max_int_bits"]

    def width(n: Any, what: str) -> None:
        if isinstance(n, int) and n > max_chars:
            size = f"{n:,}" if n.bit_length() < 64 else "more than 2^63"
            raise TemplateRunaway(f"{what} of {size} characters (the cap is {max_chars:,})")

    def formatted(fmt: str, args: Any, what: str) -> None:
        """A format string's written widths, and the arguments that give a width (``%*s``, ``{:>{}}``)."""
        for m in _WRITTEN.finditer(fmt[:100_000]):
            for digits in m.groups():
                digits = (digits or "").lstrip("0")
                if len(digits) > len(str(max_chars)) or (digits and int(digits) > max_chars):
                    raise TemplateRunaway(f"{what} with a width past {max_chars:,} characters")
        if _FROM_ARGS.search(fmt[:100_000]):
            for value in args if isinstance(args, (tuple, list)) else (args,):
                width(value, what)

    def binop(operator: str, left: Any, right: Any) -> None:
        if operator == "*" and any(isinstance(x, (str, list, tuple)) for x in (left, right)):
            seq, count = (left, right) if isinstance(left, (str, list, tuple)) else (right, left)
            if isinstance(count, int) and count * max(len(seq), 1) > max_chars:
                raise TemplateRunaway(f"a repetition past {max_chars:,} items")
        ints = all(isinstance(x, int) for x in (left, right))
        if operator == "*" and ints and left.bit_length() + right.bit_length() > max_bits:
            raise TemplateRunaway(f"a product past {max_bits:,} bits")
        if operator == "**" and ints and right > 0 and abs(left) > 1 and left.bit_length() * right > max_bits:
            raise TemplateRunaway(f"a power past {max_bits:,} bits")
        if operator == "**" and isinstance(right, (int, float)) and abs(right) > 64 and \
                isinstance(left, (int, float)) and abs(left) not in (0, 1):
            raise TemplateRunaway("a power with an exponent past 64")
        if operator == "%" and isinstance(left, str):
            formatted(left, right, "a %-format")

    def call(obj: Any, args: tuple, kwargs: dict) -> None:
        obj = getattr(obj, "__wrapped__", obj)  # the sandbox wraps str.format
        owner, name = getattr(obj, "__self__", None), getattr(obj, "__name__", "")
        if not isinstance(owner, str):
            return
        if name in WIDTH_METHODS and args:
            width(args[0], f"str.{name}")
        elif name == "expandtabs" and args and isinstance(args[0], int):
            width(args[0] * owner.count("\t"), "str.expandtabs")
        elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
            hits = owner.count(args[0]) if args[0] else len(owner) + 1
            width(len(owner) + hits * len(args[1]), "str.replace")
        elif name in ("format", "format_map"):
            formatted(owner, (*args, *kwargs.values()), "str.format")

    return width, formatted, binop, call


def environment(limits: dict[str, Any]):
    """transformers' chat-template environment, with every operation that sizes its result bounded."""
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.filters import do_center, do_format, do_indent
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    check_width, check_format, check_binop, check_call = _bounded(limits)

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
        check_width(indent, "a JSON indent")
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    def center(value, width=80):
        check_width(width, "a centre")
        return do_center(value, width)

    def indent(s, width=4, first=False, blank=False):
        check_width(width, "an indent")
        return do_indent(s, width, first, blank)

    def format_(value, *args, **kwargs):
        check_format(str(value), (*args, *kwargs.values()), "the format filter")
        return do_format(value, *args, **kwargs)

    class Sandbox(ImmutableSandboxedEnvironment):
        """The sandbox, with ``*``, ``**``, ``%`` and width-taking calls bounded before they run."""

        intercepted_binops = frozenset({"*", "**", "%"})

        def call_binop(self, context, operator, left, right):
            check_binop(operator, left, right)
            return super().call_binop(context, operator, left, right)

        def call(self, context, obj, /, *args, **kwargs):
            check_call(obj, args, kwargs)
            return super().call(context, obj, *args, **kwargs)

    env = Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters.update({"tojson": tojson, "center": center, "indent": indent, "format": format_})
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_here(template: str, context: dict[str, Any], limits: dict[str, Any]) -> dict[str, Any]:
    """One rendering in this process: ``{"text": ...}`` or the failure as ``{"kind", "detail"}``.

    The deadline is checked on every line of the template's compiled code, the output cap on every chunk;
    neither interrupts one C-level call (the child's limits and the parent's kill do).
    """
    import jinja2

    seconds, max_chars = limits["seconds"], limits["max_chars"]
    deadline = time.monotonic() + seconds

    def watch(frame, event, arg):
        if time.monotonic() > deadline:
            raise TemplateRunaway(f"rendering took longer than {seconds:g} s")
        return watch

    before = sys.gettrace()
    try:
        compiled = environment(limits).from_string(template)
        chunks, size = [], 0
        sys.settrace(watch)
        try:
            for chunk in compiled.generate(**context):
                size += len(chunk)
                if size > max_chars:
                    raise TemplateRunaway(f"the rendering passed {max_chars:,} characters")
                chunks.append(chunk)
        finally:
            sys.settrace(before)
        return {"text": "".join(chunks)}
    except TemplateRunaway as exc:
        return {"kind": "runaway", "detail": str(exc)}
    except jinja2.exceptions.TemplateSyntaxError as exc:
        return {"kind": "syntax", "line": exc.lineno, "detail": str(exc.message)}
    except jinja2.exceptions.SecurityError as exc:
        return {"kind": "sandbox", "detail": str(exc)}
    except jinja2.exceptions.TemplateError as exc:
        return {"kind": "raised", "detail": str(exc)}
    except (RecursionError, MemoryError) as exc:
        return {"kind": "runaway", "detail": f"the template ran away ({type(exc).__name__})"}
    except Exception as exc:  # a template is someone else's program: any failure is a finding about it
        return {"kind": "error", "type": type(exc).__name__, "detail": str(exc)}


def _vm_size() -> int:
    """This process's address space now (bytes; 0 where /proc is not there)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def limit_self(memory_bytes: int, cpu_seconds: float) -> None:
    """Lower this process's limits for good: ``memory_bytes`` more address space than it holds now, the CPU
    seconds given (SIGXCPU, then SIGKILL a second later), and no core file (SIGXCPU would write one)."""
    def lower(which: int, soft: int, hard: int) -> None:
        old = resource.getrlimit(which)[1]
        if old != resource.RLIM_INFINITY:
            soft, hard = min(soft, old), min(hard, old)
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError):  # a platform without this limit: the parent's deadline still holds
            pass

    lower(resource.RLIMIT_CORE, 0, 0)
    cpu = math.ceil(time.process_time() + cpu_seconds)
    lower(resource.RLIMIT_CPU, cpu, cpu + 1)
    vm = _vm_size()
    if vm:
        lower(resource.RLIMIT_AS, vm + memory_bytes, vm + memory_bytes)


def _say(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=True) + "\n")
    sys.stdout.flush()


def main() -> None:
    """Read the request on stdin, render each template under the limits, one JSON line per rendering."""
    request = json.loads(sys.stdin.read())
    renders = request["renders"]
    limit_self(request["memory_bytes"], len(renders) * (request["seconds"] + 1) + 2)
    sys.path += [p for p in request.get("paths", []) if p not in sys.path]  # where the parent finds jinja2
    import jinja2.sandbox  # noqa: F401 - imported under the limits, before the first deadline starts

    _say({"ready": True})
    for item in renders:
        _say(render_here(item["template"], item["context"], request))


if __name__ == "__main__":
    main()
