"""#57 item 2: a notebook's set-up is one call. ``open_case`` checks the parameters in the order a notebook needs (the
local paths, whose case, whether the targets load, the world, the pickers) and the case records what ran and saves the
findings with it."""

from __future__ import annotations

import json
import shutil

import pytest

from eaglelab.errors import ParameterError
from eaglelab.workbook.opening import SLOTS, open_case


def test_a_bad_path_or_a_half_given_case_is_one_line_before_any_world(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(ParameterError, match="DATA"):
        open_case("04", {"WORLD": "tiny", "WORLD_DIR": str(missing / "world"), "DATA": str(missing / "data.txt")})
    with pytest.raises(ParameterError, match="OLD_DRAFTER: not given, while NEW_TARGET is yours"):
        open_case("04", {"WORLD": "tiny", "WORLD_DIR": str(missing / "world"), "NEW_TARGET": str(tmp_path)})
    assert not missing.exists()  # nothing was built on the way to either refusal


def test_the_worlds_case_reads_the_world_and_the_users_case_reads_theirs(tiny_world, tmp_path):
    world_dir = str(tiny_world.root)
    demo = open_case("03", {"WORLD_DIR": world_dir, "SMOKE": True, "OLD_TARGET": None, "NEW_TARGET": None,
                            "OLD_DRAFTER": None, "DATA": None})
    assert demo.demo and demo.tag == "[demo]" and [s.name for s in demo.choices.slots] == [s[0] for s in SLOTS["03"]]
    assert demo.values["OLD_DRAFTER"] == str(tiny_world.drafter_a) and demo.values["DATA"] == ""
    mine = tmp_path / "mine"
    for name in ("target_a", "drafter_a"):  # copies: a link into the world would still be the world's checkpoint
        shutil.copytree(getattr(tiny_world, name), mine / name)
    yours = open_case("01", {"WORLD": "tiny", "WORLD_DIR": world_dir, "OLD_TARGET": str(mine / "target_a"),
                             "OLD_DRAFTER": str(mine / "drafter_a")})
    assert not yours.demo and yours.choices is None and yours.values == {"OLD_TARGET": str(mine / "target_a"),
                                                                        "OLD_DRAFTER": str(mine / "drafter_a")}
    assert yours.tag != "[demo]"


def test_notebook_02_without_the_new_drafter_checks_the_old_one_alone_and_says_so(tiny_world, tmp_path):
    case = open_case("02", {"WORLD": "tiny", "WORLD_DIR": str(tiny_world.root), "OLD_DRAFTER": str(tiny_world.drafter_a),
                            "NEW_DRAFTER": None, "NEW_TARGET": str(tiny_world.target_b),
                            "OLD_TARGET": str(tiny_world.target_a)})
    assert case.values["NEW_DRAFTER"] == case.values["OLD_DRAFTER"] and "no NEW_DRAFTER given" in case.not_done[0]
    case.save({"k": 3}, ["- a finding"], tmp_path / "figures")
    saved = json.loads((tmp_path / "figures" / "02_findings.json").read_text())
    assert saved["numbers"]["k"] == 3 and saved["bullets"] == ["- a finding"]
    record = saved["numbers"]["inputs"]
    assert set(record["checkpoints"]) == {"OLD_DRAFTER", "NEW_DRAFTER", "NEW_TARGET", "OLD_TARGET"}
    assert "no NEW_DRAFTER given" in record["not_done"][0]


def test_the_settings_come_from_the_parameters_of_the_same_names_and_take_the_picks(tiny_world, tmp_path):
    from eaglelab.jobs.finetune import FinetuneSettings
    from eaglelab.jobs.probe import ProbeSettings

    parameters = {"WORLD": "tiny", "WORLD_DIR": str(tiny_world.root), "SMOKE": True, "NEW_TARGET": None,
                  "OLD_DRAFTER": None, "DATA": None, "SEQ_LEN": 32, "STEPS": 60, "LR": 1e-3, "DTYPE": "float32",
                  "UNRELATED": object()}  # a name that is no field is not read
    case = open_case("04", parameters, FinetuneSettings)
    settings = case.settings
    assert settings.new_target == str(tiny_world.target_b) and settings.old_drafter == str(tiny_world.drafter_a)
    assert settings.data is None and settings.seq_len == 32 and settings.lr == 1e-3  # given, kept
    assert settings.world_dir is None  # WORLD_DIR is the case's folder, not the job's: it reads its checkpoints' world
    assert settings.steps == FinetuneSettings.SMOKE_SIZES["steps"]  # a smoke run: the class's smoke sizes
    case.choices.pick("DATA", __file__)  # a pick reaches the settings the next time they are read
    assert case.settings.data == __file__
    with pytest.raises(ParameterError, match="--seq-len"):  # a value out of range: one line, before any world
        open_case("03", {**parameters, "SEQ_LEN": 0, "WORLD_DIR": str(tmp_path / "nowhere")}, ProbeSettings)
    assert not (tmp_path / "nowhere").exists()
