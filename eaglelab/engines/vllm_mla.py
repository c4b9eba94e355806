"""vLLM serves an MLA drafter: the folder its ``Eagle3DeepseekV2ForCausalLM`` reads, and what its CPU build cannot run.

vLLM (0.32.0) has an MLA EAGLE-3 class (``model_executor/models/deepseek_eagle3.py``) but no speculators
format for it: it reads a flat, SpecForge-like config through its ``EAGLEConfig``, renames ``midlayer.*``
to ``layers.0.*`` itself, and takes aux ids from a top-level ``eagle_aux_hidden_state_layer_ids`` as layer
*inputs* (a nested ``eagle_config`` list is read as inputs too, where SGLang reads outputs). The class
reads ``fc_norm``, ``norm_before_residual`` and ``norm_output`` (the normed state fed back), always
applies ``norm`` before ``lm_head``, and has no ``input_norm``. Three traps of vLLM's own make the
folder differ from the SpecForge one: a ``deepseek_v3`` model type is rewritten to ``DeepSeekMTPModel``
for every draft (``config/speculative.py`` ``hf_config_override``), so the folder says ``deepseek_v2``;
an absent ``q_lora_rank`` would read as transformers' 1536, so it is written (null for ``q_proj``); and the
aux ids are written as layer inputs.

The CPU build runs MLA with its reference backend (``CPU_MLA``, exact in float32; the AMX one is bf16
only and packs no small head) whose decode kernel compiles for one latent width, ``kv_lora_rank +
qk_rope_head_dim`` = 512 + 64, DeepSeek-V3's (``v1/attention/backends/mla/cpu_mla.py``). A DeepSeek-V3
target saved by transformers writes neither ``topk_method`` nor ``scoring_func``: transformers routes with
sigmoid scores and a correction bias, vLLM reads the absent keys as softmax without one (and fails to
load the bias). Each is refused in one line, before the engine starts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eaglelab.checkpoints.drafters.spec import (
    DrafterSpec,
    aux_ids_as_layer_outputs,
    drafter_spec_from_config,
    is_mla_config,
    layer_body,
)
from eaglelab.checkpoints.drafters.tensor_table import canonical_tensor_name, check_tensors_against_spec
from eaglelab.checkpoints.files.sources import load_checkpoint
from eaglelab.errors import CheckpointMismatchError, ConfigError, UnsupportedDrafterError

#: The one latent width (kv_lora_rank + qk_rope_head_dim) vLLM's CPU MLA decode kernel runs.
CPU_MLA_HEAD = 576
#: The attention backend asked for wherever MLA layers run on vLLM's CPU build.
CPU_MLA_BACKEND = "CPU_MLA"
#: vLLM's class for an MLA EAGLE-3 drafter (registry: Eagle3DeepseekV2/V3ForCausalLM -> deepseek_eagle3).
VLLM_MLA_ARCH = "Eagle3DeepseekV2ForCausalLM"
#: Keys of the source config the vLLM folder writes anew, in vLLM's meaning.
_REWRITTEN = ("architectures", "model_type", "eagle_config", "eagle_aux_hidden_state_layer_ids", "norm_output",
              "norm_before_fc", "fc_norm", "norm_before_residual", "q_lora_rank", "draft_vocab_size")


def target_uses_mla(target_cfg: dict[str, Any]) -> bool:
    """Whether a target's attention is multi-head latent (DeepSeek-V2/V3, Kimi-K2: ``kv_lora_rank`` set)."""
    return _text_config(target_cfg).get("kv_lora_rank") is not None


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The language model's config (Kimi-K2.5 nests it under ``text_config``)."""
    inner = cfg.get("text_config")
    return inner if isinstance(inner, dict) else cfg


def _latent_problem(who: str, kv_lora_rank: Any, rope: Any) -> str | None:
    if kv_lora_rank is None or rope is None or kv_lora_rank + rope == CPU_MLA_HEAD:
        return None
    return (f"vLLM's CPU build runs MLA only at kv_lora_rank + qk_rope_head_dim = 512 + 64 (its CPU_MLA decode "
            f"kernel, v1/attention/backends/mla/cpu_mla.py); {who} has {kv_lora_rank} + {rope}")


def mla_refusal(target_cfg: dict[str, Any], drafter_cfg: dict[str, Any] | None) -> str | None:
    """Why vLLM's CPU build cannot run this target and drafter as eaglelab computes them, or None.

    Checks what the engine would otherwise fail on or compute differently: a latent width its CPU MLA
    kernel does not run (target or drafter), an MLA drafter flag its class does not compute, and a
    DeepSeek-V3 MoE target whose routing keys are absent.
    """
    body = _text_config(target_cfg)
    problem = _latent_problem("the target", body.get("kv_lora_rank"), body.get("qk_rope_head_dim"))
    if problem:
        return problem
    if drafter_cfg is not None and is_mla_config(drafter_cfg):
        d = layer_body(drafter_cfg)
        problem = _latent_problem("the drafter", d.get("kv_lora_rank"), d.get("qk_rope_head_dim")) or \
            _flag_problem(drafter_spec_from_config(drafter_cfg))
        if problem:
            return problem
    if body.get("model_type") == "deepseek_v3" and body.get("n_routed_experts") and \
            (body.get("topk_method") is None or body.get("scoring_func") is None):
        return ("the DeepSeek-V3 target's config has no topk_method / scoring_func: transformers routes its experts "
                "with sigmoid scores and a correction bias, vLLM reads the absent keys as softmax without one "
                "(model_executor/models/deepseek_v2.py); write \"topk_method\": \"noaux_tc\", \"scoring_func\": "
                "\"sigmoid\" into its config.json, as DeepSeek-V3's own config has them")
    return None


def _flag_problem(spec: DrafterSpec) -> str | None:
    """A flag of this MLA drafter vLLM's class computes otherwise (serving it there would be a near model), or None."""
    if spec.norm_before_fc or spec.input_norm_kept:
        return ("norm_before_fc (input_norm) is set: vLLM's MLA EAGLE-3 class has no input_norm "
                "(model_executor/models/deepseek_eagle3.py)")
    if not spec.norm_before_head:
        return ("its logits skip the final norm: vLLM's MLA EAGLE-3 class always applies norm before lm_head "
                "(model_executor/models/deepseek_eagle3.py)")
    return None


def vllm_mla_config(cfg: dict[str, Any], num_target_layers: int, where: str = "config.json") -> dict[str, Any]:
    """The config vLLM's ``Eagle3DeepseekV2ForCausalLM`` reads for this MLA drafter, every flag in vLLM's meaning.

    Raises:
        UnsupportedDrafterError: a flag vLLM's MLA class does not compute (``input_norm``, no norm before
            ``lm_head``): serving it there would be a near model, not this one.
    """
    spec = drafter_spec_from_config(cfg, where)
    if spec.mla is None:
        raise ConfigError(where, "not an MLA drafter")
    problem = _flag_problem(spec)
    if problem:
        raise UnsupportedDrafterError(where, problem)
    outputs = aux_ids_as_layer_outputs(spec.aux_layer_ids, spec.aux_convention, num_target_layers)
    out = {k: v for k, v in layer_body(cfg).items() if k not in _REWRITTEN}
    out.update(architectures=[VLLM_MLA_ARCH], model_type="deepseek_v2", q_lora_rank=spec.mla.q_lora_rank,
               draft_vocab_size=spec.draft_vocab_size, eagle_aux_hidden_state_layer_ids=[i + 1 for i in outputs],
               fc_norm=spec.fc_norm, norm_before_residual=spec.norm_before_residual, norm_output=spec.norm_fed_back)
    if spec.target_hidden_size != spec.hidden_size:
        out["target_hidden_size"] = spec.target_hidden_size
    return out


def write_vllm_mla_drafter(drafter_dir: str | Path, target_cfg: dict[str, Any], out_dir: Path) -> Path:
    """Write the MLA drafter as vLLM reads it into ``out_dir`` (a fresh folder): its config, its tensors less the embedding.

    The embedding is left out so vLLM shares the target's (as SGLang and the workbook's own measurement do).

    Raises:
        ConfigError, UnsupportedDrafterError: see :func:`vllm_mla_config`.
        CheckpointMismatchError: the tensors do not fit the drafter's own config.
    """
    from safetensors.torch import load_file, save_file

    ck = load_checkpoint(str(drafter_dir))
    if ck.config is None:
        raise ConfigError(drafter_dir, "no config.json beside the weights")
    where = str(ck.config_path or drafter_dir)
    layers = _text_config(target_cfg).get("num_hidden_layers")
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
        raise ConfigError("target config.json", f"field 'num_hidden_layers' must be a positive integer, got {layers!r}")
    cfg = vllm_mla_config(ck.config, layers, where)
    spec = drafter_spec_from_config(ck.config, where)
    problems = check_tensors_against_spec(spec, {n: (t.shape, t.dtype) for n, t in ck.tensors.items()})
    if problems:
        raise CheckpointMismatchError(drafter_dir, "; ".join(problems))
    sd = {}  # vLLM prefixes "model." itself and maps midlayer.* to layers.0.*: the SpecForge spelling, unprefixed
    for f in ck.weight_files:
        sd.update({canonical_tensor_name(k): v.contiguous() for k, v in load_file(f).items()})
    sd.pop("embed_tokens.weight", None)
    if not spec.norm_before_fc:
        sd.pop("input_norm.weight", None)  # kept in the file, never applied: vLLM's class has no such module
    out_dir.mkdir(parents=True)
    save_file(sd, str(out_dir / "model.safetensors"), metadata={"format": "pt", "producer": "eaglelab"})
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    return out_dir
