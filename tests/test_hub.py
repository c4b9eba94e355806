"""Hub ids end to end, offline: eaglelab's own reader and command line against a Hub-compatible HTTP server.

The server (:mod:`tests.hub_server`) runs on 127.0.0.1 and the real ``huggingface_hub`` client talks to
it over sockets, nothing patched but its configuration. Repos are tiny drafters with real safetensors
headers (``eaglelab.worlds.synthetic_checkpoints``, weights a sparse hole, several MB as served).

Olah (a self-hosted hub mirror on PyPI) was tried first and cannot serve these tests offline: it ignores
``Range`` (a header read would transfer the whole file) and answers a missing file or revision with
``401 RepoNotFound``, so the cases below could not be told apart. See :mod:`tests.hub_server`.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from eaglelab.checkpoints.files.sources import load_checkpoint
from eaglelab.cli import main
from eaglelab.errors import HubError
from eaglelab.worlds.synthetic_checkpoints import KIMI_K2_DRAFTER_CONFIG, write_synthetic_drafter, write_synthetic_weights
from tests.hub_server import HubServer, client_env, point_client_at

#: A drafter small enough to build in milliseconds, big enough (about 7 MB served) that reading it whole would show.
TINY = {**KIMI_K2_DRAFTER_CONFIG, "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
        "num_key_value_heads": 4, "head_dim": 64, "vocab_size": 8192, "draft_vocab_size": 2048,
        "max_position_embeddings": 4096}

#: huggingface_hub always reads ``bytes=0-100000`` of a safetensors file first, whatever the header's size.
FIRST_READ = 100_001

#: Per-request timeout (s) given to subprocesses through HF_HUB_ETAG_TIMEOUT / HF_HUB_DOWNLOAD_TIMEOUT.
CLIENT_TIMEOUT = 1


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A running server with this process's huggingface_hub pointed at it; everything under tmp_path."""
    with HubServer(tmp_path / "hub") as server:
        point_client_at(monkeypatch, server.endpoint, tmp_path / "hf-home")
        yield server


def header_length(path: Path) -> int:
    with open(path, "rb") as fh:
        return struct.unpack("<Q", fh.read(8))[0]


def error_line(capsys) -> str:
    """The command's stderr, which must be exactly one line."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def run_cli(args: list[str], env: dict[str, str], timeout: float) -> tuple[subprocess.CompletedProcess | None, float]:
    """``python -m eaglelab ARGS`` in a fresh process (its huggingface_hub reads only the environment).

    Returns ``(completed process, seconds)``, or ``(None, seconds)`` when it was killed at ``timeout``.
    """
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "eaglelab", *args], env=env, capture_output=True, text=True,
                              timeout=timeout, cwd=Path(__file__).resolve().parent.parent)
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - start
    return proc, time.monotonic() - start


def shapes(checkpoint) -> dict[str, tuple]:
    return {name: (t.shape, t.dtype) for name, t in checkpoint.tensors.items()}


# --------------------------------------------------------------------------- reading


@pytest.mark.parametrize("lfs_redirect", [True, False], ids=["lfs-302-to-cdn", "served-directly"])
def test_inspect_hub_id_matches_local_folder_and_reads_headers_only(hub, capsys, lfs_redirect):
    hub.lfs_redirect = lfs_redirect
    folder = write_synthetic_drafter(hub.revision_dir("acme/drafter"), TINY)
    weights = folder / "model.safetensors"

    assert main(["inspect", "--json", "acme/drafter"]) == 0
    remote = json.loads(capsys.readouterr().out)
    assert main(["inspect", "--json", str(folder)]) == 0
    local = json.loads(capsys.readouterr().out)
    assert remote["kind"] == "hub" and remote["config"] == TINY
    assert remote["problems"] == [] and len(remote["tensors"]) == 16
    content = ("config", "tensors", "total_parameters", "total_bytes", "parameters_by_module", "spec", "problems",
               "family", "computed", "status", "refusals", "cautions")
    assert {k: remote.get(k) for k in content} == {k: local.get(k) for k in content}

    # the weights were read through ranged GETs only, about the client's fixed first read, not the file
    size, moved = weights.stat().st_size, hub.body_bytes("model.safetensors")
    assert size > 5_000_000 and header_length(weights) < FIRST_READ
    assert 8 + header_length(weights) <= moved <= FIRST_READ
    gets = [r for r in hub.requests if r.filename == "model.safetensors" and r.method == "GET"]
    assert gets and all(r.range for r in gets)
    if lfs_redirect:
        assert {r.server for r in gets} == {"hub", "cdn"}


def test_human_readable_inspect_of_a_hub_id(hub, capsys):
    write_synthetic_drafter(hub.revision_dir("acme/drafter"), TINY)
    assert main(["inspect", "acme/drafter"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("acme/drafter (hub, 1 file(s)): 16 tensors")
    assert "lm_head.weight" in out and "[2048, 256]" in out and "problems: none" in out


def test_header_larger_than_the_first_read_costs_one_more_ranged_read(hub):
    entries = [(f"layers.{i}.weight", (16, 16), "F32") for i in range(2500)]
    folder = write_synthetic_weights(hub.revision_dir("acme/wide"), entries)
    n = header_length(folder / "model.safetensors")
    assert n > FIRST_READ

    ck = load_checkpoint("acme/wide")
    assert len(ck.tensors) == 2500 and ck.tensors["layers.7.weight"].shape == (16, 16) and ck.config is None
    ranged = [r for r in hub.requests if r.filename == "model.safetensors" and r.status == 206]
    assert [r.range for r in ranged] == ["bytes=0-100000", f"bytes=8-{n + 7}"]
    assert hub.body_bytes("model.safetensors") == FIRST_READ + n < (folder / "model.safetensors").stat().st_size


def test_sharded_repo_reads_each_shard_header(hub, capsys):
    folder = write_synthetic_drafter(hub.revision_dir("acme/sharded"), TINY, shards=3)
    shards = sorted(p.name for p in folder.glob("*.safetensors"))
    assert len(shards) == 3

    ck = load_checkpoint("acme/sharded")
    assert ck.kind == "hub" and ck.weight_files == shards and ck.config == TINY
    assert shapes(ck) == shapes(load_checkpoint(str(folder)))
    assert any(r.filename == "model.safetensors.index.json" and r.status == 200 for r in hub.requests)
    for shard in shards:
        assert hub.body_bytes(shard) <= max(FIRST_READ, 8 + header_length(folder / shard))

    assert main(["inspect", "acme/sharded"]) == 0
    assert "(hub, 3 file(s)): 16 tensors" in capsys.readouterr().out


def test_repo_without_config_reads_tensors_and_inspect_says_config_is_missing(hub, capsys):
    from safetensors.numpy import save_file

    folder = hub.revision_dir("acme/bare")
    save_file({"w": np.zeros((512, 512), np.float32), "b": np.ones(512, np.int64)}, str(folder / "model.safetensors"))

    ck = load_checkpoint("acme/bare")
    assert ck.config is None and ck.config_path is None
    assert shapes(ck) == {"w": ((512, 512), "F32"), "b": ((512,), "I64")}

    assert main(["inspect", "acme/bare"]) == 2
    line = error_line(capsys)
    assert "acme/bare" in line and "no config.json" in line


def test_revisions_branch_tag_and_commit(hub, capsys):
    write_synthetic_drafter(hub.revision_dir("acme/drafter", "main"), TINY)
    write_synthetic_drafter(hub.revision_dir("acme/drafter", "v1"), {**TINY, "draft_vocab_size": 1024})

    assert load_checkpoint("acme/drafter").tensors["lm_head.weight"].shape == (2048, 256)
    v1 = load_checkpoint("acme/drafter", revision="v1")
    assert v1.tensors["lm_head.weight"].shape == (1024, 256) and v1.config["draft_vocab_size"] == 1024
    by_commit = load_checkpoint("acme/drafter", revision=hub.commit("acme/drafter", "v1"))
    assert shapes(by_commit) == shapes(v1) and by_commit.config == v1.config

    assert main(["inspect", "--json", "--revision", "v1", "acme/drafter"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["draft_vocab_size"] == 1024
    assert main(["inspect", "--revision", "nope", "acme/drafter"]) == 2
    assert "acme/drafter" in error_line(capsys)


def test_compare_two_hub_ids_and_a_hub_target(hub, capsys):
    write_synthetic_drafter(hub.revision_dir("acme/a"), TINY)
    write_synthetic_drafter(hub.revision_dir("acme/b"), {**TINY, "draft_vocab_size": 1024})
    target = hub.revision_dir("acme/target")
    (target / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                                    "hidden_size": 256, "vocab_size": 8192, "num_hidden_layers": 61}))

    assert main(["compare", "--json", "acme/a", "acme/b", "--new-target", "acme/target"]) == 0
    cmp_ = json.loads(capsys.readouterr().out)
    assert [d["key"] for d in cmp_["config_diff"]] == ["draft_vocab_size"]
    changed = {t["name"] for t in cmp_["tensor_diff"] if t["status"] != "same"}
    assert changed == {"lm_head.weight", "d2t"}
    assert cmp_["verdict"]["level"] == "warm-start"

    assert main(["compare", "acme/a", "acme/missing"]) == 2
    assert "acme/missing" in error_line(capsys)


# --------------------------------------------------------------------------- failures


def test_missing_repo_is_one_line_naming_it(hub, capsys):
    with pytest.raises(HubError, match="acme/missing"):
        load_checkpoint("acme/missing")
    assert main(["inspect", "acme/missing"]) == 2
    line = error_line(capsys)
    assert line.startswith("eaglelab inspect: error: acme/missing:")


def test_missing_shard_and_missing_weights_are_one_line_naming_the_repo(hub, capsys):
    folder = write_synthetic_drafter(hub.revision_dir("acme/broken"), TINY, shards=2)
    (folder / "model-00002-of-00002.safetensors").unlink()
    assert main(["inspect", "acme/broken"]) == 2
    assert "acme/broken" in error_line(capsys)

    (hub.revision_dir("acme/configonly") / "config.json").write_text(json.dumps(TINY))
    assert main(["inspect", "acme/configonly"]) == 2
    line = error_line(capsys)
    assert "acme/configonly" in line and "model.safetensors" in line


def test_stall_on_the_weights_times_out_as_one_line(tmp_path):
    """The config answers, the weights never do: the client's timeout ends it (a fresh process reads the env)."""
    stall_weights = lambda r: (r.filename or "").endswith(".safetensors")  # noqa: E731
    with HubServer(tmp_path / "hub", stall=stall_weights) as hub:
        write_synthetic_drafter(hub.revision_dir("acme/drafter"), TINY)
        env = client_env(hub.endpoint, tmp_path / "hf-home", HF_HUB_ETAG_TIMEOUT=str(CLIENT_TIMEOUT),
                         HF_HUB_DOWNLOAD_TIMEOUT=str(CLIENT_TIMEOUT))
        proc, seconds = run_cli(["inspect", "acme/drafter"], env, timeout=10)
        assert proc is not None, "eaglelab inspect hung on a stalled server"
        assert any(r.stalled for r in hub.requests)
    assert proc.returncode == 2 and seconds < 8
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "acme/drafter" in lines[0]
    assert "timed out" in lines[0] or "no answer" in lines[0]


def test_stalled_server_gives_a_timeout_line_in_bounded_time(tmp_path):
    with HubServer(tmp_path / "hub", stall=True) as hub:
        write_synthetic_drafter(hub.revision_dir("acme/drafter"), TINY)
        env = client_env(hub.endpoint, tmp_path / "hf-home", HF_HUB_ETAG_TIMEOUT=str(CLIENT_TIMEOUT),
                         HF_HUB_DOWNLOAD_TIMEOUT=str(CLIENT_TIMEOUT))
        proc, seconds = run_cli(["inspect", "acme/drafter"], env, timeout=5)  # about 2 s once fixed
    assert proc is not None, f"eaglelab inspect still waiting on a stalled server after {seconds:.1f} s"
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "acme/drafter" in lines[0]
    assert "timed out" in lines[0] or "no answer" in lines[0]


def test_config_that_cannot_be_fetched_is_not_a_missing_config(hub, capsys):
    write_synthetic_drafter(hub.revision_dir("acme/drafter"), TINY)
    hub.fault = lambda r: (403, {"Content-Type": "application/json"}, b'{"error": "Forbidden"}') \
        if r.filename == "config.json" else None
    assert main(["inspect", "acme/drafter"]) == 2
    line = error_line(capsys)
    assert "acme/drafter" in line and "no config.json" not in line and "403" in line


@pytest.mark.parametrize("case", ["repo", "revision", "shard"])
def test_hub_errors_say_what_is_missing(hub, capsys, case):
    folder = write_synthetic_drafter(hub.revision_dir("acme/drafter"), TINY, shards=2)
    if case == "repo":
        args, needle = ["inspect", "acme/missing"], "not found"
    elif case == "revision":
        args, needle = ["inspect", "--revision", "nope", "acme/drafter"], "nope"
    else:
        (folder / "model-00002-of-00002.safetensors").unlink()
        args, needle = ["inspect", "acme/drafter"], "model-00002-of-00002.safetensors"
    assert main(args) == 2
    assert needle in error_line(capsys)


def test_missing_hub_target_is_one_short_line(hub, capsys):
    write_synthetic_drafter(hub.revision_dir("acme/a"), TINY)
    assert main(["compare", "acme/a", "acme/a", "--new-target", "acme/nosuch"]) == 2
    line = error_line(capsys)
    assert "acme/nosuch" in line and "\\x0a" not in line and len(line) < 200


# --------------------------------------------------------------------------- the server itself


def test_server_speaks_the_hub_protocol_to_huggingface_hub(hub, tmp_path):
    """The typed errors and model info the real client derives from this server's answers."""
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import RemoteEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    write_synthetic_drafter(hub.revision_dir("acme/drafter"), TINY)
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("acme/missing", "config.json")
    with pytest.raises(RepositoryNotFoundError):  # 404 rather than 401 once a token is sent, as on the Hub
        hf_hub_download("acme/missing", "config.json", token="hf_test")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download("acme/drafter", "config.json", revision="nope")
    with pytest.raises(RemoteEntryNotFoundError):
        hf_hub_download("acme/drafter", "tokenizer.json")
    assert json.loads(Path(hf_hub_download("acme/drafter", "config.json")).read_text()) == TINY

    info = HfApi(endpoint=hub.endpoint).model_info("acme/drafter", files_metadata=True)
    assert info.sha == hub.commit("acme/drafter")
    sizes = {s.rfilename: s.size for s in info.siblings}
    assert sizes == {p.name: p.stat().st_size for p in hub.revision_dir("acme/drafter").iterdir()}


def test_console_script_reaches_the_server_through_the_environment_alone(tmp_path):
    """No monkeypatching: HF_ENDPOINT and HF_HOME in a fresh process are all a user sets."""
    with HubServer(tmp_path / "hub") as hub:
        write_synthetic_drafter(hub.revision_dir("acme/drafter"), TINY)
        proc, _ = run_cli(["inspect", "--json", "acme/drafter"], client_env(hub.endpoint, tmp_path / "hf-home"),
                          timeout=60)
        served = {r.filename for r in hub.requests if r.status in (200, 206)}
    assert proc is not None and proc.returncode == 0, proc and proc.stderr
    assert json.loads(proc.stdout)["config"] == TINY
    assert {"config.json", "model.safetensors"} <= served
