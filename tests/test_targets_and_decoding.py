"""Aux capture matches a manual forward; speculative decoding equals greedy token for token."""

from __future__ import annotations

import pytest
import torch

from eaglelab.checkpoints.drafters.spec import drafter_spec_from_config
from eaglelab.model.decoding import benchmark_speculation, greedy_decode, measure_acceptance, speculative_decode
from eaglelab.model.drafter import Eagle3Drafter
from eaglelab.model.drafter_files import load_drafter
from eaglelab.model.targets import Target, load_target


@pytest.mark.parametrize("config_ids, convention", [({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 3, 6]}}, "sglang"),
                                                    ({"eagle_aux_hidden_state_layer_ids": [1, 4, 7]}, "vllm"),
                                                    ({}, None)])
def test_aux_capture_matches_output_hidden_states(tiny_llama, config_ids, convention):
    base = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "draft_vocab_size": 64,
            "num_hidden_layers": 1, **config_ids}
    spec = drafter_spec_from_config(base)
    assert spec.aux_convention == convention
    target = Target.for_drafter(tiny_llama, spec)
    ids = torch.randint(0, 256, (2, 9))
    out = target.forward(ids)
    hs = tiny_llama(ids, output_hidden_states=True).hidden_states  # index 0 = embedding
    expected_outputs = {"sglang": (0, 3, 6), "vllm": (0, 3, 6), None: (1, 3, 4)}[convention]
    assert target.aux_layer_outputs == expected_outputs
    manual = torch.cat([hs[i + 1] for i in expected_outputs], dim=-1)
    assert torch.equal(out.aux, manual)
    assert torch.allclose(out.last_hidden, hs[-1])
    assert torch.allclose(tiny_llama.lm_head(out.last_hidden), out.logits, atol=1e-5)


@pytest.mark.parametrize("k", [1, 2, 4, 7])
def test_random_drafter_speculation_equals_greedy(tiny_llama, k):
    drafter = Eagle3Drafter.from_target_config(tiny_llama.config.to_dict(), draft_vocab_size=128)
    target = Target.for_drafter(tiny_llama, drafter.spec)
    gen = torch.Generator().manual_seed(k)
    for _ in range(3):
        prompt = torch.randint(0, 256, (int(torch.randint(1, 12, (1,), generator=gen)),), generator=gen).tolist()
        g = greedy_decode(target, prompt, 25)
        s = speculative_decode(target, drafter, prompt, 25, k=k)
        assert s.tokens == g.tokens
        assert all(1 <= c.emitted <= k + 1 for c in s.cycles)


def test_trained_drafter_speculates_exactly_and_accepts(tiny_world):
    model, tok = load_target(tiny_world.target_a, device="cpu")
    drafter = load_drafter(tiny_world.drafter_a)
    target = Target.for_drafter(model, drafter.spec)
    prompts = [tok(p)["input_ids"] for p in tiny_world.held_out_prompts()[:10]]
    for k in (1, 3, 5):
        for ids in prompts:
            assert speculative_decode(target, drafter, ids, 40, k=k).tokens == greedy_decode(target, ids, 40).tokens
    bench = benchmark_speculation(target, drafter, prompts[:5], 40, k=4, keep_outputs=True)
    assert bench.matches_greedy and bench.accept_len > 1.5
    assert len(bench.position_acceptance) == 4
    assert bench.position_acceptance[0] > 0.3
    # τ alone (a drift sweep's measured points): the benchmark's cycles without its plain baseline
    alone = measure_acceptance(target, drafter, prompts[:5], 40, k=4)
    assert alone["outputs"] == bench.outputs  # plain greedy decoding's text
    assert (alone["accept_len"], alone["position_acceptance"], alone["cycles"]) == \
        (bench.accept_len, bench.position_acceptance, bench.cycles)
