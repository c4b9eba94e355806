"""#41 item 6: an MLA EAGLE-3 drafter on a tiny DeepSeek-V3 target, measured in vLLM's CPU build beside the workbook.

vLLM 0.32.0 serves MLA drafters with ``Eagle3DeepseekV2ForCausalLM`` (``deepseek_eagle3.py``), from a
flat config, not the speculators format eaglelab's export refuses for MLA; its CPU build runs MLA with
the ``CPU_MLA`` backend, whose decode kernel runs one latent width, 512 + 64. The end-to-end test builds
a tiny DeepSeek-V3 at that width, trains an MLA drafter on it (``drafter init --attention mla``,
``finetune``) and holds vLLM's τ to the workbook's decoder on the same prompt token ids (greedy, k = 3),
as ``tests/test_engines.py`` does for the Llama drafter, and again with EAGLE-3.1's ``fc_norm`` /
``norm_output``; it skips, with the reason, only where vLLM's environment is absent. The refusals need
no engine: the tiny MLA width of ``tests/test_mla.py``, and a DeepSeek-V3 target saved by transformers
(no routing keys, which vLLM reads as another router).
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors import safe_open

from eaglelab.engines import vllm_requests
from eaglelab.engines.vllm import compare_with_workbook, engine_refusal, engine_status, measure_in_engine
from eaglelab.engines.vllm_mla import write_vllm_mla_drafter
from eaglelab.errors import EngineError
from eaglelab.model.drafter import Eagle3Drafter
from eaglelab.model.drafter_files import save_drafter
from tests.conftest import run_cli
from tests.test_mla import mla_config, write_deepseek_target

ROUTING = {"topk_method": "noaux_tc", "scoring_func": "sigmoid"}


#: vLLM's CPU_MLA kernel's one latent width (512 + 64), and the positions its engine measure asks for.
SERVED_LATENTS = {"kv_lora_rank": 512, "qk_nope_head_dim": 16, "qk_rope_head_dim": 64, "v_head_dim": 16,
                  "max_position_embeddings": 1024}


def write_served_deepseek_target(folder, tokenizer_from, seed: int = 0, words=(" the", " of")):
    """A tiny DeepSeek-V3 vLLM's CPU build runs: latent 512 + rope 64 (its CPU_MLA kernel's one width), a dense
    layer then MoE layers, routing keys written as DeepSeek-V3's own config writes them.

    Learnable as ``tests/test_mla.py``'s target is: damped layers, a head naming two frequent tokens.
    """
    return write_deepseek_target(folder, tokenizer_from, seed, words=words, latents=SERVED_LATENTS,
                                 extra_config=ROUTING)


@pytest.fixture(scope="module")
def served(tiny_world, tmp_path_factory):
    """The 512 + 64 DeepSeek-V3 target and an MLA drafter trained on it (40 steps), from the command line."""
    root = tmp_path_factory.mktemp("mla-engine")
    target = write_served_deepseek_target(root / "target", tiny_world.target_a)
    for argv in (("drafter", "init", "--target", str(target), "--attention", "mla", "--out", str(root / "init"),
                  "--dtype", "float32"),
                 ("finetune", "--new-target", str(target), "--old-drafter", str(root / "init"), "--out", str(root / "run"),
                  "--world-dir", str(tiny_world.root), "--sequences", "32", "--eval-sequences", "8", "--seq-len", "32",
                  "--steps", "40", "--batch-size", "8", "--lr", "3e-3")):
        code, _, err = run_cli(*argv)
        assert code == 0, err
    return target, root / "run" / "final"


def as_eagle31(drafter, out):
    """The drafter with EAGLE-3.1's flags: ``fc_norm.{0,1,2}`` (weights drawn around 1) and ``norm_output`` true."""
    from safetensors.torch import load_file, save_file

    out.mkdir()
    cfg = json.loads((drafter / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**cfg, "fc_norm": True, "norm_output": True}))
    sd = load_file(str(drafter / "model.safetensors"))
    gen = torch.Generator().manual_seed(0)
    width = sd["fc.weight"].shape[1] // 3
    sd.update({f"fc_norm.{i}.weight": 1 + 0.3 * torch.randn(width, generator=gen) for i in range(3)})
    save_file(sd, str(out / "model.safetensors"))
    return out


@pytest.mark.engine
def test_vllm_measures_an_mla_drafter_on_a_deepseek_v3_target_as_the_workbook(tiny_world, served, tmp_path):
    """vLLM's Eagle3DeepseekV2ForCausalLM on CPU_MLA: τ and the per-position rates of the workbook's decoder,
    for the trained drafter and its EAGLE-3.1 form (fc_norm read: its τ moves, in both alike)."""
    ok, why = engine_status()
    if not ok:
        pytest.skip(f"vLLM environment not installed here: {why}")
    from eaglelab.data.sets import measure_prompts
    from eaglelab.model.drafter_files import load_drafter
    from eaglelab.model.targets import load_target
    from eaglelab.probe.plugin import measure_on_target

    target, drafter = served
    model, tok = load_target(target, device="cpu")
    prompts = measure_prompts(tok, 5, tiny_world)
    alone, taus = None, []
    for folder in (drafter, as_eagle31(drafter, tmp_path / "eagle31")):
        engine = measure_in_engine(target, folder, prompts, 48, k=3, target_alone=alone)
        alone = engine.target_alone
        workbook = measure_on_target(model, load_drafter(folder), prompts, 48, k=3)
        row = compare_with_workbook(workbook, engine)
        assert engine.matches_target and workbook.matches_greedy
        assert workbook.accept_len > 1.2, workbook  # drafts accepted: the comparison is not of 1.0 against 1.0
        assert abs(row["tau_difference"]) <= 0.02, row
        assert row["position_conditional_engine"] == pytest.approx(row["position_conditional_workbook"], abs=0.05), row
        assert engine.with_drafter.load_warnings == []  # the folder loads with no key or shape warning
        taus.append(workbook.accept_len)
    assert abs(taus[0] - taus[1]) > 0.05, taus  # fc_norm changed what was drafted: vLLM did not ignore it


def test_the_vllm_mla_folder_is_what_vllms_mla_class_reads(served, tmp_path):
    """deepseek_v2 (vLLM rewrites a deepseek_v3 draft into its MTP model), aux ids as layer inputs, no embedding."""
    target, drafter = served
    cfg = json.loads((target / "config.json").read_text())
    out = write_vllm_mla_drafter(drafter, cfg, tmp_path / "vllm")
    written = json.loads((out / "config.json").read_text())
    source = json.loads((drafter / "config.json").read_text())
    assert written["model_type"] == "deepseek_v2" and written["architectures"] == ["Eagle3DeepseekV2ForCausalLM"]
    nested = source["eagle_config"]["eagle_aux_hidden_state_layer_ids"]  # SGLang's layer outputs
    assert written["eagle_aux_hidden_state_layer_ids"] == [i + 1 for i in nested] and "eagle_config" not in written
    assert written["kv_lora_rank"] == 512 and written["q_lora_rank"] == 24
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert "embed_tokens.weight" not in names and "midlayer.self_attn.kv_a_proj_with_mqa.weight" in names


def test_a_q_proj_drafter_says_so_to_vllm(tmp_path):
    """q_lora_rank: null (one q_proj) is written, not left out: vLLM's config class reads an absent key as 1536."""
    cfg = mla_config(kv_lora_rank=512, qk_rope_head_dim=64, vocab_size=512, draft_vocab_size=512)
    d = Eagle3Drafter({**cfg, "q_lora_rank": None}).eval()
    assert d.spec.mla.q_lora_rank is None
    folder = save_drafter(d, tmp_path / "q-proj")
    target = {"model_type": "deepseek_v3", "num_hidden_layers": 6, "kv_lora_rank": 512, "qk_rope_head_dim": 64}
    written = json.loads((write_vllm_mla_drafter(folder, target, tmp_path / "vllm") / "config.json").read_text())
    assert "q_lora_rank" in written and written["q_lora_rank"] is None
    assert written["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]  # [1, 3, 4] read as SGLang reads them, plus one


@pytest.mark.engine
def test_an_mla_width_vllms_cpu_kernel_lacks_is_refused_in_one_line(tiny_world, tmp_path):
    """The tiny MLA world of tests/test_mla.py (latent 16 + rope 8): named with the kernel's one width, before any run."""
    target = write_deepseek_target(tmp_path / "target", tiny_world.target_a)
    d = Eagle3Drafter(mla_config(vocab_size=512, draft_vocab_size=512)).eval()
    drafter = save_drafter(d, tmp_path / "mla")
    with pytest.raises(EngineError) as err:
        measure_in_engine(target, drafter, [[1, 2, 3]], 4)
    assert "512 + 64" in str(err.value) and "16 + 8" in str(err.value) and "cpu_mla.py" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.engine
def test_a_deepseek_v3_target_without_routing_keys_is_refused(served, tmp_path):
    """transformers writes no topk_method / scoring_func; vLLM reads them as softmax routing without the bias."""
    target, drafter = served
    bare = shutil.copytree(target, tmp_path / "bare")
    cfg = json.loads((bare / "config.json").read_text())
    (bare / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if k not in ROUTING}))
    why = engine_refusal(bare, drafter)
    assert why is not None and "topk_method" in why and "noaux_tc" in why
    assert engine_refusal(target, drafter) is None
    with pytest.raises(EngineError, match="no topk_method"):
        measure_in_engine(bare, drafter, [[1, 2, 3]], 4)


@settings(max_examples=60, deadline=None)
@given(backend=st.one_of(st.none(), st.text(max_size=20), st.integers(), st.booleans(), st.lists(st.text(max_size=3))),
       key=st.sampled_from(["attention_backend", "draft_attention_backend"]))
def test_the_worker_reads_an_attention_backend_as_a_name_or_refuses_it(backend, key, tmp_path_factory):
    """The worker's request: a backend is null or a word of letters, digits and underscores, else one RequestError."""
    folder = tmp_path_factory.mktemp("target")
    req = {"target": str(folder), "drafter": None, "k": 0, "prompts": [[1]], "max_new_tokens": 1, "max_model_len": 8,
           key: backend}
    name = isinstance(backend, str) and backend.replace("_", "").isalnum()
    if backend is None or name:
        assert vllm_requests.validate(req)[key] == backend
    else:
        with pytest.raises(vllm_requests.RequestError, match=key):
            vllm_requests.validate(req)
