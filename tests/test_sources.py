"""Header-only reading and every kind of bad input: a typed error naming the file and the problem."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import safe_open

from eaglelab.checkpoints.drafters.inspection import inspect_checkpoint
from eaglelab.checkpoints.files.sources import MAX_HEADER_BYTES, load_checkpoint, read_safetensors_header
from eaglelab.errors import ConfigError, HeaderError, HubError, SourceError, UnsafeFormatError


def write_raw(path, header: dict | bytes, data: bytes = b"", length: int | None = None):
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return path


def good_header():
    return {"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
            "b": {"dtype": "I64", "shape": [1], "data_offsets": [16, 24]}}


def test_reads_shapes_from_header_only(tmp_path):
    f = write_raw(tmp_path / "m.safetensors", good_header(), bytes(24))
    tensors, meta = read_safetensors_header(f)
    assert {n: (t.shape, t.dtype) for n, t in tensors.items()} == {"a": ((2, 2), "F32"), "b": ((1,), "I64")}
    assert tensors["a"].nbytes == 16 and meta == {}


def test_matches_the_safetensors_library(tmp_path):
    import torch
    from safetensors.torch import save_file

    f = tmp_path / "real.safetensors"
    save_file({"w": torch.zeros(3, 5, dtype=torch.bfloat16), "m": torch.ones(7, dtype=torch.bool)}, str(f))
    tensors, _ = read_safetensors_header(f)
    assert tensors["w"].shape == (3, 5) and tensors["w"].dtype == "BF16"
    assert tensors["m"].shape == (7,) and tensors["m"].dtype == "BOOL"


@pytest.mark.parametrize("earlier, readable", [
    ({"dtype": "F32", "shape": [2, 2], "data_offsets": [0, -3.2569301226601012e+16]}, False),  # fuzz round four
    ({"dtype": "F99", "shape": [2, 2], "data_offsets": [0, 16]}, False),
    ({"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}, True),  # well formed, replaced by the last
])
def test_a_repeated_tensor_name_reads_as_safetensors_reads_it(tmp_path, earlier, readable):
    """serde reads every value of a repeated name (each must be an entry) and keeps the last."""
    good = good_header()
    text = '{"a": ' + json.dumps(earlier) + ', "b": ' + json.dumps(good["b"]) + ', "a": ' + json.dumps(good["a"]) + "}"
    f = write_raw(tmp_path / "m.safetensors", text.encode(), bytes(24))
    try:
        with safe_open(str(f), "np") as opened:
            theirs = {n: tuple(opened.get_slice(n).get_shape()) for n in opened.keys()}
    except Exception:  # noqa: BLE001 - safetensors' own refusal, whatever its type
        theirs = None
    assert (theirs is not None) == readable
    if readable:
        tensors, _ = read_safetensors_header(f)
        assert {n: t.shape for n, t in tensors.items()} == theirs
    else:
        with pytest.raises(HeaderError, match="m.safetensors: tensor 'a': "):
            read_safetensors_header(f)


@pytest.mark.parametrize("case, needle", [
    ("truncated", "truncated"),
    ("beyond", "past the end"),
    ("oversized", "limit"),
    ("json", "not valid JSON"),
    ("dtype", "unknown dtype"),
    ("span", "does not hold shape"),
    ("overlap", "overlap"),
    ("range", "the file holds 10"),
    ("trailing", "8 bytes after the last tensor"),
    ("gap", "gap of 8 bytes"),
    ("metadata", "not an object of strings"),
    ("nan", "NaN is not JSON"),
])
def test_bad_headers_raise_typed_errors_naming_the_file(tmp_path, case, needle):
    f = tmp_path / f"{case}.safetensors"
    h = good_header()
    if case == "truncated":
        f.write_bytes(b"\x01\x02\x03")
    elif case == "beyond":
        write_raw(f, h, bytes(24), length=10_000)
    elif case == "oversized":
        write_raw(f, b"{}", length=MAX_HEADER_BYTES + 1)
    elif case == "json":
        write_raw(f, b"{not json", bytes(8))
    elif case == "dtype":
        h["a"]["dtype"] = "F128"
        write_raw(f, h, bytes(24))
    elif case == "span":
        h["a"]["data_offsets"] = [0, 12]
        h["b"]["data_offsets"] = [12, 20]
        write_raw(f, h, bytes(24))
    elif case == "overlap":
        h["b"] = {"dtype": "I64", "shape": [1], "data_offsets": [8, 16]}
        write_raw(f, h, bytes(24))
    elif case == "range":
        write_raw(f, h, bytes(10))
    elif case == "trailing":
        write_raw(f, h, bytes(32))
    elif case == "gap":
        h["b"]["data_offsets"] = [24, 32]
        write_raw(f, h, bytes(32))
    elif case == "metadata":
        h["__metadata__"] = {"format": 1}
        write_raw(f, h, bytes(24))
    elif case == "nan":
        write_raw(f, json.dumps(h).replace('"I64"', '"I64", "x": NaN').encode(), bytes(24))
    with pytest.raises(HeaderError) as err:
        read_safetensors_header(f)
    assert needle in str(err.value) and f.name in str(err.value)
    with pytest.raises(Exception, match="Error while deserializing header|HeaderTooLarge|HeaderTooSmall"):
        safe_open(str(f), "np")  # the same file is invalid for safetensors itself


def test_folder_without_weights(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SourceError, match="no weights"):
        load_checkpoint(tmp_path)


def test_pickle_only_is_refused_with_a_conversion_hint(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"not unpickled")
    with pytest.raises(UnsafeFormatError, match="never unpickles") as err:
        load_checkpoint(tmp_path)
    assert "weights_only=True" in str(err.value)


def test_missing_and_non_eagle_config(tmp_path):
    write_raw(tmp_path / "model.safetensors", good_header(), bytes(24))
    with pytest.raises(ConfigError, match="no config.json"):
        inspect_checkpoint(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 8}))
    insp = inspect_checkpoint(str(tmp_path))  # shapes and configs only, said so; no EAGLE-3 problems judged
    assert insp.spec is None and not insp.computed and insp.family.name == "target model"  # a language model's class
    assert insp.status_line.startswith("shapes and configs only") and "LlamaForCausalLM" in insp.status_line
    (tmp_path / "config.json").write_text("{broken")
    with pytest.raises(ConfigError, match="not valid JSON"):
        inspect_checkpoint(str(tmp_path))


def test_offline_hub_id_fails_at_once(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError, match="HF_HUB_OFFLINE"):
        load_checkpoint("someone/some-drafter")


def test_shard_index_is_followed(tmp_path):
    write_raw(tmp_path / "s1.safetensors", {"a": good_header()["a"]}, bytes(16))
    write_raw(tmp_path / "s2.safetensors", {"b": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}}, bytes(8))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "s1.safetensors",
                                                                                      "b": "s2.safetensors"}}))
    ck = load_checkpoint(tmp_path)
    assert ck.kind == "index" and set(ck.tensors) == {"a", "b"}
    (tmp_path / "s2.safetensors").unlink()
    with pytest.raises(SourceError, match="missing files"):
        load_checkpoint(tmp_path)


@pytest.mark.parametrize("args", [["inspect", "/no/such/dir"], ["compare", "/no/a", "/no/b"],
                                  ["perf", "--log", "/no/log"], ["perf", "--baseline-tps", "-1", "--cycle-ms", "3",
                                                                  "--accept-len", "2"]])
def test_cli_bad_input_exits_2_with_one_line(args):
    proc = subprocess.run([sys.executable, "-m", "eaglelab", *args], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunk=st.integers(1, 64), rows=st.integers(0, 9), cut=st.booleans())
def test_a_tensor_read_in_pieces_is_what_safetensors_reads(tmp_path_factory, monkeypatch, chunk, rows, cut):
    """A tensor's bytes come in pieces (each piece's cached copy then dropped): any piece size reads the bytes
    safetensors reads, and a file that ends inside the tensor is one typed line."""
    import torch
    from safetensors.torch import load_file, save_file

    from eaglelab.checkpoints.files import sources

    monkeypatch.setattr(sources, "READ_CHUNK_BYTES", chunk)
    f = tmp_path_factory.mktemp("pieces") / "m.safetensors"
    save_file({"w": torch.arange(rows * 5, dtype=torch.float32).reshape(rows, 5), "b": torch.ones(3).bfloat16()},
              str(f))
    info = sources.read_safetensors_header(f)[0]["w"]
    if cut and info.nbytes:
        f.write_bytes(f.read_bytes()[:info.data_start + info.span[1] - 1])
        with pytest.raises(HeaderError, match="m.safetensors: tensor 'w': file ends inside its data"):
            sources.read_small_tensor(info)
        return
    assert (torch.from_numpy(sources.read_small_tensor(info)) == load_file(str(f))["w"]).all()
