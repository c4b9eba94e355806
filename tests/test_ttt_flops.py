"""#42 item 3: the TTT FLOP count is what ``forward_ttt`` computes, held against torch's own FLOP counter.

``ttt_flops_per_token`` counts matmul FLOPs (the training benchmark's share of peak divides by it); torch's
``FlopCounterMode`` counts the matmuls the unroll actually runs. A Llama drafter (GQA) and an MLA drafter
(both low-rank query forms), at two sequence lengths and unroll lengths: the counts agree exactly.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from eaglelab.model.drafter import Eagle3Drafter
from eaglelab.train.training import ttt_flops_per_token
from tests.test_mla import mla_config

LLAMA = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64, "intermediate_size": 96,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "draft_vocab_size": 64,
         "num_hidden_layers": 1, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 2]}}


@pytest.mark.parametrize("config", [LLAMA, mla_config(), mla_config(q_lora_rank=None)], ids=["llama", "mla", "mla-q"])
@pytest.mark.parametrize("seq, steps", [(16, 1), (32, 3), (48, 5)])
def test_the_counted_flops_are_the_unrolls_matmuls(config, seq, steps):
    drafter = Eagle3Drafter(config).eval()
    ht = drafter.spec.target_hidden_size
    ids = torch.randint(0, 200, (2, seq))
    aux = torch.randn(2, seq, 3 * ht)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        drafter.ttt_logits(ids, aux, steps)
    counted = ttt_flops_per_token(drafter.spec, seq, steps, target_rows=0) / 3 * ids.numel()
    assert counter.get_total_flops() == pytest.approx(counted, rel=1e-9)
