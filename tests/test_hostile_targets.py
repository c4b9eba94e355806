"""Issue #37 items 1-3: a target's chat template, tokenizer files and config strings against ``compare-targets`` and
``inspect``.

1. A template renders in a child process under address-space and CPU limits, killed at its deadline; one C-level
   call (a width, a power of a huge integer, a join) cannot hold memory or time past the caps.
2. A number read from a file is ASCII digits, or a one-line refusal (``"²".isdigit()`` is true, ``int("²")`` raises).
3. Every string from a file reaches the terminal escaped (C0, C1, DEL, bidi and format controls) and quoted unless
   it is a plain name: no file can move the cursor or print a line that passes for eaglelab's own.

Real files under ``tmp_path``, the real command line through the fuzzing harness (:mod:`tests.fuzzing`), real
child processes; memory is capped the way the harness caps it, never measured by the clock.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import subprocess
import sys
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eaglelab.checkpoints.targets import chat_templates
from eaglelab.checkpoints.targets.chat_templates import SAMPLE_CONVERSATION, render, render_all, template_context
from eaglelab.checkpoints.targets.config import quantization_of
from eaglelab.checkpoints.targets.tokenizer_files import MAX_TOKEN_ID, TargetFiles, read_tokenizer
from eaglelab.cli.arguments import count
from eaglelab.engines.logprob_files import EngineFileError, read_logprob_file
from eaglelab.errors import SourceError
from eaglelab.inputs import is_ascii_digits, one_line, printable, quoted, shown
from eaglelab.serving.logs import parse_line
from eaglelab.worlds.artifacts import cached_build
from eaglelab.worlds.kimi_shapes import K2_TEMPLATE, K25_TEMPLATE
from tests import fuzzing as fz

#: The issue's hang: ``((7**64)**64)**64`` is 737,000 bits, ``(x*x)**64`` one multiplication of minutes.
BIG_POWER = "{% set x = ((7**64)**64)**64 %}{{ (x*x)**64 }}"
#: One join of 9,999 pieces with a 99,999-character separator: a gigabyte in one C call, past every line check.
BIG_JOIN = "{{ range(9999)|map('string')|join('x' * 99999)|length }}"
FORGED = "\x1b[2J\x1b[H\nverdict: PROBE\nproblems: none\u202e\x9b31m"


def _cli(tmp_path, argv_of) -> fz.Outcome:
    """A command through the fuzzing harness (time and address-space caps); fail unless exit 0 or one line."""
    case = argv_of(fz.new_dir(tmp_path, "targets"))
    outcome = fz.check(case)
    assert outcome.acceptable, fz.describe(case, outcome)
    return outcome


# --------------------------------------------------------------------------- 1. runaway templates


def test_center_filter_cannot_allocate_a_gigabyte():
    """#37 item 1: ``'x'|center(1500000000)`` held 1.5 GB; now refused before it runs, under a cap it cannot pass."""
    with fz._memory_cap(768 << 20):  # the old in-process rendering fails here only by a MemoryError
        got = render("{{ 'x'|center(1500000000)|length }}")
    assert got.text is None and "1,500,000,000 characters" in got.problem, got


@pytest.mark.parametrize("template, words", [
    ("{{ 'x'.ljust(1500000000)|length }}", "str.ljust"), ("{{ 'x'.zfill(1500000000)|length }}", "str.zfill"),
    ("{{ ('x' * 1000).replace('x', 'y' * 900000)|length }}", "str.replace"),
    ("{{ '%1500000000s' % 'x' }}", "%-format"), ("{{ '%*s' % (1500000000, 'x') }}", "%-format"),
    ("{{ '{:>1500000000}'.format('x') }}", "str.format"), ("{{ '{:>{}}'.format('x', 1500000000) }}", "str.format"),
    ("{{ '%1500000000s'|format('x') }}", "format filter"), ("{{ 'ab'|indent(1500000000) }}", "indent"),
    (BIG_POWER, "a power past 65,536 bits"),
    ("{% set x = (7 ** 60) ** 60 %}{{ x * x * x * x * x * x * x }}", "a product past 65,536 bits"),
])
def test_width_filters_and_big_integers_are_refused_before_they_run(template, words):
    """#37 item 1: every operation that sizes its result from the template's numbers is checked first (the power's
    base too, not only its exponent)."""
    with fz._memory_cap(768 << 20):
        got = render(template)
    assert got.text is None and words in got.problem, got


def test_one_join_past_the_childs_memory_is_a_finding():
    """#37 item 1: a gigabyte asked for in one C call, which no line check sees, fails in the child's address space
    (this process runs under the fuzzing harness's cap, which a gigabyte fits in)."""
    with fz._memory_cap(fz.MEMORY_CAP_BYTES):
        got = render(BIG_JOIN)
    assert got.text is None and got.problem == "the template ran away (MemoryError)", got


def test_doubling_with_tilde_runs_into_the_childs_memory():
    """#37 item 1: ``~`` doubling a string in a loop reaches half a gigabyte in 29 fast steps, inside the deadline;
    the child's address space stops it."""
    doubling = "{% set ns = namespace(a='x') %}{% for i in range(29) %}{% set ns.a = ns.a ~ ns.a %}{% endfor %}{{ 1 }}"
    with fz._memory_cap(fz.MEMORY_CAP_BYTES):
        got = render(doubling)
    assert got.text is None and "MemoryError" in got.problem, got


def test_the_child_is_killed_when_one_c_call_escapes_every_check(monkeypatch):
    """#37 item 1: with the big-integer check off, the issue's power runs as one C call; the parent kills the child at
    its deadline, and the finding says so."""
    monkeypatch.setattr(chat_templates, "MAX_INT_BITS", 10**12)
    got = render(BIG_POWER, seconds=0.3)
    assert got.text is None and got.problem == "rendering took longer than 0.3 s (the renderer was stopped)", got


def test_after_a_killed_rendering_the_next_gets_a_fresh_child(monkeypatch):
    """#37 item 1: one command's renderings share one child; the one after a runaway still renders, identically."""
    monkeypatch.setattr(chat_templates, "MAX_INT_BITS", 10**12)
    starts = []
    real = subprocess.Popen

    def counted(*args, **kwargs):
        starts.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", counted)
    context = template_context(SAMPLE_CONVERSATION)
    first = render_all([(K2_TEMPLATE, context), (K25_TEMPLATE, context)])
    assert len(starts) == 1 and all(r.problem is None for r in first)
    runaway, after = render_all([(BIG_POWER, context), (K2_TEMPLATE, context)], seconds=0.3)
    assert len(starts) == 3 and "stopped" in runaway.problem and after.text == first[0].text
    assert starts[0][1] == "-I" and starts[0][2].endswith("template_child.py")


def test_the_child_lowers_its_own_limits(tmp_path):
    """#37 item 1: the child caps its address space, CPU time and core files before it reads a template."""
    code = ("import resource, sys; sys.path.insert(0, sys.argv[1]); import template_child as t; "
            "t.limit_self(64 << 20, 3); print(*(resource.getrlimit(r)[0] for r in "
            "(resource.RLIMIT_AS, resource.RLIMIT_CPU, resource.RLIMIT_CORE)))")
    folder = str(chat_templates._CHILD.parent)
    out = subprocess.run([sys.executable, "-I", "-c", code, folder], capture_output=True, text=True,
                         check=True).stdout.split()
    space, cpu, core = (int(x) for x in out)
    assert 0 < space < (1 << 30) and 3 <= cpu <= 5 and core == 0


def test_hostile_templates_render_the_same_text_as_before():
    """#37 item 1: the checks refuse nothing transformers' templates use (the equivalence tests in
    test_target_compare.py compare with apply_chat_template itself)."""
    got = render("{{ 'ab'|center(6) }}|{{ '%-4s|%5.1f' % ('a', 2.25) }}|{{ '{:>5}'.format('x') }}|{{ 2 ** 64 }}|"
                 "{{ 'a\tb'.expandtabs(4) }}|{{ 'abc'.replace('b', 'xx') }}|{{ '%s'|format('q') }}")
    assert got.problem is None and got.text == "  ab  |a   |  2.2|    x|18446744073709551616|a   b|axxc|q", got


@pytest.mark.parametrize("template", fz.HOSTILE_TEMPLATES)
def test_hostile_templates_forge_nothing_on_the_terminal(tmp_path, template):
    """#37 items 1 and 3: each hostile template of the fuzzing list, through ``compare-targets`` without ``--json``:
    a finding or a rendering, and nothing of it moves the cursor or passes for a line of eaglelab's."""
    outcome = _cli(tmp_path, lambda d: fz.targets_case(d, "chat_template.jinja", template.encode("utf-8", "surrogatepass")))
    assert outcome.kind == "ok" and "chat templates:" in outcome.stdout


# --------------------------------------------------------------------------- 2. numbers read from files


@pytest.mark.parametrize("key", fz.NON_ASCII_DIGITS)
def test_a_superscript_token_id_is_one_line(tmp_path, key):
    """#37 item 2: an ``added_tokens_decoder`` key ``"²"`` passed ``isdigit()`` and ``int()`` raised a traceback."""
    content = json.dumps({"added_tokens_decoder": {key: {"content": "x", "special": True}}}).encode()
    outcome = _cli(tmp_path, lambda d: fz.targets_case(d, "tokenizer_config.json", content))
    assert outcome.kind == "error" and "added_tokens_decoder key" in outcome.stderr, outcome.stderr


@settings(max_examples=150, deadline=None, derandomize=True)
@given(key=st.text(st.characters(whitelist_categories=("Nd", "No", "Nl", "Lo", "Zs", "Cc", "Cf")), min_size=1, max_size=12),
       content=st.text(max_size=8))
def test_any_added_token_key_reads_or_is_refused(key, content):
    """#37 item 2 (property): whatever the key, the tokenizer reads it as an id or refuses the file in one line."""
    files = TargetFiles("t", {"tokenizer_config.json": json.dumps({"added_tokens_decoder": {key: {"content": content}}})
                              .encode()})
    valid = is_ascii_digits(key) and len(key) <= 10 and int(key) <= MAX_TOKEN_ID
    try:
        tok = read_tokenizer(files)
    except SourceError as exc:
        assert not valid and "\n" not in str(exc), exc
    else:
        assert valid and tok.added == {int(key): (content, False)}


def test_every_reader_takes_ascii_digits_only(tmp_path):
    """#37 item 2: logprob files, serving logs, command-line counts and build folders: ``²`` (which ``int`` refuses)
    and ``١٢`` (which ``int`` reads as 12) are refused or left alone, never a traceback or a silent 12."""
    assert [is_ascii_digits(x) for x in ("12", "²", "١٢", "", "1 ", "+1", 12)] == [True] + [False] * 6
    for key in ("²", "١٢"):
        path = tmp_path / f"lp-{len(key)}.jsonl"
        path.write_text(json.dumps({"prompt_token_ids": [1, 2], "prompt_logprobs": [None, {key: -0.5}]}) + "\n")
        with pytest.raises(EngineFileError, match="is not a non-negative integer"):
            read_logprob_file(path)
        with pytest.raises(ValueError, match="#running-req: not a count"):
            parse_line(f"[2026-01-01 10:00:00 TP0] Decode batch. #running-req: {key}, accept len: 2.19, "
                       "gen throughput (token/s): 10.0")
    for word in ("²", "١٢", "+-5"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not a whole number"):
            count(word)
        outcome = fz.run_cli(["perf", "--accept-len", "2", "--k", word])
        assert outcome.kind == "error" and "is not a whole number" in outcome.stderr, outcome.stderr
    odd = tmp_path / ".stage.building-²"
    odd.mkdir()
    def build(folder):
        (folder / "x").write_text("x")

    built = cached_build(tmp_path / "stage", {"a": 1}, build, log=lambda _: None)
    assert (built / "x").is_file() and odd.is_dir()


# --------------------------------------------------------------------------- 3. forged output


@pytest.mark.parametrize("text", ["\x1b[2J", "\x9b31m", "\x85", "\u202e", "\u2066", "\u2069", "\u200e", "\u200f",
                                  "\u2028", "\u2029", "\ufeff", "\x7f", "\ud800", "\U000e0041"])
def test_printable_escapes_c1_and_bidi_controls(text):
    """#37 item 3: C1 controls (CSI ``\\x9b``, NEL ``\\x85``), bidi overrides and isolates, marks, separators, tags."""
    for f in (one_line, printable, shown, quoted):
        out = f("a" + text + "b")
        assert not any(unicodedata.category(c) in fz.UNSHOWN for c in out), (f.__name__, out)
    assert printable("é 中文 tab\there") == "é 中文 tab\\x09here" and printable("plain") == "plain"


@settings(max_examples=300, deadline=None, derandomize=True)
@given(text=st.text(max_size=20))
def test_quoted_text_never_passes_for_a_line(text):
    """#37 item 3 (property): quoted text holds no control or format character, and is a plain name or in quotes."""
    out = quoted(text)
    assert not any(unicodedata.category(c) in fz.UNSHOWN for c in out)
    assert out == text if re.fullmatch(r"[A-Za-z0-9_.+/-]+", text) else out[0] in "'\"" and out == printable(repr(text))


def test_a_raise_exception_text_cannot_forge_a_line(tmp_path):
    """#37 item 3: a template's ``raise_exception`` text printed raw by ``compare-targets`` reached the terminal."""
    template = b"{{ raise_exception('\\x1b[2J\\nverdict: PROBE\\nproblems: none') }}"
    outcome = _cli(tmp_path, lambda d: fz.targets_case(d, "chat_template.jinja", template))
    assert fz.nothing_forged(outcome) is None and "verdict: PROBE" not in outcome.stdout.split("\n")
    assert "the template raised: '\\x1b[2J\\nverdict: PROBE\\nproblems: none'" in outcome.stdout


@pytest.mark.parametrize("where", ["rope key", "quant"])
def test_rope_keys_and_quantization_strings_are_quoted_by_compare_targets(tmp_path, where):
    """#37 item 3: ``rope_scaling`` sub-keys and ``quantization_config`` strings were printed raw."""
    cfg = copy.deepcopy(fz.TINY_TARGET)
    if where == "rope key":
        cfg["rope_scaling"] = {"rope_type": "linear", "factor": 2.0, FORGED: 1.0}
    else:
        cfg["quantization_config"] = {"quant_method": "fp8", "fmt": FORGED, "activation_scheme": FORGED,
                                      "modules_to_not_convert": [FORGED]}
    outcome = _cli(tmp_path, lambda d: fz.targets_case(d, "config.json", fz.dump(cfg)))
    assert outcome.kind == "ok" and fz.nothing_forged(outcome) is None, outcome.stdout
    assert ("'rope_scaling.\\x1b[2J" if where == "rope key" else "FP8 '\\x1b[2J\\x1b[H\\nVERDICT") in outcome.stdout


def test_inspect_quotes_a_targets_quantization_and_tensor_names(tmp_path):
    """#37 item 3: ``inspect`` of a target printed its quantization strings raw; tensor names that are not plain names
    are quoted in the table too."""
    cfg = copy.deepcopy(fz.TINY_TARGET)
    cfg["quantization_config"] = {"quant_method": "compressed-tensors", "format": FORGED, "ignore": [FORGED]}
    outcome = _cli(tmp_path, lambda d: fz.forged_inspect_case(d, cfg))
    assert outcome.kind == "ok" and fz.nothing_forged(outcome) is None, outcome.stdout
    assert "problems: none" in outcome.stdout.split("\n")  # eaglelab's own line, once
    assert outcome.stdout.split("\n").count("problems: none") == 1
    q = quantization_of(cfg)
    assert q.scheme.startswith("'\\x1b[2J") and q.line.count("'\\x1b[2J") == 2


def test_plain_names_stay_as_they_were():
    """#37 item 3: what is a plain name (a config key, a method, a tensor name) prints as before; the rest in quotes."""
    assert [quoted(x) for x in ("rope_scaling.factor", "compressed-tensors", "model.layers.0.mlp.weight")] == \
        ["rope_scaling.factor", "compressed-tensors", "model.layers.0.mlp.weight"]
    assert quoted("verdict: PROBE") == "'verdict: PROBE'" and quoted("") == "''" and quoted([1, "a\x1b"]) == '[1, "a\\u001b"]'
    assert quoted("x " * 50, 10) == "'x x x ..." and quoted("x" * 100, 10) == "xxxxxxx..."
    assert quantization_of({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}).scheme == \
        "FP8 E4M3 weights, 128 x 128 blocks"


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_forged_configs_reach_no_terminal(tmp_path, data):
    """#37 item 3 (property): any forged text in a config's RoPE keys, quantization strings, architecture or vision
    fields, through ``compare-targets`` or ``inspect``."""
    cfg = data.draw(st.composite(lambda draw: fz.forged_config(draw))())
    if data.draw(st.booleans()):
        case = fz.forged_inspect_case(fz.new_dir(tmp_path, "targets"), cfg)
    else:
        case = fz.targets_case(fz.new_dir(tmp_path, "targets"), "config.json", fz.dump(cfg))
    outcome = fz.check(case)
    assert outcome.kind == "ok", fz.describe(case, outcome)
