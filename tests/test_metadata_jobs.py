"""``perf``, ``plan`` and ``recipe`` as jobs (#39 item 2): settings in, a typed report out, the CLI printing it.

Each job is called here as the notebooks and pickers call it, and its report is held against what the command
prints for the same flags: one answer, two surfaces.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from eaglelab.cli import main
from eaglelab.errors import ParameterError
from eaglelab.jobs.load import LoadSettings, load_model_for
from eaglelab.jobs.perf import PerfSettings, diagnose_serving
from eaglelab.jobs.plan import PlanSettings, founding_help, plan_options
from eaglelab.jobs.recipe import RecipeJobSettings, write_recipe
from eaglelab.planning.decision_table import FOUNDING_CASE
from eaglelab.serving.load import STEP_KINDS


def printed(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    return code, out.getvalue()


# --------------------------------------------------------------------------- perf

def test_perf_answers_in_the_reading_its_settings_ask_for(tmp_path):
    point = diagnose_serving(PerfSettings(baseline_tps=82, cycle_ms=30, accept_len=2.0, goal_tps=(150,)))
    assert point.load is None and point.log is None
    assert point.point.break_even_tau == pytest.approx(82 * 0.030)
    load = diagnose_serving(PerfSettings(baseline_tps=82, cycle_ms=30, accept_len=2.0, concurrency=(1, 8)))
    assert [r.concurrency for r in load.load.rows] == [1, 8]
    assert load.to_json()["effective_tps"] == pytest.approx(point.point.effective_tps)  # the point beside the load
    with pytest.raises(ParameterError, match="--log FILE, or all of"):
        diagnose_serving(PerfSettings(baseline_tps=82, cycle_ms=30))


@pytest.mark.parametrize("flags", [["--baseline-tps", "82", "--cycle-ms", "30", "--accept-len", "2", "--goal-tps", "150"],
                                   ["--baseline-tps", "82", "--cycle-ms", "30", "--accept-len", "2", "--concurrency", "1",
                                    "8", "64"]])
def test_perf_prints_its_report(flags):
    code, text = printed(["perf", *flags])
    goal = ("150",) if "--goal-tps" in flags else None
    concurrency = (1, 8, 64) if "--concurrency" in flags else None
    report = diagnose_serving(PerfSettings(baseline_tps=82.0, cycle_ms=30.0, accept_len=2.0, goal_tps=goal and (150.0,),
                                           concurrency=concurrency))
    assert code == 0 and text.splitlines() == report.lines()
    code, text = printed(["perf", *flags, "--json"])
    assert code == 0 and json.loads(text) == json.loads(json.dumps(report.to_json()))


def test_perf_streams_a_logs_records_as_json(tmp_path):
    log = tmp_path / "sglang.log"
    log.write_text("".join(f"[2025-01-01 00:00:0{i}] Decode batch. #running-req: 4, #token: 900, accept len: 2.{i}, "
                           f"gen throughput (token/s): 1{i}0.0\n" for i in range(5)))
    code, text = printed(["perf", "--log", str(log), "--json"])
    assert code == 0
    streamed = json.loads(text)
    assert len(streamed["records"]) == 5 and streamed == json.loads(json.dumps(diagnose_serving(
        PerfSettings(log=str(log))).to_json()))


def test_the_bare_cuda_graphs_flag_is_every_step_kind():
    code, text = printed(["perf", "--accept-len", "2", "--concurrency", "1", "--cuda-graphs", "--json"])
    assert code == 0
    assert PerfSettings(accept_len=2, concurrency=(1,), cuda_graphs=()).cuda_graphs == STEP_KINDS


# --------------------------------------------------------------------------- plan

def test_plan_labels_every_number_left_out_as_the_founding_cases():
    report = plan_options(PlanSettings(baseline_tps=90))
    s = report.plan.scenario
    assert s.baseline_tps == 90 and s.source("baseline_tps") == "entered"
    assert s.cycle_ms == FOUNDING_CASE["cycle_ms"] and s.source("cycle_ms") == "default"
    code, text = printed(["plan", "--baseline-tps", "90"])
    assert code == 0 and text.splitlines() == report.lines()
    assert "(default: the founding case's 30.0)" in founding_help()["cycle_ms"]


def test_plan_takes_the_measured_all_reduce_bandwidth():
    """--link-gbps was declared on plan but never reached its model before it was a job (#39 item 2)."""
    slow = plan_options(PlanSettings(link_gbps=1.0)).plan.load
    fast = plan_options(PlanSettings(link_gbps=400.0)).plan.load
    assert slow != fast
    machine = load_model_for(LoadSettings(link_gbps=1.0, k=3))[0].machine
    assert machine.link_bytes_s == pytest.approx(1e9)


def test_plan_refuses_a_tau_given_twice(tmp_path):
    with pytest.raises(ParameterError, match="--accept-len or --log, not both"):
        PlanSettings(accept_len=2.0, log=str(tmp_path / "x.log"))


# --------------------------------------------------------------------------- recipe

def test_a_recipe_takes_its_jobs_defaults_and_refuses_another_jobs_settings(tiny_world, tmp_path):
    common = dict(engine="specforge", old_drafter=str(tiny_world.drafter_a), new_target=str(tiny_world.target_b))
    probe = RecipeJobSettings(**common, out=str(tmp_path / "p"), job="probe", old_target=str(tiny_world.target_a))
    job = probe.job_settings()
    assert (job.data, job.workdir, job.gpus) == ("conversations.jsonl", "probe", 8)  # the probe's own defaults
    with pytest.raises(ParameterError, match=r"^--lr: is not a setting of --job probe"):
        RecipeJobSettings(**common, out=str(tmp_path / "p"), job="probe", old_target=str(tiny_world.target_a),
                          learning_rate=1e-4).job_settings()
    with pytest.raises(ParameterError, match="--concurrency: is not a setting of --job warm-start"):
        RecipeJobSettings(**common, out=str(tmp_path / "w"), concurrency=(1, 2)).job_settings()
    with pytest.raises(ParameterError, match="--engine"):
        RecipeJobSettings(**common, out=str(tmp_path / "l"), job="load").job_settings()
    report = write_recipe(probe)
    assert (tmp_path / "p" / "run.sh").is_file()
    code, text = printed(["recipe", "--job", "probe", "--engine", "specforge", "--old-drafter", common["old_drafter"],
                          "--new-target", common["new_target"], "--old-target", str(tiny_world.target_a),
                          "--out", str(tmp_path / "p"), "--force"])
    assert code == 0 and text.splitlines() == report.lines()
    assert json.loads((tmp_path / "p" / "recipe.json").read_text())["job"] == "probe"


def test_a_recipe_flags_help_gives_the_defaults_its_jobs_own():
    """The defaults are written once, in the jobs' settings; the shared flag's help reads them from there."""
    from eaglelab.engines.load_recipes import LoadRecipeSettings
    from eaglelab.engines.probe_recipes import ProbeRecipeSettings
    from eaglelab.engines.recipes import RecipeSettings
    from eaglelab.jobs.recipe import job_defaults_help

    helps = job_defaults_help()
    assert f"{RecipeSettings.__dataclass_fields__['data'].default} for warm-start" in helps["data"]
    assert f"{ProbeRecipeSettings.__dataclass_fields__['data'].default} for probe" in helps["data"]
    assert helps["prompt_tokens"].endswith(f"(default: {LoadRecipeSettings.__dataclass_fields__['prompt_tokens'].default})")
    assert " ".join(map(str, LoadRecipeSettings.__dataclass_fields__["concurrency"].default)) in helps["concurrency"]
