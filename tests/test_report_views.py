"""#57 item 1: each result owns its views. A report's ``table()`` (the notebook's DataFrame) and its command-line text
carry the same columns, and its ``findings()`` sentences are computed from the report: change a number and the
sentence changes with it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglelab.cli import main
from eaglelab.jobs.load import LoadSettings, speculation_under_load
from eaglelab.jobs.load_engine import EngineCostFit, EngineLoadCheck, EngineLoadRow
from eaglelab.serving import perf
from eaglelab.serving.cost_table import CostTable, Measurement, write_cost_table
from eaglelab.views import Column, View


def header_cells(text: str) -> list[str]:
    """A text table's header split on its column gaps (two spaces or more)."""
    import re

    return re.split(r"\s{2,}", text.splitlines()[0].strip())


def test_a_view_prints_and_frames_the_same_columns():
    view = View.of([Column("concurrency"), Column("speedup", "{:.2f}x"), Column("note")], [[1, 1.234, None], [8, 0.9, "x"]],
                   index="concurrency")
    assert header_cells(view.text()) == ["concurrency", "speedup", "note"]
    assert "1.23x" in view.text() and "-" in view.text().splitlines()[2]  # None prints as a dash
    frame = view.frame()
    assert [frame.index.name, *frame.columns] == view.headers and frame.loc[1, "speedup"] == 1.234
    with pytest.raises(ValueError):
        View.of([Column("a")], [[1, 2]])


def test_the_load_reports_table_is_what_perf_prints(capsys):
    report = speculation_under_load(LoadSettings(concurrency=(1, 8, 64), baseline_tps=82, cycle_ms=30, accept_len=2.5))
    frame = report.table()
    assert [frame.index.name, *frame.columns] == report.view().headers
    assert "band" in frame.columns and list(frame.index) == [1, 8, 64]
    assert main(["perf", "--concurrency", "1", "8", "64", "--baseline-tps", "82", "--cycle-ms", "30",
                 "--accept-len", "2.5"]) == 0
    printed = capsys.readouterr().out
    header = next(line for line in printed.splitlines() if line.startswith("concurrency") and "decode ms" in line)
    assert header_cells(header) == report.view().headers
    assert frame.loc[8, "speedup (τ 2.50)"] == pytest.approx(next(r.speedup for r in report.rows if r.concurrency == 8))


@settings(max_examples=25, deadline=None)
@given(tps=st.floats(40, 200), ratio=st.floats(1.2, 3.0), tau=st.floats(1.5, 3.9))
def test_the_load_findings_follow_the_rows(tps, ratio, tau):
    from eaglelab.errors import EaglelabError

    try:
        report = speculation_under_load(LoadSettings(concurrency=(1, 16), baseline_tps=tps, cycle_ms=ratio * 1e3 / tps,
                                                     accept_len=tau, k=3))
    except EaglelabError:
        return
    said = report.findings("[entered]")
    assert report.crossover() in said["load"] and "[entered]" in said["load"]
    for r in report.rows:
        plural = "s" if r.concurrency != 1 else ""
        assert f"{r.concurrency} request{plural} {r.speedup:.2f}× (break-even τ {r.break_even_tau:.2f}" in said["load"]
    assert bool(said["band"]) == (report.band is not None)


@settings(max_examples=40, deadline=None)
@given(tps=st.floats(10, 500), cycle=st.floats(5, 80), tau=st.floats(1.0, 4.0))
def test_the_points_findings_are_its_numbers(tps, cycle, tau):
    d = perf.diagnose(tps, cycle, tau, [150], strict=False)
    said = d.findings({"accept_len": "[entered]", "cycle_ms": "[default]", "baseline_tps": "[your logs]"})
    assert f"**{d.effective_tps:.1f} tok/s**, {d.speedup:.2f}×" in said["pays"]
    assert ("pays" if d.speedup > 1 else "loses") in said["pays"].split(":")[0]
    assert f"τ = {tau:g} [entered] over a {cycle:g} ms [default] cycle" in said["pays"]
    assert f"τ = **{d.break_even_tau:.2f}**" in said["break_even"]
    assert f"150 tok/s needs τ = {d.required_accept_len['150']:.2f}" in said["goals"]
    assert d.lines()[0].startswith(f"effective tok/s        {d.effective_tps:.1f}")


def _engine_row(c: int, measured: float, model: float, held: bool) -> EngineLoadRow:
    return EngineLoadRow(c, 1.8, 10.0, 10.0 * measured, measured, model, model / measured - 1, measured * 0.95,
                         measured * 1.05, measured * 0.95 <= model <= measured * 1.05, held)


@settings(max_examples=30, deadline=None)
@given(speedups=st.lists(st.floats(0.5, 2.5), min_size=2, max_size=4), off=st.floats(-0.3, 0.3))
def test_the_engine_load_findings_follow_the_rows(speedups, off):
    rows = [_engine_row(2 ** i, s, s * (1 + off), 0 < i < len(speedups) - 1) for i, s in enumerate(speedups)]
    check = EngineLoadCheck(None, None, rows, "vLLM 0.0 on this machine")
    said = check.findings("[demo]")["engine_load"]
    for r in rows:
        assert r.words() in said and f"{r.measured:.2f}× measured" in said
    if len(rows) > 2:
        assert f"{100 * check.worst_held_out:.0f}% off where held out" in said
    else:
        assert "held out" not in said
    frame = check.table()
    assert [frame.index.name, *frame.columns] == header_cells(check.view().text())
    assert "not run (no vLLM here)" in EngineLoadCheck.skipped("no vLLM here").findings()["engine_load"]


def test_the_engine_cost_fit_findings_are_its_residuals(tmp_path):
    from eaglelab.jobs.load import load_model_for

    settings_ = LoadSettings(concurrency=(1, 4, 16), accept_len=2.5, k=2, gpu="cpu", context=64)
    truth, _ = load_model_for(settings_)
    rows = []
    for b in (1, 4, 16):
        rows.append(Measurement(b, 0, 1, 1, 1.0, 64, b / float(truth.decode_s(b))))
        rows.append(Measurement(b, 2, 3, 1, 2.5, 64, 2.5 * b / float(truth.cycle_s(b, 2))))
    path = write_cost_table(tmp_path / "costs.csv", rows, ["engine: vllm 0.0"])
    report = speculation_under_load(replace(settings_, costs=(str(path),)))
    held = [{"error": 0.07}]
    fit = EngineCostFit(CostTable(tuple(rows)), report, held, str(path), "vllm 0.0 on this machine", (2.5,))
    said = fit.findings("[demo]")["engine_costs"]
    assert "6 steps measured in vllm 0.0 on this machine at forced τ 2.5 (`costs.csv`)" in said
    assert f"within {100 * fit.worst_fitted:.0f}% of every one" in said and "7% off at the ones between" in said
    assert header_cells(fit.view().text()) == list(fit.table().columns)
    assert "not measured (SERVING_ENGINE = None)" in EngineCostFit.skipped("SERVING_ENGINE = None").findings()["engine_costs"]


@pytest.mark.parametrize("pays, says", [((None, None), "it pays at no concurrency (the table"),
                                        ((None, 8), "it pays up to 8 concurrent requests at best and nowhere at worst"),
                                        ((4, 16), "it pays up to 4-16 concurrent requests (the table"),
                                        ((16, 16), "it pays up to 16 concurrent requests (the table")])
def test_the_bands_sentence_reads_at_each_end(pays, says):
    """The band's crossover was printed as "pays up to nowhere concurrent requests" where no corner paid."""
    from eaglelab.serving.load_band import LoadBand

    band = LoadBand(("context 512-8192 tokens",), {1: 0.8, 8: 0.9}, {1: 1.1, 8: 1.2}, pays)
    assert says in band.lines()[0] and "nowhere concurrent" not in band.lines()[0]


def _sweep_record(family: str, agreement: float, gamma: float, measured: float | None = None,
                  magnitude: float | None = None):
    import math

    from eaglelab.drift.records import SweepRecord

    chain = [0.8, 0.6, 0.45]
    tau_b = 1 + sum(c * (agreement ** gamma) ** (i + 1) for i, c in enumerate(chain))
    return SweepRecord.from_json({
        "point": {"family": family, "label": f"{family} {agreement}",
                  "magnitude": 1 - agreement if magnitude is None else magnitude},
        "measures": {"agreement": agreement, "tv_topk": 1 - agreement, "tv": 1 - agreement, "kl": -math.log(agreement),
                     "cos_last": agreement}, "weight_distance": 1 - agreement,
        "on_a": {"chain": chain, "accept_len": 1 + sum(chain)},
        "on_b": {"accept_len": tau_b, "walk_accept_len": tau_b * 1.01},
        "conditional": {"accept_len": tau_b},
        "measured": {"accept_len": measured, "walk_own_text": measured * 0.99} if measured else None})


@settings(max_examples=10, deadline=None)
@given(gamma=st.floats(0.5, 2.5), off=st.floats(0.9, 1.1))
def test_the_drift_findings_follow_the_sweep(gamma, off):
    from eaglelab.drift import analysis

    records = [_sweep_record("none", 1.0, gamma)] + [
        _sweep_record(f, a, gamma, measured=(1 + sum(c * (a ** gamma) ** (i + 1) for i, c in
                                                     enumerate([0.8, 0.6, 0.45]))) * off if a < 0.8 else None)
        for f, ags in (("path", (0.9, 0.7)), ("quant", (0.95, 0.75)), ("train", (0.85, 0.6))) for a in ags]
    drift = analysis.analyse(records, [], 0.10)
    said = drift.findings("[demo]")
    c = drift.choice
    assert f"has γ = {c.gamma_all[c.chosen_engine]:.2f}" in said["law"] and "[demo]" in said["law"]
    assert f"best **{c.chosen}** (worst error {c.error_words(c.chosen)}" in said["predictors"]
    gaps = drift.gaps["teacher_forced"]
    assert len(gaps) == 3 and all(g == pytest.approx(1 / off - 1) for g in gaps)
    assert analysis.gap_text(gaps, 0.10) in said["decoding"] and "at the 3 measured points" in said["decoding"]
    assert list(drift.table().index.names) == ["family", "point"] and len(drift.table()) == len(records)
    assert drift.predictors_table().index.name == "predictor"
    assert drift.to_json()["gaps_vs_measured"] == drift.gaps and len(drift.to_json()["points"]) == len(records)
    from eaglelab.drift.file_prediction import FilePrediction

    b_point = _sweep_record("path", 0.65, gamma, magnitude=1.0)  # the sweep's B: its α = 1 point
    with_b = analysis.DriftAnalysis([*records, b_point], [], drift.choice, drift.rows, 0.10)
    p = FilePrediction(1.6, 1.4, 1.8, "agreement", 1.0, {"agreement": 0.64}, [0.8], None, None, 10, 2, 1.8, 30.0,
                       (50.0, 45.0, 60.0))
    files = with_b.files_findings(p, b_point, "[demo]", "05_predictor.json")["files"]
    assert "agreement 0.640 (the sweep's own 0.650)" in files and f"against {b_point.on_b.accept_len:.2f} teacher forced" in files
    assert "**1.60** [1.40–1.80]" in files and "`--calibration 05_predictor.json`" in files


@settings(max_examples=20, deadline=None)
@given(tps=st.floats(40, 200), ratio=st.floats(1.5, 3.0))
def test_the_cycle_costs_findings_are_its_parts(tps, ratio):
    from eaglelab.serving.cycle_cost import cycle_cost
    from eaglelab.serving.load import kimi_k25_on_pcie
    from eaglelab.serving.load_fit import Point, calibrate

    model = calibrate(kimi_k25_on_pcie(), [Point(1, decode_s=1 / tps, cycle_s=ratio / tps, k=3)])
    cost = cycle_cost(model, 3, "the model [assumed]", measured_verify_ms=30.0)
    said = cost.findings("[entered]")["cycle"]
    assert f"a 4-token verify at {cost.verify_ms:.1f} ms" in said and "the verify measured 30 ms [entered]" in said
    assert f"{cost.parts[0].part} {cost.parts[0].ms:.1f} ms" in said and said.endswith(f"the largest lever is {cost.lever}.")
    assert cost.parts == tuple(sorted(cost.parts, key=lambda p: -p.ms)) and sum(p.share for p in cost.parts) == pytest.approx(1)
    assert header_cells(cost.view().text()) == [cost.table().index.name, *cost.table().columns]


@settings(max_examples=30, deadline=None)
@given(alpha=st.floats(0.3, 0.95), cycle=st.floats(10, 60))
def test_the_acceptance_each_goal_needs_is_said(alpha, cycle):
    needs = perf.acceptance_needs([100, 150, 400], cycle, 7, alpha, 3)
    said = needs.findings("[default]")["acceptance"]
    for goal, rate in needs.rates.items():
        tau = goal * cycle / 1e3
        assert (rate is None) == (tau > 8) and (rate is None or rate == pytest.approx(perf.rate_for_accept_len(max(tau, 1), 7)))
    assert f"a measured {alpha:g} [default] gives τ ≈ {needs.tau_at_alpha:.2f} with k = 3" in said
    assert "(100, 150, 400 tok/s)" in said and ("unreachable" in said) == (None in needs.rates.values())


def test_a_log_set_reads_each_file_and_says_what_it_read(tmp_path):
    from eaglelab.serving.log_set import LogSet

    line = ("[2026-01-01 10:00:0{i} TP0] Decode batch[ 40], #running-req: 1, #token: 900, token usage: 0.02, "
            "accept len: {tau}, accept rate: 0.40, cuda graph: True, gen throughput (token/s): 80.0, #queue-req: 0,")
    (tmp_path / "a.log").write_text("\n".join([line.format(i=i, tau=t) for i, t in enumerate((1.5, 2.5, 3.0))]
                                              + ["something else"]) + "\n")
    (tmp_path / "b.log").write_text(line.format(i=9, tau=2.0) + "\n")
    logs = LogSet.read([str(tmp_path / "a.log"), str(tmp_path / "b.log")])
    assert logs.median_tau == pytest.approx(2.25) and len(logs.records) == 4
    said = logs.findings("[your logs]")["logs"]
    assert said == ("**Logs [your logs]:** 4 metrics lines parsed from 2 files (1 other lines skipped, 0 malformed); "
                    "median τ 2.25.")
    assert list(logs.table()["metrics lines"]) == [3, 1] and len(logs.by_concurrency()) == 2


def _probe(tau_a: float, tau_b: float, cos: float = 0.9, acc_b=(0.5, 0.4, 0.3)):
    from eaglelab.decisions import plugin_verdict
    from eaglelab.jobs.probe import ProbeReport, ProbeSettings
    from eaglelab.probe.plugin import ProbeResult
    from eaglelab.probe.similarity import LayerSimilarity

    def ev(tau, acc):
        chain = [float(acc[0]), float(acc[0] * acc[1]), float(acc[0] * acc[1] * acc[2])]
        return {"accept_len": tau, "acc": list(acc), "chain": chain,
                "chain_band": [{"low": c - 0.01, "high": c + 0.01} for c in chain]}

    layers = [LayerSimilarity(name, cos - i / 100, cos - 0.1, 0.3 + i / 10, 1.0, 0.8) for i, name in enumerate(("low", "mid"))]
    result = ProbeResult(layers=layers, argmax_agreement=0.6, tokens=100, eval_a=ev(tau_a, (0.7, 0.6, 0.5)),
                         eval_b=ev(tau_b, acc_b), decision=plugin_verdict(tau_a, tau_b), tv=0.2)
    return ProbeReport(ProbeSettings("a", "b", "d", k=3), result, "text", 100)


@settings(max_examples=25, deadline=None)
@given(tau_b=st.floats(1.0, 2.5), cycle=st.floats(10, 60), tps=st.floats(20, 200))
def test_the_probes_tables_and_scenario_follow_its_numbers(tau_b, cycle, tps):
    report = _probe(2.5, tau_b)
    assert list(report.table().index) == ["low", "mid"] and report.table().loc["mid", "rel L2"] == pytest.approx(0.4)
    chain = report.chain_table()
    assert list(chain["accuracy on B"]) == [0.5, 0.4, 0.3] and chain.loc[2, "B 90% band"] == "0.190-0.210"
    yours = report.scenario_findings(cycle, tps, "[yours]", True, "the plan uses it.")["scenario"]
    assert f"τ {tau_b:.2f} [yours] projects to {perf.effective_tps(tau_b, cycle / 1e3):.1f} tok/s" in yours
    assert f"break-even needs τ = {perf.break_even_tau(cycle / 1e3, tps):.2f}" in yours
    assert yours.endswith("the plan uses it.") == report.result.decision.decided
    assert "not projected" in report.scenario_findings(cycle, tps, "[demo]", False, "")["scenario"]


def test_the_dump_parity_says_whether_the_dumps_reproduce_the_live_numbers():
    from dataclasses import replace as replace_

    from eaglelab.jobs.dump_parity import DumpParity

    live = _probe(2.5, 1.8)
    same = DumpParity(live.settings, live.result, _probe(2.5, 1.8).result)
    assert same.holds and same.worst == 0 and "reproduce every live number" in same.findings("[demo]")["dumps"]
    off = DumpParity(live.settings, live.result, _probe(2.5, 1.8, cos=0.9 + 3e-3).result)
    said = off.findings("[demo]")["dumps"]
    assert not off.holds and "do **not** reproduce" in said and "(similarity)" in said and f"{off.worst:.1e}" in said
    assert list(off.table().index) == ["live", "from dumps"]
    dumped = DumpParity(replace_(live.settings, old_states="dA", new_states="dB"), live.result, None)
    assert dumped.holds is None and "probed from dA (A) and dB (B)" in dumped.findings()["dumps"]


@settings(max_examples=10, deadline=None)
@given(b_scratch=st.floats(0.15, 0.6), lift=st.floats(0.1, 0.6))
def test_the_scaling_sweeps_findings_follow_its_fit(b_scratch, lift):
    from eaglelab.planning.scaling import DataLaw, ScalingSweep, fit_scaling

    budgets = (4, 8, 16, 32, 64)
    scratch_law, warm_law = DataLaw(0.9, b_scratch, 3), DataLaw(0.9 * (1 - lift), b_scratch / 2, 3)
    scratch = [(n, float(scratch_law.tau(n))) for n in budgets]
    warm = [(0, 1.5)] + [(n, float(warm_law.tau(n))) for n in budgets]
    fit = fit_scaling(scratch, warm, k=3, n_boot=40)
    sweep = ScalingSweep({"from scratch": scratch, "warm start": warm}, fit, (0, *budgets), (0,), 10, 2.0)
    said = sweep.findings("[demo]", goal=(2.2, "your goal's"))
    top = sweep.levels[-1]
    assert f"b = {fit.exponent[0]:.3f}" in said["scaling"]
    assert fit.needs_text(top, "the highest τ scratch reached") in said["scaling"]
    assert fit.ratio_text(top) in said["scaling"] and fit.needs_text(2.2, "your goal's") in said["scaling"]
    assert "your goal's" not in sweep.findings("[demo]")["scaling"]
    assert said["plugin"] == f"**Fine-tune or plug in? [demo]** {fit.plugin_text()}"
    assert list(sweep.equal_table().index) == pytest.approx(sweep.levels)


def test_projected_throughput_is_tau_over_the_cycle():
    from eaglelab.serving.speculation import Speculation, Speculations

    def spec(tau):
        return Speculation(3, 2, 2, 20, tau, [[20, 10]], 100.0, 80.0, True, 0.002, 0.012, 0.001, [0.8], True)

    runs = Speculations({"plug in": spec(1.5), "warm start": spec(2.4)})
    said = runs.projection_findings(30, 82, yours=True)["projected"]
    assert said.endswith("plug in 50.0 tok/s, warm start 80.0 tok/s.") and "(30 ms cycle, 82 tok/s baseline)" in said
    assert "not projected" in runs.projection_findings(30, 82, yours=False)["projected"]


def test_the_config_survey_counts_what_its_rows_say(tmp_path):
    import shutil

    from eaglelab.jobs.config_survey import EAGLE31_PAIR, survey_configs

    fixtures = Path(__file__).resolve().parents[1] / "data" / "fixtures" / "specforge-configs"
    survey = survey_configs(fixtures)
    said = survey.findings()["configs"]
    n, consistent = len(survey.rows), sum(r["consistent"] for r in survey.rows)
    assert f"{consistent} of {n} real configs parse into consistent tensor tables" in said
    assert "`fc_norm`" in said and len(survey.table()) == n and not survey.pair_table().empty
    refused = [r["config"] for r in survey.rows if not r["computed"]]
    assert f"eaglelab computes {n - len(refused)} of them" in said and all(f"`{name}`" in said for name in refused)
    # the pair alone, copied: both parse, and the sentence counts two
    for name in EAGLE31_PAIR:
        shutil.copy(fixtures / name, tmp_path / name)
    assert "2 of 2 real configs" in survey_configs(tmp_path).findings()["configs"]


@settings(max_examples=25, deadline=None)
@given(tau=st.floats(1.1, 3.0), width=st.floats(0.01, 0.5), baseline=st.one_of(st.none(), st.floats(20, 200)))
def test_the_predictions_sentence_is_its_numbers(tau, width, baseline):
    from eaglelab.drift.file_prediction import FilePrediction
    from eaglelab.jobs.predict import PredictionReport, PredictSettings

    be = None if baseline is None else float(perf.break_even_tau(0.03, baseline))
    p = FilePrediction(tau, tau - width, tau + width, "agreement", 1.0, {"agreement": 0.6, "tv_topk": 0.3}, [0.5, 0.2],
                       None, None, 100, 4, 1.7, 30.0, (tau / 0.03, (tau - width) / 0.03, (tau + width) / 0.03), be)
    report = PredictionReport(PredictSettings("a.jsonl", "b.jsonl", chain=(0.5, 0.2), baseline_tps=baseline), p)
    said = report.findings("[yours]")["predicted"]
    assert f"**{tau:.2f}** [{tau - width:.2f}–{tau + width:.2f}] by agreement" in said and "[yours]" in said
    assert f"{tau / 0.03:.1f} tok/s at a 30 ms cycle" in said
    assert ("plugging in" in said) == (baseline is not None) and (report.plug_in is None) == (baseline is None)
    assert ("break_even_tau" in report.to_json()) == (baseline is not None)


def test_smoke_sizes_live_in_the_settings():
    """#57 item 2: a notebook's smoke run takes its sizes from the settings class, checked like any value."""
    from eaglelab.drift.sweep import SweepSettings
    from eaglelab.jobs.probe import ProbeSettings
    from eaglelab.settings import smoke_sized

    probe = ProbeSettings("a", "b", "d", sequences=24, measure_prompts=4)
    assert smoke_sized(probe, False) is probe
    small = smoke_sized(probe, True)
    assert (small.sequences, small.measure_prompts, small.measure_tokens) == (16, 3, 24) and small.old_target == "a"
    sweep = smoke_sized(SweepSettings(sequences=40, k=3), True)
    assert (sweep.sequences, sweep.lora_rows, sweep.k) == (16, 128, 3)
