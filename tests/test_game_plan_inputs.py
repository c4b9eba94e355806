"""The game plan says what each notebook ran on, and whose decision it is (issue #38 items 2 and 5).

Findings files are written as the notebooks write them (``save_findings``, with ``record_inputs`` under
``"inputs"``); the worlds and the user's checkpoints are real folders under ``tmp_path``. No torch.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eaglelab.cli import main
from eaglelab.errors import ConfigError, ParameterError
from eaglelab.markdown import CELL_CHARS, md_text
from eaglelab.planning import provenance as pv
from eaglelab.planning.decision_table import Scenario, plan
from eaglelab.planning.render import plan_markdown
from eaglelab.workbook.inputs_record import REPO_ROOT, InputsRecord, record_inputs
from eaglelab.workbook.report import read_findings, save_findings, write_game_plan

#: The serving numbers of a user who entered every one (values of their own, not the founding case's).
ENTERED = {"baseline_tps": 60.0, "cycle_ms": 25.0, "accept_len": 2.2, "goal_tps": 120.0, "samples": 50_000,
           "gen_tps": 100.0, "k": 3, "old_samples": 1_000_000, "at_concurrency": 1}
VERDICT = {"level": "plug in", "between": [], "kept": 0.9}
RECOMMENDATION = {"text": "Initialise the new drafter from the old one.", "action": "warm start"}


@pytest.fixture
def world(tmp_path) -> Path:
    """A world's folder as `build_world` lays it out (the folders the records point into)."""
    root = tmp_path / "worlds" / "demo"
    for name in ("target-a", "target-b", "drafter-a", "drafter-b-small", "data/replies-a"):
        (root / name).mkdir(parents=True)
    return root


@pytest.fixture
def mine(tmp_path) -> Path:
    """The user's checkpoints and files: folders and a log outside the world and the repository."""
    root = tmp_path / "mine"
    for name in ("old", "new", "drafter", "states-old", "states-new"):
        (root / name).mkdir(parents=True)
    (root / "prompts.jsonl").write_text('{"text": "hello"}\n')
    (root / "sglang.log").write_text("x\n")
    return root


def demo_pair(world: Path) -> dict[str, str]:
    return {"OLD_TARGET": str(world / "target-a"), "NEW_TARGET": str(world / "target-b"),
            "OLD_DRAFTER": str(world / "drafter-a")}


def user_pair(mine: Path) -> dict[str, str]:
    return {"OLD_TARGET": str(mine / "old"), "NEW_TARGET": str(mine / "new"), "OLD_DRAFTER": str(mine / "drafter")}


def findings(figures: Path, nb: str, numbers: dict, bullets=("- a finding",)) -> None:
    save_findings(nb, numbers, list(bullets), figures)  # as the notebooks write them


def section(text: str, heading: str) -> str:
    """The markdown from ``heading`` (a prefix of a ``## `` line) to the next ``## ``."""
    start = text.index(f"\n## {heading}") + 1
    end = text.find("\n## ", start)
    return text[start:] if end < 0 else text[start:end]


def table_rows(text: str) -> list[str]:
    """The rows (not the header) of the inputs table."""
    lines = section(text, "What this plan was computed from").splitlines()
    return [line for line in lines if re.match(r"\| \d\d \|", line)]


def cells(row: str) -> list[str]:
    """A markdown table row's cells: split at pipes that are not backslash-escaped."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]


# --------------------------------------------------------------------------- record_inputs


def test_record_labels_each_input_by_where_it_lies(world, mine):
    bundled = REPO_ROOT / "data" / "logs" / "vllm_sample.log"
    record = record_inputs({"OLD_TARGET": str(world / "target-a"), "NEW_TARGET": str(mine / "new"),
                            "OLD_DRAFTER": "org/eagle3-drafter", "NEW_DRAFTER": None, "OLD_STATES": ""},
                           world, data=str(mine / "prompts.jsonl"), data_line="your file: 1 row",
                           logs=[str(bundled)], not_done=["no fine-tune\nran"])
    got = InputsRecord.from_json(json.loads(json.dumps(record)), "here")  # JSON-able, and it reads back
    assert {name: i.source for name, i in got.inputs.items()} == {
        "OLD_TARGET": pv.DEMO, "NEW_TARGET": pv.YOURS, "OLD_DRAFTER": pv.YOURS, "DATA": pv.YOURS, "LOG_FILES": pv.SAMPLE}
    assert got.inputs["OLD_TARGET"].shown == "demo world: target-a"
    assert got.inputs["OLD_DRAFTER"].shown == "org/eagle3-drafter" and got.inputs["OLD_DRAFTER"].value == "org/eagle3-drafter"
    assert got.inputs["LOG_FILES"].shown == "data/logs/vllm_sample.log"
    assert got.inputs["DATA"].what == "your file: 1 row" and got.evidence() == "mixed"
    assert got.not_done == ("no fine-tune\\x0aran",)  # one line
    assert record_inputs({}, world, logs=[str(bundled), str(mine / "sglang.log")])["checkpoints"]["LOG_FILES"][
        "source"] == pv.LOGS  # one file of the user's among the samples: the user's logs


@pytest.mark.parametrize("kind, source", [("world-replies", pv.DEMO), ("built-in", pv.SAMPLE), (None, pv.SAMPLE)])
def test_data_drawn_without_a_file_is_never_the_users(world, kind, source):
    record = record_inputs(demo_pair(world), world, data_line="target B's own replies: 24", data_kind=kind)
    assert record["checkpoints"]["DATA"] == {"value": None, "shown": "target B's own replies: 24", "source": source,
                                             "what": ""}


def test_a_long_description_of_text_is_cut_at_its_end_a_long_path_in_its_middle():
    """#54 item 7: "standard-libra…e" in the inputs table: a description cut as if it were a path."""
    from eaglelab.workbook.inputs_record import Input, cell

    line = "built-in text: the standard library's docstrings and code blocks, 48 rows of 64 tokens (no verdict)"
    described = cell(Input(None, line, pv.SAMPLE))
    assert described.startswith("built-in text: the standard library's docstrings") and "…" in described
    assert described.split("…")[1].strip() == pv.tag(pv.SAMPLE)  # nothing of the end kept: the start says what it is
    path = "/home/me/checkpoints/" + "x" * 80 + "/new-target"
    assert cell(Input(path, path, pv.YOURS)).split(" ")[0].endswith("new-target")  # a path's end names it


def test_record_refuses_a_name_outside_the_contract(world):
    with pytest.raises(ParameterError, match="TARGET_A"):
        record_inputs({"TARGET_A": str(world / "target-a")}, world)
    with pytest.raises(ParameterError, match="NEW_TARGET"):
        record_inputs({"NEW_TARGET": 3}, world)


# --------------------------------------------------------------------------- the game plan's inputs section


def test_mixed_case_is_named_in_a_warning_and_in_the_headings(tmp_path, world, mine):
    """02 and 04 on the demo world, 03 and 05 on the user's: the plan says their numbers are not one case."""
    figures = tmp_path / "figures"
    findings(figures, "02", {"inputs": record_inputs(demo_pair(world), world)})
    findings(figures, "03", {"verdict": VERDICT, "evidence": pv.YOURS, "plugin": {"accept_len_on_b": 2.3}, "k": 3,
                             "inputs": record_inputs(user_pair(mine), world)})
    findings(figures, "04", {"recommendation": RECOMMENDATION, "evidence": pv.DEMO,
                             "inputs": record_inputs({"NEW_TARGET": str(world / "target-b"),
                                                      "OLD_DRAFTER": str(world / "drafter-a")}, world,
                                                     data_line="target B's own replies", data_kind="world-replies")})
    findings(figures, "05", {"evidence": pv.YOURS, "inputs": record_inputs(user_pair(mine), world)})
    text = write_game_plan(figures).read_text()
    assert text.index("## What this plan was computed from") < text.index("## Your decision") < text.index("## 02")
    rows = table_rows(text)
    assert [r[2:4] for r in rows] == ["02", "03", "04", "05"]
    shown = md_text(str(mine / "new"), CELL_CHARS, middle=True)  # a long temporary path is cut in the middle
    assert "demo world: target-b [demo]" in rows[0] and f"{shown} [your checkpoints]" in rows[1]
    assert "target B's own replies [demo]" in rows[2]  # the data column, shown because 04 recorded data
    assert ("**Not one case:** notebooks 02 and 04 ran on the demo world; 03 and 05 on your checkpoints: their numbers "
            "are not one case (OLD_TARGET, NEW_TARGET, OLD_DRAFTER differ between them).") in text
    assert "  - NEW_TARGET: 02 and 04 on demo world: target-b [demo]; 03 and 05 on" in text
    assert "## The fine-tune's verdict on the demo world (an illustration)" in text
    assert ("## One answer: the probe and the fine-tune (notebook 03 on your checkpoints, 04 on the demo world: "
            "not one case)") in text


def test_demo_case_says_demo_everywhere_and_never_yours(tmp_path, world):
    figures = tmp_path / "figures"
    findings(figures, "01", {"plan": plan(Scenario.founding_case()).to_json(),
                             "inputs": record_inputs({}, world, logs=[str(REPO_ROOT / "data/logs/vllm_sample.log")])})
    for nb, numbers in (("03", {"verdict": VERDICT, "plugin": {"accept_len_on_b": 2.3}, "k": 3}),
                        ("04", {"recommendation": RECOMMENDATION})):
        findings(figures, nb, {**numbers, "evidence": pv.DEMO, "inputs": record_inputs(demo_pair(world), world)})
    text = write_game_plan(figures).read_text()
    assert "Not one case" not in text and "did not record" not in text
    decision = section(text, "The decision for the founding case (notebook 01's default numbers: enter yours)")
    assert "**The founding case's scenario**" in decision and "Your scenario" not in decision
    assert "warm start, 37k samples (default)" in decision and "(yours)" not in text
    assert "the founding case's τ 2.00 at 37k samples [default]" in decision and "your τ" not in decision
    assert "old drafter's τ on the new target" not in decision  # a demo τ never enters the decision
    assert "## The fine-tune's verdict on the demo world (an illustration)" in text
    assert "## One answer: the probe and the fine-tune on the demo world (an illustration)" in text
    assert table_rows(text)[0] == "| 01 | — | — | — | data/logs/vllm\\_sample.log (1 file) [sample] |"


def test_users_case_is_their_decision(tmp_path, world, mine):
    figures = tmp_path / "figures"
    findings(figures, "01", {"plan": plan(Scenario.founding_case(**ENTERED)).to_json(),
                             "inputs": record_inputs({}, world, logs=[str(mine / "sglang.log")])})
    checkpoints = {**user_pair(mine), "OLD_STATES": str(mine / "states-old"), "NEW_STATES": str(mine / "states-new")}
    findings(figures, "03", {"verdict": VERDICT, "evidence": pv.YOURS, "plugin": {"accept_len_on_b": 2.3}, "k": 3,
                             "inputs": record_inputs(checkpoints, world)})
    findings(figures, "04", {"recommendation": RECOMMENDATION, "evidence": pv.YOURS,
                             "inputs": record_inputs(user_pair(mine), world, data=str(mine / "prompts.jsonl"),
                                                     not_done=["the new target is too large to load here (1.03 T "
                                                               "parameters): no fine-tune ran; the recipes hand it "
                                                               "over"])})
    text = write_game_plan(figures).read_text()
    decision = section(text, "Your decision")
    assert decision.startswith("## Your decision\n") and "**Your scenario**" in decision
    assert "| old drafter's τ on the new target | 2.30 | [your checkpoints] |" in decision
    assert "warm start, 50k samples (entered)" in decision and "founding case" not in decision
    header = section(text, "What this plan was computed from").splitlines()[2]
    assert cells(header) == ["notebook", "old target", "new target", "old drafter", "old target's dumps",
                             "new target's dumps", "data", "serving logs"]
    assert all(len(cells(r)) == len(cells(header)) for r in table_rows(text))
    assert "sglang.log (1 file) [your logs]" in table_rows(text)[0]
    assert ("- **Notebook 04, not done with your inputs:** the new target is too large to load here (1.03 T "
            "parameters): no fine-tune ran; the recipes hand it over") in text
    assert "Not one case" not in text and "[demo]" not in section(text, "What this plan was computed from")
    assert "## The fine-tune's verdict on your checkpoints" in text
    assert "## One answer: the probe and the fine-tune on your checkpoints" in text


def test_partly_entered_numbers_name_the_defaults(tmp_path):
    findings(tmp_path, "01", {"plan": plan(Scenario.founding_case(baseline_tps=60.0, accept_len=2.2)).to_json()})
    decision = section(write_game_plan(tmp_path).read_text(), "Your decision, partly on the founding case's numbers")
    assert "Still notebook 01's defaults (the founding case's), not yours: speculative cycle," in decision
    assert "plain decoding" not in decision.split("Enter yours")[0]  # entered: not listed as a default
    assert "(the numbers tagged [default] are still the founding case's: enter yours)" in decision


def test_a_mixed_probe_does_not_enter_the_decision(tmp_path, world, mine):
    """03's findings call it the user's (one checkpoint was), its record shows the demo world's beside it."""
    findings(tmp_path, "01", {"plan": plan(Scenario.founding_case(**ENTERED)).to_json()})
    findings(tmp_path, "03", {"verdict": VERDICT, "evidence": pv.YOURS, "plugin": {"accept_len_on_b": 2.3}, "k": 3,
                              "inputs": record_inputs({**demo_pair(world), "NEW_TARGET": str(mine / "new")}, world)})
    findings(tmp_path, "04", {"recommendation": RECOMMENDATION, "evidence": pv.YOURS,
                              "inputs": record_inputs({"NEW_TARGET": str(mine / "new"),
                                                       "OLD_DRAFTER": str(world / "drafter-a")}, world)})
    text = write_game_plan(tmp_path).read_text()
    assert "## The fine-tune's verdict on the demo world's checkpoints and yours, mixed (not one case)" in text
    assert "Notebook 04 ran on some of the demo world's checkpoints beside yours" in text
    assert "Initialise the new drafter from the old one. [demo] [your checkpoints]" in text
    assert "## One answer: the probe and the fine-tune (notebooks 03 and 04 on different checkpoints" in text
    assert "Notebook 03's plug-in τ is left out of this decision: not all the checkpoints it ran on are yours" in text
    assert "old drafter's τ on the new target" not in section(text, "Your decision")


def test_findings_without_inputs_say_so(tmp_path, world):
    findings(tmp_path, "02", {"inputs": record_inputs(demo_pair(world), world)})
    findings(tmp_path, "03", {"verdict": VERDICT, "evidence": pv.YOURS})  # written before the record existed
    findings(tmp_path, "04", {"recommendation": RECOMMENDATION, "evidence": pv.YOURS})
    text = write_game_plan(tmp_path).read_text()
    rows = table_rows(text)
    assert len(rows) == 3 and rows[1] == "| 03 | *not recorded* | *not recorded* | *not recorded* |"
    assert "- Notebook 03 did not record its inputs" in text and "- Notebook 04 did not record its inputs" in text
    assert "## One answer: the probe and the fine-tune on your checkpoints" in text  # from their own evidence


def test_no_notebook_yet(tmp_path):
    text = write_game_plan(tmp_path).read_text()
    assert "*No notebook has run yet: nothing was computed.*" in section(text, "What this plan was computed from")


# --------------------------------------------------------------------------- hostile values

HOSTILE = ["a | b | c", "line\n## Injected heading\n| 09 | x |", "<script>alert(1)</script><img src=x>", "\ud800x\udfff",
           "\u202eevil\u2066", "[link](javascript:alert(1))", "`code` *bold* _it_ ~~s~~ \\", "/p/" + "x" * 10_000 + "/end"]


def test_hostile_text_is_shown_escaped_on_one_row(tmp_path):
    figures = tmp_path / "figures"
    for nb, text, what in zip(("02", "03", "04", "05"), HOSTILE[1:4] + HOSTILE[7:], HOSTILE[4:7] + HOSTILE[:1],
                              strict=True):
        entry = {"value": text, "shown": text, "source": pv.YOURS, "what": what}
        findings(figures, nb, {"inputs": {"checkpoints": {"NEW_TARGET": entry, "DATA": entry | {"value": None}},
                                          "not_done": HOSTILE}})
    text = write_game_plan(figures).read_text()  # surrogates written as JSON escapes, read back, written escaped
    rows = table_rows(text)
    # notebook, the three checkpoint columns, data: a pipe in a value never adds a column
    assert [r[2:4] for r in rows] == ["02", "03", "04", "05"] and all(len(cells(r)) == 5 for r in rows)
    assert "a \\| b \\| c" in text and "\\[link\\](javascript:alert(1))" in text
    body = text.split("\n", 1)[1]  # after the signature, an HTML comment of eaglelab's own
    assert not re.search(r"(?<!\\)<", body) and not re.search(r"(?<!\\)\]\(javascript", body)  # every < escaped
    assert not any(line.startswith(("## Injected", "| 09")) for line in text.splitlines())
    assert "\ud800" not in text and "\\\\ud800x\\\\udfff" in text  # escaped, then the backslash escaped for markdown
    assert "\u202e" not in text and "\\\\u202eevil" in text
    assert max(len(line) for line in rows) < 1_000 and re.search(r" /p/x+…x+/end ", rows[3])  # cut in the middle
    assert max(len(line) for line in text.splitlines()) < 1_000  # a 10 kB not-done sentence is cut too


@pytest.mark.parametrize("inputs, needle", [
    ([1, 2], "'inputs' is not an object"), ("OLD_TARGET", "'inputs' is not an object"),
    ({"checkpoints": []}, "'inputs.checkpoints' is not an object"),
    ({"checkpoints": {}, "extra": 1}, "unknown key extra"),
    ({"checkpoints": {"TARGET_A": {}}}, "names TARGET_A, not one of"),
    ({"checkpoints": {"OLD_TARGET": "x"}}, "OLD_TARGET' is not an object"),
    ({"checkpoints": {"OLD_TARGET": {"value": 3, "shown": "", "source": "demo"}}}, ".value is not text"),
    ({"checkpoints": {"OLD_TARGET": {"value": "x", "shown": None, "source": "demo"}}}, ".shown and .what"),
    ({"checkpoints": {"OLD_TARGET": {"value": "x", "shown": "x", "source": "mine\n"}}}, ".source is 'mine\\n'"),
    ({"not_done": "too large"}, "'inputs.not_done' is not a list of text"),
    ({"not_done": [None]}, "'inputs.not_done' is not a list of text"),
])
def test_malformed_inputs_are_one_line_naming_the_file(tmp_path, capsys, inputs, needle):
    findings(tmp_path, "03", {"inputs": inputs})
    with pytest.raises(ConfigError, match=re.escape(needle)) as caught:
        read_findings(tmp_path / "03_findings.json")
    assert "03_findings.json" in str(caught.value) and "\n" not in str(caught.value)
    assert main(["report", "--figures", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "03_findings.json" in err[0] and "Traceback" not in err[0]


def test_findings_evidence_outside_the_labels_is_one_line(tmp_path):
    findings(tmp_path, "04", {"recommendation": RECOMMENDATION, "evidence": "trust me"})
    with pytest.raises(ConfigError, match="04_findings.json: its 'evidence' is 'trust me'"):
        write_game_plan(tmp_path)


HOSTILE_TEXT = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=40),
                         st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=3))
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | HOSTILE_TEXT,
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(HOSTILE_TEXT, inner, max_size=3),
                    max_leaves=8)
ENTRY = st.fixed_dictionaries({"value": st.none() | HOSTILE_TEXT | JSON, "shown": HOSTILE_TEXT | JSON,
                               "source": st.sampled_from([*pv.LABELS, "mine"]) | JSON},
                              optional={"what": HOSTILE_TEXT | JSON})
NAME = st.sampled_from(["OLD_TARGET", "NEW_TARGET", "OLD_DRAFTER", "NEW_STATES", "DATA", "LOG_FILES", "TARGET_A"])
RECORD = st.one_of(JSON, st.fixed_dictionaries({"checkpoints": st.dictionaries(NAME, ENTRY, max_size=4),
                                                "not_done": st.lists(HOSTILE_TEXT, max_size=3)}))


@given(records=st.dictionaries(st.sampled_from(["02", "03", "04", "05"]), RECORD, min_size=1, max_size=4))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_hostile_inputs_never_break_the_plan(records):
    """Any value under "inputs": a one-line ConfigError naming the file, or a plan with one row per notebook."""
    with tempfile.TemporaryDirectory() as tmp:
        figures = Path(tmp)
        for nb, record in records.items():
            findings(figures, nb, {"inputs": record})
        try:
            text = write_game_plan(figures).read_text(encoding="utf-8")
        except ConfigError as exc:
            assert "_findings.json" in str(exc) and "\n" not in str(exc)
            return
    rows = table_rows(text)
    header = section(text, "What this plan was computed from").splitlines()[2]
    assert [r[2:4] for r in rows] == sorted(records) and all(len(cells(r)) == len(cells(header)) for r in rows)
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert len(headings) == 7  # inputs, decision, the five notebooks: no value adds a heading


def test_plan_markdown_of_the_cli_keeps_its_tables():
    """`eaglelab plan` on entered numbers: the scenario is the user's, the table is the same one."""
    md = plan_markdown(plan(Scenario.founding_case(**ENTERED)))
    assert md.startswith("**Your scenario**\n") and "warm start, 50k samples (entered)" in md


@pytest.mark.parametrize("scaling, smoke, used", [
    ({"exponent": [0.2, 0.15, 0.25]}, False, True),
    ({"exponent": [0.001, 0.0005, 0.002]}, False, False),  # #54: "6.72e+150B samples" from b = 0.001
    ({"exponent": [0.2, 0.15, 0.25]}, True, False),  # a smoke run's sweep fits noise
])
def test_a_fitted_exponent_feeds_the_decision_only_from_a_real_sweep_steep_enough(scaling, smoke, used):
    from eaglelab.planning.decision_table import DEFAULT_EXPONENTS, Scenario, plan
    from eaglelab.workbook.report import _left_out, decision_plan

    numbers = {"01": {"plan": json.loads(json.dumps(plan(Scenario.founding_case()).to_json()))},  # as saved
               "04": {"evidence": "yours", "scaling": scaling, "smoke": smoke}}
    decided = decision_plan(numbers, {})
    left = _left_out(numbers, {})
    if used:
        assert decided.scenario.exponents == (0.15, 0.25) and decided.scenario.tag("exponents") == "your checkpoints"
        assert left == []
    else:
        assert decided.scenario.exponents == DEFAULT_EXPONENTS and decided.scenario.tag("exponents") == "assumed"
        assert len(left) == 1 and left[0].startswith("Notebook 04's data exponent is left out of this decision: ")
        assert ("smoke run" in left[0]) == smoke and ("too flat" in left[0]) != smoke


def test_the_plan_has_one_options_figure_and_its_top_and_end_say_how_they_relate(tmp_path, world):
    """#54 item 3: two figures titled alike, a top that serves without speculation and an end that warm-starts,
    and 03's τ at k = 3 weighed against 04's at k = 5, all unexplained."""
    figures = tmp_path / "figures"
    founding = plan(Scenario.founding_case())
    findings(figures, "01", {"plan": founding.to_json()})
    (figures / "01_options.png").write_bytes(b"\x89PNG\r\n")  # notebook 01's own options figure
    (figures / "01_concurrency.png").write_bytes(b"\x89PNG\r\n")
    findings(figures, "03", {"verdict": VERDICT, "evidence": pv.DEMO, "k": 3, "inputs": record_inputs(demo_pair(world),
                                                                                                    world)})
    findings(figures, "04", {"recommendation": RECOMMENDATION, "evidence": pv.DEMO, "k": 5,
                             "inputs": record_inputs(demo_pair(world), world)})
    text = write_game_plan(figures).read_text()
    assert "plan_options.png" in text and "01_options.png" not in text and "01_concurrency.png" in text
    answer = section(text, "One answer")
    assert "(notebook 03 drafted k = 3, notebook 04 k = 5: their τ are not comparable with each other" in answer
    assert founding.action != RECOMMENDATION["action"]
    assert (f"Not the decision above (**{founding.action}**): that one asks whether any start pays in notebook 01's "
            "serving scenario (the founding case's numbers)") in answer
    findings(figures, "04", {"recommendation": RECOMMENDATION, "evidence": pv.DEMO, "k": 3,
                             "inputs": record_inputs(demo_pair(world), world)})
    assert "not comparable" not in section(write_game_plan(figures).read_text(), "One answer")  # one k: nothing to say


def test_a_fine_tune_on_built_in_text_decides_nothing_for_the_users_model(tmp_path, world, mine):
    """#54 item 4: "WARM START [your checkpoints] ... built-in stdlib text" decided the plan, on the text 03 refuses."""
    figures = tmp_path / "figures"
    findings(figures, "03", {"verdict": VERDICT, "evidence": pv.YOURS, "k": 3,
                             "inputs": record_inputs(user_pair(mine), world, data=str(mine / "prompts.jsonl"))})
    findings(figures, "04", {"recommendation": RECOMMENDATION, "evidence": pv.YOURS, "k": 3,
                             "inputs": record_inputs(user_pair(mine), world, data_line="built-in stdlib text: 48 rows",
                                                     data_kind="built-in")})
    answer = section(write_game_plan(figures).read_text(), "One answer")
    assert "**Notebook 04 trained and measured on built-in standard-library text**" in answer
    assert "The answer rests on notebook 03's probe alone: **plug in**." in answer and "decides: **warm" not in answer
    findings(figures, "03", {"verdict": {"level": "no verdict", "between": [], "kept": None}, "evidence": pv.YOURS,
                             "k": 3, "inputs": record_inputs(user_pair(mine), world)})
    assert "Neither notebook decides on this text." in section(write_game_plan(figures).read_text(), "One answer")
    findings(figures, "04", {"recommendation": RECOMMENDATION, "evidence": pv.YOURS, "k": 3,
                             "inputs": record_inputs(user_pair(mine), world, data=str(mine / "prompts.jsonl"))})
    answer = section(write_game_plan(figures).read_text(), "One answer")  # your data: 04 decides as before
    assert "built-in" not in answer and "decides: **warm start**" in answer
