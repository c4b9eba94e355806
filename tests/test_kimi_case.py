"""The seed's case in one line (issue #38): Kimi-K2 -> Kimi-K2.5, 1T-parameter targets that no workstation loads,
given as the team has them (the targets and drafters as folders of configs, headers and tokenizer files; the
engines' dumps of both targets; the serving log), and one ``eaglelab run`` writes the game plan for that case.

Run on the Kimi-shaped sparse sample (full-width shapes, weights as holes) with dumps written at its width: no
target is loaded, the probe reads the dumps and the targets' heads only, the notebooks that would load a target say
so and hand over the recipes, and no number of the demo world enters the plan.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from eaglelab.data.dump_writers import specforge_payload
from eaglelab.workbook.runner import run_workbook
from eaglelab.worlds.kimi_shapes import build_kimi_sample

from .conftest import REPO, run_cli

FIXTURES = REPO / "data" / "fixtures" / "kimi"
#: Hidden width of both Kimi targets, their vocabulary, and the dumps' size: paired samples of this many tokens.
HIDDEN, VOCAB, SAMPLES, TOKENS = 7168, 163_840, 4, 48


def write_dumps(folder: Path, seed: int) -> None:
    """SpecForge-layout dumps of one target at Kimi width (``rows_0-4/data_{i}.ckpt``), the same tokens for both."""
    ids = torch.randint(0, VOCAB, (SAMPLES, TOKENS), generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(seed)
    for i in range(SAMPLES):
        aux = torch.randn(TOKENS, 3 * HIDDEN, generator=g).to(torch.bfloat16)
        last = torch.randn(TOKENS, HIDDEN, generator=g).to(torch.bfloat16)
        path = folder / "rows_0-4" / f"data_{i}.ckpt"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(specforge_payload(ids[i], torch.ones(TOKENS, dtype=torch.bool), aux, last), path)


@pytest.mark.notebook
def test_the_kimi_case_in_one_line(tmp_path):
    kimi = build_kimi_sample(tmp_path / "kimi", FIXTURES)
    write_dumps(tmp_path / "states-k2", seed=1)
    write_dumps(tmp_path / "states-k25", seed=2)
    log = tmp_path / "sglang.log"  # the seed's own log, as the team's (not the bundled sample's path)
    shutil.copy(REPO / "data" / "logs" / "sglang_kimi_k25_sample.log", log)
    params = {"OLD_TARGET": str(kimi.k2_target), "NEW_TARGET": str(kimi.k25_target),
              "OLD_DRAFTER": str(kimi.k2_drafter), "NEW_DRAFTER": str(kimi.k25_mla_drafter),
              "OLD_STATES": str(tmp_path / "states-k2"), "NEW_STATES": str(tmp_path / "states-k25"),
              "DTYPE": "bfloat16", "LOG_FILES": [str(log)], "WORLD_DIR": str(tmp_path / "no-world"),
              "SERVING_ENGINE": None}
    runs = run_workbook(tmp_path / "run", smoke=True, parameters=params, notebooks_dir=REPO / "notebooks",
                        progress=False)
    not_run = {r.notebook.name[:2]: r.not_run for r in runs if r.not_run}
    assert set(not_run) == {"04", "05"} and all("does not load here" in why for why in not_run.values()), not_run
    assert not (tmp_path / "no-world").exists()  # nothing of the demo world was built or read
    figures = tmp_path / "run" / "figures"
    probe = json.loads((figures / "03_findings.json").read_text())["numbers"]
    assert probe["states"] == {"old": params["OLD_STATES"], "new": params["NEW_STATES"]}
    assert probe["inputs"]["checkpoints"]["OLD_TARGET"]["what"] == "heads only"
    # the sample's heads are holes (zeros): every token ties, so the probe measures nothing and says so
    assert probe["verdict"]["level"] == "no verdict" and "all zeros" in probe["verdict"]["reasons"][0]
    first = json.loads((figures / "01_findings.json").read_text())
    assert first["numbers"]["closed_loop"] is None and any("does not load here" in b for b in first["bullets"])
    finetune = json.loads((figures / "04_findings.json").read_text())["numbers"]
    assert Path(finetune["recipes"]["specforge"]).is_file()  # the warm start handed over for the cluster
    plan = (figures / "GAME_PLAN.md").read_text()
    header = plan[plan.index("## What this plan was computed from"):plan.index("## 01")]
    table = header.split("\n\n")[1]
    assert "[demo]" not in plan.replace("**[demo]**", "") or "[demo]" not in table  # no demo number in the case
    assert "[demo]" not in table and table.count("[your checkpoints]") >= 10, table
    assert "Notebook 04" in header and "Notebook 05" in header and "not run here" in header
    assert "k2-target" in table and "k25-target" in table
    assert "## 04" in plan and "warm-start recipes" in plan
    assert "| old drafter's τ on the new target |" not in plan  # a probe without a verdict projects nothing


@pytest.mark.parametrize("notebook, name", [("04", "NEW_TARGET"), ("05", "OLD_TARGET")])
def test_a_notebook_run_alone_on_a_target_too_large_says_so_in_one_line(tmp_path, notebook, name):
    from eaglelab.errors import ParameterError
    from eaglelab.workbook.feasibility import require_loadable

    kimi = build_kimi_sample(tmp_path / "kimi", FIXTURES)
    with pytest.raises(ParameterError) as err:
        require_loadable(notebook, {"OLD_TARGET": str(kimi.k2_target), "NEW_TARGET": str(kimi.k25_target)})
    assert str(err.value).startswith(f"{name}: ") and "\n" not in str(err.value) and "does not load here" in str(err.value)


def test_the_run_says_where_its_game_plan_went(tmp_path):
    """`eaglelab run` ends with the plan's path (in a smoke run: OUT/figures, not the README's figures/)."""
    kimi = build_kimi_sample(tmp_path / "kimi", FIXTURES)
    out = tmp_path / "run"
    code, stdout, stderr = run_cli("run", "--smoke", "--only", "04", "--out", str(out),
                                   "-p", f"NEW_TARGET={kimi.k25_target}", "-p", f"OLD_DRAFTER={kimi.k2_drafter}",
                                   "-p", f"WORLD_DIR={tmp_path / 'no-world'}")
    assert code == 0, stderr
    plan = (out / "figures" / "GAME_PLAN.md").resolve()
    assert stdout.splitlines()[-1] == f"game plan: {plan}" and plan.is_file()
    assert "does not load here" in stdout  # 04 stood in: no kernel started, and the plan still written
    code, stdout, _ = run_cli("run", "--smoke", "--only", "04", "--out", str(tmp_path / "prepared"), "--prepare-only",
                              "-p", f"NEW_TARGET={kimi.k25_target}", "-p", f"OLD_DRAFTER={kimi.k2_drafter}")
    assert code == 0 and "game plan:" not in stdout  # nothing ran, so no plan is claimed
