"""#41 items 3 and 5: a drafter's RoPE against its target's, the trainer's θ caution, the recipes' chat template.

- ``compare --target`` compares the drafter's RoPE (θ, scaling type, factor, betas, mscales, original context)
  with the target's and says what each difference does to acceptance; on the Kimi fixtures the K2.5 MLA
  drafter's YaRN has ``beta_fast`` 1.0 where the K2.5 target has 32.0.
- ``inspect`` (and ``compare``) caution that TorchSpec trains an MLA drafter's YaRN at θ 10000 whatever
  ``rope_theta`` says, naming the source and the probe; for certain when the config is a TorchSpec export
  (``_torchspec_version``), conditionally otherwise, and only for MLA drafters with YaRN.
- The warm-start recipe picks SpecForge's chat template from the target (from what its own template writes, #53:
  ``llama3`` for a Llama 3 template or a base Llama, ``qwen`` for ChatML; Kimi's own for a Kimi target) or refuses to
  guess in one line naming ``--chat-template``; before, it passed ``llama3`` to all.
"""

from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglelab.checkpoints.drafters.config_rules import diff_configs
from eaglelab.checkpoints.drafters.inspection import compare_checkpoints, inspect_checkpoint
from eaglelab.checkpoints.drafters.spec import drafter_spec_from_config
from eaglelab.checkpoints.drafters.verdicts import drafter_vs_target, rope_fit, trainer_cautions
from eaglelab.engines.recipes import RecipeSettings, build_recipe
from eaglelab.errors import ParameterError
from tests.conftest import run_cli
from tests.test_kimi import FIXTURES, fixture, kimi  # noqa: F401  (the module-scoped Kimi sample)

MLA = "torchspec-k25-mla-drafter-config.json"
LLAMA = "torchspec-k25-llama-drafter-config.json"
K25 = "kimi-k25-target-config-fields.json"
K2 = "kimi-k2-target-config-fields.json"


def fit(drafter: dict, target: dict) -> list[str]:
    return rope_fit(drafter_spec_from_config(drafter), drafter, target)


def with_rope(cfg: dict, **changes) -> dict:
    """``cfg`` (a drafter's, or a target's language model) with its RoPE changed: ``rope_theta`` or scaling fields."""
    cfg = json.loads(json.dumps(cfg))
    body = cfg.get("text_config", cfg)
    if "rope_theta" in changes:
        body["rope_theta"] = changes.pop("rope_theta")
    if changes.pop("no_scaling", False):
        body.pop("rope_scaling", None)
    body.get("rope_scaling", {}).update(changes)
    return cfg


# --------------------------------------------------------------------------- RoPE against the target

def test_compare_target_names_the_k25_mla_drafters_yarn_ramp_against_the_k25_target(kimi):  # noqa: F811
    """The K2.5 MLA drafter's beta_fast 1.0 vs the K2.5 target's 32.0: which pairs YaRN ramps, in the drafter's dims."""
    cmp_ = compare_checkpoints(str(kimi.k25_mla_drafter), str(kimi.k26_mla_drafter), str(kimi.k25_target))
    on_target = cmp_.target_verdicts["a"].reasons
    line = next(r for r in on_target if r.startswith("YaRN beta_fast"))
    assert "1 / 1 vs the target's 32 / 1" in line and "(pairs 19-20 vs 8-20 of the drafter's 32)" in line
    assert "rotate differently" in line and "\n" not in line
    assert not any(r.startswith("RoPE theta") for r in on_target)  # both at 50000
    assert cmp_.target_verdicts["a"].level == "interchangeable"  # a note on acceptance, not a load failure


def test_each_rope_difference_says_what_it_does_to_acceptance():
    mla, k25, k2 = fixture(MLA), fixture(K25), fixture(K2)
    assert fit(mla, k2) == ["RoPE yarn factor 64 vs the target's 32: positions are stretched by another factor; "
                            "acceptance falls with position"]  # K2's betas are 1 / 1 too
    assert fit(fixture(LLAMA), k25) == []  # TorchSpec's K2.5 Llama drafter: the target's RoPE exactly
    theta = fit(with_rope(mla, rope_theta=10000.0), k25)
    assert theta[0] == ("RoPE theta 10000 vs the target's 50000: positions rotate at other speeds; unless the drafter "
                        "was trained at 10000, acceptance falls as positions grow")
    plain = fit(with_rope(mla, no_scaling=True), k25)
    assert plain == ["RoPE scaling none vs the target's yarn x64 over 4096: the slow dims rotate differently, the more "
                     "the longer the prompt; acceptance falls with position"]
    context = " ".join(fit(with_rope(mla, original_max_position_embeddings=8192), k2))
    assert "RoPE original context 8192 vs the target's 4096: yarn stretches another band of dims" in context
    mscale = " ".join(fit(mla, with_rope(k25, mscale_all_dim=0.0, beta_fast=1.0)))
    assert "YaRN mscale / mscale_all_dim 1 / 1 vs the target's 1 / 0" in mscale and "every length" in mscale
    assert "beta_fast" not in mscale


def test_a_target_rope_eaglelab_does_not_compute_is_said_not_judged():
    lines = fit(fixture(MLA), with_rope(fixture(K25), type="longrope"))
    assert len(lines) == 1 and lines[0].startswith("the target's RoPE is not compared with the drafter's:")
    assert "longrope" in lines[0]


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["type", "rope_type", "factor", "original_max_position_embeddings", "beta_fast",
                                        "beta_slow", "mscale", "mscale_all_dim", "low_freq_factor", "high_freq_factor"]),
                       st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-10, 10**9),
                                 st.sampled_from(["yarn", "llama3", "linear", "default", "dynamic", "", None, True]),
                                 st.lists(st.integers(), max_size=2))),
       st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-5, 10**12), st.text(max_size=5)))
def test_a_hostile_target_rope_is_one_line_or_nothing(scaling, theta):
    """Whatever RoPE fields a target's config holds, the fit says it in lines of text, never a traceback."""
    target = {**fixture(K25)["text_config"], "rope_scaling": scaling, "rope_theta": theta}
    lines = fit(fixture(MLA), target)
    assert all(isinstance(line, str) and "\n" not in line for line in lines)


# --------------------------------------------------------------------------- the trainer's θ

def test_inspect_cautions_that_torchspec_trains_an_mla_yarn_drafter_at_theta_10000(kimi, capsys):  # noqa: F811
    code, out, _ = run_cli("inspect", str(kimi.k25_mla_drafter), "--json")
    assert code == 0
    caution = next(c for c in json.loads(out)["cautions"] if "TorchSpec" in c)
    assert caution.startswith("if this drafter was trained with TorchSpec:")
    for part in ("builds YaRN at theta 10000 whatever rope_theta says", "torchspec/models/draft/deepseek_eagle.py",
                 "commit 6f21829", "SGLang and eaglelab serve 50000", "`eaglelab probe`"):
        assert part in caution
    cmp_ = compare_checkpoints(str(kimi.k25_mla_drafter), str(kimi.k26_mla_drafter))
    assert any(r.startswith("A: if this drafter was trained with TorchSpec") for r in cmp_.verdict.reasons)
    assert not any("TorchSpec" in c for c in inspect_checkpoint(str(kimi.k25_llama_drafter)).cautions)


def test_a_torchspec_export_is_named_as_such_and_only_mla_yarn_away_from_10000_is_cautioned():
    mla = fixture(MLA)
    export = {**mla, "_torchspec_version": "0.3.0"}
    assert trainer_cautions(export)[0].startswith("exported by TorchSpec (_torchspec_version '0.3.0'): ")
    assert trainer_cautions(with_rope(mla, rope_theta=10000.0)) == []  # trained and served alike
    assert trainer_cautions(with_rope(mla, no_scaling=True)) == []  # the plain rotary gets the config's θ
    assert trainer_cautions({**fixture(LLAMA), "_torchspec_version": "0.3.0"}) == []  # TorchSpec's Llama drafter
    diff = {d.key: d for d in diff_configs(mla, export)}
    assert diff["_torchspec_version"].category == "metadata"


def test_the_fit_of_a_drafter_without_a_target_rope_reads_the_default():
    """A target config that writes no RoPE is read as the transformers default (θ 10000, no scaling)."""
    target = {k: v for k, v in fixture(K2).items() if k not in ("rope_theta", "rope_scaling")}
    spec = drafter_spec_from_config(fixture(MLA))
    reasons = drafter_vs_target(spec, fixture(MLA), target).reasons
    assert any(r.startswith("RoPE theta 50000 vs the target's 10000") for r in reasons)


# --------------------------------------------------------------------------- the recipes' chat template

def capture_template(recipe) -> str:
    capture = next(s for s in recipe.steps if "scripts/prepare_hidden_states.py" in s.argv)
    return capture.argv[capture.argv.index("--chat-template") + 1]


def test_a_llama_target_gets_llama3(tiny_world):
    recipe = build_recipe(RecipeSettings("specforge", str(tiny_world.drafter_a), str(tiny_world.target_b)))
    assert capture_template(recipe) == "llama3" and recipe.settings.chat_template == "llama3"
    assert recipe.provenance["chat_template"] == ("llama3 (the target ships no chat template (a base model): its family's, "
                                                  "model_type llama, assumed)")


def test_a_kimi_target_gets_kimis_template_not_llama3(kimi, tmp_path):  # noqa: F811
    """K2.5's template opens a <think> block: SpecForge's kimi-k2-thinking; K2's does not: kimi-k2-instruct."""
    from tests import engines

    k25 = build_recipe(RecipeSettings("specforge", str(kimi.k2_drafter), str(kimi.k25_target)))
    assert capture_template(k25) == "kimi-k2-thinking"
    assert "opens <think>" in k25.provenance["chat_template"]
    cfg, _ = engines.specforge_config(str(k25.write(tmp_path / "k25") / "warm.yaml"))
    assert cfg.data.chat_template == "kimi-k2-thinking"
    k2 = build_recipe(RecipeSettings("specforge", str(kimi.k2_drafter), str(kimi.k2_target)))
    assert capture_template(k2) == "kimi-k2-instruct"
    from specforge.data.template import TEMPLATE_REGISTRY

    assert {"kimi-k2-thinking", "kimi-k2-instruct", "llama3", "llama4"} <= set(TEMPLATE_REGISTRY.get_all_template_names())


def test_a_kimi_target_without_a_readable_template(kimi, tmp_path):  # noqa: F811
    """K2.5 is a thinking model as published; K2 comes as Instruct and Thinking: refused, both names given."""
    bare = tmp_path / "k2-config-only"
    bare.mkdir()
    shutil.copy(kimi.k2_target / "config.json", bare / "config.json")
    with pytest.raises(ParameterError, match="--chat-template") as err:
        build_recipe(RecipeSettings("specforge", str(kimi.k2_drafter), str(bare)))
    assert "kimi-k2-instruct" in str(err.value) and "kimi-k2-thinking" in str(err.value)
    bare25 = tmp_path / "k25-config-only"
    bare25.mkdir()
    shutil.copy(kimi.k25_target / "config.json", bare25 / "config.json")
    recipe = build_recipe(RecipeSettings("specforge", str(kimi.k2_drafter), str(bare25),
                                         embedding_key="language_model.model.embed_tokens.weight",
                                         lm_head_key="language_model.lm_head.weight"))
    assert capture_template(recipe) == "kimi-k2-thinking"


def test_an_unknown_target_is_refused_in_one_line_naming_the_flag(tiny_world, tmp_path):
    target = tmp_path / "mistral"
    target.mkdir()
    cfg = json.loads((tiny_world.target_b / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**cfg, "model_type": "mistral", "architectures": ["MistralForCausalLM"]}))
    code, out, err = run_cli("recipe", "--engine", "specforge", "--old-drafter", str(tiny_world.drafter_a), "--new-target",
                             str(target), "--out", str(tmp_path / "recipe"))
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "--chat-template" in err and "model_type mistral" in err
    assert not (tmp_path / "recipe").exists()
    given_ = build_recipe(RecipeSettings("specforge", str(tiny_world.drafter_a), str(target), chat_template="qwen"))
    assert capture_template(given_) == "qwen" and given_.provenance["chat_template"] == "qwen (given)"
    # speculators renders with the target's own template: nothing to pick, nothing refused
    build_recipe(RecipeSettings("speculators", str(tiny_world.drafter_a), str(target)))


def probe_capture_templates(recipe) -> set[str]:
    steps = [s for s in recipe.steps if "scripts/prepare_hidden_states.py" in s.argv]
    assert len(steps) == 2  # one dump per target
    return {s.argv[s.argv.index("--chat-template") + 1] for s in steps}


def test_the_probe_recipe_dumps_both_targets_with_the_template_they_imply(tiny_world, kimi):  # noqa: F811
    """#41: the dump-and-probe recipe picks SpecForge's template from the targets as the warm start does, one for
    both dumps (the probe pairs them by token ids); K2 -> K2.5 (instruct -> thinking) is a re-template, refused
    until the user names the template to probe with."""
    from eaglelab.engines.probe_recipes import ProbeRecipeSettings, build_probe_recipe

    llama = build_probe_recipe(ProbeRecipeSettings("specforge", str(tiny_world.drafter_a), str(tiny_world.target_a),
                                                   str(tiny_world.target_b)))
    assert probe_capture_templates(llama) == {"llama3"}
    assert llama.provenance["chat template"] == ("llama3 (the target ships no chat template (a base model): its family's, "
                                                 "model_type llama, assumed)")
    with pytest.raises(ParameterError, match="--chat-template") as err:
        build_probe_recipe(ProbeRecipeSettings("specforge", str(kimi.k2_drafter), str(kimi.k2_target),
                                               str(kimi.k25_target)))
    assert "kimi-k2-instruct" in str(err.value) and "kimi-k2-thinking" in str(err.value)
    given = build_probe_recipe(ProbeRecipeSettings("specforge", str(kimi.k2_drafter), str(kimi.k2_target),
                                                   str(kimi.k25_target), chat_template="kimi-k2-thinking"))
    assert probe_capture_templates(given) == {"kimi-k2-thinking"}
