"""What SGLang's MLA drafter class makes of an MLA drafter's flags, and where the other engines depart (no torch).

eaglelab computes an MLA drafter (DeepSeek / Kimi, ``Eagle3DeepseekV2ForCausalLM``) as SGLang's class computes
it (:func:`eaglelab.checkpoints.drafters.spec.mla_flags`); this module names the SGLang layout a config needs, refuses
the combinations the engines read in contradiction, and words the cautions. Read from: SGLang
``python/sglang/srt/models/kimi_k25_eagle3.py`` at PR #24826's layout (commit 40449c1) and at PR #26506's
EAGLE-3.1 layout (commit 054a1ce); vLLM ``vllm/model_executor/models/deepseek_eagle3.py`` (commit 0359019);
TorchSpec ``torchspec/models/draft/deepseek_eagle.py`` (commit 6dda2bf).
"""

from __future__ import annotations

from typing import Any

from eaglelab.checkpoints.drafters.spec import SPECULATORS, eagle_config

#: The EAGLE-3.1 flags of an MLA config, as SGLang's later ``kimi_k25_eagle3.py`` layout reads them (PR #26506).
MLA_EAGLE31_FLAGS = ("fc_norm", "use_aux_norm", "norm_output")


def mla_layout(cfg: dict[str, Any]) -> str:
    """Which layout of SGLang's MLA drafter class (``kimi_k25_eagle3.py``) an MLA config needs.

    The EAGLE-3.1 layout (PR #26506) reads ``fc_norm`` (or ``use_aux_norm``) and ``norm_output``; the first
    one (PR #24826) reads neither. A config that sets none of them true is computed alike by both.
    """
    on = [k for k in MLA_EAGLE31_FLAGS if cfg.get(k) is True]
    if on:
        return f"SGLang layout: EAGLE-3.1 ({', '.join(on)}; kimi_k25_eagle3.py since PR #26506)"
    return "SGLang layout: EAGLE-3 (kimi_k25_eagle3.py as PR #24826 added it, and PR #26506's alike)"


def mla_refusals(cfg: dict[str, Any], body: dict[str, Any], fmt: str) -> list[str]:
    """What eaglelab (and SGLang's MLA drafter) cannot compute in an MLA drafter config."""
    out = []
    if fmt == SPECULATORS:
        out.append("an MLA drafter in the speculators format: speculators' drafter layer is llama or qwen3 only; "
                   "write it in the SpecForge / SGLang layout (Eagle3DeepseekV2ForCausalLM)")
    if cfg.get("attention_bias") or body.get("attention_bias"):
        out.append("attention_bias: true in an MLA drafter: SGLang's MLA layer has no biases")
    scaling = body.get("rope_scaling") if isinstance(body.get("rope_scaling"), dict) else {}
    kind = scaling.get("rope_type") or scaling.get("type")
    if scaling and kind not in ("yarn", "deepseek_yarn"):
        out.append(f"rope_scaling type {kind!r} in an MLA drafter: SGLang reads any rope_scaling of an MLA layer as "
                   "DeepSeek YaRN; write type yarn")
    if isinstance(body.get("qk_rope_head_dim"), int) and body["qk_rope_head_dim"] % 2:
        out.append(f"qk_rope_head_dim {body['qk_rope_head_dim']} is odd: RoPE rotates pairs of dimensions")
    if cfg.get("fc_norm") is False and cfg.get("use_aux_norm") is True:
        out.append("fc_norm: false with use_aux_norm: true: SGLang's MLA class applies fc_norm (either flag), vLLM's "
                   "deepseek_eagle3 does not (fc_norm only); write one flag")
    return out


#: Model-Optimizer's flags of a Kimi drafter, with their defaults; SGLang reads none of them and applies every norm.
MODELOPT_LAYER_FLAGS = {"use_input_layernorm_in_first_layer": True, "use_last_layernorm": True,
                        "use_mtp_layernorm": False}


def mla_cautions(cfg: dict[str, Any], body: dict[str, Any]) -> list[str]:
    """Where an engine reads an MLA drafter's flags otherwise than eaglelab, which computes SGLang's MLA class.

    Sources: SGLang ``python/sglang/srt/models/kimi_k25_eagle3.py`` at PR #24826's layout (commit 40449c1) and
    PR #26506's EAGLE-3.1 layout (commit 054a1ce); vLLM ``vllm/model_executor/models/deepseek_eagle3.py``
    (commit 0359019).
    """
    out = []
    on = [k for k in MLA_EAGLE31_FLAGS if cfg.get(k) is True]
    if on:
        out.append(f"{', '.join(on)}: EAGLE-3.1, computed as SGLang's MLA class since PR #26506 (and vLLM's "
                   "deepseek_eagle3); SGLang with PR #24826's layout reads neither flag: it skips fc_norm.* and feeds "
                   "the pre-norm state to the next step")
    if cfg.get("use_aux_norm") is True and cfg.get("fc_norm") is not True:
        out.append("use_aux_norm: true: SGLang's MLA class reads it as fc_norm; vLLM's deepseek_eagle3 reads fc_norm "
                   "only (no place for fc_norm.*): write fc_norm: true")
    if cfg.get("norm_output") is False:
        out.append("norm_output: false in an MLA drafter: SGLang's MLA class (both layouts), vLLM's and TorchSpec apply "
                   "the final norm before lm_head and feed the pre-norm state back, as eaglelab computes (dropping "
                   "the norm is SpecForge's Llama meaning)")
    if eagle_config(cfg).get("norm_before_fc", cfg.get("norm_before_fc")) is True:
        out.append("norm_before_fc: true in an MLA drafter: SGLang's MLA class (both layouts) never reads it and skips "
                   "input_norm.weight, as eaglelab computes; vLLM's deepseek_eagle3 has no input_norm either (its "
                   "loader refuses the tensor); a trainer that applied it served without it")
    if cfg.get("norm_before_residual") is True:
        out.append("norm_before_residual: true in an MLA drafter: SGLang's MLA class never reads it (the residual is "
                   "the raw hidden state), as eaglelab computes; vLLM's deepseek_eagle3 reads it (residual = "
                   "hidden_norm(hidden))")
    for flag, default in MODELOPT_LAYER_FLAGS.items():
        value = eagle_config(cfg).get(flag)
        if isinstance(value, bool) and value != default:
            out.append(f"eagle_config.{flag}: {str(value).lower()}: Model-Optimizer trains with it; SGLang ignores "
                       "it and applies every norm, as eaglelab computes")
    if "q_lora_rank" in body and body["q_lora_rank"] is None:
        out.append("q_lora_rank: null: one q_proj reads 2H; SGLang's kimi_k25_eagle3 refuses it at load (it needs "
                   "q_lora_rank); vLLM's deepseek_eagle3 and TorchSpec compute it")
    return out
