"""Hostile-input cases for the surfaces of issue #53, in the harness of :mod:`tests.fuzzing`.

Three categories, each a hypothesis strategy returning a :class:`tests.fuzzing.Case`:

- ``plan``: a findings folder (notebooks 01, 03 and 04, as they write them) with hostile text and values put where
  the notebooks put theirs: bullets holding Markdown links, images, raw HTML, autolinks, line breaks, bidi
  overrides, headings and reference definitions; the fine-tune's recommendation, the probe's verdict (its ``between``
  of any length), recipe names and paths. ``eaglelab report`` must answer in one line or write a game plan in which
  no line came from a value unescaped: no raw HTML but eaglelab's own signature comment, no link but its own to the
  figures and recipes it found, no control or format character, and no line that a value put there;
- ``loadrecipe``: ``eaglelab recipe --job load`` with hostile values: concurrencies (0, huge, many), token counts,
  repeats, trees, forced τ, and names with ``$(...)``, quotes, bidi overrides, ESC, CR, line separators. Written,
  the script parses in bash, holds no control or format character but its line breaks, and every count in it is
  within what the cost table and the client read;
- ``costs``: cost tables with hostile rows (rates of 1e308 and 1e-300, context 0, impossible trees, τ out of
  reach, junk cells) fitted by ``eaglelab perf --costs --json``: one line, or an answer whose every number is
  finite and physically sized (no 300-digit break-even τ).
"""

from __future__ import annotations

import json
import re
import subprocess
import unicodedata
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from tests import fuzzing as fz

CATEGORIES = ("plan", "loadrecipe", "costs")
#: A case that writes a game plan draws its figure (PNG and PDF, about 1 s here).
TIME_CAPS = {"plan": 10.0}

#: Text built to forge structure in Markdown, reach a browser, or break a path on its way to a link.
FORGERIES = [
    "[click here](https://evil.example/x)", "![x](https://evil.example/t.png)", "<img src=x onerror=alert(1)>",
    "<script>alert(1)</script>", "<https://evil.example>", "</details><b>bold</b>", "[ref]: https://evil.example",
    "x\n- plug in, serve it as is", "x\r\n## Your decision\r\nplug in", "x\u2028- plug in", "x\u202egnp.exe",
    "x\u2066hidden\u2069", "x\x1b[31mred", "| a | b |\n|---|---|", "x\n\n[a]: https://evil.example", "`code` **bold**",
    "a](https://evil.example)", "[a][b]", "<!-- comment -->", "&lt;img&gt;", "x\x00y", "\\[x\\](y)", "😀 🇺🇸", "\udcff",
    "x/.." + "/../etc/run.sh", "",
]
#: The line a forgery must not produce on its own.
FORGED_LINE = "- plug in, serve it as is"


def base_folder() -> dict[str, dict[str, Any]]:
    """What notebooks 01, 03 and 04 write, in strict JSON, for the mutations to start from."""
    from eaglelab.outputs import strict_json_text
    from eaglelab.planning.decision_table import Scenario, plan

    n01 = {"plan": plan(Scenario.founding_case()).to_json(), "lever": "CUDA graphs"}
    n03 = {"k": 3, "evidence": "demo", "plugin": {"accept_len_on_a": 1.96, "accept_len_on_b": 1.88},
           "verdict": {"level": "plug in", "reasons": ["kept 92%"], "kept": 0.92, "between": ["plug in", "warm start"]}}
    n04 = {"evidence": "demo", "recommendation": {"action": "warm start", "taus": {"plug in": 1.66, "warm start": 1.79},
                                                   "text": "Warm start: τ 1.79."},
           "scaling": {"exponent": [0.3, 0.2, 0.4]}, "recipes": {"specforge": "/tmp/recipe/run.sh"}}
    docs = {nb: {"notebook": nb, "numbers": numbers, "bullets": [f"- **Notebook {nb}:** a finding [demo]"]}
            for nb, numbers in (("01", n01), ("03", n03), ("04", n04))}
    return json.loads(strict_json_text(docs))


#: Where a string of a findings folder can hold the user's or a file's text.
TEXT_SLOTS = [("01", ("bullets", 0)), ("03", ("bullets", 0)), ("04", ("bullets", 0)), ("01", ("numbers", "lever")),
              ("04", ("numbers", "recommendation", "text")), ("04", ("numbers", "recipes", "specforge")),
              ("03", ("numbers", "verdict", "cause")), ("03", ("numbers", "verdict", "reasons", 0))]
#: Where a value of the verdict and the recommendation sits (what ``decisions.reconcile`` reads).
VERDICT_SLOTS = [("03", ("numbers", "verdict", "between")), ("03", ("numbers", "verdict", "level")),
                 ("03", ("numbers", "verdict", "kept")), ("04", ("numbers", "recommendation", "action"))]
VERDICT_VALUES = [["plug in"], ["plug in", "warm start", "from scratch"], [], ["x", "y"], ["plug in", "plug in"],
                  "plug in", "no verdict", None, 1.0, float("nan"), [1, 2], "warm start", {"a": 1}, "[x](y)"]


def _put(doc: dict, path: tuple, value: Any) -> None:
    cur = doc
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value


def _plan_sane(folder: Path):
    def check(outcome: fz.Outcome):
        plan = folder / "GAME_PLAN.md"
        if not plan.is_file():
            return "garbage", "exit 0 without a game plan", ""
        text = plan.read_text(encoding="utf-8")
        lines = text.splitlines()
        for n, line in enumerate(lines[1:], 2):  # line 1 is eaglelab's own signature (an HTML comment)
            bad = next((c for c in line if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") and c != "\t"), None)
            if bad is not None:
                return "garbage", "a control or format character reached the game plan", f"line {n}: {line[:120]!r}"
            if re.search(r"<[A-Za-z/!?]", line):
                return "garbage", "raw HTML or an autolink reached the game plan", f"line {n}: {line[:120]!r}"
            for target in re.findall(r"(?<!\\)\]\(([^)]*)\)", line):  # eaglelab's own: a path, percent-encoded
                if ":" in target or target.startswith("//") or re.search(r"[\s<>\[\]]", target):
                    return "garbage", "a link eaglelab did not write reached the game plan", f"line {n}: {line[:120]!r}"
            if line.strip() == FORGED_LINE or re.match(r"^\s*\[[^\]]*\]:", line):
                return "garbage", "a value became a line of its own", f"line {n}: {line[:120]!r}"
        if len(lines) > 400:
            return "garbage", "the game plan grew with the values", f"{len(lines)} lines"
        return None
    return check


@st.composite
def plan_cases(draw, root: Path) -> fz.Case:
    """A findings folder with hostile text or verdict values, rendered by ``eaglelab report``."""
    folder = fz.new_dir(root, "plan")
    docs = base_folder()
    planted: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            nb, path = draw(st.sampled_from(TEXT_SLOTS))
            value = draw(st.sampled_from(FORGERIES) | st.text(max_size=40)) + draw(st.sampled_from(["", " [demo]", "**"]))
            planted.append(value)
        else:
            nb, path = draw(st.sampled_from(VERDICT_SLOTS))
            value = draw(st.sampled_from(VERDICT_VALUES))
        _put(docs[nb], path, value)
    for nb, doc in docs.items():
        (folder / f"{nb}_findings.json").write_bytes(fz.dump(doc))
    label = f"{len(planted)} text(s): {planted[:2]!r}"
    return fz.Case("plan", label[:120], ["report", "--figures", str(folder)], "any", folder,
                   check_ok=_plan_sane(folder), kind="text" if planted else "verdict")


# --------------------------------------------------------------------------- loadrecipe

NAMES = ["./target", "org/model", "-x", "$(touch PWNED)", "`id`", "a b", "a'b", 'a"b', "a;b", "x\u202ey", "x\u2066y",
         "x\x1by", "x\ry", "x\u2028y", "x\u200by", "😀", "a" * 300, "~/m", "..", "--"]
COUNTS = ["0", "1", "8", "65536", "65537", "100000000000", "10000000", "-1", "1e3", "2.5", "x", ""]


def _script_sane(folder: Path):
    def check(outcome: fz.Outcome):
        script = folder / "out" / "run.sh"
        if not script.is_file():
            return "garbage", "exit 0 without run.sh", ""
        text = script.read_text(encoding="utf-8")
        bad = next((c for c in text if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") and c not in "\n"), None)
        if bad is not None:
            return "garbage", "a control or format character reached run.sh", repr(bad)
        parsed = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=10)
        if parsed.returncode:
            return "garbage", "run.sh does not parse in bash", parsed.stderr[:200]
        settings = json.loads((folder / "out" / "recipe.json").read_text())["settings"]
        from eaglelab.serving.cost_table import MAX_CONCURRENCY, MAX_WHOLE

        if not all(1 <= c <= MAX_CONCURRENCY for c in settings["concurrency"]) or \
                settings["prompt_tokens"] + settings["output_tokens"] > MAX_WHOLE:
            return "garbage", "a count the cost table refuses was written", json.dumps(settings)[:200]
        k, topk = settings["k"], settings["topk"]
        verified = settings["draft_tokens"] or k + 1
        if not (verified == k + 1 if topk == 1 else k + 1 <= verified <= topk * k + 1):
            return "garbage", "an impossible tree was written", json.dumps(settings)[:200]
        return None
    return check


@st.composite
def load_recipe_cases(draw, root: Path) -> fz.Case:
    """``recipe --job load`` with hostile names and counts."""
    folder = fz.new_dir(root, "loadrecipe")
    argv = ["recipe", "--job", "load", "--engine", draw(st.sampled_from(["sglang", "vllm"])), "--out", str(folder / "out"),
            "--new-target", draw(st.sampled_from(NAMES)), "--old-drafter", draw(st.sampled_from(NAMES))]
    for flag in draw(st.lists(st.sampled_from(["--concurrency", "--prompt-tokens", "--output-tokens", "--repeats",
                                               "--gpus", "--k", "--topk", "--draft-tokens"]), max_size=4, unique=True)):
        argv += [flag, *draw(st.lists(st.sampled_from(COUNTS), min_size=1, max_size=3 if flag == "--concurrency" else 1))]
    if draw(st.booleans()):
        argv += ["--workdir", draw(st.sampled_from(NAMES))]
    if draw(st.booleans()):
        argv += ["--accept-lens", *draw(st.lists(st.sampled_from(["1", "2.5", "4", "9", "0.5", "nan", "1e308"]),
                                                 min_size=1, max_size=3))]
    return fz.Case("loadrecipe", " ".join(argv[3:])[:120], argv, "any", folder, check_ok=_script_sane(folder),
                   kind="load recipe")


# --------------------------------------------------------------------------- costs

RATES = ["1e308", "1e-300", "0", "-5", "nan", "inf", "1e9", "1e6", "2000", "450.5", "12", "x", ""]
CONTEXTS = ["0", "1024", "10000000", "10000001", "-1", "1.5"]


def _costs_sane(outcome: fz.Outcome):
    answer = json.loads(outcome.stdout)
    numbers = []

    def walk(v):
        if isinstance(v, bool):
            return
        if isinstance(v, (int, float)):
            numbers.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(answer.get("by_concurrency"))
    if any(abs(x) > 1e12 for x in numbers):
        return "garbage", "an absurd number was answered", str(max(numbers, key=abs))
    return None


@st.composite
def cost_cases(draw, root: Path) -> fz.Case:
    """A cost table with hostile rows, fitted by ``perf --costs``."""
    folder = fz.new_dir(root, "costs")
    rows = ["concurrency,k,draft_tokens,topk,accept_len,context,output_tok_s"]
    good = [("1", "0", "", "", "", "1024", "80"), ("8", "0", "", "", "", "1024", "560"),
            ("1", "3", "", "", "2", "1024", "120"), ("8", "3", "", "", "2", "1024", "800")]
    table = [list(r) for r in good]
    for _ in range(draw(st.integers(1, 4))):
        row = list(draw(st.sampled_from(good)))
        column = draw(st.integers(0, 6))
        row[column] = draw(st.sampled_from(RATES if column == 6 else CONTEXTS if column == 5 else COUNTS + ["4", "13"]))
        table[draw(st.integers(0, len(table) - 1))] = row
    path = folder / "costs.csv"
    path.write_text("\n".join(rows + [",".join(r) for r in table]) + "\n")
    config = folder / "config.json"
    config.write_text(json.dumps(fz.LOAD_TARGET))
    return fz.Case("costs", " | ".join(",".join(r) for r in table)[:120],
                   ["perf", "--costs", str(path), "--target-config", str(config), "--accept-len", "2", "--json"], "any",
                   folder,
                   check_ok=_costs_sane, kind="cost table")


STRATEGIES = {"plan": plan_cases, "loadrecipe": load_recipe_cases, "costs": cost_cases}
