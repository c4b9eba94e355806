"""Drafter training throughput (tokens/s) and its share of the matmul peak, measured in the same process.

The peak is what this machine's torch achieves on large fp32 matmuls right before the run;
the run's FLOPs are counted analytically (:func:`eaglelab.train.training.ttt_flops_per_token`).
Target states are random (the training step's cost does not depend on their values).

    python benchmarks/bench_training.py [--steps 20] [--sizes tiny smollm2 1b]
"""

from __future__ import annotations

import argparse
import time

SIZES = {
    # name: (target config fields, draft vocab, batch, seq_len)
    "tiny": (dict(hidden_size=64, intermediate_size=192, num_attention_heads=4, num_key_value_heads=2,
                  num_hidden_layers=8, vocab_size=512), 320, 8, 64),
    "smollm2": (dict(hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3,
                     num_hidden_layers=30, vocab_size=49152), 8192, 4, 256),
    "1b": (dict(hidden_size=2048, intermediate_size=8192, num_attention_heads=32, num_key_value_heads=8,
                num_hidden_layers=16, vocab_size=32000), 8000, 2, 256),
}


def matmul_peak_flops(n: int = 2048, repeat: int = 5, dtype: str = "float32") -> float:
    """Best FLOP/s of an n^3 matmul in ``dtype`` in this process."""
    import torch

    a, b = torch.randn(n, n, dtype=getattr(torch, dtype)), torch.randn(n, n, dtype=getattr(torch, dtype))
    a @ b
    best = 0.0
    for _ in range(repeat):
        t = time.perf_counter()
        a @ b
        best = max(best, 2 * n**3 / (time.perf_counter() - t))
    return best


def run(name: str, steps: int, ttt_length: int) -> dict:
    import torch

    from eaglelab.data.states import HiddenStates
    from eaglelab.model.drafter import Eagle3Drafter
    from eaglelab.train.training import TrainConfig, train_drafter, ttt_flops_per_token

    fields, vd, batch, seq = SIZES[name]
    drafter = Eagle3Drafter.from_target_config({**fields, "max_position_embeddings": 4096}, draft_vocab_size=vd)
    H, V = fields["hidden_size"], fields["vocab_size"]
    g = torch.Generator().manual_seed(0)
    n = batch * 4
    ids = torch.randint(0, V, (n, seq), generator=g)
    # as captured here: the target's greedy ids are kept, so only the draft rows of its lm_head run
    states = HiddenStates(ids, torch.ones(n, seq, dtype=torch.bool), torch.randn(n, seq, 3 * H, generator=g),
                          torch.randn(n, seq, H, generator=g), target_ids=torch.roll(ids, -1, dims=1))
    lm_head = torch.nn.Linear(H, V, bias=False)
    drafter.set_embedding(torch.randn(V, H, generator=g) * 0.02)
    warm = TrainConfig(steps=2, batch_size=batch, ttt_length=ttt_length, log_every=100, eval_every=0)
    train_drafter(drafter, states, lm_head, warm, progress=False)
    cfg = TrainConfig(steps=steps, batch_size=batch, ttt_length=ttt_length, log_every=10**6, eval_every=0)
    res = train_drafter(drafter, states, lm_head, cfg, progress=False)
    tps = res.tokens / res.seconds
    flops = ttt_flops_per_token(drafter.spec, seq, ttt_length, vd) * tps
    return {"size": name, "params_m": sum(p.numel() for p in drafter.parameters() if p.requires_grad) / 1e6,
            "tokens_per_s": tps, "gflops": flops / 1e9}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--ttt-length", type=int, default=7)
    ap.add_argument("--sizes", nargs="+", default=["tiny", "smollm2", "1b"], choices=list(SIZES))
    args = ap.parse_args()
    import torch

    peak = matmul_peak_flops()
    print(f"matmul peak (fp32, 2048^3, {torch.get_num_threads()} threads): {peak / 1e9:.1f} GFLOP/s")
    print(f"{'size':>8} {'params M':>9} {'tok/s':>9} {'GFLOP/s':>8} {'of peak':>8}")
    for name in args.sizes:
        r = run(name, args.steps, args.ttt_length)
        print(f"{r['size']:>8} {r['params_m']:9.1f} {r['tokens_per_s']:9.1f} {r['gflops']:8.1f} "
              f"{r['gflops'] * 1e9 / peak:8.0%}")


if __name__ == "__main__":
    main()
