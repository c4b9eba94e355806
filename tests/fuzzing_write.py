"""Hostile-input cases for the write side and the files read back (issue #31), in the harness of :mod:`tests.fuzzing`.

Seven categories, each a hypothesis strategy returning a :class:`tests.fuzzing.Case` whose oracle the
same judge applies (exit 0 with valid output, or exit 2 with one line; never a traceback, a hang,
garbage accepted, or code run):

- ``param``: ``eaglelab run --prepare-only -p NAME=VALUE`` with values built to break quoting (quotes,
  backslashes, newlines, papermill's ``{}``), Python literals of every type, huge and nested ones; an
  exit 0 must write an injected cell that parses to data only and holds exactly the value parsed;
- ``out``: ``--out`` targets of ``recipe``, ``run --prepare-only`` and ``report``: files, paths under a
  file, FIFOs, symlinks, folders with the user's files, folders with a broken or lying marker,
  ``/proc``, ``~nosuchuser``, odd names; whatever the outcome, every file the user had is unchanged;
- ``recipe``: hostile ``--data`` / ``--workdir`` / ``--chat-template``; control characters must be
  refused, everything else must reach the engines as the same word when the script runs in bash
  (the engines replaced by recorders, :mod:`tests.script_stubs`);
- ``readback``: mutated findings files (``report``) and run records (``recipe --from-run``);
- ``worker``: mutated answers of vLLM's worker, read by :func:`eaglelab.engines.vllm.run_from_result`;
- ``hub``: a hub-compatible server that trickles, sends huge or lying bodies, or garbage, answering
  ``inspect OWNER/NAME``, or changes a file between two answers (its commit, ETag or header length) while
  a target's heads are read: one line within the deadline; an endless agent registry it is never asked for;
- ``picker``: hostile folder trees for the notebooks' pickers (FIFOs named config.json, huge and
  broken configs, symlink loops, deep trees): they answer in time and list exactly the drafters;
- ``dump``: the engines' hidden-state dumps (issue #27), SpecForge's ``data_{i}.ckpt[.gz]`` and vLLM's
  ``hs_{i}.safetensors``, mutated as bytes (flips, cuts, appends) and as tensors (NaN / Inf, widths,
  layer counts, token ids, dtypes, ranks, a pickled global ``weights_only`` refuses): what reads is
  finite and of the promised shapes, the rest one line; and pairs of folders probed as A and B (issue #37):
  loss masks of 0, one-token samples, too few samples, one folder twice or its byte copy, a ``rows_*`` folder
  linked from outside or inside, a gzip bomb: refused with the reason, or (linked from inside) every sample probed.

Function-level categories (``worker``, ``picker``) run through :func:`cli_errors`, which prints an
:class:`~eaglelab.errors.EaglelabError` exactly as ``eaglelab.cli.main`` does.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import io
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from tests import fuzzing as fz
from tests import script_stubs

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
CATEGORIES = ("param", "out", "recipe", "readback", "worker", "hub", "picker", "dump")
#: Seconds per case where a category needs more than the readers' cap: a hub case waits out its 1 s deadline,
#: a picker walks a tree, a findings file that reads renders the game plan's figure (PNG and PDF, about 1 s here).
TIME_CAPS = {"hub": 4.0, "picker": 20.0, "readback": 10.0}


def cli_errors(command: str, func: Callable[[list[str]], None]) -> Callable[[list[str]], int]:
    """An entry point for :func:`tests.fuzzing.run_cli`: ``func(argv)``, its EaglelabError printed as the CLI prints it."""
    def run(argv: list[str]) -> int:
        from eaglelab.errors import EaglelabError
        from eaglelab.inputs import printable

        try:
            func(argv)
        except EaglelabError as exc:
            print(f"eaglelab {command}: error: {printable(str(exc))}", file=sys.stderr)
            return 2
        return 0
    return run


def digest(root: Path) -> dict[str, str]:
    """Every regular file under ``root`` (symlinks not followed) and its sha256."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            if p.is_symlink() or not p.is_file():
                continue
            with contextlib.suppress(OSError):
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _unchanged(root: Path, before: dict[str, str]):
    """An invariant for both outcomes: every file the user had under ``root`` is still there, byte for byte."""
    def check(outcome: fz.Outcome):
        after = digest(root)
        lost = [k for k, v in before.items() if after.get(k) != v]
        if lost:
            return "garbage", "a user's file was replaced or deleted", f"changed: {lost[:3]}"
        return None
    return check


# --------------------------------------------------------------------------- param

QUOTE_BREAKERS = ['"', "'", '"""', "'''", "\\", "\\'", '\\"', "\n", "\r", "{}", "{0}", "%s", "\x00", "#", ")", "(",
                  "]", "[", "__import__('os').system('touch PWNED')", "${HOME}", "$(id)", "`id`", "\u2028", "\udcff",
                  "😀", " ", "\t", ",", ":", "None", "True"]
LITERALS = ["(1, 2)", "('a\"', 'b')", "{1, 2}", "frozenset()", "b'x'", "1j", "1e309", "-1e309", "{1: 2}", "{'a': (1,)}",
            "[" * 50 + "]" * 50, "(" * 300, "{{}}", "[" + "1," * 5000 + "]", "'x' * 3", "None", "True", "3", "2.5",
            "[1, 'a', None]", "{'k': [1.5, {'j': None}]}", "''", "'" + "a" * 300 + "'", "0x10", "1_000", "-0.0"]


@st.composite
def param_cases(draw, root: Path) -> fz.Case:
    from eaglelab.workbook.runner import notebook_parameters

    folder = fz.new_dir(root, "param")
    names = sorted(notebook_parameters(NOTEBOOKS / "02_config_and_weight_shapes.ipynb"))
    name = draw(st.sampled_from(names))
    raw = draw(st.one_of(st.sampled_from(LITERALS),
                         st.lists(st.sampled_from(QUOTE_BREAKERS) | st.text(max_size=5), min_size=1, max_size=8)
                         .map("".join),
                         st.lists(st.sampled_from(QUOTE_BREAKERS), min_size=1, max_size=4).map(repr)))
    out = folder / "prepared"
    argv = ["run", "--only", "02", "--prepare-only", "--out", str(out), "-p", f"{name}={raw}"]
    return fz.Case("param", f"-p {name}={raw!r}"[:120], argv, "any", folder, check_ok=_injected_is(name, raw, out),
                   kind="literal" if raw in LITERALS else "text")


def _injected_is(name: str, raw: str, out: Path):
    def check(outcome: fz.Outcome):
        import nbformat

        from eaglelab.workbook.runner import as_json_value

        try:
            expected = as_json_value(ast.literal_eval(raw), name)
        except Exception:  # noqa: BLE001 - not a literal: the text itself
            expected = raw
        nb = nbformat.read(str(out / "02_config_and_weight_shapes.ipynb"), as_version=4)
        cells = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
        if len(cells) != 1:
            return "garbage", "no injected cell", f"{len(cells)} cells"
        tree = ast.parse(cells[0].source)
        if [type(n).__name__ for n in tree.body] != ["Import", "Expr", "Delete"]:
            return "garbage", "the injected cell holds more than data", cells[0].source[:200]
        namespace: dict[str, Any] = {}
        exec(compile(cells[0].source, "<injected>", "exec"), namespace)
        if json.dumps(namespace.get(name)) != json.dumps(expected):
            return "garbage", "the kernel would get another value", f"{namespace.get(name)!r:.80} != {expected!r:.80}"
        return None
    return check


# --------------------------------------------------------------------------- out

OUT_KINDS = ("new", "empty", "file", "under-file", "fifo", "symlink-to-user", "symlink-loop", "user-files",
             "ours-plus-user", "broken-marker", "lying-marker", "proc", "dev-null", "no-such-user", "empty-string",
             "long-name", "odd-name", "ours")
OUT_COMMANDS = ("recipe", "run", "report")


def _plant(folder: Path, kind: str) -> str:
    """Make the --out target of ``kind`` under ``folder`` (with the user's files beside it); return the argument."""
    user = folder / "user"
    user.mkdir()
    (user / "notes.txt").write_text("the user's own")
    target = folder / "target"
    if kind == "new":
        pass
    elif kind == "empty":
        target.mkdir()
    elif kind == "file":
        target.write_text("a user's file")
    elif kind == "under-file":
        target.write_text("a user's file")
        target = target / "sub"
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "symlink-to-user":
        target.symlink_to(user)
    elif kind == "symlink-loop":
        target.symlink_to(target)
    elif kind in ("user-files", "ours-plus-user", "broken-marker", "lying-marker", "ours"):
        target.mkdir()
        if kind != "ours":
            (target / "warm.yaml").write_text("mine: 1\n")
        marker = {"eaglelab": 1, "kind": "recipe", "files": []}
        if kind == "ours-plus-user":
            (target / "run.sh").write_text("# eaglelab's\n")
            marker["files"] = ["run.sh"]
        if kind == "ours":
            (target / "run.sh").write_text("# eaglelab's\n")
            marker["files"] = ["run.sh"]
        if kind == "lying-marker":
            marker["files"] = ["warm.yaml", "../user/notes.txt"]
        text = "{not json" if kind == "broken-marker" else json.dumps(marker)
        if kind != "user-files":
            (target / ".eaglelab-output.json").write_text(text)
    elif kind == "proc":
        return "/proc/eaglelab-fuzz/out"
    elif kind == "dev-null":
        return "/dev/null"
    elif kind == "no-such-user":
        return "~nosuchuser-eaglelab/out"
    elif kind == "empty-string":
        return ""
    elif kind == "long-name":
        target = folder / ("x" * 300)
    elif kind == "odd-name":
        target = folder / "odd \\ 'name' \"$(x)\""
    return str(target)


@st.composite
def out_cases(draw, root: Path) -> fz.Case:
    folder = fz.new_dir(root, "out")
    kind = draw(st.sampled_from(OUT_KINDS))
    command = draw(st.sampled_from(OUT_COMMANDS))
    force = draw(st.booleans())
    out = _plant(folder, kind)
    drafter = fz.write_tiny_drafter(folder / "drafter")
    target = folder / "target-config.json"
    target.write_text(json.dumps(fz.TINY_TARGET))
    if command == "recipe":
        argv = ["recipe", "--engine", "speculators", "--old-drafter", str(drafter), "--new-target", str(target), "--out", out]
        argv += ["--force"] if force else []
    elif command == "run":
        argv = ["run", "--only", "02", "--prepare-only", "--out", out]
    else:
        figures = folder / "figures"
        figures.mkdir()
        argv = ["report", "--figures", str(figures), "--out", out + ("/GAME_PLAN.md" if kind == "ours" else "")]
    before = digest(folder)
    # the user's files must come out unchanged; eaglelab's own (its marker, what it listed) may change
    invariant = _unchanged(folder, {k: v for k, v in before.items() if not (k.startswith("target/") and kind == "ours")
                                    and not k.startswith("drafter/") and not k.endswith(".eaglelab-output.json")
                                    and not (kind == "ours-plus-user" and k == "target/run.sh")})
    # run from the case's folder: a relative or empty --out that went astray lands there, not in the repository;
    # an empty --out is no folder, and recipe and run refuse it (report reads it as its default, FIGURES/GAME_PLAN.md)
    oracle = "invalid" if kind == "empty-string" and command in ("recipe", "run") else "any"
    return fz.Case("out", f"{command} --out {kind}{' --force' if force else ''}", argv, oracle, folder,
                   check_ok=invariant, check_error=invariant, kind=f"{kind}", main=in_folder(folder))


# --------------------------------------------------------------------------- recipe

RECIPE_TEXT = st.one_of(
    st.sampled_from([
        "with space", "quote'single", 'quote"double', "$(touch PWNED)", "`touch PWNED`", "; touch PWNED #", "$HOME",
        "$SERVER_PID", "$HERE/x", "${IFS}", "*", "~", "-rf", "--flag", "back\\slash", "ümlaut", "😀", "#hash", "a&&b",
        "a|b", ">out", "!bang", "%p", "a: b", "{a,b}", "[x]", "- item", "'; touch PWNED; '", "line\nbreak", "tab\t",
        "esc\x1b[2J", "nul\x00", "\u2028", "\udcff", "\x85", "null", "true", "~", "123", "&anchor", "*alias", "? q",
    ]),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=12))


#: Relative paths and names that start with "-" (issue #37 item 17): a parser reads such a word as an option.
#: (``--`` itself cannot be given as ``--flag=--``: argparse, eaglelab's too, reads it as no value.)
DASH_NAMES = st.sampled_from(["-k2", "--k2", "-rf", "--flag", "-h", "--help", "- item", "-", "-$(touch PWNED)",
                              "--x=y", "-'q'", "-😀", "-1", "--1e3", "---"])
#: The recipe settings that are paths checked here (the drafter, the targets): given relative, from the case's folder.
LOCAL_PATH_FLAGS = ("--old-drafter", "--new-target", "--old-target")


def tiny_target_folder(folder: Path) -> Path:
    """A target the probe recipe's checks read: the tiny target's config and safetensors with its embedding, head, norm."""
    import numpy as np
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(fz.TINY_TARGET))
    V, H = fz.TINY_TARGET["vocab_size"], fz.TINY_TARGET["hidden_size"]
    save_file({"model.embed_tokens.weight": np.ones((V, H), np.float32), "lm_head.weight": np.ones((V, H), np.float32),
               "model.norm.weight": np.ones(H, np.float32)}, str(folder / "model.safetensors"))
    return folder


def in_folder(folder: Path) -> Callable[[list[str]], int]:
    """An entry point running ``eaglelab`` from ``folder``, so that relative paths name the case's own files."""
    def run(argv: list[str]) -> int:
        from eaglelab.cli import main

        with contextlib.chdir(folder):
            return main(argv)
    return run


@st.composite
def recipe_cases(draw, root: Path) -> fz.Case:
    import unicodedata

    folder = fz.new_dir(root, "recipe")
    job = draw(st.sampled_from(["warm-start", "warm-start", "probe"]))
    flags = ["--data", "--workdir", "--chat-template", *LOCAL_PATH_FLAGS[: 3 if job == "probe" else 2]]
    flag = draw(st.sampled_from(flags))
    # a local path is a folder made here; the probe's work folder receives the probe's JSON when the script runs
    local = flag in LOCAL_PATH_FLAGS or (job == "probe" and flag == "--workdir")
    value = draw(DASH_NAMES if local else RECIPE_TEXT | DASH_NAMES)
    engine = draw(st.sampled_from(["specforge", "speculators"]))
    bad = any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") for c in value)  # Cf: bidi, soft hyphen
    paths = {"--old-drafter": "drafter", "--new-target": "target-b", "--old-target": "target-a"}
    if flag in LOCAL_PATH_FLAGS:
        paths[flag] = value
    fz.write_tiny_drafter(folder / paths["--old-drafter"])
    for f in ("--old-target", "--new-target") if job == "probe" else ("--new-target",):
        tiny_target_folder(folder / paths[f])
    out = folder / "recipe"
    argv = ["recipe", "--job", job, "--engine", engine, "--out", str(out)]
    argv += [f"{f}={paths[f]}" for f in LOCAL_PATH_FLAGS if f in paths and (job == "probe" or f != "--old-target")]
    if flag not in LOCAL_PATH_FLAGS:
        argv.append(f"{flag}={value}")  # FLAG=VALUE: a value may start with "-"
    return fz.Case("recipe", f"{job} {engine} {flag} {value!r}"[:120], argv, "invalid" if bad else "valid", folder,
                   check_ok=_script_runs_as_written(out, job, flag, value), kind=f"{job} {flag}", main=in_folder(folder))


def _rebuilt(out: Path, job: str):
    """The recipe built again from its ``recipe.json`` settings (from the case's folder, as it was built)."""
    from eaglelab.engines.probe_recipes import ProbeRecipeSettings, build_probe_recipe
    from eaglelab.engines.recipes import RecipeSettings, build_recipe

    s = json.loads((out / "recipe.json").read_text())["settings"]
    with contextlib.chdir(out.parent):
        return build_probe_recipe(ProbeRecipeSettings(**s)) if job == "probe" else build_recipe(RecipeSettings(**s))


def _parse_problem(call: list[str]) -> str | None:
    """Why the command's own parser refuses a recorded call (eaglelab's, SpecForge's, speculators'), or None."""
    from tests import engines

    try:
        if call[0] == "eaglelab":
            from eaglelab.cli import build_parser

            with contextlib.redirect_stderr(io.StringIO()):
                build_parser().parse_args(call[1:])
        elif call[0] == "specforge":
            with contextlib.redirect_stderr(io.StringIO()):
                engines.specforge_parser().parse_args(call[1:])
        elif call[0] == "speculators":
            try:
                engines.speculators_command(call[1], call[2:])
            except Exception as exc:  # Typer's own click: a BadParameter is a value checked against the cluster's files
                if type(exc).__name__ != "BadParameter":
                    raise
    except (SystemExit, Exception) as exc:  # noqa: BLE001 - the parser's refusal is the finding
        return f"{call[:2]}: {type(exc).__name__}: {str(exc)[:120]}"
    return None


def _script_runs_as_written(out: Path, job: str, flag: str, value: str):
    def check(outcome: fz.Outcome):
        recipe = _rebuilt(out, job)
        workdir = out / recipe.settings.workdir
        if job == "probe" and not workdir.resolve().is_relative_to(out.resolve()):
            return None  # the script's output would land outside the case's folder: not run here
        if job == "probe":  # the script's mkdir is a recorder: its folder made here for the probe's JSON
            workdir.mkdir(parents=True, exist_ok=True)
        calls, proc = script_stubs.run_script(out / "run.sh", out)
        if proc.returncode != 0 or proc.stderr:
            return "garbage", "the script did not run as written", proc.stderr[-200:]
        got = sorted(map(tuple, script_stubs.engine_calls(calls)))
        if got != sorted(map(tuple, script_stubs.expected_calls(recipe, out))):
            return "garbage", "a word reached the engines changed", f"{flag} {value!r}"
        if list(out.parent.rglob("PWNED")):
            return "garbage", "code ran from a value", f"{flag} {value!r}"
        if value.startswith("-") and flag != "--chat-template":
            loose = [c for c in script_stubs.engine_calls(calls) if any(w == value or w.startswith(value + "/")
                                                                        for w in c[1:])]
            if loose:
                return "garbage", "a path starting with '-' reached an engine as an option-like word", f"{loose[0][:6]}"
        if value.startswith("-") and flag == "--chat-template":
            if any(value in c[1:] for c in calls):
                return "garbage", "a name starting with '-' reached an engine as its own word", f"{value!r}"
        for call in script_stubs.engine_calls(calls):
            problem = _parse_problem(call)
            if problem:
                return "garbage", "an engine's own parser refuses a step of the script", problem
        return None
    return check


# --------------------------------------------------------------------------- readback

def base_findings() -> dict[str, Any]:
    """What notebook 01 writes (strict JSON: its infinities as null), for the mutations to start from."""
    from eaglelab.outputs import strict_json_text
    from eaglelab.planning.decision_table import Scenario, plan

    numbers = {"plan": plan(Scenario.founding_case()).to_json(), "lever": "CUDA graphs"}
    return json.loads(strict_json_text({"notebook": "01", "numbers": numbers, "bullets": ["- a finding"]}))


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, prefix + (i,))
    return out


def _set(obj: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    obj = json.loads(json.dumps(obj))
    cur = obj
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value
    return obj


@st.composite
def readback_cases(draw, root: Path) -> fz.Case:
    folder = fz.new_dir(root, "readback")
    which = draw(st.sampled_from(["findings", "run record"]))
    value = draw(fz.HOSTILE_JSON)
    if which == "findings":
        base = base_findings()
        path = draw(st.sampled_from(_paths(base)))
        doc = _set(base, path, value)
        figures = folder / "figures"
        figures.mkdir()
        (figures / "01_findings.json").write_bytes(fz.dump(doc))
        argv = ["report", "--figures", str(figures)]
        label = f"findings {'.'.join(map(str, path))} = {value!r}"
    else:
        base = {"config": {"steps": 60, "batch_size": 4, "ttt_length": 3}, "train_sequences": 64, "aux_layers": [1, 3, 4]}
        path = draw(st.sampled_from(_paths(base)))
        run = folder / "run"
        run.mkdir()
        (run / "run.json").write_bytes(fz.dump(_set(base, path, value)))
        drafter = fz.write_tiny_drafter(folder / "drafter")
        target = folder / "target-config.json"
        target.write_text(json.dumps(fz.TINY_TARGET))
        argv = ["recipe", "--engine", "specforge", "--old-drafter", str(drafter), "--new-target", str(target), "--out",
                str(folder / "recipe"), "--from-run", str(run)]
        label = f"run.json {'.'.join(map(str, path))} = {value!r}"
    return fz.Case("readback", label[:120], argv, "any", folder, kind=which)


# --------------------------------------------------------------------------- worker

WORKER = {"vllm_version": "0.32.0", "k": 3, "outputs": [[1, 2, 3], [4]], "tokens_per_s": 10.0, "engine_start_s": 2.0,
          "warnings": ["x"], "spec": {"tau": 2.0, "position_rate_unconditional": [0.5, 0.3, 0.1],
                                      "position_rate_conditional": [0.5, 0.6, 0.33], "num_drafts": 10,
                                      "num_accepted_tokens": 10}, "spec_log_lines": []}


def _read_worker(argv: list[str]) -> None:
    from eaglelab.engines.vllm import run_from_result
    from eaglelab.errors import EngineError
    from eaglelab.inputs import loads_json, read_bytes

    result = loads_json(read_bytes(argv[0], EngineError, 1 << 26), "vllm worker result", EngineError)
    if not isinstance(result, dict):
        raise EngineError("vllm worker result", "not a JSON object")
    run = run_from_result(result, "one", 2)
    tau_ok = run.tau is None or 1 <= run.tau <= run.k + 1
    rates_ok = all(x is None or 0 <= x <= 1 for x in run.position_rate + run.position_rate_conditional)
    ids_ok = all(isinstance(t, int) and t >= 0 for row in run.outputs for t in row)
    print(json.dumps({"tau_ok": tau_ok, "rates_ok": rates_ok, "ids_ok": ids_ok}))


def _worker_sane(outcome: fz.Outcome):
    report = json.loads(outcome.stdout)
    if not all(report.values()):
        return "garbage", "an impossible worker answer was accepted", outcome.stdout
    return None


@st.composite
def worker_cases(draw, root: Path) -> fz.Case:
    folder = fz.new_dir(root, "worker")
    path = draw(st.sampled_from(_paths(WORKER)))
    value = draw(fz.HOSTILE_JSON | st.sampled_from([-3, 5.0, 1e300, "1", [[-1]], [[1.5]], [["a"]], [1, 2], 99]))
    (folder / "result.json").write_bytes(fz.dump(_set(WORKER, path, value)))
    return fz.Case("worker", f"{'.'.join(map(str, path))} = {value!r}"[:120], [str(folder / "result.json")], "any",
                   folder, check_ok=_worker_sane, kind=str(path[:1]), main=cli_errors("engine", _read_worker))


# --------------------------------------------------------------------------- hub

HUB_FAULTS = ("trickle config", "trickle weights", "huge config", "huge config no length", "lying length",
              "garbage config", "garbage weights", "server error", "forbidden", "empty weights", "huge header length",
              "commit changes", "header length changes", "etag changes")
#: Faults in a file asked for more than once: read as a target's heads (a header, then tensors by range).
HUB_HEAD_FAULTS = ("header length changes", "etag changes")
#: Answers eaglelab never asks for: the command succeeds and the server never sees the request.
HUB_UNASKED = ("huge agent registry",)


def hub_fault(kind: str, body: bytes):
    """The server's fault hook for ``kind`` (see :class:`tests.hub_server.HubServer`)."""
    from tests.hub_server import trickle, zeros

    big = 1 << 30

    def fault(rec):
        name = rec.filename or ""
        config, weights = name == "config.json", name.endswith(".safetensors")
        if kind == "trickle config" and config:
            return 200, {"Content-Length": str(len(body))}, trickle(body, 0.3)
        if kind == "trickle weights" and weights:
            return 206, {"Content-Length": "100001"}, trickle(b"\x10" * 100, 0.3)
        if kind == "huge config" and config:
            return 200, {"Content-Length": str(big)}, zeros(big)
        if kind == "huge config no length" and config:
            return 200, {}, zeros(big)
        if kind == "lying length" and config:
            return 200, {"Content-Length": str(len(body) * 4)}, iter([body])
        if kind == "garbage config" and config:
            return 200, {}, b"\xff\xfe{{{"
        if kind == "garbage weights" and weights:
            return 206, {}, b"not a safetensors file at all"
        if kind == "server error":
            return 500, {}, b"boom"
        if kind == "forbidden" and weights:
            return 403, {}, b"{}"
        if kind == "empty weights" and weights:
            return 206, {}, b""
        if kind == "huge header length" and weights:
            return 206, {}, (2 ** 62).to_bytes(8, "little") + b"{}"
        return None
    return fault


def changed_file_fault(kind: str, path: Path, commit: str, first_answers: int):
    """Answers for ``path`` (a served file) after its first ``first_answers`` requests to the hub: from another commit
    (``commit changes``), with another ETag (``etag changes``), or from a copy whose header is 8 bytes longer, every
    tensor 8 bytes later (``header length changes``), each claiming the original's other stamps."""
    import re

    data = path.read_bytes()
    etag = f'"{hashlib.sha256(data).hexdigest()}"'
    if kind == "header length changes":
        n = int.from_bytes(data[:8], "little")
        data = (n + 8).to_bytes(8, "little") + data[8:8 + n] + b" " * 8 + data[8 + n:]
    seen = []

    def fault(rec):
        if rec.filename != path.name or rec.server != "hub":
            return None
        seen.append(rec)
        if len(seen) <= first_answers:
            return None
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", rec.range or "")
        lo, hi = (int(m.group(1)), min(int(m.group(2)), len(data) - 1)) if m else (0, len(data) - 1)
        return 206, {"Content-Range": f"bytes {lo}-{hi}/{len(data)}", "Accept-Ranges": "bytes",
                     "X-Repo-Commit": "0" * 40 if kind == "commit changes" else commit,
                     "ETag": '"0000"' if kind == "etag changes" else etag}, data[lo:hi + 1]
    return fault


def _registry_asked(hub) -> Callable[[fz.Outcome], tuple[str, str, str] | None]:
    def check(outcome: fz.Outcome) -> tuple[str, str, str] | None:
        asked = [r.path for r in hub.requests if r.path.startswith("/api/agent-harnesses")]
        return ("bad-output", "hub: the agent registry was asked for", asked[0]) if asked else None
    return check


def _read_heads(argv: list[str]) -> None:
    from eaglelab.model.heads import read_target_heads

    read_target_heads(argv[0])


def hub_case(root: Path, hub, kind: str) -> fz.Case:
    """``inspect acme/drafter`` (or a read of ``acme/target``'s heads) against ``hub`` misbehaving as ``kind``: one
    line, within the deadline; for :data:`HUB_UNASKED`, an answer and the request never made."""
    import huggingface_hub.utils._detect_agent as detect
    from huggingface_hub import constants

    from tests.hub_server import zeros
    from tests.test_hub import TINY

    folder = fz.new_dir(root, "hub")
    argv, entry, oracle, check_ok = ["inspect", "acme/drafter"], None, "invalid", None
    if kind in HUB_HEAD_FAULTS:
        repo = "acme/target"
        fault = changed_file_fault(kind, hub.revision_dir(repo) / "model.safetensors", hub.commit(repo), 1)
        argv, entry = [repo], cli_errors("probe", _read_heads)
    elif kind == "commit changes":
        repo = "acme/drafter"
        fault = changed_file_fault(kind, hub.revision_dir(repo) / "model.safetensors", hub.commit(repo), 0)
    elif kind == "huge agent registry":
        def fault(rec):
            return (200, {"Content-Length": str(1 << 30)}, zeros(1 << 30)) \
                if rec.path.startswith("/api/agent-harnesses") else None
        oracle, check_ok = "valid", _registry_asked(hub)
    else:
        fault = hub_fault(kind, json.dumps(TINY).encode())

    def run(argv: list[str]) -> int:
        from eaglelab.cli import main

        saved = os.environ.get("HF_HUB_DISABLE_TELEMETRY"), constants.HF_HUB_DISABLE_TELEMETRY, detect._registry
        if kind in HUB_UNASKED:  # as a user without HF_HUB_DISABLE_TELEMETRY: the registry not yet fetched
            os.environ["HF_HUB_DISABLE_TELEMETRY"], constants.HF_HUB_DISABLE_TELEMETRY, detect._registry = "0", False, None
        hub.fault = fault
        try:
            return (entry or main)(argv)
        finally:
            hub.fault = None
            if saved[0] is None:
                os.environ.pop("HF_HUB_DISABLE_TELEMETRY", None)
            else:
                os.environ["HF_HUB_DISABLE_TELEMETRY"] = saved[0]
            constants.HF_HUB_DISABLE_TELEMETRY, detect._registry = saved[1:]
    return fz.Case("hub", kind, argv, oracle, folder, check_ok=check_ok, kind=kind, main=run)


@st.composite
def hub_cases(draw, root: Path, hub) -> fz.Case:
    return hub_case(root, hub, draw(st.sampled_from(HUB_FAULTS + HUB_UNASKED)))


# --------------------------------------------------------------------------- picker

PICKER_PLANTS = ("fifo config", "huge config", "broken config", "symlink loop", "deep", "many files", "no weights",
                 "config is a folder", "weights is a fifo", "hidden", "non-utf8 name")


@st.composite
def picker_cases(draw, root: Path) -> fz.Case:
    folder = fz.new_dir(root, "picker")
    tree = folder / "tree"
    tree.mkdir()
    plants = draw(st.lists(st.sampled_from(PICKER_PLANTS), min_size=1, max_size=4, unique=True))
    good = fz.write_tiny_drafter(tree / "good")
    for n, plant in enumerate(plants):
        d = tree / f"p{n}"
        d.mkdir()
        if plant == "fifo config":
            os.mkfifo(d / "config.json")
            (d / "model.safetensors").write_bytes(b"")
        elif plant == "huge config":
            (d / "config.json").write_bytes(b" " * (3 << 20) + json.dumps(fz.tiny_config()).encode())
            (d / "model.safetensors").write_bytes(b"")
        elif plant == "broken config":
            (d / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]')
            (d / "model.safetensors").write_bytes(b"")
        elif plant == "symlink loop":
            (d / "loop").symlink_to(d)
            (d / "up").symlink_to(tree)
        elif plant == "deep":
            deep = d
            for i in range(12):
                deep = deep / f"d{i}"
            fz.write_tiny_drafter(deep)  # beyond the pickers' depth: not listed
        elif plant == "many files":
            for i in range(3000):
                (d / f"f{i}.txt").write_bytes(b"")
        elif plant == "no weights":
            (d / "config.json").write_text(json.dumps(fz.tiny_config()))
        elif plant == "config is a folder":
            (d / "config.json").mkdir()
            (d / "model.safetensors").write_bytes(b"")
        elif plant == "weights is a fifo":
            (d / "config.json").write_text(json.dumps(fz.tiny_config()))
            os.mkfifo(d / "model.safetensors")
        elif plant == "hidden":
            fz.write_tiny_drafter(d / ".hidden")
        elif plant == "non-utf8 name":
            with contextlib.suppress(OSError):
                fz.write_tiny_drafter(Path(os.fsdecode(bytes(d) + b"/bad\xff")))

    expected = {str(good)} | ({str(tree / f"p{plants.index('weights is a fifo')}")}
                              if "weights is a fifo" in plants else set())
    if "non-utf8 name" in plants and Path(os.fsdecode(bytes(tree / f"p{plants.index('non-utf8 name')}") + b"/bad\xff")).is_dir():
        expected.add(os.fsdecode(bytes(tree / f"p{plants.index('non-utf8 name')}") + b"/bad\xff"))

    def listing(argv: list[str]) -> None:
        from eaglelab.workbook.widgets import find_checkpoints

        found = find_checkpoints(tree)
        print(json.dumps({"found": sorted(found), "expected": sorted(expected)}, ensure_ascii=True))

    def exact(outcome: fz.Outcome):
        got = json.loads(outcome.stdout)
        if got["found"] != got["expected"]:
            return "garbage", "the pickers listed other folders than the drafters", outcome.stdout[:200]
        return None
    return fz.Case("picker", "+".join(plants), [], "valid", folder, check_ok=exact, kind=plants[0],
                   main=cli_errors("pickers", listing))


# --------------------------------------------------------------------------- dump

DUMP_H, DUMP_S, DUMP_V = 8, 6, 32


class _Global:  # pickled by reference: torch.load(weights_only=True) must refuse it, never call it
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def _dump_tensors(layout: str) -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, DUMP_V, (DUMP_S,), generator=g)
    mask = torch.tensor([0, 0, 1, 1, 1, 1])
    if layout == "specforge":
        return {"input_ids": ids, "loss_mask": mask, "hidden_state": torch.randn(1, DUMP_S, DUMP_H, generator=g),
                "aux_hidden_state": torch.randn(1, DUMP_S, 3 * DUMP_H, generator=g)}
    return {"hidden_states": torch.randn(DUMP_S, 4, DUMP_H, generator=g), "token_ids": ids, "loss_mask": mask}


def _tensor_mutation(draw, tensors: dict[str, Any]) -> str:
    import torch

    key = draw(st.sampled_from(sorted(tensors)))
    how = draw(st.sampled_from(["nan", "inf", "wider", "drop row", "rank", "dtype", "ids high", "ids negative",
                                "empty", "drop key", "not a tensor", "global", "zero dims"]))
    t = tensors[key]
    if how in ("nan", "inf") and t.is_floating_point():
        t = t.clone()
        t.view(-1)[draw(st.integers(0, t.numel() - 1))] = float(how)
    elif how == "wider":
        t = torch.cat([t, t[..., :1]], -1)
    elif how == "drop row":
        t = t[..., :-1, :] if t.dim() >= 2 else t[:-1]
    elif how == "rank":
        t = t[None]
    elif how == "dtype":
        t = t.to(draw(st.sampled_from([torch.float16, torch.int32, torch.bool, torch.uint8, torch.complex64])))
    elif how in ("ids high", "ids negative") and not t.is_floating_point():
        t = t.clone()
        t[0] = DUMP_V + 5 if how == "ids high" else -1
    elif how == "empty":
        t = t[..., :0]
    elif how == "zero dims":
        t = t.reshape(-1)[:1].reshape(())
    elif how == "drop key":
        del tensors[key]
        return f"{key}: {how}"
    elif how == "not a tensor":
        t = draw(st.sampled_from([[1, 2], "x", 3.5, {"a": 1}, None]))
    elif how == "global":
        t = _Global()
    tensors[key] = t
    return f"{key}: {how}"


def _write_dump(folder: Path, layout: str, tensors: dict[str, Any], compress: bool) -> Path:
    import gzip

    import torch

    if layout == "specforge":
        path = folder / "rows_0-2000" / ("data_0.ckpt" + (".gz" if compress else ""))
        path.parent.mkdir(parents=True)
        buf = io.BytesIO()
        torch.save(tensors, buf)
        path.write_bytes(gzip.compress(buf.getvalue()) if compress else buf.getvalue())
        return path
    from safetensors.torch import save_file

    path = folder / "hs_0.safetensors"
    folder.mkdir(parents=True)
    try:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))
    except Exception:  # a mutation safetensors cannot write (a global, a list): write the clean file
        save_file(_dump_tensors(layout), str(path))
    return path


def _read_dump(argv: list[str]) -> None:
    from eaglelab.data.dumps import open_dumps

    folder = open_dumps(argv[0], hidden_size=DUMP_H, vocab_size=DUMP_V)
    for sample in folder:
        print(json.dumps({"len": len(sample), "aux": list(sample.aux.shape), "last": list(sample.last.shape),
                          "finite": bool(sample.aux.isfinite().all() and sample.last.isfinite().all()),
                          "ids": [int(sample.input_ids.min()), int(sample.input_ids.max())],
                          "mask": list(sample.loss_mask.shape)}))


def _dump_sane(outcome: fz.Outcome):
    for line in outcome.stdout.splitlines():
        d = json.loads(line)
        n = d["len"]
        ok = (d["finite"] and d["aux"] == [n, 3 * DUMP_H] and d["last"] == [n, DUMP_H] and d["mask"] == [n]
              and 0 <= d["ids"][0] <= d["ids"][1] < DUMP_V)
        if not ok:
            return "garbage", "a hostile dump was read as a sample", line
    return None


#: Pairs of dump folders the probe must refuse (issue #37 items 4, 7, 12), each with the words its one line says.
PAIR_REFUSALS = {"all-zero loss masks": "nothing to measure", "one-token samples": "nothing to measure",
                 "too few samples": "needs at least", "same folder": "same folder", "byte copy": "byte-identical",
                 "rows linked from outside": "outside the dump folder", "gzip bomb": "gzip bomb"}
PAIR_SAMPLES = 5


def _write_pair_folder(folder: Path, kind: str, seed: int) -> Path:
    """``PAIR_SAMPLES`` SpecForge samples by the package's writer, on the same token ids in both folders of a pair."""
    import torch

    from eaglelab.data.dump_writers import specforge_payload

    g, ids = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(0)
    rows = folder / "rows_0-2000"
    rows.mkdir(parents=True)
    for i in range(PAIR_SAMPLES):
        s = 1 if kind == "one-token samples" else DUMP_S
        counted = torch.ones(s, dtype=torch.bool)
        counted[-1] = False
        if kind == "all-zero loss masks" or (kind == "too few samples" and i >= 2):
            counted[:] = False
        payload = specforge_payload(torch.randint(0, DUMP_V, (s,), generator=ids), counted,
                                    torch.randn(s, 3 * DUMP_H, generator=g), torch.randn(s, DUMP_H, generator=g))
        torch.save(payload, rows / f"data_{i}.ckpt")
    return folder


def _pair_case(draw, folder: Path) -> fz.Case:
    """Two dump folders the probe reads as A and B: refused with the reason (PAIR_REFUSALS), or probed in full."""
    import gzip

    kind = draw(st.sampled_from(sorted(PAIR_REFUSALS) + ["rows linked from inside"]))
    a = _write_pair_folder(folder / "a", kind, 1)
    b = _write_pair_folder(folder / "b", kind, 2)
    if kind == "same folder":
        b = a
    elif kind == "byte copy":
        shutil.rmtree(b)
        shutil.copytree(a, b)
    elif kind.startswith("rows linked"):
        store = (folder / "store") if kind.endswith("outside") else (a / "store")
        store.mkdir()
        (a / "rows_0-2000").rename(store / "rows_0-2000")
        (a / "rows_0-2000").symlink_to(store / "rows_0-2000", target_is_directory=True)
    elif kind == "gzip bomb":  # 16 MiB of zeros in 16 KiB, where floats compress by under 2x
        (a / "rows_0-2000" / "data_0.ckpt").unlink()
        bomb = bytearray(gzip.compress(bytes(16 << 20), compresslevel=9))
        if draw(st.booleans()):  # a footer that lies low: the cap holds while decompressing
            bomb[-4:] = (100).to_bytes(4, "little")
        (a / "rows_0-2000" / "data_0.ckpt.gz").write_bytes(bytes(bomb))
    says = PAIR_REFUSALS.get(kind)

    def names_it(outcome: fz.Outcome):
        if says not in outcome.stderr:
            return "garbage", f"refused for another reason than {kind}", outcome.stderr[:300]
        return None

    def probed_all(outcome: fz.Outcome):
        got = json.loads(outcome.stdout)
        if got["samples"] != PAIR_SAMPLES or not got["verdict"]:
            return "garbage", "a symlinked rows folder's samples were not all probed", outcome.stdout[:200]
        return None

    return fz.Case("dump", f"pair: {kind}", [str(a), str(b)], "invalid" if says else "valid", folder,
                   check_ok=None if says else probed_all, check_error=names_it if says else None,
                   kind=f"pair {kind}", main=cli_errors("probe", _probe_pair))


def _probe_pair(argv: list[str]) -> None:
    """The dump probe on two folders, with a tiny target's heads and a fresh drafter of its width: what it says."""
    import torch

    from eaglelab.checkpoints.drafters.implied_config import drafter_config_for_target
    from eaglelab.data.dumps import open_dumps, pair_dumps
    from eaglelab.model.drafter import Eagle3Drafter
    from eaglelab.model.heads import TargetHeads
    from eaglelab.probe.dumps import run_dump_probe

    target = {**fz.TINY_TARGET, "hidden_size": DUMP_H, "vocab_size": DUMP_V, "num_hidden_layers": 4}
    drafter = Eagle3Drafter(drafter_config_for_target(target, DUMP_V // 2, [0, 1, 2]), seed=0)
    g = torch.Generator().manual_seed(0)
    heads = TargetHeads("tiny", torch.ones(DUMP_H), 1e-6, torch.randn(DUMP_V, DUMP_H, generator=g),
                        torch.randn(DUMP_V, DUMP_H, generator=g), {})
    a, b = (open_dumps(x, hidden_size=DUMP_H, vocab_size=DUMP_V) for x in argv)
    pairs = pair_dumps(a, b)
    result = run_dump_probe(pairs, heads, heads, drafter, (0, 1, 2), k=2)
    print(json.dumps({"samples": len(pairs.indices), "verdict": result.decision.label, "tokens": result.tokens}))


@st.composite
def dump_cases(draw, root: Path) -> fz.Case:
    folder = fz.new_dir(root, "dump")
    if draw(st.integers(0, 2)) == 0:
        return _pair_case(draw, folder)
    layout = draw(st.sampled_from(["specforge", "vllm"]))
    compress = layout == "specforge" and draw(st.booleans())
    tensors = _dump_tensors(layout)
    label = "clean"
    if draw(st.booleans()):
        label = _tensor_mutation(draw, tensors)
    path = _write_dump(folder / "states", layout, tensors, compress)
    if draw(st.booleans()):
        raw = bytearray(path.read_bytes())
        op = draw(st.sampled_from(["flip", "cut", "append"]))
        at = draw(st.integers(0, len(raw) - 1))
        if op == "flip":
            raw[at] ^= draw(st.integers(1, 255))
        elif op == "cut":
            raw = raw[:at]
        else:
            raw += draw(st.binary(min_size=1, max_size=64))
        path.write_bytes(bytes(raw))
        label += f", bytes {op} at {at}"
    return fz.Case("dump", f"{layout}{' gz' if compress else ''}: {label}"[:120], [str(folder / "states")], "any",
                   folder, check_ok=_dump_sane, kind=f"{layout} {label.split(',')[0].split(': ')[-1]}",
                   main=cli_errors("probe", _read_dump))


STRATEGIES: dict[str, Callable[..., st.SearchStrategy[fz.Case]]] = {
    "param": param_cases, "out": out_cases, "recipe": recipe_cases, "readback": readback_cases, "worker": worker_cases,
    "hub": hub_cases, "picker": picker_cases, "dump": dump_cases,
}


@contextlib.contextmanager
def hub_for_fuzzing(root: Path, deadline_s: float = 1.0):
    """A hub-compatible server with a drafter and a target repo, this process's huggingface_hub pointed at it, a short
    deadline."""
    from _pytest.monkeypatch import MonkeyPatch

    import eaglelab.model.heads  # noqa: F401 (torch imported once here, not within a case's time cap)
    from tests.hub_server import HubServer, point_client_at
    from tests.test_hostile_heads_hub import write_target
    from tests.test_hub import TINY, write_synthetic_drafter

    mp = MonkeyPatch()
    with HubServer(root / "hub") as hub:
        write_synthetic_drafter(hub.revision_dir("acme/drafter"), TINY)
        write_target(hub.revision_dir("acme/target"))
        point_client_at(mp, hub.endpoint, root / "hf-home")
        mp.setenv("HF_HUB_DOWNLOAD_TIMEOUT", str(deadline_s))
        try:
            yield hub
        finally:
            mp.undo()


def quiet() -> contextlib.AbstractContextManager:
    """Nothing printed by a function-level case leaks into the harness's own output."""
    return contextlib.redirect_stdout(io.StringIO())


def shutil_rm(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
