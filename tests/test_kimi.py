"""The Kimi family as it is published: fixtures from the public configs (data/fixtures/kimi/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "data" / "fixtures" / "kimi"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


import pytest  # noqa: E402

from eaglelab.checkpoints.drafters.inspection import compare_checkpoints, inspect_checkpoint  # noqa: E402
from eaglelab.checkpoints.drafters.spec import drafter_spec_from_config  # noqa: E402
from eaglelab.checkpoints.drafters.tensor_table import table_problems  # noqa: E402
from eaglelab.checkpoints.files.config_types import check_config_types  # noqa: E402
from eaglelab.checkpoints.targets.config import head_names, quantization_of, text_config  # noqa: E402
from eaglelab.cli import main  # noqa: E402
from eaglelab.jobs.targets import TargetCompareSettings, compare_targets  # noqa: E402
from eaglelab.worlds.kimi_shapes import KIMI_SAMPLE, build_kimi_sample  # noqa: E402


@pytest.fixture(scope="module")
def kimi(tmp_path_factory):
    """The Kimi-shaped sparse checkpoints (a few hundred kB of disk)."""
    return build_kimi_sample(tmp_path_factory.mktemp("kimi") / "sample", FIXTURES)


def cli_json(capsys, *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_every_fixture_is_a_config_eaglelab_reads():
    for name in ("torchspec-k25-llama-drafter-config.json", "torchspec-k25-mla-drafter-config.json"):
        cfg = fixture(name)
        spec = drafter_spec_from_config(cfg)
        assert spec.full_vocab and spec.vocab_size == 163840 and table_problems(spec, cfg) == []
    llama, mla = (drafter_spec_from_config(fixture(n)) for n in ("torchspec-k25-llama-drafter-config.json",
                                                                 "torchspec-k25-mla-drafter-config.json"))
    assert not llama.draft_vocab_given and llama.head_dim == 128 and llama.intermediate_size == 12288
    assert mla.draft_vocab_given and mla.mla.kv_lora_rank == 512 and mla.aux_layer_ids == (1, 29, 57)
    for name in ("kimi-k2-target-config-fields.json", "kimi-k25-target-config-fields.json"):
        cfg = check_config_types(fixture(name), name)
        assert text_config(cfg)["num_hidden_layers"] == 61 and text_config(cfg)["kv_lora_rank"] == 512
    assert quantization_of(fixture("kimi-k25-target-config-fields.json")).scheme.startswith("INT4 weights, groups of 32")
    assert quantization_of(fixture("kimi-k2-target-config-fields.json")).method == "fp8"


def test_the_sample_is_what_it_says(kimi):
    assert set(KIMI_SAMPLE) == {p.name.replace("-", "_") for p in kimi.root.iterdir() if p.is_dir()}
    total = sum(f.stat().st_blocks * 512 for f in kimi.root.rglob("*") if f.is_file())
    assert total < 20 * 1024 * 1024  # sparse: terabyte shapes, a few hundred kB on disk


def test_inspect_computes_the_full_vocabulary_and_mla_drafters(kimi, capsys):
    for name in ("k25_llama_drafter", "k25_mla_drafter", "k26_mla_drafter"):
        js = cli_json(capsys, "inspect", str(getattr(kimi, name)))
        assert js["problems"] == [] and js["computed"] is True and js["refusals"] == [], (name, js["problems"])
    llama = inspect_checkpoint(str(kimi.k25_llama_drafter))
    assert llama.spec.draft_vocab_size == 163840 and "load_lm_head_from_target" in " ".join(llama.cautions)
    mla = inspect_checkpoint(str(kimi.k25_mla_drafter))
    assert "as SGLang computes it" in mla.status_line and mla.spec.attention == "mla"
    k26 = inspect_checkpoint(str(kimi.k26_mla_drafter))
    assert any("sglang issue #27829" in c for c in k26.cautions)  # no head in the file, draft_vocab_size written
    assert k26.sglang_random_head and not mla.sglang_random_head  # the same finding, typed: what notebook 02 reads


def test_compare_judges_the_k25_and_k26_mla_drafters(kimi):
    cmp_ = compare_checkpoints(str(kimi.k25_mla_drafter), str(kimi.k26_mla_drafter), str(kimi.k25_target))
    assert cmp_.verdict.level == "interchangeable"  # K2.6's was warm-started from K2.5's: the same shapes
    assert {d.category for d in cmp_.config_diff} <= {"metadata"}
    assert {t.name for t in cmp_.tensor_diff if t.status != "same"} == {"embed_tokens.weight", "lm_head.weight"}
    assert any("#27829" in r for r in cmp_.verdict.reasons)
    on_b = " ".join(cmp_.target_verdicts["b"].reasons)
    assert "drafts with the target's, language_model.lm_head.weight" in on_b
    assert "language_model.model.embed_tokens.weight" in on_b and "compressed-tensors" in on_b


@pytest.mark.parametrize("new", ["k25_llama_drafter", "k25_mla_drafter"])
def test_compare_classifies_every_field_from_the_k2_drafter_to_the_k25_ones(kimi, new):
    cmp_ = compare_checkpoints(str(kimi.k2_drafter), str(getattr(kimi, new)), str(kimi.k25_target))
    assert cmp_.config_diff and all(d.category != "unknown" for d in cmp_.config_diff), \
        [d.key for d in cmp_.config_diff if d.category == "unknown"]
    assert cmp_.verdict.level == "incompatible"
    first = cmp_.verdict.reasons[0]
    assert ("intermediate_size 18432 vs 12288" in first) if new == "k25_llama_drafter" else \
        first.startswith("attention llama vs mla")
    assert any("draft vocabulary 32000 vs 163840" in r for r in cmp_.verdict.reasons)
    assert all(v.level == "interchangeable" for v in cmp_.target_verdicts.values())  # each fits K2.5 by shape


def test_the_k25_target_is_read_through_its_prefix(kimi):
    names = head_names(json.loads((kimi.k25_target / "model.safetensors.index.json").read_text())["weight_map"],
                       json.loads((kimi.k25_target / "config.json").read_text()), "k25")
    assert (names.embed_tokens, names.lm_head, names.prefix) == ("language_model.model.embed_tokens.weight",
                                                                 "language_model.lm_head.weight", "language_model.")
    js = inspect_checkpoint(str(kimi.k25_target)).to_json()
    assert js["family"] == "target model" and js["spec"] is None  # a target, not a drafter: shapes only
    assert js["target"]["prefix"] == "language_model." and js["target"]["quantization"]["method"] == "compressed-tensors"


def test_a_recipe_for_the_k25_target_names_its_prefixed_tensors(kimi, tmp_path):
    from eaglelab.engines.recipes import RecipeSettings, build_recipe
    from tests import engines

    recipe = build_recipe(RecipeSettings("specforge", str(kimi.k2_drafter), str(kimi.k25_target)))
    out = recipe.write(tmp_path / "recipe")
    cfg, _ = engines.specforge_config(str(out / "warm.yaml"))  # SpecForge's own schema reads it
    assert cfg.model.embedding_key == "language_model.model.embed_tokens.weight"
    assert cfg.model.lm_head_key == "language_model.lm_head.weight"
    assert "read from the target's safetensors headers" in recipe.provenance["embedding_key"]
    full = build_recipe(RecipeSettings("specforge", str(kimi.k25_llama_drafter), str(kimi.k25_target)))
    assert "save_vocab_map.py" not in full.files and "no vocabulary map to keep" in full.script()


def test_compare_targets_k2_to_k25(kimi):
    report = compare_targets(TargetCompareSettings(str(kimi.k2_target), str(kimi.k25_target), str(kimi.k2_drafter)))
    by_key = {d.key: d for d in report.config_diff}
    assert by_key["rope_scaling.factor"].category == "rope and context" and by_key["quantization"].category == "quantization"
    assert by_key["max_position_embeddings"].a == 131072 and by_key["max_position_embeddings"].b == 262144
    assert "hidden_size" not in by_key and "num_hidden_layers" not in by_key and "n_routed_experts" not in by_key
    assert (report.a.prefix, report.b.prefix) == ("", "language_model.")
    assert (report.a.quantization.method, report.b.quantization.method) == ("fp8", "compressed-tensors")
    assert report.tokenizers.same and report.tokenizers.drafter_ids == 32000 and report.tokenizers.drafter_renamed == 0
    assert not report.templates.same and any("<think>" in line for line in report.templates.diff)
    assert report.verdict.level == "re-template"


def test_compare_targets_on_two_tokenizer_folders_that_differ_only_in_the_template(kimi, capsys):
    js = cli_json(capsys, "compare-targets", str(kimi.k25_tokenizer_k2_template), str(kimi.k25_tokenizer))
    assert js["config_diff"] == [] and js["tokenizers"]["same"] is True
    assert js["templates"]["same_text"] is False and js["templates"]["same"] is False
    assert js["verdict"]["level"] == "re-template" and js["headline"].startswith("ANOTHER CHAT TEMPLATE")
    assert main(["compare-targets", str(kimi.k25_tokenizer), str(kimi.k25_tokenizer)]) == 0
    assert capsys.readouterr().out.startswith("SAME TOKENIZER AND TEMPLATE")


def test_the_kimi_family_is_one_job_with_its_tables_and_sentence(tmp_path):
    """#57: notebook 02's Kimi section as one result: the drafters, the pairs, the targets, the findings sentence."""
    from eaglelab.jobs.kimi_family import KIMI_DRAFTERS, KIMI_PAIRS, kimi_family

    family = kimi_family(tmp_path / "kimi", FIXTURES)
    assert list(family.drafters_table().index) == list(KIMI_DRAFTERS)
    assert list(family.pairs_table().index) == list(KIMI_PAIRS)
    said = family.findings()["kimi"]
    for label, c in family.pairs.items():
        assert f"{label}: **{c.verdict.level}** ({c.verdict.reasons[0]})" in said
    assert "SGLang would serve a random head" in said  # the K2.6 drafter ships no lm_head (test above: typed)
    assert f"K2 -> K2.5 targets: **{family.targets.verdict.level}**" in said and "`language_model.`" in said
    assert f"template only: **{family.template_only.verdict.level}**" in said
    assert "K2.6 on K2.5:" in family.markdown() and set(family.to_json()["pairs"]) == set(KIMI_PAIRS)
