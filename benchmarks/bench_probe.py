"""Probe cost against a bare forward pass with hidden states, and peak memory as tokens grow 10x.

Baseline (same process): both targets run over the same sequences with
``output_hidden_states=True`` and nothing else. Probe: :func:`eaglelab.probe.plugin.run_probe`
(hook capture, cosine / relative L2 / streaming CKA, next-token agreement, the drafter's
teacher-forced acceptance on both targets). Peak memory (max RSS) is measured in a fresh
subprocess per token count.

    python benchmarks/bench_probe.py [--world DIR] [--sequences 64] [--seq-len 64] [--shape tiny|smollm2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def _setup(world_dir):
    from eaglelab.model.drafter_files import load_drafter
    from eaglelab.model.targets import load_target
    from eaglelab.worlds.tiny import build_tiny_world

    world = build_tiny_world(world_dir)
    a, tok = load_target(world.target_a, device="cpu")
    b, _ = load_target(world.target_b, device="cpu")
    return world, a, b, tok, load_drafter(world.drafter_a)


def _smollm2_shaped():
    """Two random Llamas with SmolLM2-135M's shape (30 layers, width 576, vocab 49152) and a drafter: cost only."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from eaglelab.model.drafter import Eagle3Drafter

    cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048, tie_word_embeddings=True)
    torch.manual_seed(0)
    a, b = LlamaForCausalLM(cfg).eval(), LlamaForCausalLM(cfg).eval()
    drafter = Eagle3Drafter.from_target_config(cfg.to_dict(), draft_vocab_size=8192)
    return a, b, drafter


def timing(args) -> None:
    import torch

    from eaglelab.data.tokens import builtin_sequences
    from eaglelab.probe.plugin import run_probe

    if args.shape == "smollm2":
        a, b, drafter = _smollm2_shaped()
        seqs = torch.randint(0, 49152, (args.sequences, args.seq_len), generator=torch.Generator().manual_seed(0))
    else:
        _, a, b, tok, drafter = _setup(args.world)
        seqs = builtin_sequences(tok, args.seq_len, "held_out", args.sequences)

    @torch.no_grad()
    def bare():
        for i in range(0, len(seqs), 8):
            a(input_ids=seqs[i:i + 8], output_hidden_states=True)
            b(input_ids=seqs[i:i + 8], output_hidden_states=True)

    def similarity_only():
        from eaglelab.model.targets import Target
        from eaglelab.probe.plugin import capture_batch, layer_labels, update_similarity
        from eaglelab.probe.similarity import SimilarityAccumulator

        ta, tb = Target.for_drafter(a, drafter.spec), Target.for_drafter(b, drafter.spec)
        acc = SimilarityAccumulator(layer_labels(ta.aux_layer_outputs))
        for i in range(0, len(seqs), 8):
            (sa, la), (sb, lb) = capture_batch(ta, seqs[i:i + 8]), capture_batch(tb, seqs[i:i + 8])
            update_similarity(acc, sa, sb, argmax_a=la.argmax(-1), argmax_b=lb.argmax(-1))
        acc.result()
        ta.close()
        tb.close()

    def probe_full():
        run_probe(a, b, drafter, seqs, k=5)

    bare()  # warm-up
    rows = []
    for name, fn in (("bare forward A+B (hidden states)", bare), ("similarity (capture, cosine, L2, CKA)", similarity_only),
                     ("full probe (+ 5-step acceptance on A and B)", probe_full)):
        t = time.perf_counter()
        fn()
        rows.append((name, time.perf_counter() - t))
    base = rows[0][1]
    tokens = seqs.numel()
    print(f"{tokens} tokens through two {a.config.num_hidden_layers}-layer targets (CPU)")
    for name, s in rows:
        print(f"  {name:<40} {s:7.2f} s   {s / base:5.2f}x")


def memory_child(world_dir, sequences: int, seq_len: int) -> None:
    import resource

    from eaglelab.data.tokens import builtin_sequences
    from eaglelab.probe.plugin import run_probe

    _, a, b, tok, drafter = _setup(world_dir)
    seqs = builtin_sequences(tok, seq_len, "held_out", sequences)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run_probe(a, b, drafter, seqs, k=5)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"tokens": seqs.numel(), "maxrss_mb_before": before / 1024, "maxrss_mb_after": after / 1024}))


def memory(args) -> None:
    out = []
    for n in (args.sequences // 4, args.sequences * 10 // 4):
        cmd = [sys.executable, __file__, "--child", str(n), "--seq-len", str(args.seq_len)]
        cmd += ["--world", args.world] if args.world else []
        out.append(json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]))
    print("peak memory of the probe (max RSS, fresh process each):")
    for r in out:
        print(f"  {r['tokens']:>7} tokens: {r['maxrss_mb_after']:7.0f} MB (after loading models: {r['maxrss_mb_before']:.0f} MB)")
    grow = [r["maxrss_mb_after"] - r["maxrss_mb_before"] for r in out]
    print(f"  probe's own growth of the peak: {grow[0]:.0f} MB at {out[0]['tokens']} tokens, "
          f"{grow[1]:.0f} MB at {out[1]['tokens']} tokens")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world")
    ap.add_argument("--sequences", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--shape", choices=["tiny", "smollm2"], default="tiny",
                    help="tiny: the offline world's targets; smollm2: random weights in SmolLM2-135M's shape (cost only)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        memory_child(args.world, args.child, args.seq_len)
        return
    timing(args)
    if args.shape == "tiny":
        memory(args)


if __name__ == "__main__":
    main()
