"""Offline text every machine has: the Python standard library's docstrings and sources.

Two domains stand in for the two targets' data: English documentation (docstrings) and
Python code. Files are read in sorted order from a fixed module list, so the text is the
same on every machine with the same Python minor version.
"""

from __future__ import annotations

import ast
import functools
import sysconfig
from pathlib import Path

#: Modules whose sources feed the corpora (pure-Python, present in every CPython 3.11+).
STDLIB_MODULES = (
    "argparse", "ast", "base64", "bisect", "calendar", "collections/__init__", "configparser",
    "contextlib", "copy", "csv", "dataclasses", "datetime", "decimal", "difflib", "email/message",
    "enum", "fractions", "ftplib", "functools", "getopt", "gettext", "glob", "gzip", "heapq", "hmac",
    "html/parser", "http/client", "http/server", "imaplib", "inspect", "ipaddress", "json/decoder",
    "json/encoder", "logging/__init__", "mailbox", "mimetypes", "nntplib", "numbers", "operator",
    "optparse", "os", "pathlib", "pdb", "pickle", "pkgutil", "platform", "plistlib", "poplib",
    "pprint", "queue", "random", "re/__init__", "sched", "secrets", "selectors", "shlex", "shutil",
    "smtplib", "socket", "socketserver", "statistics", "string", "subprocess", "tarfile",
    "tempfile", "textwrap", "threading", "timeit", "tokenize", "trace", "traceback", "turtle",
    "typing", "unittest/case", "urllib/parse", "urllib/request", "uuid", "warnings", "wave",
    "weakref", "webbrowser", "zipfile", "zipimport",
)


def stdlib_files() -> list[Path]:
    """The existing source files of :data:`STDLIB_MODULES`, in a fixed order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for mod in STDLIB_MODULES:
        for cand in (root / f"{mod}.py", root / mod / "__init__.py"):
            if cand.is_file():
                files.append(cand)
                break
    return files


@functools.lru_cache(maxsize=4)
def docstrings(min_chars: int = 80) -> list[str]:
    """Module, class and function docstrings of the stdlib files (English prose). Cached."""
    out = []
    for f in stdlib_files():
        try:
            tree = ast.parse(f.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= min_chars:
                    out.append(" ".join(doc.split()))
    return out


@functools.lru_cache(maxsize=4)
def code_blocks(min_chars: int = 200) -> list[str]:
    """Function and class sources of the stdlib files, docstrings kept (Python code). Cached."""
    out = []
    for f in stdlib_files():
        try:
            text = f.read_text(encoding="utf-8")
            tree = ast.parse(text)
        except (SyntaxError, UnicodeDecodeError):
            continue
        lines = text.splitlines(keepends=True)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                # slice by line numbers: ast.get_source_segment re-splits the file per node
                seg = "".join(lines[node.lineno - 1: node.end_lineno])
                if len(seg) >= min_chars:
                    out.append(seg)
    return out


def split_held_out(items: list[str], every: int = 10) -> tuple[list[str], list[str]]:
    """Deterministic split: every ``every``-th item is held out."""
    train = [x for i, x in enumerate(items) if i % every != 0]
    held = [x for i, x in enumerate(items) if i % every == 0]
    return train, held


def prompts_from_docstrings(texts: list[str], n: int, words: int = 8) -> list[str]:
    """Prompts: the first ``words`` words of held-out docstrings."""
    return [" ".join(t.split()[:words]) for t in texts[:n]]
