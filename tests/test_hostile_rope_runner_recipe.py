"""Issue #37, items 8, 15 and 17: RoPE edge values, notebook parameters before any world, option-like names in recipes.

- 8: a RoPE config the model code cannot compute (YaRN with ``rope_theta`` 1.0 divided by ln(1) = 0) was
  "computed exactly" by ``inspect``; now every config's RoPE fields are checked against each other when it is
  read, and what passes computes finite cos / sin tables (a property test over edge values).
- 15: notebook 03 built the demo world before it read ``OLD_STATES`` / ``NEW_STATES``; now the runner and the
  notebook check the parameters first, and no world is built when every checkpoint is the user's.
- 17: a path starting with ``-`` was written as its own word after ``--target-a``; the probe step's parser read
  it as an option.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eaglelab.errors import ConfigError, EaglelabError, NotebookError, ParameterError
from tests import fuzzing as fz
from tests import fuzzing_write as fw
from tests import script_stubs
from tests.conftest import run_cli

REPO = Path(__file__).resolve().parent.parent
YARN_THETA_ONE = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}


def _with_rope(cfg: dict, theta, scaling: dict, fmt: str = "specforge") -> dict:
    return fz.set_config_field(fz.set_config_field(cfg, "rope_theta", theta, fmt), "rope_scaling", scaling, fmt)


def one_error_line(outcome: fz.Outcome) -> str:
    assert outcome.kind == "error", (outcome.kind, outcome.reason, outcome.stderr, outcome.stdout[-300:])
    return outcome.stderr.strip()


# --------------------------------------------------------------------------- 8: RoPE edge values

@pytest.mark.parametrize("fmt", ["specforge", "speculators"])
def test_yarn_with_rope_theta_one_is_refused_not_computed_exactly(tmp_path, fmt):
    """#37 item 8: inspect said "computed exactly", then the model divided by ln(1) = 0 (ZeroDivisionError)."""
    from eaglelab.model.drafter import Eagle3Drafter

    cfg = _with_rope(fz.tiny_config(fmt), 1.0, YARN_THETA_ONE, fmt)
    drafter = fz.write_tiny_drafter(tmp_path / "d", fmt, config=cfg)
    line = one_error_line(fz.run_cli(["inspect", str(drafter)]))
    assert "config.json" in line and "rope_theta" in line and "greater than 1" in line
    with pytest.raises(EaglelabError, match="rope_theta"):
        Eagle3Drafter(cfg)


@pytest.mark.parametrize("scaling, field", [
    ({"rope_type": "linear", "factor": 0.5}, "factor"),
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0,
      "original_max_position_embeddings": 128}, "high_freq_factor"),
    ({**YARN_THETA_ONE, "beta_fast": 1.0, "beta_slow": 32.0}, "beta_fast"),
    ({**YARN_THETA_ONE, "factor": 1e300, "mscale": 1e300}, "mscale"),
])
def test_inconsistent_rope_fields_are_one_line_naming_the_field(tmp_path, scaling, field):
    """#37 item 8: the fields transformers validates against each other (it only warns), refused where read."""
    drafter = fz.write_tiny_drafter(tmp_path / "d", config=_with_rope(fz.tiny_config(), 10000.0, scaling))
    line = one_error_line(fz.run_cli(["inspect", str(drafter)]))
    assert f"rope_scaling.{field}" in line and "config.json" in line


def test_kimi_k2s_equal_betas_are_still_computed(tmp_path):
    """beta_fast = beta_slow (Kimi-K2's 1.0 / 1.0) is what transformers accepts: not refused."""
    scaling = {**YARN_THETA_ONE, "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}
    drafter = fz.write_tiny_drafter(tmp_path / "d", config=_with_rope(fz.tiny_config(), 50000.0, scaling))
    outcome = fz.run_cli(["inspect", str(drafter), "--json"])
    assert outcome.kind == "ok" and outcome.json["computed"] is True, outcome.stderr


def test_a_targets_rope_is_checked_where_it_is_read(tmp_path):
    """#37 item 8: the target's config is read by compare --target and by the model commands' preflight."""
    from eaglelab.checkpoints.targets.reading import load_target_config

    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({**fz.TINY_TARGET, "rope_theta": 1.0, "rope_scaling": YARN_THETA_ONE}))
    drafter = fz.write_tiny_drafter(tmp_path / "d")
    line = one_error_line(fz.run_cli(["compare", str(drafter), str(drafter), "--new-target", str(target)]))
    assert "target/config.json" in line and "rope_theta" in line
    with pytest.raises(ConfigError, match="rope_theta"):
        load_target_config(str(target))


def test_the_one_place_that_computes_refuses_what_it_cannot_compute():
    """#37 item 8: a Rope made directly (not read from a file) cannot reach a division by zero either."""
    from eaglelab.checkpoints.drafters.variants import Rope

    with pytest.raises(ValueError, match="rope_theta"):
        Rope("yarn", 1.0, 4.0)
    with pytest.raises(ValueError, match="original_max_position_embeddings"):
        Rope("yarn", 10000.0, 4.0, original_max_position_embeddings=0)
    # a ramp whose ratio overflows a float (beta near 0) is still a finite band
    low, high = Rope("yarn", 10000.0, 4.0, original_max_position_embeddings=10 ** 15, beta_fast=5e-324,
                     beta_slow=5e-324)._yarn_range(64)
    assert 0 <= low and high <= 63


MLA_H = 32


def tiny_mla_config() -> dict:
    """A small MLA drafter config (SGLang's Eagle3DeepseekV2ForCausalLM layout), its RoPE DeepSeek's YaRN."""
    return {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "kimi_k2", "hidden_size": MLA_H,
            "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
            "q_lora_rank": 16, "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8,
            "hidden_act": "silu", "rms_norm_eps": 1e-5, "vocab_size": 64, "draft_vocab_size": 64,
            "rope_theta": 50000.0, "rope_scaling": {**YARN_THETA_ONE, "type": "yarn"},
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4], "use_aux_hidden_state": True}}


@pytest.fixture(scope="module")
def mla_weights(tmp_path_factory) -> Path:
    """The tiny MLA drafter's safetensors file, written by eaglelab's own writer."""
    from eaglelab.model.drafter import Eagle3Drafter
    from eaglelab.model.drafter_files import save_drafter

    return save_drafter(Eagle3Drafter(tiny_mla_config()), tmp_path_factory.mktemp("mla") / "d") / "model.safetensors"


def _tables_are_finite(cfg: dict) -> None:
    """The drafter the model code builds from ``cfg``: finite cos / sin at every position it may meet, a finite
    softmax scale, finite logits of one step."""
    from eaglelab.model.attention import rope_cos_sin
    from eaglelab.model.drafter import Eagle3Drafter

    d = Eagle3Drafter(cfg).eval()
    attn = d.midlayer.self_attn
    positions = torch.tensor([[0, 1, 7, 127, 4095, 1_000_000]])
    cos, sin = rope_cos_sin(attn.inv_freq, positions, torch.float32, attn.rope_scale, pairs=d.spec.mla is not None)
    assert torch.isfinite(cos).all() and torch.isfinite(sin).all(), (cfg.get("rope_theta"), cfg.get("rope_scaling"))
    assert math.isfinite(attn.scale) and attn.scale > 0
    H = d.spec.target_hidden_size
    with torch.no_grad():
        hidden = d.step(torch.tensor([[1, 2, 3]]), d.project(torch.ones(1, 3, 3 * H)), positions[:, 3:])
    assert torch.isfinite(d.logits(hidden)).all()


@settings(max_examples=60, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(fields=fz.rope_fields(), attention=st.sampled_from(["llama", "llama", "mla"]))
def test_rope_edge_values_are_refused_in_one_line_or_computed_finite(tmp_path, mla_weights, fields, attention):
    """#37 item 8, as a property: for any RoPE drawn from edge values, ``inspect`` refuses it in one line (or lists it
    as not computed, and the model refuses it too), or the model's cos / sin tables are finite; where transformers'
    own arithmetic fails, eaglelab never says "computed"."""
    theta, scaling = fields
    if attention == "mla":
        cfg = {**tiny_mla_config(), "rope_theta": theta, "rope_scaling": scaling}
        folder = fz.new_dir(tmp_path, "mla")
        (folder / "config.json").write_text(json.dumps(cfg))
        shutil.copyfile(mla_weights, folder / "model.safetensors")
    else:
        cfg = _with_rope(fz.tiny_config(), theta, scaling)
        folder = fz.write_tiny_drafter(fz.new_dir(tmp_path, "llama"), config=cfg)
    outcome = fz.run_cli(["inspect", str(folder), "--json"])
    assert outcome.acceptable, fz.describe(fz.Case("config", repr(fields), [], "any"), outcome)
    computed = outcome.kind == "ok" and outcome.json["computed"] and not outcome.json["problems"]
    if not computed:
        if outcome.kind == "error":
            one_error_line(outcome)
        from eaglelab.model.drafter import Eagle3Drafter

        with pytest.raises(EaglelabError):  # the model refuses what inspect refused, typed, in one line
            Eagle3Drafter(cfg)
        return
    oracle, why = fz.rope_reference(theta, scaling)
    assert oracle == "any", f"inspect says computed, but {why}: {fields}"
    _tables_are_finite(cfg)


# --------------------------------------------------------------------------- 15: parameters before any world

def test_a_missing_dump_folder_is_refused_before_any_kernel_or_world(tmp_path):
    """#37 item 15: ``run --only 03 -p OLD_STATES=<missing>`` used to build the demo world (25 min) before reading it."""
    world, out = tmp_path / "world", tmp_path / "out"
    (tmp_path / "b").mkdir()
    code, stdout, stderr = run_cli("run", "--only", "03", "-p", f"OLD_STATES={tmp_path / 'missing'}", "-p",
                                   f"NEW_STATES={tmp_path / 'b'}", "-p", f"WORLD_DIR={world}", "--out", str(out))
    assert code == 2 and stderr.count("\n") == 1 and "OLD_STATES" in stderr and "no such folder" in stderr, stderr
    code, _, stderr = run_cli("run", "--only", "03", "-p", "OLD_STATES=5", "-p", f"NEW_STATES={tmp_path / 'b'}",
                              "--out", str(out))
    assert code == 2 and stderr.count("\n") == 1 and "OLD_STATES" in stderr and "must be the path of a folder" in stderr
    assert not world.exists() and not out.exists()


def test_the_world_is_only_paths_when_every_checkpoint_is_given(tmp_path):
    """#37 item 15: with the user's checkpoints a notebook takes the world's paths (pickers, provenance), builds nothing."""
    from eaglelab.workbook.case import notebook_case
    from eaglelab.worlds.build import world_for

    world = world_for("demo", tmp_path / "demo", needed=notebook_case("03", {"OLD_TARGET": "a", "NEW_TARGET": "b",
                                                                              "OLD_DRAFTER": "d"}))
    assert world.root == tmp_path / "demo" and world.target_a == tmp_path / "demo" / "target-a"
    assert not (tmp_path / "demo").exists()
    assert notebook_case("03", {}) and notebook_case("03", {"OLD_TARGET": "", "NEW_TARGET": None})
    with pytest.raises(ParameterError, match="unknown world"):
        world_for("demoo", tmp_path / "x", needed=False)


@pytest.mark.notebook
def test_notebook_03_checks_its_parameters_before_building_a_world(tmp_path):
    """#37 item 15: in the notebook itself (JupyterLab, no runner check), the setup cell reads the parameters first."""
    from eaglelab.workbook.runner import run_notebook

    world = tmp_path / "world"
    with pytest.raises(NotebookError) as err:
        run_notebook(REPO / "notebooks" / "03_plugin_probe.ipynb", tmp_path / "out" / "03.ipynb",
                     {"OLD_STATES": str(tmp_path / "missing"), "NEW_STATES": str(tmp_path), "WORLD_DIR": str(world),
                      "FIGURES_DIR": str(tmp_path / "figures")})
    assert "OLD_STATES" in str(err.value) and "no such folder" in str(err.value)
    assert not world.exists()


@pytest.mark.notebook
def test_notebook_03_on_the_users_dumps_builds_no_world(tiny_world, tmp_path):
    """#37 item 15: OLD_STATES / NEW_STATES with the user's targets and drafter: the probe runs, and no demo world
    appears (neither at WORLD_DIR nor at the default place)."""
    from eaglelab.data.world import default_world_dir
    from eaglelab.jobs.probe import DumpSettings, dump_states
    from eaglelab.workbook.runner import run_workbook

    for name, target, layout in (("a", tiny_world.target_a, "specforge"), ("b", tiny_world.target_b, "vllm")):
        dump_states(DumpSettings(str(target), str(tiny_world.drafter_a), str(tmp_path / name), layout=layout,
                                 sequences=8), progress=False)
    world, default = tmp_path / "demo-world", default_world_dir("demo")
    had_default = default.exists()
    run_workbook(tmp_path / "out", only=["03"], notebooks_dir=REPO / "notebooks", progress=False,
                 parameters={"OLD_STATES": str(tmp_path / "a"), "NEW_STATES": str(tmp_path / "b"), "WORLD_DIR": str(world),
                             "OLD_TARGET": str(tiny_world.target_a), "NEW_TARGET": str(tiny_world.target_b),
                             "OLD_DRAFTER": str(tiny_world.drafter_a), "FIGURES_DIR": str(tmp_path / "figures")})
    findings = json.loads((tmp_path / "figures" / "03_findings.json").read_text())["numbers"]
    assert findings["states"] == {"old": str(tmp_path / "a"), "new": str(tmp_path / "b")} and findings["measured"] is None
    assert not world.exists() and default.exists() == had_default


# --------------------------------------------------------------------------- 17: option-like names in recipes

def _probe_inputs(root: Path, target_a: str) -> None:
    fz.write_tiny_drafter(root / "drafter")
    fw.tiny_target_folder(root / target_a)
    fw.tiny_target_folder(root / "tb")


@pytest.mark.parametrize("engine", ["specforge", "speculators"])
def test_a_target_named_like_an_option_reaches_the_probe_step_as_its_value(tmp_path, monkeypatch, engine):
    """#37 item 17: ``--old-target -k2`` was quoted but written as its own word; the probe step's parser read an option."""
    from eaglelab.cli import build_parser
    from eaglelab.engines.probe_recipes import ProbeRecipeSettings, build_probe_recipe

    monkeypatch.chdir(tmp_path)
    _probe_inputs(tmp_path, "-k2")
    code, _, stderr = run_cli("recipe", "--job", "probe", "--engine", engine, "--old-drafter", "drafter", "--old-target=-k2",
                              "--new-target", "tb", "--workdir=-w", "--out", str(tmp_path / "recipe"))
    assert code == 0, stderr
    recipe = build_probe_recipe(ProbeRecipeSettings(engine, "drafter", "-k2", "tb", workdir="-w"))
    assert recipe.settings.old_target == "-k2"  # recorded as given
    (tmp_path / "recipe" / "-w").mkdir()  # the script's mkdir is a recorder: the probe's JSON lands here
    calls, proc = script_stubs.run_script(tmp_path / "recipe" / "run.sh", tmp_path / "recipe")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    script_stubs.assert_same_calls(script_stubs.engine_calls(calls),
                                   script_stubs.expected_calls(recipe, tmp_path / "recipe"))
    probe = next(c for c in calls if c[0] == "eaglelab")
    args = build_parser().parse_args(probe[1:])
    assert Path(args.old_target) == Path("-k2") and args.new_target == "tb"  # ./-k2: the same folder, as a value
    assert Path(args.old_states) == Path("-w/states-a")
    assert not any(w == "-k2" or w.startswith("-w/") for c in calls for w in c[1:])
    for call in script_stubs.engine_calls(calls):
        assert fw._parse_problem(call) is None


def test_a_chat_template_named_like_an_option_is_one_word_with_its_flag(tiny_world, tmp_path):
    """#37 item 17, for names that are not paths: ``--chat-template=-x`` (argparse reads it as the value); ``--``
    cannot be a value at all (argparse reads ``--flag=--`` as none) and is refused in one line."""
    import argparse

    from eaglelab.engines.recipes import RecipeSettings, build_recipe

    recipe = build_recipe(RecipeSettings("specforge", str(tiny_world.drafter_a), str(tiny_world.target_b),
                                         chat_template="-x"))
    capture = next(st for st in recipe.steps if "scripts/prepare_hidden_states.py" in st.argv)
    assert "--chat-template=-x" in capture.argv and "-x" not in capture.argv
    parser = argparse.ArgumentParser()
    parser.add_argument("--chat-template")
    assert parser.parse_known_args(capture.words()[1:])[0].chat_template == "-x"
    with pytest.raises(ParameterError, match="--chat-template"):
        build_recipe(RecipeSettings("specforge", str(tiny_world.drafter_a), str(tiny_world.target_b), chat_template="--"))


def test_paths_starting_with_a_dash_are_the_same_files(tmp_path):
    from eaglelab.engines.scripts import flag_value, path_word

    assert path_word("-k2") == "./-k2" and path_word("k2") == "k2" and path_word("/abs/-x") == "/abs/-x"
    assert path_word("org/model") == "org/model"  # hub ids never start with "-"
    (tmp_path / "-k2").mkdir()
    assert (tmp_path / path_word("-k2")).resolve() == (tmp_path / "-k2").resolve()
    assert flag_value("--t", "-x") == ["--t=-x"] and flag_value("--t", "x") == ["--t", "x"]
    shutil.rmtree(tmp_path / "-k2")
