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
  ``inspect OWNER/NAME``: one line within the deadline;
- ``picker``: hostile folder trees for the notebooks' pickers (FIFOs named config.json, huge and
  broken configs, symlink loops, deep trees): they answer in time and list exactly the drafters;
- ``dump``: the engines' hidden-state dumps (issue #27), SpecForge's ``data_{i}.ckpt[.gz]`` and vLLM's
  ``hs_{i}.safetensors``, mutated as bytes (flips, cuts, appends) and as tensors (NaN / Inf, widths,
  layer counts, token ids, dtypes, ranks, a pickled global ``weights_only`` refuses): what reads is
  finite and of the promised shapes, the rest one line.

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
        argv = ["recipe", "--engine", "speculators", "--init", str(drafter), "--target", str(target), "--out", out]
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
    return fz.Case("out", f"{command} --out {kind}{' --force' if force else ''}", argv, "any", folder,
                   check_ok=invariant, check_error=invariant, kind=f"{kind}")


# --------------------------------------------------------------------------- recipe

RECIPE_TEXT = st.one_of(
    st.sampled_from([
        "with space", "quote'single", 'quote"double', "$(touch PWNED)", "`touch PWNED`", "; touch PWNED #", "$HOME",
        "$SERVER_PID", "$HERE/x", "${IFS}", "*", "~", "-rf", "--flag", "back\\slash", "ümlaut", "😀", "#hash", "a&&b",
        "a|b", ">out", "!bang", "%p", "a: b", "{a,b}", "[x]", "- item", "'; touch PWNED; '", "line\nbreak", "tab\t",
        "esc\x1b[2J", "nul\x00", "\u2028", "\udcff", "\x85", "null", "true", "~", "123", "&anchor", "*alias", "? q",
    ]),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=12))


@st.composite
def recipe_cases(draw, root: Path) -> fz.Case:
    import unicodedata

    folder = fz.new_dir(root, "recipe")
    drafter = fz.write_tiny_drafter(folder / "drafter")
    target = folder / "target-config.json"
    target.write_text(json.dumps(fz.TINY_TARGET))
    flag = draw(st.sampled_from(["--data", "--workdir", "--chat-template"]))
    value = draw(RECIPE_TEXT)
    engine = draw(st.sampled_from(["specforge", "speculators"]))
    bad = any(unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp") for c in value)
    out = folder / "recipe"
    argv = ["recipe", "--engine", engine, "--init", str(drafter), "--target", str(target), "--out", str(out),
            f"{flag}={value}"]  # FLAG=VALUE: a value may start with "-"
    return fz.Case("recipe", f"{engine} {flag} {value!r}"[:120], argv, "invalid" if bad else "valid", folder,
                   check_ok=_script_runs_as_written(out, engine, flag, value), kind=f"{flag}")


def _script_runs_as_written(out: Path, engine: str, flag: str, value: str):
    def check(outcome: fz.Outcome):
        from eaglelab.engines.recipes import RecipeSettings, build_recipe

        recipe_json = json.loads((out / "recipe.json").read_text())
        s = recipe_json["settings"]
        recipe = build_recipe(RecipeSettings(**s))
        calls, proc = script_stubs.run_script(out / "run.sh", out)
        if proc.returncode != 0 or proc.stderr:
            return "garbage", "the script did not run as written", proc.stderr[-200:]
        got = sorted(map(tuple, script_stubs.engine_calls(calls)))
        if got != sorted(map(tuple, script_stubs.expected_calls(recipe, out))):
            return "garbage", "a word reached the engines changed", f"{flag} {value!r}"
        if list(out.parent.rglob("PWNED")):
            return "garbage", "code ran from a value", f"{flag} {value!r}"
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
        argv = ["recipe", "--engine", "specforge", "--init", str(drafter), "--target", str(target), "--out",
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
              "garbage config", "garbage weights", "server error", "forbidden", "empty weights", "huge header length")


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


def hub_case(root: Path, hub, kind: str) -> fz.Case:
    """``inspect acme/drafter`` against ``hub`` misbehaving as ``kind``: it must be one line, within the deadline."""
    from tests.test_hub import TINY

    folder = fz.new_dir(root, "hub")
    fault = hub_fault(kind, json.dumps(TINY).encode())

    def run(argv: list[str]) -> int:
        from eaglelab.cli import main

        hub.fault = fault
        try:
            return main(argv)
        finally:
            hub.fault = None
    return fz.Case("hub", kind, ["inspect", "acme/drafter"], "invalid", folder, kind=kind, main=run)


@st.composite
def hub_cases(draw, root: Path, hub) -> fz.Case:
    return hub_case(root, hub, draw(st.sampled_from(HUB_FAULTS)))


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


@st.composite
def dump_cases(draw, root: Path) -> fz.Case:
    folder = fz.new_dir(root, "dump")
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
    """A hub-compatible server with one drafter repo, this process's huggingface_hub pointed at it, a short deadline."""
    from _pytest.monkeypatch import MonkeyPatch

    from tests.hub_server import HubServer, point_client_at
    from tests.test_hub import TINY, write_synthetic_drafter

    mp = MonkeyPatch()
    with HubServer(root / "hub") as hub:
        write_synthetic_drafter(hub.revision_dir("acme/drafter"), TINY)
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
