"""The drafter config a target implies, as SpecForge derives it (plain dicts; no torch)."""

from __future__ import annotations

from typing import Any

from eaglelab.checkpoints.drafters.spec import DEFAULT_DRAFT_VOCAB, MLA_FIELDS, default_aux_layer_outputs
from eaglelab.checkpoints.drafters.variants import ROPE_KINDS
from eaglelab.checkpoints.targets.config import text_config
from eaglelab.errors import ConfigError


def distinct_aux_layer_outputs(num_target_layers: int) -> list[int]:
    """The engines' default layers [1, L//2-1, L-4], made three distinct ids for targets under 8 layers.

    SGLang and vLLM compute the default as is; below 8 layers it repeats a layer ([1, 2, 2] at 6),
    which vLLM's hidden-state capture refuses. A drafter eaglelab writes names its layers, so it
    takes the nearest increasing ids instead ([1, 2, 3] at 6, [0, 1, 2] at 3).
    """
    L = num_target_layers
    ids = list(default_aux_layer_outputs(L))
    for i in (1, 2):
        ids[i] = max(ids[i], ids[i - 1] + 1)
    for i, top in ((2, L - 1), (1, L - 2), (0, L - 3)):
        ids[i] = min(ids[i], top)
    return ids


#: The drafter layer's attention: Llama q/k/v (SpecForge, speculators) or multi-head latent attention (SGLang's
#: ``Eagle3DeepseekV2ForCausalLM``, TorchSpec's Kimi drafters).
ATTENTION_KINDS = ("llama", "mla")


def drafter_config_for_target(target_cfg: dict[str, Any], draft_vocab_size: int | None = None,
                              aux_layer_ids: list[int] | None = None, attention: str = "llama",
                              **overrides) -> dict[str, Any]:
    """SpecForge-style drafter config for a transformers target config (a multimodal one's ``text_config``).

    Copies the target's width, heads, MLP width, vocabulary, eps and RoPE (scaling included, when eaglelab
    computes its kind); one layer; draft vocabulary ``min(32000, V)`` by default (V: a full-vocabulary
    drafter, no maps); aux ids (layer outputs) default [1, L//2-1, L-4] (three distinct ids below 8 layers,
    :func:`distinct_aux_layer_outputs`), written nested under ``eagle_config`` as SGLang / SpecForge read them.
    A Llama drafter on an MLA target takes the target's ``v_head_dim`` as its head size (Kimi-K2's community
    drafter: 128, not 7168 / 64); ``attention="mla"`` copies the target's MLA shapes instead, as TorchSpec's
    Kimi-K2.5 MLA drafter does.

    Raises:
        ConfigError: aux ids that are not three distinct layers of the target; MLA asked of a target without it.
    """
    t = text_config(target_cfg)
    L = t["num_hidden_layers"]
    V = t["vocab_size"]
    if L < 3:
        raise ConfigError("aux_layer_ids", f"an EAGLE-3 drafter reads three distinct target layers; this target has {L}")
    ids = list(aux_layer_ids) if aux_layer_ids is not None else distinct_aux_layer_outputs(L)
    if len(ids) != 3 or not all(isinstance(i, int) and 0 <= i < L for i in ids):
        raise ConfigError("aux_layer_ids", f"need three layer ids in [0, {L}), got {ids}")
    if len(set(ids)) != 3:
        raise ConfigError("aux_layer_ids", f"the three layers must be distinct (vLLM captures each layer once), got {ids}")
    if attention not in ATTENTION_KINDS:
        raise ConfigError("attention", f"unknown attention {attention!r}; choose {' or '.join(ATTENTION_KINDS)}")
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "num_hidden_layers": 1,
        "hidden_size": t["hidden_size"],
        "intermediate_size": t["intermediate_size"],
        "num_attention_heads": t["num_attention_heads"],
        "num_key_value_heads": t.get("num_key_value_heads", t["num_attention_heads"]),
        "head_dim": t.get("head_dim") or t.get("v_head_dim") or t["hidden_size"] // t["num_attention_heads"],
        "hidden_act": t.get("hidden_act", "silu"),
        "rms_norm_eps": t.get("rms_norm_eps", 1e-6),
        "rope_theta": (t.get("rope_parameters") or {}).get("rope_theta", t.get("rope_theta", 10000.0)),
        "max_position_embeddings": t.get("max_position_embeddings", 2048),
        "vocab_size": V,
        "draft_vocab_size": draft_vocab_size or min(DEFAULT_DRAFT_VOCAB, V),
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True},
        "torch_dtype": "float32",
    }
    scaling = t.get("rope_scaling") or {k: v for k, v in (t.get("rope_parameters") or {}).items() if k != "rope_theta"}
    if isinstance(scaling, dict) and (scaling.get("rope_type") or scaling.get("type")) in ROPE_KINDS[1:]:
        cfg["rope_scaling"] = dict(scaling)
    if attention == "mla":
        if t.get("kv_lora_rank") is None:
            raise ConfigError("attention", "an MLA drafter copies the target's multi-head latent attention, and this "
                                           "target has none (no kv_lora_rank)")
        del cfg["head_dim"]
        # q_lora_rank written even when null (one q_proj): absent, the engines read their config class's 1536
        cfg.update({"architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": t.get("model_type", "deepseek_v3"),
                    **{k: t.get(k) for k in MLA_FIELDS if t.get(k) is not None or (k == "q_lora_rank" and k in t)}})
    cfg.update(overrides)
    return cfg
