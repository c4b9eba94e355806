"""Export a drafter for serving: the SGLang / SpecForge folder and the vLLM (speculators) folder.

SGLang reads the SpecForge layout as is (``midlayer.*``, nested ``eagle_config`` aux ids,
layer outputs). vLLM reads the speculators format: ``layers.0.*`` keys, a
``transformer_layer_config``, a ``speculators_config`` naming the verifier, and top-level
``eagle_aux_hidden_state_layer_ids`` in vLLM's convention (layer *inputs*, one more than
SGLang's ids).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eaglelab.checkpoints.schema import aux_ids_as_layer_outputs, drafter_spec_from_config
from eaglelab.errors import OverwriteError

_LAYER_KEYS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
               "hidden_act", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters",
               "max_position_embeddings", "vocab_size", "attention_bias", "mlp_bias", "initializer_range",
               "tie_word_embeddings")


def speculators_config(drafter_cfg: dict[str, Any], target_cfg: dict[str, Any], verifier: str,
                       num_speculative_tokens: int = 3) -> dict[str, Any]:
    """The speculators / vLLM config of a SpecForge-style drafter config.

    Args:
        drafter_cfg: the SpecForge config.json.
        target_cfg: the target's config (for its layer count and architectures).
        verifier: the target's name or path, recorded for vLLM.
        num_speculative_tokens: default draft length of the proposal method.
    """
    spec = drafter_spec_from_config(drafter_cfg)
    L = (target_cfg.get("text_config") or target_cfg)["num_hidden_layers"]
    outs = aux_ids_as_layer_outputs(spec.aux_layer_ids, spec.aux_convention, L)
    layer = {k: drafter_cfg[k] for k in _LAYER_KEYS if k in drafter_cfg}
    layer.update(model_type="llama", architectures=["LlamaForCausalLM"], num_hidden_layers=1,
                 tie_word_embeddings=False)
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.3.0",
        "draft_vocab_size": spec.draft_vocab_size,
        "target_hidden_size": spec.target_hidden_size,
        "norm_before_residual": False,
        # vLLM's ids are layer inputs: output of layer i == input of layer i + 1
        "eagle_aux_hidden_state_layer_ids": [i + 1 for i in outs],
        "transformer_layer_config": layer,
        "speculators_config": {
            "algorithm": "eagle3",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": num_speculative_tokens,
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": verifier,
                         "architectures": target_cfg.get("architectures") or ["LlamaForCausalLM"]},
        },
        "torch_dtype": drafter_cfg.get("torch_dtype", "bfloat16"),
    }


def export_speculators(drafter_dir: str | Path, out_dir: str | Path, target_cfg: dict[str, Any], verifier: str,
                       target_embedding=None, overwrite: bool = False, num_speculative_tokens: int = 3) -> Path:
    """Write the vLLM / speculators folder for a drafter checkpoint.

    Args:
        drafter_dir: SpecForge-layout drafter folder.
        out_dir: new folder to write.
        target_cfg: the target's config dict.
        verifier: target name or path recorded in the config.
        target_embedding: [V, H] tensor written as ``embed_tokens.weight`` when the drafter has none
            (speculators models carry the embedding).
        overwrite: replace an existing export.
    """
    import torch
    from safetensors.torch import load_file, save_file

    from eaglelab.atomic import atomic_path, write_json_atomic
    from eaglelab.checkpoints.sources import load_checkpoint

    out = Path(out_dir)
    if (out / "model.safetensors").exists() and not overwrite:
        raise OverwriteError(out, "already holds an export; pass overwrite (--force) to replace it")
    ck = load_checkpoint(str(drafter_dir))
    sd: dict[str, torch.Tensor] = {}
    for f in ck.weight_files:
        sd.update(load_file(f))
    renamed = {}
    for k, v in sd.items():
        k = k[len("model."):] if k.startswith("model.") else k
        k = "layers.0." + k[len("midlayer."):] if k.startswith("midlayer.") else k
        renamed[k] = v.contiguous()
    if "embed_tokens.weight" not in renamed and target_embedding is not None:
        dtype = renamed["fc.weight"].dtype
        renamed["embed_tokens.weight"] = target_embedding.detach().to("cpu", dtype).contiguous()
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / "model.safetensors") as tmp:
        save_file(renamed, str(tmp), metadata={"format": "pt", "producer": "eaglelab"})
    write_json_atomic(out / "config.json", speculators_config(ck.config, target_cfg, verifier, num_speculative_tokens))
    return out
