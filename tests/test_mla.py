"""MLA EAGLE-3 drafters (Kimi-K2.5 / K2.6, SGLang's ``Eagle3DeepseekV2ForCausalLM``) against a reference.

SGLang needs CUDA, so the reference (``tests/references.py`` :class:`SglangMlaDrafter`) is transformers'
DeepSeek-V3 attention, MLP and norms composed as SGLang's MLA drafter composes them. eaglelab's drafter
is written to disk, read back by the reference from the file, and both run on the same inputs in fp32:
a prefix and three draft steps through a KV cache (how SGLang drafts), and the training-time-test unroll
(which must equal, position by position, the reference drafting a chain from that position).
"""

from __future__ import annotations

import json

import pytest
import torch

from eaglelab.checkpoints.drafters.export import export_drafter
from eaglelab.checkpoints.drafters.spec import drafter_spec_from_config
from eaglelab.checkpoints.drafters.variants import rope_of
from eaglelab.errors import UnsupportedDrafterError
from eaglelab.model.attention import DrafterKV
from eaglelab.model.drafter import Eagle3Drafter
from eaglelab.model.drafter_files import load_drafter, save_drafter
from tests.conftest import fill_realistic, run_cli
from tests.references import SglangMlaDrafter

H, HEADS, V, INTER = 64, 4, 256, 96
S, STEPS = 12, 3
TOL = 1e-5
KIMI_YARN = {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 1.0,
             "original_max_position_embeddings": 8, "type": "yarn"}


def mla_config(q_lora_rank: int | None = 24, draft_vocab_size: int | None = V, **over) -> dict:
    """A small MLA drafter config shaped like TorchSpec's Kimi-K2.5 one (positions beyond 8 exercise YaRN).

    ``q_lora_rank=None`` writes it null (one ``q_proj``); an absent key reads as the engines' 1536.
    """
    cfg = {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "kimi_k2", "hidden_size": H,
           "intermediate_size": INTER, "num_hidden_layers": 1, "num_attention_heads": HEADS,
           "num_key_value_heads": HEADS, "q_lora_rank": q_lora_rank, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
           "qk_rope_head_dim": 8, "v_head_dim": 12, "hidden_act": "silu", "rms_norm_eps": 1e-5, "vocab_size": V,
           "rope_theta": 50000.0, "rope_scaling": KIMI_YARN,
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4], "use_aux_hidden_state": True,
                            "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True,
                            "use_mtp_layernorm": False}}
    if draft_vocab_size is not None:
        cfg["draft_vocab_size"] = draft_vocab_size
    return {**cfg, **over}


def realistic(d: Eagle3Drafter, seed: int) -> Eagle3Drafter:
    fill_realistic(d, seed)
    return d.eval()


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def written(cfg: dict, tmp_path, seed: int = 3) -> tuple[Eagle3Drafter, SglangMlaDrafter]:
    d = realistic(Eagle3Drafter(cfg), seed)
    folder = save_drafter(d, tmp_path / "mla", include_embedding=True)
    return d, SglangMlaDrafter(folder)


def inputs(seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (1, S), generator=gen), torch.randn(1, S, 3 * H, generator=gen) * 2.0


@pytest.mark.parametrize("q_lora_rank", [24, None])
def test_mla_drafts_through_its_cache_as_the_reference(q_lora_rank, tmp_path):
    from transformers import DynamicCache

    d, ref = written(mla_config(q_lora_rank), tmp_path)
    ids, aux = inputs()
    positions = torch.arange(S)[None]
    with torch.no_grad():
        cache, ref_cache = DrafterKV(), DynamicCache()
        ours = d.step(ids, d.project(aux), positions, cache=cache)
        theirs = ref.step(ids, ref.project(aux), positions, ref_cache)
        assert rel(d.logits(ours), ref.logits(theirs)) < TOL
        h, g = ours[:, -1:], theirs[:, -1:]
        for i in range(STEPS):  # each step feeds the pre-norm output back with the token it drafted
            token = d.logits(h).argmax(-1)
            assert torch.equal(token, ref.logits(g).argmax(-1))
            pos = torch.tensor([[S + i]])
            h, g = d.step(token, h, pos, cache=cache), ref.step(token, g, pos, ref_cache)
            assert rel(d.logits(h), ref.logits(g)) < TOL, f"draft step {i}"
    assert d.logits(ours).abs().mean() > 0.3  # logits of order one: the comparison is not of near-zeros


def test_mla_training_unroll_is_the_reference_drafting_from_each_position(tmp_path):
    d, ref = written(mla_config(), tmp_path)
    ids, aux = inputs(2)
    with torch.no_grad():
        unrolled = d.ttt_logits(ids, aux, STEPS)
        for t in range(0, S - STEPS, 3):
            for i, logits in enumerate(ref.chain_logits(ids, aux, t, STEPS)):
                assert rel(unrolled[i][:, t], logits) < TOL, f"position {t}, step {i}"


def test_kimi_k25_mla_numbers_are_sglangs():
    """The K2.5 drafter's softmax scale and YaRN band, as SGLang's DeepseekV2AttentionMLA computes them."""
    from tests.test_kimi import fixture

    cfg = fixture("torchspec-k25-mla-drafter-config.json")
    spec = drafter_spec_from_config(cfg)
    rope = rope_of(cfg)
    assert spec.mla.qk_head_dim == 192 and spec.full_vocab and spec.attention == "mla"
    scale = spec.mla.qk_head_dim ** -0.5 * rope.softmax_mscale ** 2
    assert scale == pytest.approx(0.14467962580268923, rel=1e-12)
    assert rope._yarn_range(spec.mla.qk_rope_head_dim) == (19, 20)
    assert rope.attention_scale == 1.0


def test_mla_files_round_trip_in_either_layer_spelling(tmp_path):
    """SGLang reads midlayer.* and layers.0.* alike (TorchSpec's vLLM export writes layers.0. beside a flat config)."""
    from safetensors.torch import load_file, save_file

    d, _ = written(mla_config(), tmp_path)
    folder = tmp_path / "mla"
    sd = load_file(str(folder / "model.safetensors"))
    assert "midlayer.self_attn.kv_a_proj_with_mqa.weight" in sd and "d2t" not in sd  # full vocabulary: no maps
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    save_file({k.replace("midlayer.", "layers.0."): v for k, v in sd.items()}, str(renamed / "model.safetensors"))
    (renamed / "config.json").write_text((folder / "config.json").read_text())
    ids, aux = inputs()
    with torch.no_grad():
        want = d.ttt_logits(ids, aux, STEPS)
        for f in (folder, renamed):
            got = load_drafter(f).ttt_logits(ids, aux, STEPS)
            assert all(rel(g, w) < 1e-7 for g, w in zip(got, want, strict=True))


def test_an_mla_drafter_is_not_exported_to_speculators(tmp_path):
    written(mla_config(), tmp_path)
    target = {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 6, "hidden_size": H, "vocab_size": V}
    with pytest.raises(UnsupportedDrafterError, match="no speculators format") as err:
        export_drafter(tmp_path / "mla", tmp_path / "out", "speculators", target, "t")
    assert "\n" not in str(err.value) and not (tmp_path / "out" / "model.safetensors").exists()
    back = export_drafter(tmp_path / "mla", tmp_path / "sglang", "specforge")
    assert json.loads((back / "config.json").read_text())["kv_lora_rank"] == 16


# --------------------------------------------------------------------------- end to end on a DeepSeek-V3 target

#: The tiny target's latent widths: small, for speed (vLLM's CPU kernel needs others: tests/test_engine_mla.py).
TINY_LATENTS = {"kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 12,
                "max_position_embeddings": 256}


def write_deepseek_target(folder, tokenizer_from, seed: int = 0, noise: float = 0.0, words=(" the", " of"),
                          latents: dict | None = None, extra_config: dict | None = None):
    """A tiny DeepSeek-V3 (MLA attention, a dense first layer, then MoE layers) with the tiny world's tokenizer.

    Made learnable in a few dozen steps: its layers are damped (the last state is close to the token's
    embedding) and its head names two frequent tokens only (``words``), so its next token is one of two,
    chosen by the last token; a drafter that learns the choice gets drafts accepted, and decoding crosses
    full and partial acceptance. ``noise`` perturbs every weight (a drifted copy, for the probe).
    ``latents``: the latent widths and positions (default :data:`TINY_LATENTS`); ``extra_config``: keys
    written into the saved ``config.json`` over transformers' own.
    """
    import shutil

    from tokenizers import Tokenizer
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    torch.manual_seed(seed)
    cfg = DeepseekV3Config(vocab_size=512, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                           num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=24,
                           n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
                           n_group=1, topk_group=1, bos_token_id=None, eos_token_id=None, pad_token_id=None,
                           tie_word_embeddings=False, **(latents or TINY_LATENTS))
    model = DeepseekV3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layers" in name and p.dim() == 2:
                p.mul_(0.05)
        v = torch.randn(cfg.hidden_size, generator=torch.Generator().manual_seed(seed))
        model.lm_head.weight.zero_()
        ids = [Tokenizer.from_file(str(tokenizer_from / "tokenizer.json")).encode(w).ids[0] for w in words]
        model.lm_head.weight[ids[0]], model.lm_head.weight[ids[1]] = v, -v
        if noise:
            for p in model.parameters():
                p.add_(torch.randn_like(p) * noise * p.std().clamp_min(1e-3))
    model.save_pretrained(folder)
    if extra_config:
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **extra_config}, indent=1))
    for f in tokenizer_from.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(f, folder / f.name)
    return folder


def cli(*argv: str) -> str:
    code, out, err = run_cli(*argv)
    assert code == 0, err
    return out


def test_an_mla_drafter_runs_end_to_end_on_a_deepseek_v3_target(tiny_world, tmp_path):
    """drafter init (MLA), a warm fine-tune, speculative decoding (equal to greedy) and the probe, from the command line."""
    a = write_deepseek_target(tmp_path / "target-a", tiny_world.target_a)
    b = write_deepseek_target(tmp_path / "target-b", tiny_world.target_a, noise=0.05)
    cli("drafter", "init", "--target", str(a), "--attention", "mla", "--out", str(tmp_path / "init"), "--dtype", "float32")
    cfg = json.loads((tmp_path / "init" / "config.json").read_text())
    assert cfg["architectures"] == ["Eagle3DeepseekV2ForCausalLM"] and cfg["kv_lora_rank"] == 16
    assert "as SGLang computes it" in cli("inspect", str(tmp_path / "init"))
    cli("finetune", "--new-target", str(a), "--old-drafter", str(tmp_path / "init"), "--out", str(tmp_path / "run"),
        "--world-dir", str(tiny_world.root), "--sequences", "32", "--eval-sequences", "8", "--seq-len", "32",
        "--steps", "40", "--batch-size", "8", "--lr", "3e-3")
    trained = tmp_path / "run" / "final"
    assert load_drafter(trained).spec.attention == "mla"
    taus = []
    for prompt in ("The history of", "import os\n"):
        run = json.loads(cli("speculate", "--target", str(a), "--drafter", str(trained), "--prompt", prompt,
                             "--max-new-tokens", "24", "--k", "3", "--repeats", "1", "--json"))
        assert run["matches_greedy"] is True, run  # every emitted token is the target's own greedy token
        taus.append(run["accept_len"])
    assert max(taus) > 1.5, taus  # drafts accepted: the MLA drafter's cache crossed accepted and rejected drafts
    probe = json.loads(cli("probe", "--old-target", str(a), "--new-target", str(b), "--old-drafter", str(trained),
                           "--world-dir", str(tiny_world.root), "--sequences", "6", "--seq-len", "32",
                           "--measure-prompts", "0", "--json"))
    assert probe["plugin"]["accept_len_on_a"] > 1.5 and probe["plugin"]["accept_len_on_b"] >= 1
    assert all(0 < layer["cosine_mean"] < 1 for layer in probe["layers"])  # B moved, a little


def test_the_probe_recipe_names_an_mla_drafters_layers_in_a_config_specforge_reads(tiny_world, tmp_path):
    """SpecForge's registry has no MLA drafter: its capture reads a stand-in config naming the same layers."""
    from specforge.training.model_loading import load_draft_config_source
    from transformers import AutoConfig

    from eaglelab.engines.probe_recipes import ProbeRecipeSettings, build_probe_recipe
    from tests.references import _triton_stand_in

    from .script_stubs import run_script

    mla = written(mla_config(draft_vocab_size=None, vocab_size=512), tmp_path)[0]
    folder = save_drafter(mla, tmp_path / "mla-512")
    recipe = build_probe_recipe(ProbeRecipeSettings("specforge", str(folder), str(tiny_world.target_a),
                                                    str(tiny_world.target_b), workdir="w"))
    out = recipe.write(tmp_path / "recipe")
    (tmp_path / "w").mkdir()
    calls, proc = run_script(out / "run.sh", tmp_path)
    assert proc.returncode == 0, proc.stderr
    configs = {c[c.index("--draft-model-config") + 1] for c in calls if c[0] == "torchrun"}
    assert configs == {str(out / "capture_config.json")}
    with _triton_stand_in():
        from specforge.application.composition import resolve_offline_capture
        from specforge.config.schema import Config

        with pytest.raises(ValueError, match="not registered"):  # the MLA drafter's own config
            load_draft_config_source(str(folder))

        def layers(draft_config: str) -> tuple:  # SpecForge's own resolution of what its capture script dumps
            cfg = Config(model={"target_model_path": str(tiny_world.target_a), "draft_model_config": draft_config},
                         data={"hidden_states_path": str(tmp_path / "hs"), "max_length": 64}, training={"strategy": "eagle3"})
            return resolve_offline_capture(cfg, target_config=AutoConfig.from_pretrained(tiny_world.target_a)).capture_layers

        assert layers(str(out / "capture_config.json")) == (1, 3, 4) == tuple(recipe.vocab_map["aux_layer_outputs"])
