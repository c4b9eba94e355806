"""The decision table: the data-scaling law and its fit, provenance labels, the decision logic, `eaglelab plan`."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglelab.errors import ParameterError
from eaglelab.planning import provenance as pv
from eaglelab.planning.decision_table import Scenario, default_budgets, plan
from eaglelab.planning.render import plan_markdown
from eaglelab.planning.scaling import DataLaw, ScalingFit, assumed_band, fit_scaling, sample_count

# --------------------------------------------------------------------------- the law


@given(c=st.floats(0.2, 1.0), b=st.floats(0.05, 1.0), k=st.integers(1, 7), d=st.floats(0, 1e4),
       n=st.floats(1, 1e6))
@settings(max_examples=60, deadline=None)
def test_samples_for_inverts_tau(c, b, k, d, n):
    law = DataLaw(c, b, k, d)
    tau = float(law.tau(n))
    if 1.0 + 1e-6 < tau < k + 1 - 1e-6 and tau > float(law.tau(0.0)) + 1e-6:
        assert law.samples_for(tau) == pytest.approx(n, rel=1e-4)


def test_law_saturates_at_k_plus_one_and_counts_transfer():
    law = DataLaw(c=0.8, b=0.3, k=3)
    taus = law.tau(np.array([1e1, 1e3, 1e5, 1e9]))
    assert np.all(np.diff(taus) > 0) and taus[-1] < 4.0
    assert law.samples_for(4.0) == math.inf  # every draft accepted: never, under any data
    warm = DataLaw(c=0.8, b=0.3, k=3, transfer=500)
    assert float(warm.tau(100)) == pytest.approx(float(law.tau(600)))  # N new + D transferred = scratch on N + D
    assert warm.samples_for(float(law.tau(600))) == pytest.approx(100, rel=1e-6)


def test_a_flat_law_needs_infinitely_many_samples_not_an_overflow():
    flat = DataLaw(c=0.9, b=1e-3, k=3)
    assert flat.samples_for(3.5) == math.inf


def test_anchored_law_passes_through_its_point():
    law = DataLaw.anchored(37_000, 2.0, b=0.2, k=3)
    assert float(law.tau(37_000)) == pytest.approx(2.0, abs=1e-9)
    with pytest.raises(ParameterError):
        DataLaw.anchored(37_000, 4.2, b=0.2, k=3)  # beyond k + 1


@pytest.mark.slow
def test_fit_recovers_known_laws_within_their_bands():
    truth_s, truth_w = DataLaw(c=0.9, b=0.35, k=3), DataLaw(c=0.6, b=0.35, k=3)
    rng = np.random.default_rng(1)
    budgets = [8, 16, 32, 64, 128, 256]
    scratch = [(n, float(truth_s.tau(n)) + rng.normal(0, 0.01)) for n in budgets for _ in range(2)]
    warm = [(0, 1.9)] + [(n, float(truth_w.tau(n)) + rng.normal(0, 0.01)) for n in budgets for _ in range(2)]
    fit = fit_scaling(scratch, warm, k=3, n_boot=200)
    for band, truth in ((fit.scratch, truth_s), (fit.warm, truth_w)):
        assert band.central.b == pytest.approx(truth.b, abs=0.05)
        c, lo, hi = band.tau(1000)
        assert lo <= float(truth.tau(1000)) <= hi
    assert fit.plugin == 1.9 and fit.residual_rms["from scratch"] < 0.03
    # scratch needs (0.9 / 0.6)^(1 / 0.35) = 3.18x the warm start's data at every τ
    ratio, rlo, rhi = fit.data_ratio(float(truth_s.tau(128)))
    assert rlo <= ratio <= rhi and ratio == pytest.approx(1.5 ** (1 / 0.35), rel=0.2)
    moved, mlo, mhi = fit.transferred(64)  # effective data transferred: 64 x 2.18
    assert mlo <= moved <= mhi and moved == pytest.approx(64 * (1.5 ** (1 / 0.35) - 1), rel=0.25)
    n, nlo, nhi = fit.beats_plugin()  # where the warm law passes τ 1.9
    assert nlo <= n <= nhi and float(truth_w.tau(n)) == pytest.approx(1.9, abs=0.05)


def test_fit_refuses_too_few_budgets():
    with pytest.raises(ParameterError, match="3 distinct"):
        fit_scaling([(8, 1.2), (16, 1.3), (16, 1.31)], [(0, 1.5)], k=3)
    with pytest.raises(ParameterError, match="warm"):
        fit_scaling([(8, 1.2), (16, 1.3), (32, 1.4)], [(0, 1.5), (8, 1.6), (16, 1.7)], k=3)


def test_assumed_band_spans_its_corners():
    band = assumed_band(37_000, 2.0, 3, (0.1, 0.3))
    c, lo, hi = band.tau(370_000)
    assert lo < c < hi
    assert lo == pytest.approx(float(DataLaw.anchored(37_000, 2.0, 0.1, 3).tau(370_000)))
    assert hi == pytest.approx(float(DataLaw.anchored(37_000, 2.0, 0.3, 3).tau(370_000)))
    assert band.kind == "assumed range"


# --------------------------------------------------------------------------- provenance


def test_tags_and_legend():
    assert pv.tag(pv.LOGS) == "[your logs]" and pv.tag(pv.DEMO) == "[demo]"
    assert [line.split("]")[0] for line in pv.legend([pv.DEMO, pv.LOGS])] == ["- **[your logs", "- **[demo"]


def test_evidence_source_tells_the_demo_world_from_user_checkpoints(tmp_path):
    world = tmp_path / "world"
    (world / "target-b").mkdir(parents=True)
    (world / "drafter-a").mkdir()
    mine = tmp_path / "my-target"
    mine.mkdir()
    assert pv.evidence_source([world / "target-b", world / "drafter-a", None], world) == pv.DEMO
    assert pv.evidence_source([mine, world / "drafter-a"], world) == pv.YOURS
    assert pv.evidence_source(["org/hub-model"], world) == pv.YOURS


def test_founding_case_labels_defaults_and_entries():
    s = Scenario.founding_case()
    assert s.tag("baseline_tps") == "default" and s.tag("exponents") == "assumed"
    s = Scenario.founding_case(baseline_tps=90.0)
    assert s.tag("baseline_tps") == "entered" and s.tag("cycle_ms") == "default"
    md = plan_markdown(plan(s))
    assert "| plain decoding | 90 tok/s | [entered] |" in md
    assert "| speculative cycle | 30 ms | [default] |" in md


def test_logged_tau_replaces_a_default_never_an_entry():
    s = Scenario.founding_case().with_logged_tau(2.2)
    assert s.accept_len == 2.2 and s.tag("accept_len") == "your logs"
    entered = Scenario.founding_case(accept_len=1.9).with_logged_tau(2.2)
    assert entered.accept_len == 1.9 and entered.tag("accept_len") == "entered"


def test_files_source_tells_bundled_samples_from_user_logs(tmp_path):
    bundled = tmp_path / "repo" / "data" / "logs"
    bundled.mkdir(parents=True)
    (bundled / "sample.log").write_text("x")
    (tmp_path / "mine.log").write_text("x")
    assert pv.files_source([bundled / "sample.log"], bundled) == pv.SAMPLE
    assert pv.files_source([bundled / "sample.log", tmp_path / "mine.log"], bundled) == pv.LOGS


# --------------------------------------------------------------------------- the decision


def test_founding_case_none_reaches_the_target_and_names_the_cycle():
    s = Scenario.founding_case()
    p = plan(s, lever="CUDA graphs for the verify step")
    assert s.break_even_tau == pytest.approx(2.46) and s.goal_tau == pytest.approx(4.5)
    assert not any(r.tau >= s.goal_tau for r in p.rows)
    best = max(r.tau for r in p.rows)
    assert p.cycle_needed_ms == pytest.approx(1e3 * best / 150)
    assert "No drafter reaches 150 tok/s" in p.text and "above the 4" in p.text
    assert f"{p.cycle_needed_ms:.1f} ms" in p.text and "CUDA graphs" in p.text
    # the recommendation is the cheapest row that pays, and it does pay
    chosen = next(r for r in p.rows if r.option == p.action)
    assert chosen.tau >= s.break_even_tau
    assert all(r.to_generate >= chosen.to_generate for r in p.rows if r.tau >= s.break_even_tau)


def test_reaching_option_is_recommended_and_cheapest_wins():
    # a fast cycle: the goal needs τ 2.4; the old drafter plugged in already gives 2.6
    s = Scenario.founding_case(cycle_ms=16.0, plugin_tau=2.6)
    p = plan(s)
    assert p.action == "plug in the old drafter"
    assert "reaches the goal" in p.text and "no new data to generate" in p.text


def test_nothing_pays_branch():
    s = Scenario.founding_case(cycle_ms=60.0, accept_len=1.5, exponents=(0.05, 0.1))
    p = plan(s, budgets=[50_000, 100_000])
    assert p.action == "shrink the cycle"
    assert "No option pays" in p.text and "serve without speculation" in p.text


def test_warm_start_from_measured_plugin_tau_starts_at_that_tau():
    s = Scenario.founding_case(plugin_tau=2.3)
    p = plan(s, budgets=[37_001])
    warm = next(r for r in p.rows if r.kind == "warm start" and r.total_samples == 37_001)
    scratch = next(r for r in p.rows if r.kind == "from scratch")
    assert warm.tau > scratch.tau  # the old drafter is worth data
    need = next(n for n in p.needs if n.start == "warm start" and n.goal == "break-even")
    assert need.samples[1] <= need.samples[0] <= need.samples[2]
    assert "plug-in τ 2.30 [entered]" in warm.evidence


def test_no_warm_start_without_evidence_for_it():
    p = plan(Scenario.founding_case(old_samples=None))
    assert {r.kind for r in p.rows} == {"serve as now", "from scratch"}
    assert {r.kind for r in plan(Scenario.founding_case()).rows} >= {"warm start"}  # the founding case's 1.4M


def test_default_budgets_are_round_and_above_the_data_held():
    assert default_budgets(37_000) == [50_000, 100_000, 200_000, 500_000, 1_000_000]
    assert all(b > 900 for b in default_budgets(900))


@pytest.mark.parametrize("field, value", [("cycle_ms", 0.0), ("accept_len", 1.0), ("gen_tps", float("nan")),
                                          ("plugin_tau", 9.0), ("exponents", (0.0, 0.3))])
def test_bad_scenarios_are_refused_by_name(field, value):
    with pytest.raises(ParameterError, match=field):
        Scenario.founding_case(**{field: value})


# --------------------------------------------------------------------------- eaglelab plan


def _plan(*args):
    return subprocess.run([sys.executable, "-m", "eaglelab", "plan", *args], capture_output=True, text=True)


def test_cli_plan_on_the_seed_numbers():
    proc = _plan("--baseline-tps", "82", "--cycle-ms", "30", "--accept-len", "2.0", "--goal-tps", "150",
                 "--samples", "37000", "--gen-tps", "82", "--old-samples", "1400000")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "2.46" in out and "4.50" in out  # break-even and goal τ
    assert "warm start, 37k samples (entered)" in out and "from scratch, 1M samples" in out
    assert "days" in out  # how long the data takes
    assert "No drafter reaches 150 tok/s" in out and "entered" in out and "assumed" in out
    def strict(name):
        raise ValueError(f"not JSON: {name}")

    data = json.loads(_plan("--json").stdout, parse_constant=strict)  # unreachable needs: null, not Infinity
    assert any(n["samples"][0] is None for n in data["needs"])
    assert data["break_even_tau"] == pytest.approx(2.46) and data["sources"]["baseline_tps"] == "default"
    assert data["action"] in {r["option"] for r in data["rows"]}


def test_cli_plan_takes_tau_from_a_log(tmp_path):
    log = tmp_path / "sglang.log"
    log.write_text("\n".join(
        f"[2026-01-01 00:00:0{i}] Decode batch. #running-req: 1, #token: 100, token usage: 0.01, "
        f"accept len: {tau:.2f}, gen throughput (token/s): 60.0, #queue-req: 0" for i, tau in enumerate([1.9, 2.1, 2.2])))
    data = json.loads(_plan("--json", "--log", str(log)).stdout)
    assert data["scenario"]["accept_len"] == pytest.approx(2.1) and data["sources"]["accept_len"] == "logs"


@pytest.mark.parametrize("args, needle", [(["--cycle-ms", "-3"], "--cycle-ms: must be a number in [0.01, 3.6e+06], got -3"),
                                          (["--accept-len", "5"], "accept_len"),
                                          (["--k", "zero"], "is not a whole number")])
def test_cli_plan_bad_input_is_one_line_exit_2(args, needle):
    proc = _plan(*args)
    assert proc.returncode == 2 and needle in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1 and proc.stderr.startswith("eaglelab plan: error:")


# --------------------------------------------------------------------------- the game plan


def _findings(d, nb, numbers, bullets=("- a finding",)):
    from eaglelab.workbook.report import save_findings

    save_findings(nb, numbers, list(bullets), d)  # as the notebooks write them: strict JSON


@pytest.mark.parametrize("evidence", [pv.DEMO, pv.YOURS])
def test_game_plan_takes_the_plugin_tau_only_from_the_users_checkpoints(tmp_path, evidence):
    from eaglelab.workbook.report import write_game_plan

    _findings(tmp_path, "01", {"plan": plan(Scenario.founding_case()).to_json(), "lever": "CUDA graphs"})
    _findings(tmp_path, "03", {"plugin": {"accept_len_on_a": 2.6, "accept_len_on_b": 2.3}, "k": 3,
                               "evidence": evidence})
    _findings(tmp_path, "04", {"recommendation": {"text": "Initialise the new drafter from the old one."},
                               "evidence": evidence})
    text = write_game_plan(tmp_path).read_text()
    assert text.index("## The decision for the founding case") < text.index("## 01")  # 01 left at its defaults
    assert all(f"**[{tag}]**" in text for tag, _ in pv.LABELS.values())  # the legend
    if evidence == pv.YOURS:
        assert "| old drafter's τ on the new target | 2.30 | [your checkpoints] |" in text
        assert "plug in the old drafter" in text and "demo world (an illustration)" not in text
    else:
        assert "old drafter's τ on the new target" not in text  # a demo τ never enters the user's table
        assert "## The fine-tune's verdict on the demo world (an illustration)" in text
        assert "Initialise the new drafter from the old one. [demo]" in text


def test_game_plan_without_notebook_01_says_so(tmp_path):
    from eaglelab.workbook.report import write_game_plan

    text = write_game_plan(tmp_path).read_text()
    assert "Run notebook 01 with your serving numbers" in text and "*No findings yet: run notebook 04.*" in text


def test_plugin_text_covers_its_three_cases():
    scratch = [(n, float(DataLaw(0.9, 0.3, 3).tau(n))) for n in (8, 16, 32, 64)]
    rising = [(n, float(DataLaw(0.8, 0.3, 3).tau(n))) for n in (8, 16, 32, 64)]
    low, high = float(DataLaw(0.8, 0.3, 3).tau(8)), float(DataLaw(0.8, 0.3, 3).tau(64))
    assert "above it at every budget" in fit_scaling(scratch, [(0, low - 0.1)] + rising, 3, n_boot=50).plugin_text()
    text = fit_scaling(scratch, [(0, (low + high) / 2)] + rising, 3, n_boot=50).plugin_text()
    assert "passes it from about" in text and "within the 64 measured" in text and "forgets" in text
    assert "beyond the 64 measured" in fit_scaling(scratch, [(0, high + 0.05)] + rising, 3, n_boot=50).plugin_text()


def test_the_data_each_start_needs_for_the_tau_asked_carries_its_band():
    """#56 item 2: the decision-maker's number is the data each start needs for the τ asked, with its band, not a
    ratio; a τ a law never reaches, or one the warm start already has, is said in words."""
    scratch = [(n, float(DataLaw(0.9, 0.3, 3).tau(n))) for n in (8, 16, 32, 64)]
    warm = [(n, float(DataLaw(0.6, 0.3, 3).tau(n))) for n in (8, 16, 32, 64)]
    fit = fit_scaling(scratch, [(0, 1.5)] + warm, 3, n_boot=50)
    tau = float(DataLaw(0.9, 0.3, 3).tau(48))
    text = fit.needs_text(tau, "the goal's τ")
    for label, band in (("warm start", fit.warm), ("scratch run", fit.scratch)):
        c, lo, hi = band.samples_for(tau)
        assert lo <= c <= hi and f"the {label} at least **{sample_count(c)}** ({sample_count(lo)} to " in text
    assert f"For τ {tau:.2f} (the goal's τ)" in text and "bootstrap 90%" in text and "inf" not in text
    assert "extrapolated" in fit.needs_text(float(DataLaw(0.9, 0.3, 3).tau(5000)), "far")
    assert "never reaches it with any corpus" in fit.needs_text(3.999, "all but every draft")
    assert "the warm start needs no new data" in fit.needs_text(1.01, "a τ it has")


class _Ratio(ScalingFit):
    """A fit whose data ratio is given: the wording alone under test."""

    def __init__(self, ratio):
        self._ratio = ratio

    def data_ratio(self, tau):
        return self._ratio


@pytest.mark.parametrize("ratio, says", [
    ((3.2, 2.9, 3.6), "**scratch needs 3.2× (2.9-3.6) the warm start's data** at τ 2.10"),
    ((36.3, 11.5, 688.0), "scratch needs 11.5-688× the warm start's data at τ 2.10 (central 36.3×): a band of 60x pins "
                          "no number; more budgets, seeds or your own data would narrow it"),
    ((math.inf, 268.8, math.inf), "cannot be read from this sweep: under a fitted law one start needs no new data for it "
                                  "or never reaches it (band 268.8× to unbounded)"),
    ((math.nan, 0.0, 4.0), "(band unbounded to 4.0×)"),
])
def test_the_data_ratio_is_told_by_its_band_and_never_as_infinity(ratio, says):
    """#54 item 2: "scratch needs inf× (268.8-inf)" was printed into a game plan."""
    text = _Ratio(ratio).ratio_text(2.1)
    assert says in text and "inf" not in text and "nan" not in text


@given(n=st.floats(min_value=0, allow_nan=False), hours=st.floats(min_value=0, allow_nan=False))
def test_a_plan_prints_no_count_beyond_any_corpus_and_no_time_beyond_a_millennium(n, hours):
    """#54 item 2: "6.72e+150B samples" and a 150-digit number of years were printed into a game plan."""
    from eaglelab.planning.decision_table import DURATION_LIMIT_H, _duration
    from eaglelab.planning.scaling import CORPUS_LIMIT

    assert [sample_count(x) for x in (999_999, 999.9, 37_000, 1_400_000)] == ["1M", "1k", "37k", "1.4M"]
    count, took = sample_count(n), _duration(hours)
    assert "e+" not in count and "inf" not in count and "e+" not in took and "inf" not in took
    if n > CORPUS_LIMIT:
        assert count == "> 10B (beyond any corpus)"
    else:
        assert float(count.rstrip("kMB")) <= 10_000
    if hours > DURATION_LIMIT_H:
        assert took == "never (> 1,000 years)"
    else:
        assert float(took.split()[0]) <= 1000 * 365


def test_pays_up_to_spans_the_options_tau_band_and_the_unstated_context():
    """#55 item 1 in the game plan: "pays up to" was one number per option at the assumed 2,048-token context and
    the option's central τ; it is now a range over the τ band and, where no context was given, 512-8,192 tokens."""
    from eaglelab.jobs.plan import PlanSettings, plan_options

    loose = plan_options(PlanSettings()).plan
    given = plan_options(PlanSettings(context=2048)).plan
    for a, b in zip(loose.rows, given.rows):
        assert a.pays_up_to == b.pays_up_to  # the centre is the same answer
        for rng in (a.pays_range, b.pays_range):
            lo, hi = (-1 if p is None else p for p in rng)
            assert lo <= (-1 if a.pays_up_to is None else a.pays_up_to) <= hi
        widen = [(-1 if p is None else p) for p in (*a.pays_range, *b.pays_range)]
        assert widen[0] <= widen[2] and widen[1] >= widen[3]  # the context withheld: never narrower
    text = "\n".join(plan_options(PlanSettings()).lines())
    assert "(never-256)" in text or any(r.pays_range != (r.pays_up_to, r.pays_up_to) for r in loose.rows)
    for answer, withheld in ((loose, True), (given, False)):  # the decision's own words carry the chosen row's range
        chosen = next(r for r in answer.rows if r.option == answer.action)
        lo, hi = ("nowhere" if p is None else str(p) for p in chosen.pays_range)
        assert f"Under load it pays up to {chosen.pays_up_to} requests in flight" in answer.text
        if chosen.pays_range != (chosen.pays_up_to, chosen.pays_up_to):
            assert f"({lo} to {hi} over its τ band" in answer.text
        assert ("the contexts not given, 512-8192 tokens" in answer.text) == (withheld and lo != hi)
