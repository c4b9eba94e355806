"""#41: an MLA drafter's flags computed as SGLang's MLA class reads them, at both layouts it has shipped.

SGLang's ``kimi_k25_eagle3.py`` as PR #24826 added it, and after PR #26506 (EAGLE-3.1: ``fc_norm`` /
``use_aux_norm``, ``norm_output``), rebuilt in ``tests/references.py`` :class:`SglangMlaDrafter`. Every
combination of ``norm_output`` (true / false / absent) x ``fc_norm`` x ``norm_before_fc`` is drafted by eaglelab
and by the reference at each layout, a prefix and three draft steps through a cache; the maximum logit
difference is asserted (:data:`TABLE` keeps the numbers). Also pinned: a TorchSpec vLLM export's aux ids
(its exporter adds 1 to a ``kimi_k2`` drafter's), ``q_lora_rank`` absent as the engines resolve it, the
contradiction ``fc_norm: false`` + ``use_aux_norm: true`` refused, and EAGLE-4 drafters named and refused.
"""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eaglelab.checkpoints.drafters.inspection import inspect_checkpoint
from eaglelab.checkpoints.drafters.spec import aux_ids_as_layer_outputs, drafter_spec_from_config
from eaglelab.checkpoints.drafters.variants import cautions, check_computed, drafter_family, refusals
from eaglelab.errors import ConfigError, EaglelabError, UnsupportedDrafterError
from eaglelab.model.attention import DrafterKV
from eaglelab.model.drafter import Eagle3Drafter
from eaglelab.model.drafter_files import load_drafter, save_drafter
from tests.conftest import run_cli
from tests.references import SglangMlaDrafter
from tests.test_mla import STEPS, inputs, mla_config, realistic

ABSENT = "absent"
LOGIT_TOL = 1e-4  # max |logit difference| in fp32, logits of order 1-10
COMBOS = [(no, fc, nbf) for no in (True, False, ABSENT) for fc in (True, False) for nbf in (True, False)]
#: (norm_output, fc_norm, norm_before_fc, layout) -> max |logit difference| eaglelab vs the reference.
TABLE: dict[tuple, float] = {}


def flag_config(norm_output, fc_norm, norm_before_fc, **over) -> dict:
    cfg = mla_config(fc_norm=fc_norm, norm_before_fc=norm_before_fc, **over)
    if norm_output is not ABSENT:
        cfg["norm_output"] = norm_output
    return cfg


def drafted_difference(d: Eagle3Drafter, ref: SglangMlaDrafter, seed: int = 1) -> float:
    """Max |logit difference| over a prefix and STEPS draft steps, each side feeding back its own state.

    Both draft eaglelab's tokens, so a difference in one step does not send the two down other paths.
    """
    from transformers import DynamicCache

    ids, aux = inputs(seed)
    S = ids.shape[1]
    positions = torch.arange(S)[None]
    with torch.no_grad():
        cache, ref_cache = DrafterKV(), DynamicCache()
        ours = d.step(ids, d.project(aux), positions, cache=cache)
        theirs = ref.step(ids, ref.project(aux), positions, ref_cache)
        worst = float((d.logits(ours) - ref.logits(theirs)).abs().max())
        h, g = ours[:, -1:], theirs[:, -1:]
        for i in range(STEPS):
            token = d.logits(h).argmax(-1)
            pos = torch.tensor([[S + i]])
            h = d.step(token, d.feed_back(h), pos, cache=cache)
            g = ref.step(token, ref.feed_back(g), pos, ref_cache)
            worst = max(worst, float((d.logits(h) - ref.logits(g)).abs().max()))
    return worst


def written(cfg: dict, folder, seed: int = 3) -> Eagle3Drafter:
    d = realistic(Eagle3Drafter(cfg), seed)
    save_drafter(d, folder, include_embedding=True)
    return d


@pytest.mark.parametrize("norm_output, fc_norm, norm_before_fc", COMBOS)
def test_every_mla_flag_combination_is_sglangs_at_the_layout_it_needs(norm_output, fc_norm, norm_before_fc, tmp_path):
    """#41: norm_output false dropped the final norm, true fed the raw state back, norm_before_fc applied input_norm."""
    cfg = flag_config(norm_output, fc_norm, norm_before_fc)
    d = written(cfg, tmp_path / "mla")
    assert ("input_norm.weight" in d.state_dict()) == norm_before_fc  # kept in the file, never applied
    later = drafted_difference(d, SglangMlaDrafter(tmp_path / "mla", "eagle3.1"))
    first = drafted_difference(d, SglangMlaDrafter(tmp_path / "mla", "pr24826"))
    TABLE[(norm_output, fc_norm, norm_before_fc, "eagle3.1")] = later
    TABLE[(norm_output, fc_norm, norm_before_fc, "pr24826")] = first
    assert later < LOGIT_TOL, later
    eagle31 = fc_norm or norm_output is True
    detail = drafter_family(cfg).detail
    notes = " | ".join(cautions(cfg))
    assert not refusals(cfg)
    if eagle31:  # the first layout ignores the flags: the file needs the later one, and says so
        assert first > 0.1, first
        assert "EAGLE-3.1" in detail and "PR #24826's layout reads neither" in notes
    else:
        assert first < LOGIT_TOL, first
        assert "EAGLE-3 (" in detail and "PR #24826's layout" not in notes
    assert "SpecForge 0.2.0" not in notes  # the SpecForge caution was about Llama drafters, not this class
    assert ("skips input_norm.weight" in notes) == norm_before_fc
    assert ("apply the final norm before lm_head" in notes) == (norm_output is False)


def test_use_aux_norm_is_fc_norm_to_sglangs_eagle31_layout(tmp_path):
    """SGLang's MLA class reads the older ``use_aux_norm`` as fc_norm; vLLM's does not (a caution says so)."""
    cfg = mla_config(use_aux_norm=True, norm_output=True)
    d = written(cfg, tmp_path / "mla")
    assert d.spec.fc_norm and "fc_norm.2.weight" in d.state_dict()
    TABLE[("use_aux_norm", True, False, "eagle3.1")] = diff = drafted_difference(d, SglangMlaDrafter(tmp_path / "mla"))
    assert diff < LOGIT_TOL
    assert any("use_aux_norm: true" in c and "vLLM" in c for c in cautions(cfg))
    assert not inspect_checkpoint(str(tmp_path / "mla")).problems


def test_fc_norm_false_with_use_aux_norm_true_is_refused_in_one_line():
    cfg = mla_config(fc_norm=False, use_aux_norm=True)
    with pytest.raises(UnsupportedDrafterError, match="use_aux_norm") as err:
        check_computed(cfg)
    assert "\n" not in str(err.value)


def test_the_mla_training_unroll_feeds_the_normed_state_back_with_norm_output(tmp_path):
    """The TTT unroll of an EAGLE-3.1 MLA drafter is the EAGLE-3.1 reference drafting a chain from each position."""
    d = written(mla_config(fc_norm=True, norm_output=True), tmp_path / "mla")
    ref = SglangMlaDrafter(tmp_path / "mla", "eagle3.1")
    ids, aux = inputs(2)
    S = ids.shape[1]
    worst = 0.0
    with torch.no_grad():
        unrolled = d.ttt_logits(ids, aux, STEPS)
        for t in range(0, S - STEPS, 3):
            for i, logits in enumerate(ref.chain_logits(ids, aux, t, STEPS)):
                worst = max(worst, float((unrolled[i][:, t] - logits).abs().max()))
    assert worst < LOGIT_TOL, worst


# --------------------------------------------------------------------------- q_lora_rank

def test_an_absent_q_lora_rank_is_what_the_engines_config_class_makes_it(tmp_path):
    """#41: absent meant q_proj to eaglelab and 1536 to DeepseekV3Config (SGLang's KimiK2Config, TorchSpec, vLLM)."""
    from transformers import DeepseekV3Config

    cfg = mla_config()
    del cfg["q_lora_rank"]
    spec = drafter_spec_from_config(cfg)
    assert spec.mla.q_lora_rank == DeepseekV3Config().q_lora_rank == 1536
    assert drafter_spec_from_config({**cfg, "model_type": "deepseek_v3"}).mla.q_lora_rank == 1536
    with pytest.raises(ConfigError, match="q_lora_rank absent and model_type") as err:
        drafter_spec_from_config({**cfg, "model_type": "llama"})
    assert "\n" not in str(err.value)


def test_an_absent_q_lora_rank_beside_a_q_proj_is_refused_naming_the_flag(tmp_path):
    d = written(mla_config(q_lora_rank=None), tmp_path / "mla")
    assert hasattr(d.midlayer.self_attn, "q_proj")
    assert any("q_lora_rank: null" in c and "refuses it at load" in c for c in cautions(d.config))
    cfg = json.loads((tmp_path / "mla" / "config.json").read_text())
    del cfg["q_lora_rank"]
    (tmp_path / "mla" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="write q_lora_rank: null") as err:
        load_drafter(tmp_path / "mla")
    assert "\n" not in str(err.value)
    code, _, stderr = run_cli("inspect", str(tmp_path / "mla"))
    assert code == 2 and "q_lora_rank absent" in stderr and "Traceback" not in stderr


def test_an_mla_drafter_for_a_target_without_a_query_rank_writes_it_null():
    from eaglelab.checkpoints.drafters.implied_config import drafter_config_for_target

    target = {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "num_hidden_layers": 6,
              "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4, "vocab_size": 256,
              "q_lora_rank": None, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 12}
    cfg = drafter_config_for_target(target, attention="mla")
    assert "q_lora_rank" in cfg and cfg["q_lora_rank"] is None
    assert drafter_spec_from_config(cfg).mla.q_lora_rank is None


# --------------------------------------------------------------------------- TorchSpec's vLLM export

TRAINED_ON = [1, 29, 57]


def torchspec_exports(tmp_path) -> tuple:
    """A Kimi MLA drafter as TorchSpec's convert_to_hf.py writes it: natively, and with --export-for-vllm.

    The vLLM export renames ``midlayer.*`` to ``layers.0.*`` and, for ``model_type`` ``kimi_k2``, adds 1 to the
    nested aux ids (``_fixup_export_config``); both configs carry ``_torchspec_version``.
    """
    from safetensors.torch import load_file, save_file

    over = {"_torchspec_version": "0.1.0", "eagle_config": {"eagle_aux_hidden_state_layer_ids": TRAINED_ON}}
    d = written(mla_config(**over), tmp_path / "native")
    sd = load_file(str(tmp_path / "native" / "model.safetensors"))
    vllm = tmp_path / "vllm"
    vllm.mkdir()
    save_file({k.replace("midlayer.", "layers.0."): v for k, v in sd.items()}, str(vllm / "model.safetensors"))
    cfg = json.loads((tmp_path / "native" / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [i + 1 for i in TRAINED_ON]
    (vllm / "config.json").write_text(json.dumps(cfg))
    return d, tmp_path / "native", vllm


def outputs(spec) -> list[int]:
    return list(aux_ids_as_layer_outputs(spec.aux_layer_ids, spec.aux_convention, 61))


def test_a_torchspec_vllm_export_reads_the_layers_its_drafter_was_trained_on(tmp_path):
    """#41: TorchSpec's --export-for-vllm of a kimi_k2 drafter read as [2, 30, 58] for one trained on [1, 29, 57]."""
    d, native, vllm = torchspec_exports(tmp_path)
    assert outputs(load_drafter(native).spec) == TRAINED_ON
    exported = load_drafter(vllm)
    assert exported.spec.torchspec_vllm_export and outputs(exported.spec) == TRAINED_ON
    assert outputs(inspect_checkpoint(str(vllm)).spec) == TRAINED_ON
    ids, aux = inputs()
    with torch.no_grad():
        assert torch.equal(exported.ttt_logits(ids, aux, STEPS)[-1], d.ttt_logits(ids, aux, STEPS)[-1])
    resaved = save_drafter(exported, tmp_path / "resaved", include_embedding=True)  # SGLang layout, ids as trained
    assert json.loads((resaved / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == \
        TRAINED_ON
    assert outputs(load_drafter(resaved).spec) == TRAINED_ON


def test_a_layers0_kimi_file_without_torchspecs_marker_keeps_sglangs_reading(tmp_path):
    """Without ``_torchspec_version`` nothing says the ids were shifted: nested ids stay SGLang's layer outputs."""
    _, _, vllm = torchspec_exports(tmp_path)
    cfg = json.loads((vllm / "config.json").read_text())
    del cfg["_torchspec_version"]
    (vllm / "config.json").write_text(json.dumps(cfg))
    assert outputs(load_drafter(vllm).spec) == [i + 1 for i in TRAINED_ON]


# --------------------------------------------------------------------------- EAGLE-4

def eagle4_config() -> dict:
    return {"architectures": ["LlamaForCausalLMEagle4"], "model_type": "llama", "hidden_size": 64,
            "intermediate_size": 96, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 256, "draft_vocab_size": 128, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}}


def test_an_eagle4_drafter_is_named_and_refused_in_one_line_not_read_as_eagle3():
    """#41: LlamaForCausalLMEagle4's one-layer config passed for EAGLE-3 and was computed as one."""
    cfg = eagle4_config()
    family = drafter_family(cfg)
    assert family.name == "EAGLE-4" and not family.computed
    assert "out-of-tree harness for SGLang and vLLM" in family.line
    with pytest.raises(UnsupportedDrafterError, match="EAGLE-4") as err:
        Eagle3Drafter(cfg)
    assert "\n" not in str(err.value)
    assert drafter_family({**cfg, "architectures": [], "speculators_model_type": "eagle4"}).name == "EAGLE-4"


# --------------------------------------------------------------------------- hostile configs

FLAG_VALUES = st.one_of(st.booleans(), st.none(), st.integers(-2, 2), st.text(max_size=3), st.just(ABSENT))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries({k: FLAG_VALUES for k in ("norm_output", "fc_norm", "use_aux_norm", "norm_before_fc",
                                                       "norm_before_residual", "q_lora_rank", "model_type")}))
def test_any_mla_flag_values_read_or_refuse_in_one_line(values):
    cfg = mla_config()
    for k, v in values.items():
        if v == ABSENT:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    for read in (lambda: drafter_spec_from_config(cfg), lambda: refusals(cfg), lambda: cautions(cfg),
                 lambda: drafter_family(cfg)):
        try:
            out = read()
        except EaglelabError as exc:
            assert "\n" not in str(exc)
            continue
        if isinstance(out, list):
            assert all(isinstance(line, str) and "\n" not in line for line in out)
