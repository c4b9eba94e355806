"""Export for vLLM (speculators), drafter init, speculate and inspect/compare JSON from the command line."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import torch
from safetensors.torch import load_file

from eaglelab.checkpoints.drafters.spec import aux_ids_as_layer_outputs
from eaglelab.jobs.compare import CompareSettings, compare_drafters
from eaglelab.model.drafter_files import load_drafter


def eaglelab(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "eaglelab", *args], capture_output=True, text=True, check=True).stdout


def test_speculators_export_round_trips(tiny_world, tmp_path):
    out = tmp_path / "vllm"
    eaglelab("drafter", "export", "--to", "speculators", str(tiny_world.drafter_a), str(out), "--target",
             str(tiny_world.target_a))
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["speculators_model_type"] == "eagle3" and cfg["architectures"] == ["Eagle3Speculator"]
    src = json.loads((tiny_world.drafter_a / "config.json").read_text())
    ids = src["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [i + 1 for i in ids]  # vLLM ids are layer inputs
    assert cfg["transformer_layer_config"]["hidden_size"] == src["hidden_size"]
    keys = set(load_file(str(out / "model.safetensors")))
    assert not any(k.startswith("midlayer.") for k in keys) and "layers.0.self_attn.q_proj.weight" in keys
    a, b = load_drafter(tiny_world.drafter_a), load_drafter(out)
    L = json.loads((tiny_world.target_a / "config.json").read_text())["num_hidden_layers"]
    assert aux_ids_as_layer_outputs(b.spec.aux_layer_ids, b.spec.aux_convention, L) == a.spec.aux_layer_ids
    sa, sb = a.state_dict(), b.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa if k != "embed_tokens.weight" and not k.endswith("inv_freq"))
    verdict = json.loads(eaglelab("compare", str(tiny_world.drafter_a), str(out), "--json"))["verdict"]
    assert verdict["level"] == "interchangeable"


def test_inspect_and_compare_json(tiny_world):
    insp = json.loads(eaglelab("inspect", str(tiny_world.drafter_a), "--json"))
    assert {"tensors", "config", "total_parameters", "problems"} <= set(insp) and insp["problems"] == []
    assert {"name", "shape", "dtype"} <= set(insp["tensors"][0])
    cmp_ = json.loads(eaglelab("compare", str(tiny_world.drafter_a), str(tiny_world.drafter_b_small), "--new-target",
                               str(tiny_world.target_b), "--json"))
    assert {"config_diff", "tensor_diff", "verdict"} <= set(cmp_)
    # both drafters were sized for the same target family: same shapes and settings, other weights and maps
    assert cmp_["verdict"]["level"] == "interchangeable"
    # ... but each was trained with its own map: same shapes, rows that name other tokens
    assert cmp_["vocab_maps"]["level"] == "moved" and 0 < cmp_["vocab_maps"]["moved_fraction"] < 1
    assert {v["level"] for v in cmp_["target"].values()} == {"interchangeable"}
    assert {"name", "a_shape", "b_shape", "a_dtype", "b_dtype", "status"} <= set(cmp_["tensor_diff"][0])


def test_the_comparison_renders_itself_the_same_for_the_command_line_the_panel_and_the_findings(tiny_world):
    """One report, three readers (#39): the CLI prints its lines, the panel shows its markdown, notebook 02 quotes
    its findings; each says the same verdicts and counts the JSON holds."""
    settings = CompareSettings(str(tiny_world.drafter_a), str(tiny_world.drafter_b_small), str(tiny_world.target_b))
    report = compare_drafters(settings)
    data = report.to_json()
    printed = eaglelab("compare", *map(str, (tiny_world.drafter_a, tiny_world.drafter_b_small)), "--new-target",
                       str(tiny_world.target_b))
    assert printed == "\n".join(report.lines()) + "\n"
    assert f"verdict, A vs B: {data['verdict']['level'].upper()} in configs and shapes (the headline: the worst" in printed
    assert "vocabulary maps: MOVED" in printed
    assert printed.count("on the new target: INTERCHANGEABLE") == 2
    assert "vocabulary maps: moved" in "\n".join(report.verdict_lines())  # notebook 02 prints the levels as words
    panel = report.markdown("[demo]")
    assert panel.startswith(f"**{report.headline('[demo]')}**") and "- vocabulary maps: **moved**" in panel
    said = report.findings("[demo]")
    sentence = said["pair"]
    assert said["headline"] == f"**{report.headline('[demo]')}.**"
    if data["config_diff"]:  # the CLI's table is the notebook's
        assert re.split(r"\s{2,}", printed.splitlines()[2].strip()) == list(report.table().columns)
    else:
        assert printed.splitlines()[2] == "configs: identical" and report.table().empty
    moved = sum(t["status"] != "same" for t in data["tensor_diff"])
    assert f"{len(data['config_diff'])} config keys differ" in sentence
    assert f"{moved} of {len(data['tensor_diff'])} tensors differ" in sentence
    assert "A is **interchangeable**, B is **interchangeable**." in sentence and "Vocabulary maps: **moved**" in sentence


def test_the_printed_tables_are_lines_not_escaped_line_breaks(tiny_world, tmp_path):
    """A table in a report is one printed line per row (the text from files is escaped cell by cell, so an escaped
    line break would be a bug of the report, not a file's)."""
    other = tmp_path / "other"
    eaglelab("drafter", "init", "--target", str(tiny_world.target_a), "--out", str(other), "--draft-vocab", "64")
    printed = eaglelab("compare", str(tiny_world.drafter_a), str(other))
    report = compare_drafters(CompareSettings(str(tiny_world.drafter_a), str(other)))
    assert report.comparison.config_diff and any(t.status != "same" for t in report.comparison.tensor_diff)
    assert printed == "\n".join(report.lines()) + "\n" and "\\x0a" not in printed
    lines = printed.splitlines()
    header = next(line for line in lines if line.split()[:2] == ["config", "key"])
    assert re.split(r"\s{2,}", header.strip()) == list(report.table().columns)  # the notebook's table, the same columns
    assert "draft_vocab_size" in set(report.table()["config key"])
    assert any(line.split()[:3] == ["tensor", "A", "shape"] for line in lines)
    assert any("draft_vocab_size" in line and "64" in line for line in lines)
    inspected = eaglelab("inspect", str(other))
    assert "\\x0a" not in inspected and inspected.splitlines()[1].split()[:3] == ["tensor", "shape", "dtype"]


def test_drafter_init_and_speculate(tiny_world, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(" ".join(tiny_world.held_out_prompts()) * 3)
    eaglelab("drafter", "init", "--target", str(tiny_world.target_a), "--out", str(tmp_path / "new"),
             "--draft-vocab", "64", "--text", str(text), "--aux-layers", "1", "2", "5")
    d = load_drafter(tmp_path / "new")
    assert d.spec.aux_layer_ids == (1, 2, 5) and d.spec.draft_vocab_size == 64 and d.t2d.sum() == 64
    proc = subprocess.run([sys.executable, "-m", "eaglelab", "drafter", "init", "--target", str(tiny_world.target_a),
                           "--out", str(tmp_path / "new")], capture_output=True, text=True)
    assert proc.returncode == 2 and "--force" in proc.stderr
    out = json.loads(eaglelab("speculate", "--target", str(tiny_world.target_a), "--drafter", str(tiny_world.drafter_a),
                              "--prompt", tiny_world.held_out_prompts()[0], "--max-new-tokens", "24", "--k", "3",
                              "--json"))
    assert out["matches_greedy"] is True and out["accept_len"] > 1.0
    assert {"accept_len", "tokens_per_s", "greedy_tokens_per_s", "matches_greedy"} <= set(out)
