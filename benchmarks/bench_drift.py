"""What one drift point costs against the two forwards it cannot avoid, and how fast engine files are read.

1. A point (:func:`eaglelab.drift.measures.measure_drift`: similarity at four layers, agreement, TV,
   KL, TV(top-k), the drafter teacher forced on A and on B', the per-token prediction) against the
   baseline of both targets' bare forwards over the same sequences, in the same process; then a
   sweep's point, A's side computed once for every point (:func:`eaglelab.drift.measures.reference_pass`),
   against the full point and against B''s bare forward alone.
2. Reading a vLLM-layout JSONL of prompt logprobs (:func:`eaglelab.engines.logprob_files.read_logprob_file`,
   every number validated) against ``json.loads`` of the same lines alone.

    python benchmarks/bench_drift.py [--world tiny|demo] [--sequences 32] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", default="tiny", choices=["tiny", "demo"])
    ap.add_argument("--sequences", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    import torch

    from eaglelab.data.sets import probe_set, world_of
    from eaglelab.drift.measures import measure_drift, reference_pass, top_logprobs
    from eaglelab.engines import logprob_files as ef
    from eaglelab.model.drafter_files import load_drafter
    from eaglelab.model.targets import load_target
    from eaglelab.worlds.build import build_world

    world = build_world(args.world)
    a, tok = load_target(world.target_a, device="cpu")
    b, _ = load_target(world.target_b, device="cpu")
    drafter = load_drafter(world.drafter_a)
    data = probe_set(tok, args.sequences, 64, world_of(world.target_a))

    @torch.no_grad()
    def forwards():
        for i in range(0, len(data.ids), 8):
            a(input_ids=data.ids[i: i + 8])
            b(input_ids=data.ids[i: i + 8])

    base = _best(forwards, args.repeat)
    point = _best(lambda: measure_drift(a, b, drafter, data.ids, data.counted, k=3), args.repeat)
    tokens = int(data.counted.sum())
    print(f"{args.world} world, {len(data.ids)} sequences ({tokens} counted positions):")
    print(f"  two bare forwards {base:.2f} s; one drift point {point:.2f} s: {point / base:.2f}x")

    @torch.no_grad()
    def forward_b():
        for i in range(0, len(data.ids), 8):
            b(input_ids=data.ids[i: i + 8])

    reference = reference_pass(a, drafter, data.ids, data.counted, k=3)
    base_b = _best(forward_b, args.repeat)
    shared = _best(lambda: measure_drift(a, b, drafter, data.ids, data.counted, k=3, reference=reference), args.repeat)
    print(f"  a sweep's point (A's side shared): {shared:.2f} s, {shared / point:.2f}x the full point; "
          f"B's bare forward {base_b:.2f} s: {shared / base_b:.2f}x")

    with tempfile.TemporaryDirectory() as tmp:
        path = ef.write_jsonl(Path(tmp) / "a.jsonl", [ef.vllm_response(s) for s in top_logprobs(a, data.ids, data.counted, 20)])
        lines = path.read_bytes().splitlines()
        raw = _best(lambda: [json.loads(line) for line in lines], args.repeat)
        read = _best(lambda: ef.read_logprob_file(path), args.repeat)
        mb = path.stat().st_size / 1e6
        print(f"  vLLM-layout file {mb:.1f} MB: json.loads alone {raw:.3f} s, read + validated {read:.3f} s: "
              f"{read / raw:.2f}x ({mb / read:.0f} MB/s)")
        seqs = ef.read_logprob_file(path)
        cmp_t = statistics.median(_best(lambda: ef.compare_logprobs(seqs, seqs), 1) for _ in range(args.repeat))
        print(f"  comparing two such files {cmp_t:.3f} s ({tokens / cmp_t:,.0f} positions/s)")


if __name__ == "__main__":
    main()
