"""Run a generated recipe script for real in bash, with every command it may call replaced by a recorder.

The engines (SGLang, vLLM, SpecForge, speculators, torchrun, hf, eaglelab) and the few system
commands a recipe uses (``mkdir``, ``dirname``, ``curl``, ``kill``, ``sleep``) become bash functions,
defined through ``BASH_ENV`` before the script's first line runs. Each records the words bash
passes it, exactly, NUL-separated. ``PATH`` points nowhere, so any other command (a ``touch``
smuggled in through a folder name) fails as "command not found" instead of running, and shows in
the recorded words or on stderr.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

#: The commands a recipe may run; everything else is "command not found".
STUBBED = ("python", "torchrun", "specforge", "speculators", "vllm", "hf", "eaglelab", "curl", "kill", "sleep",
           "mkdir")
_CALL_END = "\x01\0"  # \x01 is refused in every value a recipe writes, so it cannot appear inside one


def stubs(log: Path) -> str:
    """Bash source defining the recording functions."""
    q = shlex.quote(str(log))
    # one printf, so one write: a server started in the background cannot split another call's record
    lines = [f'{name}() {{ printf "%s\\0" {name} "$@" $\'\\001\' >> {q}; }}' for name in STUBBED]
    lines.append('dirname() { case "$1" in */*) printf "%s\\n" "${1%/*}" ;; *) printf ".\\n" ;; esac; }')
    return "\n".join(lines) + "\n"


def run_script(script: Path, workdir: Path) -> tuple[list[list[str]], subprocess.CompletedProcess]:
    """Run ``script`` with ``bash`` in ``workdir``; return the recorded calls (each ``[name, *args]``) and the process."""
    log = workdir / "calls.log"
    env_file = workdir / "stubs.sh"
    env_file.write_text(stubs(log))
    log.write_bytes(b"")
    proc = subprocess.run(["/bin/bash", str(script)], cwd=workdir, capture_output=True, text=True, timeout=60,
                          env={"PATH": str(workdir / "no-such-bin"), "BASH_ENV": str(env_file), "HOME": str(workdir)})
    raw = log.read_bytes().decode("utf-8", "surrogateescape")
    calls = [c.split("\0")[:-1] for c in raw.split(_CALL_END) if c]
    return calls, proc


def expected_calls(recipe, here: Path) -> list[list[str]]:
    """The engine commands the recipe's steps say it runs, as the script in ``here`` runs them (``kill`` aside)."""
    return [step.concrete(os.path.abspath(here)) for step in recipe.steps if step.argv[0] != "kill"]


def assert_same_calls(got: list[list[str]], want: list[list[str]], label: str = "") -> None:
    """The same calls; a server started in the background may record after the next foreground call."""
    assert sorted(map(tuple, got)) == sorted(map(tuple, want)), (label, got, want)


def engine_calls(calls: list[list[str]]) -> list[list[str]]:
    """The recorded calls of steps: the script's own plumbing (mkdir, curl's wait, kill) left out."""
    return [c for c in calls if c[0] not in ("mkdir", "curl", "kill", "sleep")]
