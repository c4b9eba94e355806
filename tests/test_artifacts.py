"""Cached artefacts: built once, reused, rebuilt when corrupt, partial or stale; atomic writes."""

from __future__ import annotations

import pytest

from eaglelab.atomic import write_text_atomic
from eaglelab.worlds.artifacts import cached_build, verify_manifest


def test_cached_build_reuses_and_rebuilds(tmp_path):
    calls = []

    def build(d):
        calls.append(1)
        (d / "weights.bin").write_bytes(b"x" * 100)

    target = tmp_path / "art"
    cached_build(target, {"v": 1}, build, log=lambda m: None)
    cached_build(target, {"v": 1}, build, log=lambda m: None)
    assert len(calls) == 1 and verify_manifest(target, {"v": 1})[0]
    (target / "weights.bin").write_bytes(b"y" * 100)  # corrupted in place
    assert "corrupted" in verify_manifest(target, {"v": 1})[1]
    cached_build(target, {"v": 1}, build, log=lambda m: None)
    assert len(calls) == 2 and (target / "weights.bin").read_bytes() == b"x" * 100
    cached_build(target, {"v": 2}, build, log=lambda m: None)  # other parameters
    assert len(calls) == 3


def test_failed_build_leaves_the_old_artefact(tmp_path):
    target = tmp_path / "art"
    cached_build(target, {"v": 1}, lambda d: (d / "f").write_text("ok"), log=lambda m: None)

    def broken(d):
        (d / "f").write_text("half")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        cached_build(target, {"v": 2}, broken, log=lambda m: None)
    assert (target / "f").read_text() == "ok" and not list(tmp_path.glob(".art.building-*"))


def test_copies_left_by_killed_builds_are_removed_and_a_live_one_kept(tmp_path):
    import os
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    abandoned = tmp_path / f".art.building-{int(dead.stdout)}"  # that process has exited
    live = tmp_path / f".art.building-{os.getppid()}"  # a running process (pytest's parent)
    for d in (abandoned, live):
        d.mkdir()
        (d / "half.bin").write_bytes(b"x")
    cached_build(tmp_path / "art", {"v": 1}, lambda d: (d / "f").write_text("ok"), log=lambda m: None)
    assert not abandoned.exists() and live.exists()


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path):
    p = tmp_path / "x.txt"
    write_text_atomic(p, "old")
    with pytest.raises(TypeError):
        write_text_atomic(p, None)
    assert p.read_text() == "old" and len(list(tmp_path.iterdir())) == 1
