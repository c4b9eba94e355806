"""The MLA drafter against the Llama drafter at the same width, in the same run: its share of the matmul peak.

Kimi-K2.5's MLA drafter (SGLang's ``Eagle3DeepseekV2ForCausalLM``) replaces q/k/v with low-rank paths
(``q_a_proj`` 2H -> 1536 -> ``q_b_proj``, ``kv_a_proj_with_mqa`` 2H -> 576 -> ``kv_b_proj``) and RoPE on 64 of
192 query dims. Two passes, each for both drafters, interleaved, ``--repeats`` times:

- ``ttt``: the teacher-forced training-time-test forward (``Eagle3Drafter.ttt_logits``, k steps over S
  positions, no grad): FLOP/s over the analytical forward FLOPs (``ttt_flops_per_token / 3``, the tensor table
  of each attention) as a share of the fp32 matmul peak measured in the same process;
- ``decode``: one draft step through the KV cache at a context of ``--context`` positions, the median of 20.

Budget: the MLA drafter reaches at least 80% of the Llama drafter's share of the peak in ``ttt`` (its extra
splits, concatenations and interleaved RoPE are memory traffic, not matmuls). Ratios, never wall-clock limits.

    python benchmarks/bench_mla.py [--quick] [--repeats 3]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

#: Kimi-K2.5's language model, the fields a drafter copies (MLA shapes as TorchSpec's K2.5 drafter has them).
KIMI = {"hidden_size": 7168, "intermediate_size": 18432, "num_attention_heads": 64, "num_key_value_heads": 64,
        "num_hidden_layers": 61, "vocab_size": 163840, "q_lora_rank": 1536, "kv_lora_rank": 512,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "rms_norm_eps": 1e-5,
        "max_position_embeddings": 262144, "rope_theta": 50000.0,
        "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096, "beta_fast": 1.0,
                         "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}}
QUICK = {**KIMI, "hidden_size": 1024, "intermediate_size": 2816, "num_attention_heads": 8, "num_key_value_heads": 8,
         "vocab_size": 16384, "q_lora_rank": 384, "kv_lora_rank": 128, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32,
         "v_head_dim": 64}


def drafter(target: dict, attention: str, draft_vocab: int):
    from eaglelab.model.drafter import Eagle3Drafter

    d = Eagle3Drafter.from_target_config(target, draft_vocab_size=draft_vocab, attention=attention).eval()
    d.has_embedding = True
    return d


def time_ttt(d, ids, aux, k: int) -> float:
    import torch

    with torch.no_grad():
        start = time.perf_counter()
        d.ttt_logits(ids, aux, k)
        return time.perf_counter() - start


def time_decode(d, aux, context: int, steps: int = 20) -> float:
    """Median seconds of one draft step with ``context`` positions in the drafter's cache."""
    import torch

    from eaglelab.model.attention import DrafterKV

    g = torch.Generator().manual_seed(1)
    V = d.spec.vocab_size
    with torch.no_grad():
        cache = DrafterKV()
        hidden = d.step(torch.randint(0, V, (1, context), generator=g), d.project(aux[:, :context]),
                        torch.arange(context)[None], cache=cache)[:, -1:]
        times = []
        for i in range(steps):
            token = torch.randint(0, V, (1, 1), generator=g)
            start = time.perf_counter()
            hidden = d.step(token, hidden, torch.tensor([[context + i]]), cache=cache)
            d.logits(hidden)
            times.append(time.perf_counter() - start)
            cache.crop(context)  # every step drafts from the same context
    return statistics.median(times)


def main() -> None:
    import torch
    from bench_training import matmul_peak_flops  # a sibling script: benchmarks/ is on sys.path when run

    from eaglelab.train.training import ttt_flops_per_token

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="H 1024 (a smoke run); the default is Kimi width")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seq", type=int, default=256, help="positions of the teacher-forced pass")
    ap.add_argument("--context", type=int, default=1024, help="cache length of the decode step")
    ap.add_argument("--k", type=int, default=3)
    args = ap.parse_args()
    target, vd = (QUICK, 4096) if args.quick else (KIMI, 32000)
    torch.manual_seed(0)
    H, S = target["hidden_size"], args.seq
    ids = torch.randint(0, target["vocab_size"], (1, S))
    aux = torch.randn(1, max(S, args.context), 3 * H)
    print(f"bench_mla, {'quick' if args.quick else 'Kimi'} width: H {H}, heads {target['num_attention_heads']}, "
          f"draft vocabulary {vd}, {S} positions x k {args.k}, decode at context {args.context}, "
          f"{args.repeats} interleaved repeats, {torch.get_num_threads()} threads", flush=True)
    results: dict[str, dict] = {}
    for attention in ("llama", "mla"):
        d = drafter(target, attention, vd)
        flops = ttt_flops_per_token(d.spec, S, args.k, 0) / 3 * S
        params = sum(p.numel() for n, p in d.named_parameters() if n != "embed_tokens.weight")
        results[attention] = {"flops": flops, "params": params, "ttt": [], "decode": [], "peak": []}
        del d
        gc.collect()
    for _ in range(args.repeats):
        for attention in ("llama", "mla"):  # interleaved: a busy moment touches both
            d = drafter(target, attention, vd)
            time_ttt(d, ids[:, :32], aux[:, :32], 1)  # warm-up
            r = results[attention]
            r["peak"].append(matmul_peak_flops())
            r["ttt"].append(time_ttt(d, ids, aux[:, :S], args.k))
            r["decode"].append(time_decode(d, aux, args.context))
            del d
            gc.collect()
    print(f"{'attention':>9}  {'params (M)':>10}  {'TTT GFLOP':>9}  {'TTT s (min-max)':>16}  {'% of peak':>9}  "
          f"{'decode ms':>9}")
    share = {}
    for attention, r in results.items():
        best = min(r["ttt"])
        share[attention] = r["flops"] / best / max(r["peak"])
        print(f"{attention:>9}  {r['params'] / 1e6:>10.1f}  {r['flops'] / 1e9:>9.1f}  "
              f"{best:>7.2f}-{max(r['ttt']):<8.2f}  {100 * share[attention]:>8.1f}%  "
              f"{1e3 * statistics.median(r['decode']):>9.2f}")
    ratio = share["mla"] / share["llama"]
    decode = statistics.median(results["mla"]["decode"]) / statistics.median(results["llama"]["decode"])
    print(f"MLA / Llama: share of the matmul peak {ratio:.2f} (budget >= 0.80: {'met' if ratio >= 0.8 else 'MISSED'}); "
          f"decode step time {decode:.2f}x; the fp32 matmul peak {max(max(r['peak']) for r in results.values()) / 1e9:.0f} "
          "GFLOP/s")


if __name__ == "__main__":
    main()
