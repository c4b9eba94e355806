"""SGLang (old and new) and vLLM log lines parse; other lines are skipped; bad numbers reported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from eaglelab.errors import LogFormatError
from eaglelab.serving.logs import parse_line, parse_log, parse_log_text

OLD = ("[2026-01-01 10:00:00 TP0] Decode batch. #running-req: 1, #token: 112, token usage: 0.00, accept len: 2.19, "
       "cuda graph: True, gen throughput (token/s): 258.07, #queue-req: 0,")
NEW = ("[2026-01-01 10:00:01 TP0] Decode batch[ 40], #running-req: 4, #token: 900, token usage: 0.02, accept len: 1.87, "
       "accept rate: 0.29, cuda graph: False, gen throughput (token/s): 190.50, #queue-req: 2,")
VLLM = ("INFO 11-02 11:00:00 [metrics.py:96] SpecDecoding metrics: Mean acceptance length: 2.05, Accepted throughput: "
        "33.10 tokens/s, Drafted throughput: 96.77 tokens/s, Accepted: 1050 tokens, Drafted: 3000 tokens, "
        "Per-position acceptance rate: 0.500, 0.330, 0.220, Avg Draft acceptance rate: 35.0%")


def test_sglang_old_and_new():
    old, new = parse_line(OLD), parse_line(NEW)
    assert (old.source, old.accept_len, old.throughput, old.concurrency, old.cuda_graph) == ("sglang", 2.19, 258.07, 1, True)
    assert (new.accept_len, new.throughput, new.concurrency, new.accept_rate, new.cuda_graph) == (1.87, 190.5, 4, 0.29, False)


def test_vllm():
    r = parse_line(VLLM)
    assert (r.source, r.accept_len, r.throughput) == ("vllm", 2.05, 33.10)
    assert r.per_position == [0.5, 0.33, 0.22] and r.accept_rate == pytest.approx(0.35)


def test_skips_other_lines_and_reports_malformed():
    text = "\n".join(["server starting", OLD, 'INFO: 127.0.0.1 - "POST /v1/chat" 200 OK', NEW,
                      OLD.replace("2.19", "abc"), VLLM.replace("2.05", "x.yz"), "", VLLM])
    parsed = parse_log_text(text)
    assert [r.source for r in parsed.records] == ["sglang", "sglang", "vllm"]
    assert parsed.skipped_lines == 3
    assert [n for n, _ in parsed.malformed] == [5, 6]
    s = parsed.summary()
    groups = {(g["source"], g["concurrency"]) for g in s["by_source"]}
    assert s["n"] == 3 and groups == {("sglang", 1), ("sglang", 4), ("vllm", None)}


def test_file_without_metrics_is_an_error(tmp_path):
    f = tmp_path / "server.log"
    f.write_text("nothing here\n")
    with pytest.raises(LogFormatError, match="server.log"):
        parse_log(f)


def test_bundled_sample_logs_and_cli():
    root = Path(__file__).resolve().parent.parent / "data" / "logs"
    for name in ("sglang_kimi_k25_sample.log", "vllm_sample.log"):
        out = subprocess.run([sys.executable, "-m", "eaglelab", "perf", "--log", str(root / name), "--json"],
                             capture_output=True, text=True, check=True).stdout
        d = json.loads(out)
        assert d["records"] and all({"accept_len", "throughput"} <= set(r) for r in d["records"])
        assert 1.5 < d["summary"]["median_accept_len"] < 2.5
