"""The probe from dumps at Kimi width: its peak memory against a 16 GB budget, and the pre-flight's estimate of it.

Issue #42: ``eaglelab probe`` from the engines' dumps on the Kimi-shaped sparse sample (hidden 7,168,
vocabulary 163,840; ``k2-drafter`` on ``k2-target`` and ``k25-target``) in bf16 grew to 20 GB resident
and died in the allocator, with a traceback: the drafter was built and randomly initialised in float32
before its weights were read, beside its own [V, H] embedding. This runs that probe, the job itself
(:func:`eaglelab.jobs.probe.probe_checkpoints`), in a child process on the sample
(:func:`eaglelab.worlds.kimi_shapes.build_kimi_sample`) and ``--samples`` SpecForge-layout samples of
``--tokens`` tokens per target written with :func:`eaglelab.data.dump_writers.specforge_payload` (random
states, B = A + noise), and reports:

- ``memory``: the child's peak resident size (``ru_maxrss``) <= 16 GB (the budget);
- ``estimate``: the pre-flight's estimate (:func:`eaglelab.probe.memory.dump_probe_needs`, what the probe
  compares with the memory free before it allocates) >= what the probe added to the child's resident size
  (an estimate below it would let a probe start that then runs out);
- the wall time, for the record (no budget: the sparse heads are zeros, read from holes).

Where this machine has less free than the estimate, the probe refuses in one line before it allocates:
that line is printed instead (``--dtype float32`` on a 24 GB machine shows it).

    python benchmarks/bench_dump_memory.py [--dtype bfloat16|float32] [--samples 4] [--tokens 256] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

#: Peak resident size the probe may reach (issue #42: the machine has 24 GB; 20 GB was the failure).
BUDGET_BYTES = 16e9
#: The Kimi family's width and vocabulary (the sample's).
HIDDEN, VOCAB = 7168, 163840


def log(msg: str) -> None:
    print(msg, flush=True)


def write_inputs(root: Path, samples: int, tokens: int, seed: int = 0) -> dict[str, str]:
    """The Kimi sample and two SpecForge dump folders (old, new) of ``samples`` bf16 samples of ``tokens`` tokens."""
    import torch

    from eaglelab.data.dump_writers import specforge_payload
    from eaglelab.worlds.kimi_shapes import build_kimi_sample

    sample = build_kimi_sample(root / "sample", REPO / "data" / "fixtures" / "kimi")
    g = torch.Generator().manual_seed(seed)
    folders = {name: root / name / "rows_0-2000" for name in ("old", "new")}
    for folder in folders.values():
        folder.mkdir(parents=True)
    for i in range(samples):
        ids = torch.randint(0, VOCAB, (tokens,), generator=g)
        counted = torch.ones(tokens, dtype=torch.bool)
        counted[: tokens // 16] = False  # a prompt, then the response SpecForge's mask marks
        counted[-1] = False
        aux, last = torch.randn(tokens, 3 * HIDDEN, generator=g), torch.randn(tokens, HIDDEN, generator=g)
        for folder, noise in zip(folders.values(), (0.0, 0.3)):
            a = (aux + noise * torch.randn(aux.shape, generator=g)).bfloat16()
            h = (last + noise * torch.randn(last.shape, generator=g)).bfloat16()
            torch.save(specforge_payload(ids, counted, a, h), folder / f"data_{i}.ckpt")
    return {"old_target": str(sample.k2_target), "new_target": str(sample.k25_target),
            "old_drafter": str(sample.k2_drafter), "old_states": str(root / "old"), "new_states": str(root / "new")}


def child(paths: dict[str, str], dtype: str) -> dict:
    """In its own process: the pre-flight's estimate, then the probe; peak resident size before and after."""
    import torch

    from eaglelab.checkpoints.drafters.preflight import check_drafter
    from eaglelab.checkpoints.files.sources import load_checkpoint
    from eaglelab.data.dumps import open_dumps, pair_dumps
    from eaglelab.errors import ResourceError
    from eaglelab.jobs.probe import ProbeSettings, probe_checkpoints
    from eaglelab.model.heads import plan_target_heads
    from eaglelab.probe.memory import dump_probe_needs

    settings = ProbeSettings(paths["old_target"], paths["new_target"], paths["old_drafter"], dtype=dtype,
                             old_states=paths["old_states"], new_states=paths["new_states"])
    spec, _ = check_drafter(paths["old_drafter"], paths["old_target"])
    pairs = pair_dumps(open_dumps(paths["old_states"]), open_dumps(paths["new_states"]))
    plans = (plan_target_heads(paths["old_target"]), plan_target_heads(paths["new_target"]))
    needs = dump_probe_needs(pairs, plans, load_checkpoint(paths["old_drafter"]).tensors, spec,
                             getattr(torch, dtype), settings.batch_size, settings.k)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    out = {"dtype": dtype, "estimate": needs, "baseline_bytes": before}
    try:
        report = probe_checkpoints(settings, progress=False)
        out["headline"] = report.headline()
    except ResourceError as exc:
        out["refused"] = str(exc)
    out["seconds"] = time.perf_counter() - start
    out["peak_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return out


def run(dtype: str, samples: int, tokens: int) -> dict:
    """Write the inputs to a temporary folder, run the child on them, and return what it measured."""
    with tempfile.TemporaryDirectory(prefix="bench-dump-memory-") as tmp:
        paths = write_inputs(Path(tmp), samples, tokens)
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(paths), "--dtype", dtype],
                              capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"the probe's process failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def verdicts(r: dict) -> dict[str, bool]:
    """The budgets of the module docstring (none when the probe refused in its pre-flight)."""
    if "refused" in r:
        return {}
    grew = r["peak_bytes"] - r["baseline_bytes"]
    return {"memory": r["peak_bytes"] <= BUDGET_BYTES, "estimate": sum(r["estimate"].values()) >= grew}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", choices=["bfloat16", "float32", "float16"], default="bfloat16")
    ap.add_argument("--samples", type=int, default=4, help="samples per target (default 4)")
    ap.add_argument("--tokens", type=int, default=256, help="tokens per sample (default 256)")
    ap.add_argument("--json", action="store_true", help="print the measurements as one JSON object")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child), args.dtype)), flush=True)
        return 0
    r = run(args.dtype, args.samples, args.tokens)
    ok = verdicts(r)
    if args.json:
        print(json.dumps({**r, "verdicts": ok}))
        return 0 if all(ok.values()) else 1
    from eaglelab.checkpoints.targets.footprint import human_bytes

    log(f"probe from dumps at Kimi width (H {HIDDEN}, V {VOCAB}), {args.samples} samples x {args.tokens} tokens "
        f"per target, {args.dtype}, {os.cpu_count()} CPUs")
    parts = ", ".join(f"{k} {human_bytes(v)}" for k, v in r["estimate"].items())
    log(f"  pre-flight estimate: {human_bytes(sum(r['estimate'].values()))} ({parts})")
    if "refused" in r:
        log(f"  refused before allocating: {r['refused']}")
        return 0
    grew = r["peak_bytes"] - r["baseline_bytes"]
    log(f"  peak RSS {human_bytes(r['peak_bytes'])} ({r['peak_bytes'] / 2**30:.2f} GiB; the probe added "
        f"{human_bytes(grew)} to {human_bytes(r['baseline_bytes'])} of imports) in {r['seconds']:.0f} s")
    log(f"  memory: peak {human_bytes(r['peak_bytes'])} <= {human_bytes(BUDGET_BYTES)}: "
        f"{'budget met' if ok['memory'] else 'BUDGET MISSED'}")
    log(f"  estimate: {human_bytes(sum(r['estimate'].values()))} >= {human_bytes(grew)} added: "
        f"{'budget met' if ok['estimate'] else 'BUDGET MISSED'}")
    log(f"  {r['headline']}")
    return 0 if all(ok.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
