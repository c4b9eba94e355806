"""A target's heads read without the target, and the hub transport, against hostile files and servers.

Pins issue #37's items 4 (the heads half: a NaN or infinity in a head), 6 (heads of other sizes than the
vocabulary), 13 (a hub answer that changes between requests), 14 (huggingface_hub's own uncapped request
for its agent registry) and 18 (a missing ``lm_head`` read as tied). The targets are real safetensors
files written here; hub ids are read from the hub-compatible server of :mod:`tests.hub_server` by the
real huggingface_hub client.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from eaglelab.checkpoints.files.sources import load_checkpoint
from eaglelab.checkpoints.targets.config import TIE_DEFAULTS, head_names, tied_embeddings
from eaglelab.cli import main
from eaglelab.errors import CheckpointMismatchError, EaglelabError, HubError
from eaglelab.model.heads import read_target_heads
from eaglelab.worlds.synthetic_checkpoints import write_synthetic_drafter
from tests import fuzzing as fz
from tests.hub_server import HubServer, point_client_at, zeros
from tests.test_hub import TINY

VOCAB, HIDDEN = 64, 16


def write_target(folder: Path, *, vocab: int = VOCAB, head_rows: int | None = None, embed_rows: int | None = None,
                 head: bool = True, config: dict | None = None, poison: dict | None = None) -> Path:
    """A Llama-style target's final norm, embedding, head and one decoder weight, as real safetensors.

    Args:
        head_rows, embed_rows: rows of ``lm_head`` / ``embed_tokens`` (default ``vocab``).
        head: False writes no ``lm_head.weight``.
        config: fields over a Llama config (``vocab_size`` None leaves it out).
        poison: tensor name -> (row, value) written into that row (a NaN, an infinity).
    """
    folder.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    tensors = {"model.embed_tokens.weight": torch.randn(embed_rows or vocab, HIDDEN, generator=g),
               "model.norm.weight": torch.rand(HIDDEN, generator=g) + 0.5,
               "model.layers.0.mlp.down_proj.weight": torch.randn(HIDDEN, 2 * HIDDEN, generator=g)}
    if head:
        tensors["lm_head.weight"] = torch.randn(head_rows or vocab, HIDDEN, generator=g)
    for name, (row, value) in (poison or {}).items():
        tensors[name][row] = value
    save_file(tensors, str(folder / "model.safetensors"))
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN, "vocab_size": vocab,
           "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "tie_word_embeddings": False, **(config or {})}
    (folder / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if v is not None}))
    return folder


def stored(folder: Path, name: str) -> torch.Tensor:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))[name]


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A running hub-compatible server with this process's huggingface_hub pointed at it."""
    with HubServer(tmp_path / "hub") as server:
        point_client_at(monkeypatch, server.endpoint, tmp_path / "hf-home")
        yield server


def one_line_cli(args: list[str], capsys) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


# --------------------------------------------------------------------------- item 4: heads that are not finite


@pytest.mark.parametrize("name, value", [("lm_head.weight", float("nan")), ("model.embed_tokens.weight", float("inf")),
                                         ("model.norm.weight", float("-inf"))])
def test_a_nan_in_a_target_head_is_refused_naming_the_file_and_tensor(tmp_path, name, value):
    """#37 item 4: a NaN in a target's lm_head gave TV nan and a verdict; now refused as it is read."""
    folder = write_target(tmp_path / "t", poison={name: (5, value)})
    with pytest.raises(CheckpointMismatchError) as err:
        read_target_heads(str(folder))
    line = str(err.value)
    assert "\n" not in line and str(folder / "model.safetensors") in line and name in line
    assert "non-finite" in line and ("at row 5:" in line or "at index 5:" in line)


def test_the_finite_check_is_chunked_and_finds_the_first_row(tmp_path, monkeypatch):
    """#37 item 4: checked in chunks (a mask of a chunk, never a copy of the head); the row named is the first bad one."""
    monkeypatch.setattr("eaglelab.model.heads.FINITE_CHUNK", 48)  # 3 rows of 16 per chunk
    folder = write_target(tmp_path / "t", poison={"lm_head.weight": (61, float("nan"))})
    with pytest.raises(CheckpointMismatchError, match=r"lm_head\.weight holds a non-finite value .* at row 61"):
        read_target_heads(str(folder))


def test_a_nan_in_a_hub_target_head_is_refused(hub, tmp_path):
    """#37 item 4: the same over range requests from the hub."""
    write_target(hub.revision_dir("acme/target"), poison={"lm_head.weight": (3, float("nan"))})
    with pytest.raises(CheckpointMismatchError, match=r"acme/target/model.safetensors: tensor lm_head\.weight holds"):
        read_target_heads("acme/target")


# --------------------------------------------------------------------------- item 6: heads of other sizes


@pytest.mark.parametrize("rows", [VOCAB + 2, 128])
def test_a_head_padded_beyond_the_vocabulary_is_read_as_its_first_rows(tmp_path, rows):
    """#37 item 6: a head padded for tensor parallelism (vocab + 2, or a multiple of 64) gave a RuntimeError in the
    head pass; now its first vocab_size rows are read, with a note, and the padding (NaN here) is never read."""
    folder = write_target(tmp_path / "t", head_rows=rows, embed_rows=rows,
                          poison={"lm_head.weight": (rows - 1, float("nan")), "model.embed_tokens.weight": (VOCAB, float("inf"))})
    heads = read_target_heads(str(folder))
    assert heads.lm_head.shape == heads.embedding.shape == (VOCAB, HIDDEN) and heads.vocab_size == VOCAB
    assert torch.equal(heads.lm_head, stored(folder, "lm_head.weight")[:VOCAB])
    assert torch.equal(heads.embedding, stored(folder, "model.embed_tokens.weight")[:VOCAB])
    assert len(heads.notes) == 2 and all(f"{rows:,} rows, padded beyond the config's vocab_size {VOCAB}" in n
                                         for n in heads.notes)
    assert heads.to("cpu").notes == heads.notes


@pytest.mark.parametrize("head_rows, embed_rows, vocab, says", [
    (VOCAB - 4, VOCAB, VOCAB, "tensor lm_head.weight has 60 rows, fewer than the config's vocab_size 64"),
    (VOCAB, VOCAB - 1, VOCAB, "tensor model.embed_tokens.weight has 63 rows, fewer than the config's vocab_size 64"),
    (VOCAB + 2, VOCAB, None, "tensor lm_head.weight has 66 rows and model.embed_tokens.weight 64, and the config names "
                             "no vocab_size"),
])
def test_heads_of_other_sizes_are_refused_before_any_read(hub, capsys, head_rows, embed_rows, vocab, says):
    """#37 item 6: fewer rows than the vocabulary, or a head and embedding that disagree with no vocab_size to settle
    it: one line naming the file, the tensor and both sizes, before a byte of any tensor moved."""
    write_target(hub.revision_dir("acme/target"), head_rows=head_rows, embed_rows=embed_rows,
                 config={"vocab_size": vocab})
    hub.clear_log()
    with pytest.raises(CheckpointMismatchError) as err:
        read_target_heads("acme/target")
    assert str(err.value).startswith("acme/target/model.safetensors: ") and says in str(err.value)
    weights = [r for r in hub.requests if r.filename == "model.safetensors" and r.server == "hub"]
    assert [r.range for r in weights] == ["bytes=0-100000"]  # the header only


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(vocab=st.one_of(st.none(), st.integers(1, 80)), head_rows=st.integers(1, 80), embed_rows=st.integers(1, 80),
       tied=st.booleans())
def test_any_rows_read_as_the_vocabulary_or_one_line(tmp_path_factory, vocab, head_rows, embed_rows, tied):
    """#37 item 6, as a property: whatever the rows of the head and embedding and the config's vocab_size, the heads
    read are the first vocab_size rows of each (or of both, when equal and no vocab_size is given), or one refusal."""
    folder = write_target(tmp_path_factory.mktemp("rows"), vocab=vocab or 1, head_rows=head_rows, embed_rows=embed_rows,
                          head=not tied, config={"vocab_size": vocab, "tie_word_embeddings": tied})
    rows = vocab or embed_rows
    try:
        heads = read_target_heads(str(folder))
    except CheckpointMismatchError as exc:
        assert "\n" not in str(exc) and "model.safetensors: tensor " in str(exc)
        assert vocab is None or min(embed_rows, head_rows if not tied else embed_rows) < vocab
        return
    assert heads.vocab_size == heads.embedding.shape[0] == rows
    assert torch.equal(heads.embedding, stored(folder, "model.embed_tokens.weight")[:rows])
    if not tied:
        assert torch.equal(heads.lm_head, stored(folder, "lm_head.weight")[:rows])


# --------------------------------------------------------------------------- item 13: one commit, one header per file


def test_hub_heads_read_each_header_once_at_one_commit(hub, tmp_path, monkeypatch):
    """#37 item 13: no header length is re-read before a tensor, and every request after the first asks the commit
    the first answer named (``/resolve/<sha>/``), not the branch."""
    folder = write_target(hub.revision_dir("acme/target"))
    monkeypatch.setattr("eaglelab.model.heads.HUB_CHUNK_BYTES", 1000)  # several ranges per tensor
    hub.clear_log()
    remote, local = read_target_heads("acme/target"), read_target_heads(str(folder))
    assert torch.equal(remote.lm_head, local.lm_head) and torch.equal(remote.embedding, local.embedding)
    commit = hub.commit("acme/target")
    asked = [r for r in hub.requests if r.server == "hub"]
    assert asked[0].filename == "config.json" and asked[0].revision == "main"
    assert all(r.revision == commit for r in asked[1:]) and len(asked) > 5
    starts = [r.range for r in asked if r.filename == "model.safetensors" and (r.range or "").startswith("bytes=0-")]
    assert starts == ["bytes=0-100000"]


def test_a_lying_header_length_answer_cannot_shift_the_tensors(hub):
    """#37 item 13: a server that answers a short ``bytes=0-7`` read with another header length shifted every tensor
    (τ on A 1.85 -> 1.00, no error); the length now comes from the one header read, so it is never asked again."""
    folder = write_target(hub.revision_dir("acme/target"))
    real = (folder / "model.safetensors").read_bytes()
    lie = (int.from_bytes(real[:8], "little") + 64).to_bytes(8, "little")
    hub.fault = lambda r: (206, {"Content-Range": f"bytes 0-7/{len(real)}"}, lie) if r.range == "bytes=0-7" else None
    remote = read_target_heads("acme/target")
    assert torch.equal(remote.lm_head, stored(folder, "lm_head.weight"))
    assert torch.equal(remote.norm_weight, stored(folder, "model.norm.weight"))
    assert not any(r.range == "bytes=0-7" for r in hub.requests)


@pytest.mark.parametrize("kind, says", [("header length changes", "changed between two answers of the hub"),
                                        ("etag changes", "changed between two answers of the hub (ETag"),
                                        ("commit changes", "the hub answered from commit 000000000000 after")])
def test_a_file_that_changes_between_answers_is_refused(hub, capsys, kind, says):
    """#37 item 13: after the header read, the server answers from a copy whose header is 8 bytes longer (same ETag
    and commit claimed), with another ETag, or from another commit: one line, not the tensors of another file."""
    from tests.fuzzing_write import changed_file_fault

    folder = write_target(hub.revision_dir("acme/target"))
    hub.fault = changed_file_fault(kind, folder / "model.safetensors", hub.commit("acme/target"), first_answers=1)
    with pytest.raises(HubError) as err:
        read_target_heads("acme/target")
    assert str(err.value).startswith("acme/target: model.safetensors") and says in str(err.value), str(err.value)


def test_inspect_refuses_weights_from_another_commit_than_the_config(hub, capsys):
    """#37 item 13: the config pins the commit; a header answered from another one is refused in one line."""
    from tests.fuzzing_write import changed_file_fault

    folder = write_synthetic_drafter(hub.revision_dir("acme/drafter"), TINY)
    hub.fault = changed_file_fault("commit changes", folder / "model.safetensors", hub.commit("acme/drafter"), 0)
    line = one_line_cli(["inspect", "acme/drafter"], capsys)
    assert "acme/drafter: model.safetensors: the hub answered from commit" in line


def test_an_answer_that_names_no_commit_is_refused(hub, capsys):
    """#37 item 13: a server that names no commit cannot be pinned (huggingface_hub refuses it too)."""
    write_synthetic_drafter(hub.revision_dir("acme/drafter"), TINY)
    hub.fault = lambda r: (200, {}, json.dumps(TINY).encode()) if r.filename == "config.json" else None
    assert "names no commit" in one_line_cli(["inspect", "acme/drafter"], capsys)


def test_a_commit_given_as_revision_is_asked_for_every_file(hub):
    write_synthetic_drafter(hub.revision_dir("acme/drafter", "v1"), TINY)
    commit = hub.commit("acme/drafter", "v1")
    ck = load_checkpoint("acme/drafter", revision=commit)
    assert ck.hub.commit == commit and {r.revision for r in hub.requests if r.server == "hub"} == {commit}


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_answer_after_the_header_is_the_file_or_one_line(tmp_path_factory, data):
    """#37 item 13, as a property: whatever a later answer claims (commit, ETag, length, range, bytes), the heads read
    are the file's own or the read is one typed error."""
    root = tmp_path_factory.mktemp("prop")
    folder = write_target(root / "hub" / "acme" / "target" / "main")
    real = (folder / "model.safetensors").read_bytes()
    commit_other = data.draw(st.sampled_from([None, "0" * 40, "not-a-commit"]))
    etag_other = data.draw(st.sampled_from([None, '"x"']))
    grow = data.draw(st.sampled_from([0, 8, -8]))
    flip = data.draw(st.one_of(st.none(), st.integers(0, len(real) - 1)))
    shift = data.draw(st.sampled_from([0, 1, -1]))

    with HubServer(root / "hub") as server:
        commit = server.commit("acme/target")
        body = bytearray(real)
        if flip is not None:
            body[flip] ^= 0xFF

        def fault(rec):
            if rec.filename != "model.safetensors" or rec.server != "hub" or (rec.range or "").startswith("bytes=0-1000"):
                return None
            lo, hi = (int(x) for x in rec.range.removeprefix("bytes=").split("-"))
            lo2 = max(lo + shift, 0)
            headers = {"Content-Range": f"bytes {lo2}-{hi + shift}/{len(real) + grow}",
                       "X-Repo-Commit": commit_other or commit}
            if etag_other:
                headers["ETag"] = etag_other
            return 206, headers, bytes(body[lo2:hi + shift + 1])

        server.fault = fault
        with pytest.MonkeyPatch.context() as mp:
            point_client_at(mp, server.endpoint, root / "hf-home")
            try:
                heads = read_target_heads("acme/target")
            except EaglelabError as exc:
                assert "\n" not in str(exc) and str(exc).startswith("acme/target")
            else:
                assert torch.equal(heads.lm_head, stored(folder, "lm_head.weight")) or flip is not None
                assert not commit_other and not etag_other and not grow and not shift


# --------------------------------------------------------------------------- item 14: the library's own requests


@pytest.fixture
def telemetry_on(monkeypatch):
    """huggingface_hub as a user without HF_HUB_DISABLE_TELEMETRY has it: its agent registry not yet fetched."""
    import huggingface_hub.utils._detect_agent as detect
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "0")
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", False)
    monkeypatch.setattr(detect, "_registry", None)


def registry_fault(size: int):
    return lambda r: (200, {"Content-Length": str(size), "Content-Type": "application/json"}, zeros(size)) \
        if r.path.startswith("/api/agent-harnesses") else None


def test_hub_commands_never_fetch_the_agent_registry(hub, telemetry_on, capsys):
    """#37 item 14: building the request headers made huggingface_hub fetch ``/api/agent-harnesses`` with no cap (a
    mirror's 1 GiB answer: 2.3-3 GB on every hub command); eaglelab's requests are the only ones now."""
    write_synthetic_drafter(hub.revision_dir("acme/drafter"), TINY)
    write_target(hub.revision_dir("acme/target"))
    hub.fault = registry_fault(64 << 20)
    tracemalloc.start()
    try:
        assert main(["inspect", "acme/drafter"]) == 0
        read_target_heads("acme/target")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "problems: none" in capsys.readouterr().out
    assert not any(r.path.startswith("/api/") for r in hub.requests)
    assert peak < 32 << 20, f"{peak:,} bytes held"


def test_the_console_command_never_fetches_the_agent_registry(tmp_path):
    """#37 item 14 as a user runs it: a fresh ``python -m eaglelab inspect`` with telemetry on in its environment."""
    from tests.hub_server import client_env
    from tests.test_hub import run_cli

    with HubServer(tmp_path / "hub") as server:
        write_synthetic_drafter(server.revision_dir("acme/drafter"), TINY)
        server.fault = registry_fault(256 << 20)
        env = {**client_env(server.endpoint, tmp_path / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "0"}
        proc, _ = run_cli(["inspect", "acme/drafter"], env, timeout=120)
        assert proc is not None and proc.returncode == 0, proc and proc.stderr
        assert not any(r.path.startswith("/api/agent-harnesses") for r in server.requests)


def test_a_download_the_library_makes_after_eaglelab_skips_the_registry(hub, telemetry_on):
    """#37 item 14: a hub drafter or target is downloaded by huggingface_hub itself (``load_drafter``'s
    ``snapshot_download``, transformers' ``from_pretrained``), after eaglelab's own reads of its config and headers:
    from then on the library's telemetry is off and its downloads ask no registry either (``hf_hub_download`` here:
    this server has no tree API for ``snapshot_download``)."""
    from huggingface_hub import hf_hub_download

    write_synthetic_drafter(hub.revision_dir("acme/drafter"), TINY)
    hub.fault = registry_fault(1 << 20)
    ck = load_checkpoint("acme/drafter")
    assert json.loads(Path(hf_hub_download("acme/drafter", "config.json", revision=ck.hub.commit)).read_text()) == TINY
    assert not any(r.path.startswith("/api/agent-harnesses") for r in hub.requests)


@pytest.mark.parametrize("where", ["env", "file"])
def test_the_token_is_still_sent_without_the_library_building_the_headers(hub, monkeypatch, where):
    """#37 item 14: the headers built here carry the token (``HF_TOKEN`` or the token file), as the library's did:
    the server answers a missing repo 404 with a token, 401 without one (as the Hub hides private repos)."""
    from huggingface_hub import constants

    if where == "env":
        monkeypatch.setenv("HF_TOKEN", "hf_test")
    else:
        Path(constants.HF_TOKEN_PATH).parent.mkdir(parents=True, exist_ok=True)
        Path(constants.HF_TOKEN_PATH).write_text("hf_test\n")
    with pytest.raises(HubError, match="acme/missing"):
        load_checkpoint("acme/missing")
    assert [r.status for r in hub.requests] == [404]


def test_the_fuzz_case_of_a_huge_agent_registry(tmp_path):
    """#37 item 14 in the fuzzing suite's ``hub`` category: a 1 GiB registry answer is never asked for."""
    from tests import fuzzing_write as fw

    with fw.hub_for_fuzzing(tmp_path, deadline_s=1.0) as server:
        for kind in fw.HUB_UNASKED:
            case = fw.hub_case(tmp_path, server, kind)
            outcome = fz.check(case, 4.0)
            assert outcome.kind == "ok", fz.describe(case, outcome)


# --------------------------------------------------------------------------- item 18: a missing lm_head


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "deepseek_v3", "kimi_k2", "an-unknown-type"])
def test_a_missing_lm_head_is_not_read_as_tied_by_default(tmp_path, capsys, model_type):
    """#37 item 18: no lm_head and no tie_word_embeddings was read as tied, but Llama, Qwen2 and DeepSeek-V3 default to
    untied: the probe used the embedding as head. Now refused in one line, and ``inspect`` says so (no "(tied)")."""
    folder = write_target(tmp_path / "t", head=False, config={"model_type": model_type, "tie_word_embeddings": None})
    with pytest.raises(CheckpointMismatchError) as err:
        read_target_heads(str(folder))
    assert "no lm_head.weight in model.safetensors and tie_word_embeddings is not true" in str(err.value)
    assert main(["inspect", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "(tied)" not in out and "no lm_head.weight in model.safetensors and tie_word_embeddings is not true" in out


@pytest.mark.parametrize("config, tied", [({"model_type": "gemma", "tie_word_embeddings": None}, True),
                                          ({"model_type": "llama", "tie_word_embeddings": True}, True),
                                          ({"model_type": "gemma", "tie_word_embeddings": False}, False)])
def test_tied_only_when_the_config_or_its_model_type_says_so(tmp_path, config, tied):
    """#37 item 18: an explicit value wins; unset, the model type's transformers default (Gemma ties)."""
    folder = write_target(tmp_path / "t", head=False, config=config)
    if tied:
        heads = read_target_heads(str(folder))
        assert heads.names["lm_head"] == "model.embed_tokens.weight" and heads.lm_head is heads.embedding
    else:
        with pytest.raises(CheckpointMismatchError, match="the config says tie_word_embeddings false"):
            read_target_heads(str(folder))


def test_the_tie_defaults_are_transformers_own():
    """#37 item 18: the table read as data on metadata paths is what the installed transformers' config classes say."""
    from transformers import CONFIG_MAPPING, AutoConfig

    checked = 0
    for model_type, tied in TIE_DEFAULTS.items():
        if model_type not in CONFIG_MAPPING:  # remote code (kimi_k2): mapped as transformers maps it
            assert model_type == "kimi_k2" and tied == TIE_DEFAULTS["deepseek_v3"]
            continue
        assert AutoConfig.for_model(model_type).tie_word_embeddings is tied, model_type
        checked += 1
    assert checked == len(TIE_DEFAULTS) - 1


def test_a_multimodal_target_follows_its_outer_model_type():
    names = ["language_model.model.embed_tokens.weight", "language_model.model.norm.weight"]
    assert tied_embeddings({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text"}})[0]
    assert not tied_embeddings({"model_type": "qwen2_5_vl", "text_config": {"model_type": "qwen2"}})[0]
    with pytest.raises(CheckpointMismatchError, match="no language_model.lm_head.weight in"):
        head_names(names, {"model_type": "kimi_k25", "text_config": {"tie_word_embeddings": False}}, "t")
    assert head_names(names, {"model_type": "kimi_k25", "text_config": {"model_type": "kimi_k2"}}, "t").tied


def test_a_hub_drafter_is_downloaded_at_the_commit_its_headers_were_read(hub, tmp_path):
    """#37 item 13: the weights ``load_drafter`` downloads are those of the commit whose config and headers it checked,
    not whatever the branch holds by the time ``snapshot_download`` runs."""
    from eaglelab.model.drafter_files import load_drafter

    fz.write_tiny_drafter(hub.revision_dir("acme/tiny-drafter"))
    commit = hub.commit("acme/tiny-drafter")
    hub.clear_log()
    drafter = load_drafter("acme/tiny-drafter")
    asked = [r for r in hub.requests if r.server == "hub" and r.revision is not None]
    assert drafter.config["hidden_size"] == fz.tiny_config()["hidden_size"]
    assert asked[0].revision == "main" and {r.revision for r in asked[1:]} == {commit}, [r.revision for r in asked]


def test_a_hub_target_is_loaded_through_the_one_transport_at_one_commit(hub, tmp_path):
    """#39 item 4: a target given as a hub id is downloaded by the hub transport (``HubRepo.snapshot``) at one commit,
    safetensors only, then loaded from that folder: the same weights as the folder it was published from."""
    from eaglelab.model.targets import load_target
    from tests.conftest import make_tiny_llama

    model = make_tiny_llama(layers=2)
    model.save_pretrained(hub.revision_dir("acme/tiny-target"), safe_serialization=True)
    torch.save({"not": "read"}, hub.revision_dir("acme/tiny-target") / "pytorch_model.bin")
    commit = hub.commit("acme/tiny-target")
    hub.clear_log()
    loaded, tok = load_target("acme/tiny-target", device="cpu")
    assert tok is None
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    asked = [r for r in hub.requests if r.server == "hub"]
    assert not any(r.path.endswith("pytorch_model.bin") for r in asked), [r.path for r in asked]
    assert {r.revision for r in asked if r.revision is not None} <= {"main", commit}


def test_a_target_that_is_neither_a_folder_nor_a_hub_id_is_one_line(tmp_path, monkeypatch):
    from eaglelab.errors import SourceError
    from eaglelab.model.targets import load_target

    with pytest.raises(SourceError, match="no such folder, and not a hub id"):
        load_target(str(tmp_path / "no" / "such" / "target"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError, match="HF_HUB_OFFLINE is set"):
        load_target("acme/tiny-target")
