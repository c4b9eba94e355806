"""Shapes of every tensor in a 4.7 GB drafter: ``eaglelab inspect`` vs safetensors, whole process against whole process.

The question both sides answer: the name and shape of every tensor in a checkpoint. eaglelab reads the
safetensors JSON header (plus the tiny ``d2t`` / ``t2d`` tensors, to check their invariants, and the config);
safetensors answers through its own shape API (``get_slice(key).get_shape()``, no tensor made) or, as the
seed's team did, by materialising every tensor (``get_tensor(key).shape``).

Headline (whole process): each method is a fresh ``python`` subprocess timed from start to exit, on a
freshly written Kimi-K2-shaped drafter (H 7168, V 163840, Vd 32000; ~4.7 GB bf16, a sparse file that uses
no disk) that no process has read, its pages dropped from the page cache (``posix_fadvise``). Every method
gets its own new file in every repetition, and the methods run interleaved, in a rotating order, so drifts
of a shared machine hit all alike. One untimed warm-up run per method first, so compiling ``.pyc`` files
and loading ``torch``'s libraries from disk the first time counts against no one. Each baseline's shapes
are checked against eaglelab's ``--json``.

Secondary (warm process): the same answer in this process, with eaglelab and torch already imported.

Index: a 64-shard index of a Kimi-K2-sized target (~69k tensors), whole process and in process.

    python benchmarks/bench_inspect.py [--dir DIR] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

#: Environment of every subprocess: no hub calls, no progress bars.
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "EAGLELAB_PROGRESS": "0"}

#: The baseline, run as ``python -c BASELINE FOLDER FRAMEWORK slice|tensor``: safetensors alone (plus the
#: stdlib to read a shard index), printing ``{name: shape}`` as JSON.
BASELINE = """\
import json, sys
from pathlib import Path
from safetensors import safe_open
folder, framework, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
index = folder / "model.safetensors.index.json"
files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
shapes = {}
for name in files:
    with safe_open(str(folder / name), framework=framework) as f:
        for key in f.keys():
            shapes[key] = list(f.get_slice(key).get_shape()) if mode == "slice" else list(f.get_tensor(key).shape)
print(json.dumps(shapes))
"""

#: eaglelab's reader of a target index as a whole process (``eaglelab inspect`` wants a drafter's config).
EAGLELAB_INDEX = """\
import json, sys
from eaglelab.checkpoints.files.sources import load_checkpoint
print(json.dumps({n: list(t.shape) for n, t in load_checkpoint(sys.argv[1]).tensors.items()}))
"""


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


def drop_from_page_cache(folder: Path) -> None:
    """Flush every file under ``folder`` and ask the kernel to drop its cached pages (these files only)."""
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
                if hasattr(os, "posix_fadvise"):
                    os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def eaglelab_shapes(stdout: str) -> dict[str, list[int]]:
    """``{name: shape}`` from ``eaglelab inspect --json`` output."""
    return {t["name"]: list(t["shape"]) for t in json.loads(stdout)["tensors"]}


def run_timed(cmd: list[str]) -> tuple[float, str]:
    """Run one whole process; return (wall seconds from start to exit, stdout).

    Raises:
        RuntimeError: the process failed (its stderr is in the message).
    """
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}... exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return seconds, proc.stdout


class Method:
    """One way to get every tensor's shape, as a whole process.

    Attributes:
        label: name in the table.
        command: builds the command line for a checkpoint folder.
        parse: stdout -> ``{name: shape}``; None for a reference that answers nothing.
        times: wall seconds of the timed runs.
        agrees: every run's shapes equalled eaglelab's on the same kind of file.
        error: why the method could not run (then it is left out).
    """

    def __init__(self, label: str, command: Callable[[Path], list[str]],
                 parse: Callable[[str], dict[str, list[int]]] | None = json.loads) -> None:
        self.label, self.command, self.parse = label, command, parse
        self.times: list[float] = []
        self.agrees = True
        self.error = ""


def baseline(framework: str, mode: str) -> Callable[[Path], list[str]]:
    """Command builder for the safetensors baseline with ``framework`` and ``slice`` or ``tensor``."""
    return lambda folder: [sys.executable, "-c", BASELINE, str(folder), framework, mode]


def race(methods: list[Method], write: Callable[[Path], Path], scratch: Path, repeat: int) -> None:
    """Time every method ``repeat`` times, interleaved, each run on its own freshly written, uncached checkpoint.

    The first method is the reference answer: the others' shapes are compared with its shapes on the
    same repetition. One untimed warm-up run per method comes first; a method that fails there is dropped.
    """
    reference: dict[str, list[int]] | None = None
    for i, m in enumerate(methods):  # warm-up: .pyc files, shared libraries into the page cache
        folder = write(scratch / f"warm-{i}")
        try:
            _, out = run_timed(m.command(folder))
            if m.parse is not None:
                shapes = m.parse(out)
                reference = shapes if reference is None else reference
                m.agrees = shapes == reference
        except (RuntimeError, ValueError) as exc:
            m.error = str(exc).splitlines()[-1][:200]
        shutil.rmtree(folder)
    if methods[0].error:
        raise RuntimeError(f"{methods[0].label}: {methods[0].error}")
    live = [m for m in methods if not m.error]
    for r in range(repeat):
        order = live[r % len(live):] + live[:r % len(live)]
        folders = {id(m): write(scratch / f"rep{r}-{j}") for j, m in enumerate(order)}
        for folder in folders.values():
            drop_from_page_cache(folder)
        answers = {}
        for m in order:
            seconds, out = run_timed(m.command(folders[id(m)]))
            m.times.append(seconds)
            if m.parse is not None:
                answers[id(m)] = m.parse(out)
        for m in live[1:]:
            if m.parse is not None:
                m.agrees &= answers[id(m)] == answers[id(live[0])]
        for folder in folders.values():
            shutil.rmtree(folder)


def summary_rows(methods: list[Method], against: Method) -> list[str]:
    """One line per method: median, min-max, ratio of medians against ``against``, shapes check."""
    ref = statistics.median(against.times)
    rows = []
    for m in methods:
        if m.error:
            rows.append(f"  {m.label:<58} not run: {m.error}")
            continue
        med = statistics.median(m.times)
        ratio = "1.0x (reference)" if m is against else f"{med / ref:5.1f}x eaglelab's time"
        check = "" if m.parse is None or m is against else ("  shapes match" if m.agrees else "  SHAPES DIFFER")
        rows.append(f"  {m.label:<58} {med:7.3f} s  [{min(m.times):.3f}-{max(m.times):.3f}]  {ratio}{check}")
    return rows


def in_process(write: Callable[[Path], Path], scratch: Path, repeat: int) -> tuple[list[float], list[float], list[float]]:
    """Warm process: eaglelab, safetensors and torch already imported; each call on a fresh, uncached drafter.

    Returns:
        Seconds of ``inspect_checkpoint``, of safe_open + ``get_tensor`` per key (the seed's way), and of
        safe_open + ``get_slice(key).get_shape()`` per key, one per repetition.
    """
    import torch  # noqa: F401  (imported before any timing: the baseline's process is warm too)
    from safetensors import safe_open

    from eaglelab.checkpoints.drafters.inspection import inspect_checkpoint

    def seeds_way(folder: Path, mode: str) -> dict[str, list[int]]:
        with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
            return {k: list(f.get_slice(k).get_shape() if mode == "slice" else f.get_tensor(k).shape) for k in f.keys()}

    ours, seed, sliced = [], [], []
    for r in range(repeat):
        folders = [write(scratch / f"warm-proc-{r}-{j}") for j in range(3)]
        for folder in folders:
            drop_from_page_cache(folder)
        t = time.perf_counter()
        insp = inspect_checkpoint(str(folders[0]))
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        by_tensor = seeds_way(folders[1], "tensor")
        seed.append(time.perf_counter() - t)
        t = time.perf_counter()
        by_slice = seeds_way(folders[2], "slice")
        sliced.append(time.perf_counter() - t)
        expected = {n: list(i.shape) for n, i in insp.checkpoint.tensors.items()}
        assert by_tensor == expected == by_slice, "in-process shapes differ"
        for folder in folders:
            shutil.rmtree(folder)
    return ours, seed, sliced


def med_range(xs: list[float], unit: float = 1.0, fmt: str = ".3f") -> str:
    """``median [min-max]`` of ``xs`` scaled by ``unit``."""
    return f"{statistics.median(xs) * unit:{fmt}} [{min(xs) * unit:{fmt}}-{max(xs) * unit:{fmt}}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", help="scratch folder (default: a temporary one)")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per method (default 5)")
    args = ap.parse_args()

    from eaglelab.checkpoints.files.sources import load_checkpoint
    from eaglelab.worlds.synthetic_checkpoints import write_synthetic_drafter, write_synthetic_weights

    entries = kimi_target_entries()

    def write_target(folder: Path) -> Path:
        return write_synthetic_weights(folder, entries, shards=64)

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        scratch = Path(tmp)
        probe = write_synthetic_drafter(scratch / "probe")
        size_gb = (probe / "model.safetensors").stat().st_size / 1e9
        n_tensors = len(load_checkpoint(str(probe)).tensors)
        shutil.rmtree(probe)

        # 1. Headline: whole process against whole process, fresh files.
        eaglelab = Method("eaglelab inspect --json", lambda f: [sys.executable, "-m", "eaglelab", "inspect", str(f), "--json"],
                          eaglelab_shapes)
        drafter_methods = [
            eaglelab,
            Method("safetensors pt: get_slice(k).get_shape() (library's best)", baseline("pt", "slice")),
            Method("safetensors pt: get_tensor(k).shape (the seed's way)", baseline("pt", "tensor")),
            Method("safetensors numpy: get_slice(k).get_shape() (no torch)", baseline("numpy", "slice")),
            Method("python -c pass (interpreter start, floor; answers nothing)",
                   lambda f: [sys.executable, "-c", "pass"], None),
        ]
        print(f"Kimi-K2-shaped drafter: {size_gb:.2f} GB bf16 (sparse), {n_tensors} tensors; "
              f"{args.repeat} timed runs per method, interleaved ...", flush=True)
        race(drafter_methods, write_synthetic_drafter, scratch, args.repeat)
        drafter_rows = summary_rows(drafter_methods, eaglelab)
        print("\n".join(drafter_rows), flush=True)

        # 2. The 64-shard index of a Kimi-K2-sized target (before torch is imported here: with torch loaded,
        # the garbage collector's passes over its objects slow the in-process load_checkpoint ~1.5x).
        target = write_target(scratch / "target")
        ck = load_checkpoint(str(target))
        index_desc = f"{len(ck.tensors):,} tensors, {ck.total_bytes / 1e12:.2f} TB described"
        del ck  # 69k objects kept alive would slow the collector in the timed calls below
        in_proc = []
        for r in range(args.repeat):
            folder = write_target(scratch / f"target-{r}")
            drop_from_page_cache(folder)
            t = time.perf_counter()
            load_checkpoint(str(folder))
            in_proc.append(time.perf_counter() - t)
            shutil.rmtree(folder)
        shutil.rmtree(target)
        ours_index = Method("eaglelab load_checkpoint (python -c)", lambda f: [sys.executable, "-c", EAGLELAB_INDEX, str(f)])
        index_methods = [
            ours_index,
            Method("safetensors pt: get_slice(k).get_shape(), 64 files", baseline("pt", "slice")),
            Method("safetensors numpy: get_slice(k).get_shape(), 64 files", baseline("numpy", "slice")),
        ]
        print(f"64-shard index: {index_desc} ...", flush=True)
        race(index_methods, write_target, scratch, args.repeat)
        index_rows = summary_rows(index_methods, ours_index)
        index_rows.append(f"  in process (eaglelab imported, no torch): load_checkpoint()  {med_range(in_proc, 1e3, '.1f')} ms")
        print("\n".join(index_rows), flush=True)

        # 3. Secondary: warm process (torch already imported for the baseline).
        ours, seed, sliced = in_process(write_synthetic_drafter, scratch, args.repeat)
        warm_rows = [
            f"  eaglelab inspect_checkpoint()                              {med_range(ours, 1e3, '.2f')} ms",
            f"  safe_open pt + get_tensor(k) per key (the seed's way)      {med_range(seed, 1e3, '.2f')} ms  "
            f"({statistics.median(seed) / statistics.median(ours):.1f}x)",
            f"  safe_open pt + get_slice(k).get_shape() per key            {med_range(sliced, 1e3, '.2f')} ms  "
            f"({statistics.median(sliced) / statistics.median(ours):.1f}x)",
        ]
        print("warm process, same drafter, imports already paid:\n" + "\n".join(warm_rows), flush=True)

    print()
    print(f"Measured: wall-clock of one whole `python` process, start to exit, printing the shape of every tensor; "
          f"each run on its own freshly written, never-read checkpoint (page cache dropped); median [min-max] of "
          f"{args.repeat} interleaved runs; ratio = method's median / eaglelab's median.")
    print(f"Kimi-K2-shaped drafter ({size_gb:.2f} GB bf16, {n_tensors} tensors; eaglelab also checks the config "
          f"and reads d2t/t2d):")
    print("\n".join(drafter_rows))
    print(f"64-shard Kimi-K2-sized target index ({index_desc}; eaglelab's side is load_checkpoint in `python -c`, "
          f"since `eaglelab inspect` wants a drafter's config):")
    print("\n".join(index_rows))
    print(f"Secondary, NOT whole process: warm process (eaglelab and torch already imported), fresh drafter per call, "
          f"median [min-max] of {args.repeat}:")
    print("\n".join(warm_rows))


if __name__ == "__main__":
    main()
