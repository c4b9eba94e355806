"""vLLM's synthetic rejection sampling on its CPU build: a port of the Triton greedy kernel's synthetic branch.

Loaded by path by :mod:`eaglelab.engines.vllm_worker` inside vLLM's environment (it imports only vLLM and torch,
when called), once per engine a forced-τ request builds; putting the port in place twice is a no-op.
"""

from __future__ import annotations


def synthetic_sampler() -> str:
    """Which synthetic rejection sampler the engine will run: vLLM's own, or a port where its build has none.

    vLLM 0.32's CPU build (no Triton CPU backend) registers C++ rejection kernels that assert synthetic mode
    is off. The platform registers them at engine start, reading ``vllm.utils.cpu_triton_utils``; the greedy
    one is replaced there first by a port of the Triton kernel's synthetic branch (``rejection_sampler.
    rejection_greedy_sample_kernel``): per request, draft ``i`` is accepted when ``uniform_probs[i] <
    conditional_rate[i]`` and it is not padding (-1); the first rejected position takes the target's argmax;
    a step accepting every draft appends the bonus token. Outside synthetic mode the C++ kernel runs as before.
    """
    import torch
    from vllm.platforms import current_platform
    from vllm.triton_utils import HAS_TRITON

    if not current_platform.is_cpu() or HAS_TRITON:
        return "vllm"
    from vllm.utils import cpu_triton_utils

    native = cpu_triton_utils._rejection_greedy_sample_kernel_impl
    if getattr(native, "eaglelab_port", False):  # an earlier request of this process put it in place
        return "eaglelab-cpu-port"

    def greedy_kernel(output_token_ids, cu_num_draft_tokens, draft_token_ids, target_argmax, bonus_token_ids,
                      is_greedy, max_spec_len, uniform_probs=None, synthetic_conditional_rates=None,
                      SYNTHETIC_MODE=False):  # noqa: N803 - the kernel's own argument name
        if not SYNTHETIC_MODE:
            return native(output_token_ids, cu_num_draft_tokens, draft_token_ids, target_argmax, bonus_token_ids,
                          is_greedy, max_spec_len)
        drafts, argmax, coins = draft_token_ids.tolist(), target_argmax.tolist(), uniform_probs.tolist()
        rates, bonus = synthetic_conditional_rates.tolist(), bonus_token_ids.reshape(-1).tolist()
        greedy = None if is_greedy is None else is_greedy.tolist()
        start = 0
        for r, end in enumerate(cu_num_draft_tokens.tolist()):
            if greedy is None or greedy[r]:
                row = []
                for i in range(start, end):
                    accepted = coins[i] < rates[i - start] and drafts[i] >= 0
                    row.append(drafts[i] if accepted else argmax[i])
                    if not accepted:
                        break
                else:
                    row.append(bonus[r])
                output_token_ids[r, :len(row)] = torch.tensor(row, dtype=output_token_ids.dtype)
            start = end

    greedy_kernel.eaglelab_port = True
    cpu_triton_utils._rejection_greedy_sample_kernel_impl = greedy_kernel
    return "eaglelab-cpu-port"
