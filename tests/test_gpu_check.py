"""#42 item 4: the prepared GPU check runs, here on the CPU, and writes every figure to one file.

The check is what a lent device machine runs (``benchmarks/gpu_check.sh``); this runs it the same way with
``--devices cpu cuda --quick`` on this machine: the jobs run for real on the tiny world it builds, the
probe from dumps gives the live probe's τ, a device torch does not see is recorded as skipped with the
reason, and the JSON is whole.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.world
def test_the_gpu_check_runs_its_parts_and_writes_one_file(tiny_world, tmp_path):
    """On the session's tiny world (``--world``: the lent machine builds its own, as ``gpu_check.sh`` runs it)."""
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--out", str(out), "--quick",
                           "--devices", "cpu", "cuda", "--parts", "live probe", "dump probe", "fine-tune",
                           "--world", str(tiny_world.root)],
                          capture_output=True, text=True, env=env, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["done"] and record["torch"] and record["elapsed_s"] > 0
    rows = {(r["part"], r["device"]): r for r in record["rows"]}
    if record["device"] is None:  # no CUDA here: said so, not silently dropped
        assert rows[("all", "cuda")]["skipped"] == "torch sees no CUDA device"
    live, dumped, tuned = rows[("live probe", "cpu")], rows[("dump probe", "cpu")], rows[("fine-tune", "cpu")]
    assert not any("error" in r for r in (live, dumped, tuned)), [r.get("trace") for r in (live, dumped, tuned)]
    assert 1.0 <= live["tau_old"] <= 4.0 and 1.0 <= live["tau_new"] <= 4.0
    # the dumps were written in bf16 from the same sequences: the probe from them reads the same τ to bf16's precision
    assert math.isclose(dumped["tau_old"], live["tau_old"], rel_tol=0.02)
    assert math.isclose(dumped["tau_new"], live["tau_new"], rel_tol=0.02)
    assert tuned["steps"] == 2 and tuned["train_tok_s"] > 0 and math.isfinite(tuned["last_loss"])
    assert "Verdict" in live["headline"] and all(r["seconds"] > 0 for r in (live, dumped, tuned))


def test_the_wrapper_is_bash_and_gives_the_check_its_deadline():
    script = REPO / "benchmarks" / "gpu_check.sh"
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    text = script.read_text()
    assert "timeout 480" in text and "HF_HUB_OFFLINE=1" in text and "--devices cuda cpu" in text
