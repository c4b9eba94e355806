"""The GPU check, prepared for when a device machine is lent: the probes and a fine-tune on cuda beside the CPU.

Issue #42 item 4. One run, under one deadline (``--budget-s``, 420 s by default: the wrapper
``benchmarks/gpu_check.sh`` gives it 8 minutes in all), that fetches nothing: the tiny world is built where
it runs, the Kimi-shaped sample is written from the repository's fixtures. For each ``--devices`` entry
(``cpu`` in float32, ``cuda`` in bfloat16) it runs the jobs themselves, as a user's command would:

- ``live probe``: :func:`eaglelab.jobs.probe.probe_checkpoints` on the tiny world's targets and old drafter
  (both targets loaded, paired capture, τ on both, two prompts decoded for real);
- ``dump probe``: the same from SpecForge-layout dumps of both targets (written once, on the CPU, by
  :func:`eaglelab.jobs.probe.dump_states`): only the targets' heads are read;
- ``fine-tune``: a few warm-start steps (:func:`eaglelab.jobs.finetune.train_one`), the target in the
  device's dtype, the drafter's weights in float32;
- ``Kimi-width dump probe``: the dump probe at hidden 7,168 and vocabulary 163,840 (the Kimi-shaped sample
  and four samples of 256 tokens per target, as ``benchmarks/bench_dump_memory.py`` writes them), in
  bfloat16 on every device (in float32 its heads alone are 19 GB).

Every part's wall time, its headline numbers and, on cuda, its peak device memory go into one JSON file
(``--out``); ``--world`` reuses a tiny world already built (the tests pass their session's). A part that fails
or would start past the deadline is recorded with its reason, and the rest still run. Speed is compared across
devices in the same run (the ``vs_cpu`` ratio), never against a limit.

    bash benchmarks/gpu_check.sh [OUT.json]                          # on the lent machine
    python benchmarks/gpu_check.py --devices cpu --quick --out F     # the same on this machine (the tests)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

#: The dtype each device runs in.
DTYPE = {"cpu": "float32", "cuda": "bfloat16"}
#: The parts, in the order they run.
PARTS = ("live probe", "dump probe", "fine-tune", "Kimi-width dump probe")


def log(msg: str) -> None:
    print(msg, flush=True)


def _bench_dump_memory():
    """``benchmarks/bench_dump_memory.py`` as a module (its writer of the Kimi-width inputs)."""
    spec = importlib.util.spec_from_file_location("bench_dump_memory", REPO / "benchmarks" / "bench_dump_memory.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Check:
    """The run's record: what ran where, how long, what it found; written to ``out`` after every part."""

    def __init__(self, out: Path, budget_s: float):
        import torch

        self.out, self.deadline, self.start = out, time.monotonic() + budget_s, time.monotonic()
        cuda = torch.cuda.is_available()
        self.record = {"torch": torch.__version__, "python": platform.python_version(), "cpu_threads": torch.get_num_threads(),
                       "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0) if cuda else None,
                       "budget_s": budget_s, "rows": []}
        self.write()

    def write(self) -> None:
        self.record["elapsed_s"] = time.monotonic() - self.start
        tmp = self.out.with_name(self.out.name + ".tmp")
        tmp.write_text(json.dumps(self.record, indent=2) + "\n")
        tmp.replace(self.out)

    def compare(self) -> None:
        """Each part's CPU seconds over its seconds on another device (``vs_cpu``), where both ran cleanly."""
        done = [r for r in self.record["rows"] if "seconds" in r and "error" not in r]
        for row in done:
            cpu = next((r for r in done if r["part"] == row["part"] and r["device"] == "cpu"), None)
            if cpu is not None and row["device"] != "cpu":
                row["vs_cpu"] = cpu["seconds"] / row["seconds"]

    def run(self, part: str, device: str, fn, reserve_s: float = 0.0, dtype: str | None = None) -> dict:
        """Run ``fn(device, dtype)`` (a dict of numbers) unless the deadline is too near; record it either way."""
        import torch

        dtype = dtype or DTYPE[device]
        row = {"part": part, "device": device, "dtype": dtype}
        left = self.deadline - time.monotonic()
        if left <= reserve_s:
            row["skipped"] = f"{left:.0f} s left of the budget, {reserve_s:.0f} s kept for the parts after it"
        else:
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            try:
                row.update(fn(device, dtype))
            except Exception as exc:  # a failure is a finding of the check, not its end
                row["error"] = f"{type(exc).__name__}: {exc}"[:500]
                row["trace"] = traceback.format_exc(limit=4)[-1500:]
            if device == "cuda":
                torch.cuda.synchronize()
                row["peak_device_bytes"] = torch.cuda.max_memory_allocated()
            row["seconds"] = time.perf_counter() - t0
        self.record["rows"].append(row)
        self.compare()
        self.write()
        numbers = [f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()
                   if k not in ("part", "device", "dtype", "headline", "trace")]
        shown = row.get("error") or row.get("skipped") or ", ".join(numbers)
        log(f"  {part:>22} on {device:<4} ({dtype}): {shown}")
        return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the JSON file every figure goes to")
    ap.add_argument("--devices", nargs="+", choices=sorted(DTYPE), default=["cpu", "cuda"])
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), metavar="PART")
    ap.add_argument("--budget-s", type=float, default=420.0, help="the deadline for all parts, seconds")
    ap.add_argument("--quick", action="store_true", help="the smallest sizes: a check of the check itself")
    ap.add_argument("--world", help="a tiny world already built, reused as it is (verified by its manifest); "
                                    "default: built afresh in a temporary folder")
    args = ap.parse_args(argv)

    import torch

    from eaglelab.jobs.finetune import FinetuneSettings, load_inputs, train_one
    from eaglelab.jobs.probe import DumpSettings, ProbeSettings, dump_states, probe_checkpoints
    from eaglelab.worlds.build import build_world

    devices = [d for d in args.devices if d == "cpu" or torch.cuda.is_available()]
    check = Check(Path(args.out), args.budget_s)
    for missing in sorted(set(args.devices) - set(devices)):
        check.record["rows"].append({"part": "all", "device": missing, "skipped": "torch sees no CUDA device"})
    n = 4 if args.quick else 16
    with tempfile.TemporaryDirectory(prefix="eaglelab-gpu-check-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        world = build_world("tiny", Path(args.world) if args.world else root / "tiny")
        check.record["tiny_world_s"] = time.perf_counter() - t0
        a, b, drafter = str(world.target_a), str(world.target_b), str(world.drafter_a)
        log(f"gpu check: torch {torch.__version__}, {check.record['device'] or 'no CUDA device'}; the tiny world in "
            f"{check.record['tiny_world_s']:.0f} s")

        def live(device, dtype):
            r = probe_checkpoints(ProbeSettings(a, b, drafter, sequences=n, measure_prompts=2, measure_tokens=16,
                                                device=device, dtype=dtype), progress=False)
            return {"tau_old": r.tau_a, "tau_new": r.tau_b, "headline": r.headline()}

        dumps = {}

        def dumped(device, dtype):
            if not dumps:  # written once, on the CPU, as an engine would have
                for name, target in (("old", a), ("new", b)):
                    dump_states(DumpSettings(target, drafter, str(root / name), sequences=n, dtype="bfloat16"),
                                progress=False)
                    dumps[name] = str(root / name)
            r = probe_checkpoints(ProbeSettings(a, b, drafter, sequences=n, device=device, dtype=dtype,
                                                old_states=dumps["old"], new_states=dumps["new"]), progress=False)
            return {"tau_old": r.tau_a, "tau_new": r.tau_b, "headline": r.headline()}

        def tune(device, dtype):
            settings = FinetuneSettings(b, drafter, steps=2 if args.quick else 20, train_sequences=4 * n,
                                        eval_sequences=n, measure_prompts=0, device=device, dtype=dtype)
            inputs = load_inputs(settings, device=device, progress=False)
            result = train_one(settings, inputs, "warm start", run_dir=root / f"run-{device}", progress=False)
            losses = [m["loss"] for m in result.metrics if isinstance(m.get("loss"), (int, float))]
            return {"steps": settings.steps, "train_s": result.seconds, "train_tok_s": result.tokens / result.seconds,
                    "last_loss": float(losses[-1]) if losses else None}

        kimi = {}

        def kimi_width(device, dtype):
            if not kimi:
                kimi.update(_bench_dump_memory().write_inputs(root / "kimi", samples=4, tokens=256))
            r = probe_checkpoints(ProbeSettings(kimi["old_target"], kimi["new_target"], kimi["old_drafter"],
                                                device=device, dtype=dtype, old_states=kimi["old_states"],
                                                new_states=kimi["new_states"]), progress=False)
            return {"headline": r.headline()}

        fns = {"live probe": live, "dump probe": dumped, "fine-tune": tune, "Kimi-width dump probe": kimi_width}
        # the GPU's numbers first, the CPU's beside them while the budget lasts; the Kimi part is kept 90 s
        order = [(p, d) for p in args.parts for d in sorted(devices, key=lambda d: d != "cuda")]
        for i, (part, device) in enumerate(order):
            later_kimi = any(p == "Kimi-width dump probe" for p, _ in order[i + 1:]) and part != "Kimi-width dump probe"
            check.run(part, device, fns[part], reserve_s=90.0 if later_kimi else 0.0,
                      dtype="bfloat16" if part == "Kimi-width dump probe" else None)
    check.record["done"] = True
    check.write()
    log(f"wrote {args.out} ({check.record['elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
