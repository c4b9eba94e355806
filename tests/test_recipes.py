"""Warm-start recipes: every engine command parsed by the engine's own parser, the old map kept, refusals."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from eaglelab.checkpoints.drafters.inspection import compare_checkpoints
from eaglelab.engines.recipes import RecipeSettings, build_recipe
from eaglelab.errors import ConfigError, OverwriteError, ParameterError

from . import engines


def test_specforge_recipe_is_accepted_by_specforge(tiny_world, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    recipe = build_recipe(RecipeSettings("specforge", str(tiny_world.drafter_a), str(tiny_world.target_b), gpus=2))
    out = recipe.write(tmp_path / "recipe")
    assert subprocess.run(["bash", "-n", str(out / "run.sh")]).returncode == 0
    with pytest.raises(OverwriteError):
        recipe.write(tmp_path / "recipe")
    by_command = {st.engine_command: st for st in recipe.steps if st.engine_command}
    assert set(by_command) == {("specforge", "train"), ("specforge", "export")}
    cfg, resolved = engines.specforge_config(str(out / "warm.yaml"))
    assert cfg.model.draft_checkpoint_path == str(tiny_world.drafter_a)
    assert cfg.model.vocab_mapping_path.endswith("old_vocab_map.pt")  # the old map, never a regenerated one
    assert cfg.training.ttt_length == 7 and cfg.training.learning_rate == pytest.approx(1e-4)  # SpecForge's defaults
    parser = engines.specforge_parser()
    for name, step in (("train", by_command[("specforge", "train")]), ("export", by_command[("specforge", "export")])):
        argv = step.concrete(out)[1:]
        assert engines.exact_flags(engines.subparser(parser, name), argv[1:]) == []
        parser.parse_args(argv)
    # SpecForge's own dry run plans the launch from the config without starting anything
    from specforge import cli

    assert cli.main(["train", "--config", str(out / "warm.yaml"), "--plan"]) == 0
    # the helper the script runs writes what SpecForge's own draft model loads as its vocabulary map
    subprocess.run([sys.executable, str(out / "save_vocab_map.py"), str(tiny_world.drafter_a), str(tmp_path / "m.pt")],
                   check=True, capture_output=True)
    from specforge.modeling.auto import AutoDraftModel, AutoDraftModelConfig

    draft = AutoDraftModel.from_config(AutoDraftModelConfig.from_file(str(tiny_world.drafter_a / "config.json")))
    draft.load_vocab_mapping(str(tmp_path / "m.pt"))
    weights = load_file(tiny_world.drafter_a / "model.safetensors")
    assert torch.equal(draft.d2t, weights["d2t"]) and torch.equal(draft.t2d, weights["t2d"])


def test_speculators_recipe_is_accepted_by_speculators(tiny_world, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prompts.jsonl").write_text('{"conversations": [{"role": "user", "content": "hi"}]}\n')
    recipe = build_recipe(RecipeSettings("speculators", str(tiny_world.drafter_a), str(tiny_world.target_b), gpus=2,
                                         learning_rate=5e-5, epochs=3))
    recipe.write(tmp_path / "recipe")
    checked = [st for st in recipe.steps if st.engine_command]
    assert {st.engine_command[1] for st in checked} == {"convert", "regenerate-responses", "prepare-data",
                                                         "generate-offline-data", "train"}
    for step in checked:
        if step.engine_command[1] == "train":
            argv = step.words()[step.words().index("speculators.train") + 1:]
            assert not {"--draft-vocab-size", "--d2t-path", "--t2d-path", "--token-freq-path"} & set(argv)
            resolved = engines.speculators_train(argv)
            assert resolved.optimizer.lr == pytest.approx(5e-5) and resolved.trainer.epochs == 3
            assert resolved.draft.from_pretrained.endswith("old-drafter-for-new-target")
            # nothing that would replace the old map
            assert resolved.draft.draft_vocab_size is resolved.draft.d2t_path is resolved.draft.token_freq_path is None
        else:
            engines.speculators_command(step.engine_command[1], step.words()[2:])
    assert recipe.provenance["learning_rate"].endswith("(given)") and "default" in recipe.provenance["ttt_length"]


def test_speculators_own_converter_keeps_the_old_map(tiny_world, tmp_path):
    """Step 1 of the speculators recipe, run for real: the engine's converter, then eaglelab's check."""
    recipe = build_recipe(RecipeSettings("speculators", str(tiny_world.drafter_a), str(tiny_world.target_b),
                                         workdir=str(tmp_path / "work")))
    convert = next(st for st in recipe.steps if st.engine_command == ("speculators", "convert"))
    engines.require("speculators.cli")
    proc = subprocess.run([sys.executable, "-m", "speculators", *convert.words()[1:]], capture_output=True, text=True,
                          env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    converted = tmp_path / "work" / "old-drafter-for-new-target"
    cmp_ = compare_checkpoints(str(tiny_world.drafter_a), str(converted), target=str(tiny_world.target_b))
    assert cmp_.vocab_maps.level == "same"
    assert cmp_.verdict.level == "interchangeable", cmp_.verdict.reasons  # one model in two formats
    # the converted drafter reads the same target layers in vLLM as the original in SGLang
    assert cmp_.target_verdicts["b"].level == "interchangeable"
    assert json.loads((converted / "config.json").read_text())["speculators_config"]["verifier"]["name_or_path"] == \
        str(tiny_world.target_b)


def test_recipe_takes_epochs_and_ttt_from_a_workbook_run(tiny_world, tmp_path):
    from eaglelab.cli import main

    assert main(["finetune", "--new-target", str(tiny_world.target_b), "--old-drafter", str(tiny_world.drafter_a),
                 "--steps", "12",
                 "--batch-size", "8", "--ttt-length", "4", "--sequences", "32", "--eval-sequences", "8",
                 "--seq-len", "32", "--out", str(tmp_path / "warm")]) == 0
    recipe = build_recipe(RecipeSettings("specforge", str(tiny_world.drafter_a), str(tiny_world.target_b)),
                          from_run=tmp_path / "warm")
    assert "workbook run" in recipe.provenance["epochs"] and recipe.provenance["ttt_length"].startswith("4 ")
    assert "ttt_length: 4" in recipe.files["warm.yaml"] and "num_epochs: 3" in recipe.files["warm.yaml"]  # 12 x 8 / 32


def test_refuses_a_warm_start_that_would_replace_the_map(tiny_world, tmp_path):
    no_maps = tmp_path / "no-maps"
    no_maps.mkdir()
    weights = load_file(tiny_world.drafter_a / "model.safetensors")
    save_file({k: v for k, v in weights.items() if k not in ("d2t", "t2d")}, str(no_maps / "model.safetensors"))
    (no_maps / "config.json").write_text((tiny_world.drafter_a / "config.json").read_text())
    with pytest.raises(ConfigError, match="no d2t / t2d"):
        build_recipe(RecipeSettings("specforge", str(no_maps), str(tiny_world.target_b)))
    other = tmp_path / "other-target"
    other.mkdir()
    cfg = json.loads((tiny_world.target_b / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**cfg, "vocab_size": cfg["vocab_size"] * 2}))
    with pytest.raises(ConfigError, match="vocab_size"):
        build_recipe(RecipeSettings("speculators", str(tiny_world.drafter_a), str(other)))
    with pytest.raises(ParameterError):
        build_recipe(RecipeSettings("medusa", str(tiny_world.drafter_a), str(tiny_world.target_b)))
    proc = subprocess.run([sys.executable, "-m", "eaglelab", "recipe", "--engine", "specforge", "--old-drafter", str(no_maps),
                           "--new-target", str(tiny_world.target_b), "--out", str(tmp_path / "r")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no d2t / t2d" in proc.stderr


# --------------------------------------------------------------------------- the probe's dumps at scale (#27)

def test_probe_recipe_dumps_both_targets_on_the_same_data_and_probes_them(tiny_world, tmp_path):
    from eaglelab.cli import build_parser
    from eaglelab.engines.probe_recipes import ProbeRecipeSettings, build_probe_recipe

    from .script_stubs import run_script

    s = ProbeRecipeSettings("specforge", str(tiny_world.drafter_a), str(tiny_world.target_a), str(tiny_world.target_b),
                            data="my convs.jsonl", workdir="w d", gpus=4)
    recipe = build_probe_recipe(s)
    out = recipe.write(tmp_path / "recipe")
    (tmp_path / "w d").mkdir()  # mkdir is a recorder here
    calls, proc = run_script(out / "run.sh", tmp_path)
    assert proc.returncode == 0, proc.stderr
    dumps = [c for c in calls if c[0] == "torchrun"]
    assert [c[c.index("--target-model-path") + 1] for c in dumps] == [str(tiny_world.target_a), str(tiny_world.target_b)]
    assert all(c[c.index("--data-path") + 1] == "my convs.jsonl" and "--nproc_per_node=4" in c for c in dumps)
    probe = next(c for c in calls if c[0] == "eaglelab")
    args = build_parser().parse_args(probe[1:])  # eaglelab's own parser takes the step as written
    assert (args.old_states, args.new_states) == tuple(c[c.index("--output-path") + 1] for c in dumps)
    assert (tmp_path / "w d" / "probe.json").exists()  # the probe's JSON kept for `predict --calibration`
    assert json.loads((out / "recipe.json").read_text())["layers"]["aux_layer_outputs"] == [1, 3, 4]


def test_probe_recipe_for_vllm_is_accepted_by_speculators_and_refused_for_mla_targets(tiny_world, tmp_path):
    import shutil

    from eaglelab.engines.probe_recipes import ProbeRecipeSettings, build_probe_recipe

    s = ProbeRecipeSettings("speculators", str(tiny_world.drafter_a), str(tiny_world.target_a), str(tiny_world.target_b))
    recipe = build_probe_recipe(s)
    checked = [st for st in recipe.steps if st.engine_command and st.engine_command[0] == "speculators"]
    assert [st.engine_command[1] for st in checked] == ["prepare-data", "generate-offline-data", "generate-offline-data"]
    for step in checked:
        engines.speculators_command(step.engine_command[1], step.words()[2:])
    serve = [st for st in recipe.steps if st.argv[:2] == ["vllm", "serve"]]
    layers = {json.loads(st.argv[st.argv.index("--speculative-config") + 1])["draft_model_config"]["hf_config"]
              ["eagle_aux_hidden_state_layer_ids"][-1] for st in serve}
    assert layers == {8}  # the last layer of the 8-layer targets, after the drafter's three
    mla = tmp_path / "mla-target"
    shutil.copytree(tiny_world.target_b, mla)
    cfg = json.loads((mla / "config.json").read_text())
    (mla / "config.json").write_text(json.dumps({**cfg, "kv_lora_rank": 16}))
    with pytest.raises(ParameterError, match="refuses MLA targets; use --engine specforge"):
        build_probe_recipe(ProbeRecipeSettings("speculators", str(tiny_world.drafter_a), str(tiny_world.target_a),
                                               str(mla)))
    assert build_probe_recipe(ProbeRecipeSettings("specforge", str(tiny_world.drafter_a), str(tiny_world.target_a),
                                                  str(mla))).steps


def test_the_hand_over_says_where_each_engines_recipe_is(tiny_world, tmp_path):
    """#57: the hand-over is one result with its table and its sentence (notebook 04's last finding)."""
    from eaglelab.decisions import Option
    from eaglelab.engines.recipes import TRAINING_ENGINES
    from eaglelab.jobs.finetune import FinetuneSettings, HandOver

    settings = FinetuneSettings(str(tiny_world.target_b), old_drafter=str(tiny_world.drafter_a))
    recipes = {e: build_recipe(RecipeSettings(e, str(tiny_world.drafter_a), str(tiny_world.target_b), gpus=2))
               for e in TRAINING_ENGINES}
    handed = HandOver(recipes, {e: r.write(tmp_path / e) for e, r in recipes.items()})
    said = handed.findings("[demo]", Option.WARM_START)["hand_over"]
    slots = recipes["specforge"].vocab_map["draft_slots"]
    assert f"keep the old drafter's {slots}-slot vocabulary map" in said and said.endswith(".")
    assert all(f"{e} `{tmp_path / e / 'run.sh'}`" in said and (tmp_path / e / "run.sh").is_file() for e in TRAINING_ENGINES)
    assert "nothing to train" in handed.findings("[demo]", Option.PLUG_IN)["hand_over"]
    assert list(handed.table().columns) == list(TRAINING_ENGINES) and settings.k >= 1
