"""Header-only inspection vs the seed's way (safe_open + get_tensor for every key), same process.

A drafter with Kimi-K2 drafter shapes (H 7168, V 163840, Vd 32000; ~4.7 GB in bf16) is written as
a sparse file, then timed both ways; and a 64-shard index of a Kimi-K2-sized target is inspected.

    python benchmarks/bench_inspect.py [--dir DIR] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def seeds_way(folder: Path) -> dict:
    """What the seed's team did: open with safetensors and materialise every tensor to read its shape."""
    from safetensors import safe_open

    shapes = {}
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        for key in f.keys():
            shapes[key] = tuple(f.get_tensor(key).shape)
    return shapes


def kimi_target_entries() -> list[tuple[str, tuple[int, ...], str]]:
    """Tensor names and shapes of a DeepSeek-V3 / Kimi-K2-style target (61 layers, 384 experts), int4-packed experts."""
    H, E, I = 7168, 384, 2048
    out = [("model.embed_tokens.weight", (163840, H), "BF16"), ("lm_head.weight", (163840, H), "BF16")]
    for layer in range(61):
        p = f"model.layers.{layer}"
        out += [(f"{p}.self_attn.q_a_proj.weight", (1536, H), "BF16"),
                (f"{p}.self_attn.kv_a_proj_with_mqa.weight", (576, H), "BF16"),
                (f"{p}.self_attn.o_proj.weight", (H, 8192), "BF16"), (f"{p}.input_layernorm.weight", (H,), "BF16")]
        experts = range(E) if layer >= 1 else []
        for e in experts:
            for name, shape in (("gate_proj", (I, H // 8)), ("up_proj", (I, H // 8)), ("down_proj", (H, I // 8))):
                out.append((f"{p}.mlp.experts.{e}.{name}.weight_packed", shape, "I32"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", help="scratch folder (default: a temporary one)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    from eaglelab.inspection import inspect_checkpoint
    from eaglelab.sources import load_checkpoint
    from eaglelab.synthetic import write_synthetic_drafter, write_synthetic_weights

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        drafter = write_synthetic_drafter(Path(tmp) / "kimi-k2-drafter")
        size_gb = (drafter / "model.safetensors").stat().st_size / 1e9
        header_s = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            insp = inspect_checkpoint(str(drafter))
            header_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        shapes = seeds_way(drafter)
        seed_s = time.perf_counter() - t
        assert shapes == {n: i.shape for n, i in insp.checkpoint.tensors.items()}
        h = statistics.median(header_s)
        print(f"Kimi-K2-shaped drafter, {size_gb:.2f} GB, {len(shapes)} tensors")
        print(f"  eaglelab inspect (headers + d2t/t2d invariants): {h * 1e3:8.2f} ms (median of {args.repeat})")
        print(f"  seed's way (safe_open + get_tensor each key):    {seed_s * 1e3:8.0f} ms")
        print(f"  ratio: {seed_s / h:,.0f}x faster")

        entries = kimi_target_entries()
        target = write_synthetic_weights(Path(tmp) / "kimi-k2-target", entries, shards=64)
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            ck = load_checkpoint(str(target))
            times.append(time.perf_counter() - t)
        print(f"64-shard index, {len(ck.tensors):,} tensors, {ck.total_bytes / 1e12:.2f} TB described: "
              f"{statistics.median(times) * 1e3:.1f} ms to read every header")


if __name__ == "__main__":
    main()
