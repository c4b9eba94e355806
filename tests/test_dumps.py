"""The plug-in probe from the engines' hidden-state dumps: the live probe's numbers, from real layouts.

The dumps here are written by this file's own writers (``torch.save`` of SpecForge's dict, vLLM's
safetensors), not by eaglelab's, from a live capture of the tiny world's targets; SpecForge's own
offline reader must read the same folders, so the layout is the real one.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from eaglelab.data.dumps import open_dumps
from eaglelab.data.sets import probe_set
from eaglelab.decisions import PLUGIN_KEEP, Band, Option, plugin_verdict, tau_bands
from eaglelab.errors import CheckpointMismatchError, DumpError, EaglelabError
from eaglelab.jobs.probe import ProbeSettings, probe_checkpoints
from eaglelab.model.drafter_files import load_drafter
from eaglelab.model.heads import read_target_heads
from eaglelab.model.targets import Target, decoder_layers, load_target
from eaglelab.probe.plugin import run_probe

N, S = 10, 40


# --------------------------------------------------------------------------- the test's own writers

@torch.no_grad()
def capture(model, drafter, ids):
    """aux [N, S, 3H], last after the norm [N, S, H], last decoder layer's raw output [N, S, H]."""
    target = Target.for_drafter(model, drafter.spec)
    raw = {}
    hook = decoder_layers(model)[-1].register_forward_hook(
        lambda _m, _i, o: raw.__setitem__("x", o[0] if isinstance(o, tuple) else o))
    try:
        out = target.forward(ids)
        return out.aux, out.last_hidden, raw["x"]
    finally:
        hook.remove()
        target.close()


def token_mask(counted_row):
    """SpecForge's / speculators' mask: 1 where the token is one that counts (eaglelab's moved one right)."""
    m = torch.zeros(len(counted_row), dtype=torch.long)
    m[1:] = counted_row[:-1].long()
    return m


def write_specforge(folder: Path, ids, counted, aux, last, pad: int = 0, skip=(), compress=False):
    for i in range(len(ids)):
        if i in skip:
            continue
        x, m, a, h = ids[i], token_mask(counted[i]), aux[i], last[i]
        if pad:  # right-padded to a longer batch: pad tokens, mask 0, and states there too
            g = torch.Generator().manual_seed(i)
            x = torch.cat([x, torch.zeros(pad, dtype=torch.long)])
            m = torch.cat([m, torch.zeros(pad, dtype=torch.long)])
            a = torch.cat([a, torch.randn(pad, a.shape[-1], generator=g)])
            h = torch.cat([h, torch.randn(pad, h.shape[-1], generator=g)])
        path = folder / f"rows_{i // 4 * 4}-{i // 4 * 4 + 4}" / (f"data_{i}.ckpt" + (".gz" if compress else ""))
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"input_ids": x, "loss_mask": m, "hidden_state": h[None], "aux_hidden_state": a[None]}
        if compress:
            with gzip.open(path, "wb", compresslevel=6) as fh:
                torch.save(payload, fh)
        else:
            torch.save(payload, path)


def write_vllm(folder: Path, ids, counted, aux, raw, with_mask=True):
    folder.mkdir(parents=True, exist_ok=True)
    H = raw.shape[-1]
    for i in range(len(ids)):
        states = torch.cat([aux[i].reshape(-1, 3, H), raw[i][:, None]], 1).contiguous()
        tensors = {"hidden_states": states, "token_ids": ids[i].contiguous()}
        if with_mask:
            tensors["loss_mask"] = token_mask(counted[i])
        save_file(tensors, str(folder / f"hs_{i}.safetensors"))


@pytest.fixture(scope="module")
def world_states(tiny_world, tmp_path_factory):
    """The tiny world's targets captured on the same sequences, the live probe's result, dump folders."""
    a, tok = load_target(tiny_world.target_a, device="cpu")
    b, _ = load_target(tiny_world.target_b, device="cpu")
    drafter = load_drafter(tiny_world.drafter_a)
    data = probe_set(tok, N, S)
    live = run_probe(a, b, drafter, data.ids, k=3, batch_size=4, loss_mask=data.counted)
    root = tmp_path_factory.mktemp("dumps")
    caps = {"a": capture(a, drafter, data.ids), "b": capture(b, drafter, data.ids)}
    for name, (aux, last, raw) in caps.items():
        write_specforge(root / f"sf-{name}", data.ids, data.counted, aux, last)
        write_vllm(root / f"vllm-{name}", data.ids, data.counted, aux, raw)
    return {"world": tiny_world, "live": live, "root": root, "data": data, "caps": caps}


def dump_probe(w, a: Path, b: Path, **kw):
    world = w["world"]
    s = ProbeSettings(str(world.target_a), str(world.target_b), str(world.drafter_a), old_states=str(a), new_states=str(b),
                      batch_size=kw.pop("batch_size", 3), sequences=kw.pop("sequences", 1000), **kw)
    return probe_checkpoints(s, progress=False)


def assert_same(x, y, tol=1e-5):
    for la, lb in zip(x.layers, y.layers):
        assert la.layer == lb.layer
        for f in ("cosine_mean", "rel_l2", "norm_ratio", "cka"):
            assert getattr(la, f) == pytest.approx(getattr(lb, f), abs=tol), (la.layer, f)
    assert x.argmax_agreement == pytest.approx(y.argmax_agreement, abs=tol)
    assert x.tv == pytest.approx(y.tv, abs=tol)
    assert x.tokens == y.tokens
    for ea, eb in ((x.eval_a, y.eval_a), (x.eval_b, y.eval_b)):
        assert ea["chain"] == pytest.approx(eb["chain"], abs=tol) and ea["acc"] == pytest.approx(eb["acc"], abs=tol)
        assert ea["accept_len"] == pytest.approx(eb["accept_len"], abs=tol)
    assert x.decision.action == y.decision.action


# --------------------------------------------------------------------------- the live probe's numbers

@pytest.mark.parametrize("layout_a, layout_b", [("sf", "sf"), ("vllm", "vllm"), ("sf", "vllm"), ("vllm", "sf")])
def test_dump_probe_equals_the_live_probe(world_states, layout_a, layout_b):
    w = world_states
    report = dump_probe(w, w["root"] / f"{layout_a}-a", w["root"] / f"{layout_b}-b")
    assert_same(report.result, w["live"])
    assert report.positions == int(w["data"].counted.sum())
    assert report.result.decision.bands is not None and report.measured is None
    said = report.findings("[demo]")  # the report's own sentences carry its numbers
    assert list(said) == ["compared", "moved", "data", "plugin", "verdict"]
    assert f"**{report.tau_b:.2f} on B**" in said["plugin"] and report.result.decision.label.upper() in said["verdict"]
    assert f"{100 * report.result.argmax_agreement:.1f}%" in said["moved"] and "[demo]" in said["data"]


def test_padded_gapped_and_compressed_specforge_folders_give_the_clean_numbers(world_states, tmp_path):
    w = world_states
    (aux_a, last_a, _), (aux_b, last_b, _) = w["caps"]["a"], w["caps"]["b"]
    ids, counted = w["data"].ids, w["data"].counted
    write_specforge(tmp_path / "clean-a", ids, counted, aux_a, last_a, skip={3})
    write_specforge(tmp_path / "clean-b", ids, counted, aux_b, last_b, skip={3})
    # A padded and gzipped with a NaN gap at 3 (SpecForge skips such samples); B complete and padded further
    write_specforge(tmp_path / "messy-a", ids, counted, aux_a, last_a, pad=7, skip={3}, compress=True)
    write_specforge(tmp_path / "messy-b", ids, counted, aux_b, last_b, pad=13)
    clean = dump_probe(w, tmp_path / "clean-a", tmp_path / "clean-b")
    messy = dump_probe(w, tmp_path / "messy-a", tmp_path / "messy-b")
    assert_same(messy.result, clean.result, tol=1e-6)
    assert any("1 only in" in n for n in messy.notes)


def test_specforge_own_offline_reader_reads_these_folders(world_states, tiny_world, tmp_path):
    """SpecForge 0.2.0's OfflineEagle3Dataset, on the test's folder and on eaglelab's own writer's."""
    preprocessing = pytest.importorskip("specforge.data.preprocessing")
    from eaglelab.jobs.probe import DumpSettings, dump_states

    dump_states(DumpSettings(str(tiny_world.target_a), str(tiny_world.drafter_a), str(tmp_path / "ours"),
                             sequences=4, seq_len=S), progress=False)
    for folder in (world_states["root"] / "sf-a", tmp_path / "ours"):
        ours = open_dumps(folder)
        theirs = preprocessing.build_offline_eagle3_dataset(str(folder), max_len=4096)
        assert len(theirs) == len(ours)
        by_path = {str(p): i for i, p in ours.files.items()}
        for j, path in enumerate(theirs.datapaths):
            item, mine = theirs[j], ours.read(by_path[path])
            n = len(mine)
            assert torch.equal(item["input_ids"][0, :n], mine.input_ids)
            assert torch.equal(item["hidden_state"][0, :n], mine.aux)  # SpecForge's name for the aux states
            assert torch.equal(item["target"][0, :n], mine.last)
            # its mask marks response tokens, eaglelab's the positions before them; its reader zeroes the last
            assert torch.equal(item["loss_mask"][0, 1: n - 1].bool(), mine.loss_mask[: n - 2])


# --------------------------------------------------------------------------- heads without the target

def test_heads_are_the_targets_own(tiny_world):
    model, _ = load_target(tiny_world.target_a, device="cpu")
    heads = read_target_heads(str(tiny_world.target_a))
    assert torch.equal(heads.lm_head, model.lm_head.weight) and torch.equal(heads.norm_weight, model.model.norm.weight)
    assert torch.equal(heads.embedding, model.get_input_embeddings().weight)
    x = torch.randn(5, heads.hidden_size)
    assert torch.allclose(heads.norm(x), model.model.norm(x), atol=1e-6)


def prefixed_target(src: Path, out: Path, prefix: str, tie: bool = False) -> Path:
    """The tiny target as a multimodal-style folder: ``model.*`` under ``prefix``, the text model in text_config.

    ``language_model.model.`` is Kimi-K2.5's layout (its head ``language_model.lm_head.weight``),
    ``model.language_model.`` Qwen2.5-VL's in recent transformers (its head ``lm_head.weight``).
    """
    from safetensors.torch import load_file

    out.mkdir(parents=True)
    head = "language_model.lm_head.weight" if prefix.startswith("language_model.") else "lm_head.weight"
    renamed = {}
    for name, t in load_file(str(src / "model.safetensors")).items():
        if name == "lm_head.weight":
            if not tie:
                renamed[head] = t
        else:
            renamed[prefix + name.removeprefix("model.")] = t
    renamed["vision_tower.embed_tokens.weight"] = torch.zeros(3, 4)  # a vision tower's embedding is not the text's
    save_file(renamed, str(out / "model.safetensors"))
    text = json.loads((src / "config.json").read_text())
    text["tie_word_embeddings"] = tie
    (out / "config.json").write_text(json.dumps({"model_type": "kimi_k25", "text_config": text,
                                                 "architectures": ["KimiK25ForConditionalGeneration"]}))
    return out


@pytest.mark.parametrize("prefix", ["language_model.model.", "model.language_model."])
def test_heads_of_a_prefixed_multimodal_target(tiny_world, tmp_path, prefix):
    plain = read_target_heads(str(tiny_world.target_a))
    folder = prefixed_target(Path(tiny_world.target_a), tmp_path / "mm", prefix)
    heads = read_target_heads(str(folder))
    assert heads.names["embed_tokens"] == prefix + "embed_tokens.weight"
    assert heads.names["norm"] == prefix + "norm.weight"
    assert torch.equal(heads.lm_head, plain.lm_head) and torch.equal(heads.embedding, plain.embedding)


def test_tied_head_is_the_embedding_and_an_untied_target_without_head_is_refused(tiny_world, tmp_path):
    tied = read_target_heads(str(prefixed_target(Path(tiny_world.target_a), tmp_path / "tied", "model.", tie=True)))
    assert tied.names["lm_head"] == tied.names["embed_tokens"] and torch.equal(tied.lm_head, tied.embedding)
    untied = prefixed_target(Path(tiny_world.target_a), tmp_path / "untied", "model.", tie=True)
    cfg = json.loads((untied / "config.json").read_text())
    cfg["text_config"]["tie_word_embeddings"] = False
    (untied / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointMismatchError, match="tie_word_embeddings false"):
        read_target_heads(str(untied))


def test_heads_from_a_hub_id_read_three_tensors_by_range(tiny_world, tmp_path, monkeypatch):
    from tests.hub_server import HubServer, point_client_at

    with HubServer(tmp_path / "hub") as hub:
        point_client_at(monkeypatch, hub.endpoint, tmp_path / "hf-home")
        repo = hub.revision_dir("acme/target")
        for f in ("config.json", "model.safetensors"):
            (repo / f).write_bytes((Path(tiny_world.target_a) / f).read_bytes())
        monkeypatch.setattr("eaglelab.model.heads.HUB_CHUNK_BYTES", 4096)  # several ranges per tensor
        hub.clear_log()
        remote = read_target_heads("acme/target")
        local = read_target_heads(str(tiny_world.target_a))
        assert torch.equal(remote.lm_head, local.lm_head) and torch.equal(remote.norm_weight, local.norm_weight)
        size = (repo / "model.safetensors").stat().st_size
        heads_bytes = sum(t.numel() * t.element_size() for t in (local.lm_head, local.embedding, local.norm_weight))
        assert hub.body_bytes("model.safetensors") < heads_bytes + 2 * 100_001 < size  # the rest never moved


# --------------------------------------------------------------------------- hostile dumps: one line, exit 2

def one_line_exit_2(w, a: Path, b: Path, capsys) -> str:
    from eaglelab.cli import main

    world = w["world"]
    rc = main(["probe", "--old-states", str(a), "--new-states", str(b), "--old-drafter", str(world.drafter_a),
               "--old-target", str(world.target_a), "--new-target", str(world.target_b)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    return err[0]


class Payload:  # a class weights_only=True refuses to rebuild
    def __reduce__(self):
        return (print, ("this must never run",))


def spoil(folder: Path, case: str) -> Path:
    """Sample 2 of a copy of a clean folder, spoiled as ``case``; returns the spoiled file."""
    target = folder / "rows_0-4" / "data_2.ckpt"
    d = torch.load(target, weights_only=True)
    if case == "wrong H":
        d["hidden_state"], d["aux_hidden_state"] = d["hidden_state"][..., :32], d["aux_hidden_state"][..., :96]
    elif case == "NaN":
        d["aux_hidden_state"][0, 5, 3] = float("nan")
    elif case == "Inf":
        d["hidden_state"][0, 1, 0] = float("inf")
    elif case == "token ids out of range":
        d["input_ids"][4] = 10**6
    elif case == "missing key":
        del d["hidden_state"]
    elif case == "pickle":
        d["extra"] = Payload()
    if case == "truncated":
        raw = target.read_bytes()
        target.write_bytes(raw[: len(raw) // 2])
    elif case == "not a torch file":
        target.write_bytes(b"\x00" * 100)
    else:
        torch.save(d, target)
    return target


@pytest.mark.parametrize("case, says", [
    ("wrong H", "hidden size 32, but the targets' is 64"),
    ("NaN", "hold NaN or Inf"), ("Inf", "hold NaN or Inf"),
    ("token ids out of range", "outside the vocabulary"),
    ("missing key", "lacks the tensors ['hidden_state']"),
    ("pickle", "not a tensors-only file: it needs pickled objects eaglelab refuses to load"),
    ("truncated", "torch.load(weights_only=True)"),
    ("not a torch file", "torch.load(weights_only=True)"),
])
def test_hostile_specforge_samples_are_one_line_naming_the_file(world_states, tmp_path, capsys, case, says):
    import shutil

    w = world_states
    shutil.copytree(w["root"] / "sf-a", tmp_path / "a")
    bad = spoil(tmp_path / "a", case)
    line = one_line_exit_2(w, tmp_path / "a", w["root"] / "sf-b", capsys)
    assert str(bad) in line and says in line, line


def test_hostile_vllm_files_and_mismatched_pairs(world_states, tmp_path, capsys):
    w = world_states
    aux, _, raw = w["caps"]["a"]
    ids, counted = w["data"].ids, w["data"].counted
    write_vllm(tmp_path / "three-layers", ids, counted, aux, raw)
    f = tmp_path / "three-layers" / "hs_1.safetensors"
    save_file({"hidden_states": torch.randn(S, 3, 64), "token_ids": ids[1]}, str(f))
    assert "holds 3 layers" in one_line_exit_2(w, tmp_path / "three-layers", w["root"] / "vllm-b", capsys)
    write_vllm(tmp_path / "cut", ids, counted, aux, raw)
    g = tmp_path / "cut" / "hs_4.safetensors"
    g.write_bytes(g.read_bytes()[:-100])
    assert str(g) in one_line_exit_2(w, tmp_path / "cut", w["root"] / "vllm-b", capsys)
    # other conversations in B: one line naming both files
    shuffled = ids.roll(1, 0)
    write_vllm(tmp_path / "other", shuffled, counted.roll(1, 0), aux, raw)
    line = one_line_exit_2(w, w["root"] / "vllm-a", tmp_path / "other", capsys)
    assert "hs_0.safetensors vs" in line and "different token ids" in line
    (tmp_path / "empty").mkdir()
    assert "holds no hidden-state dumps" in one_line_exit_2(w, tmp_path / "empty", w["root"] / "vllm-b", capsys)


def test_one_folder_only_is_refused():
    from eaglelab.errors import ParameterError

    with pytest.raises(ParameterError, match="give both"):
        ProbeSettings("a", "b", "d", old_states="x")


def test_cli_probe_from_dumps_json(world_states):
    w, world = world_states, world_states["world"]
    proc = subprocess.run([sys.executable, "-m", "eaglelab", "probe", "--old-states", str(w["root"] / "sf-a"),
                           "--new-states", str(w["root"] / "vllm-b"), "--old-drafter", str(world.drafter_a),
                           "--old-target", str(world.target_a), "--new-target", str(world.target_b), "--json"],
                          capture_output=True, text=True, check=True)
    d = json.loads(proc.stdout)
    assert d["states"] == {"old": str(w["root"] / "sf-a"), "new": str(w["root"] / "vllm-b")}
    assert d["plugin"]["accept_len_on_a"] == pytest.approx(w["live"].eval_a["accept_len"], abs=1e-5)
    assert set(d["verdict"]["bands"]) == {"kept", "tau_a", "tau_b"}


# --------------------------------------------------------------------------- readers under hostile bytes

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_readers_refuse_any_mutation_in_one_typed_error(world_states, tmp_path_factory, data):
    """Any byte flipped, cut or appended in either layout: a sample or a DumpError, nothing else."""
    w = world_states
    layout = data.draw(st.sampled_from(["sf", "vllm"]))
    src = next((w["root"] / f"{layout}-a").rglob("*_0.*"))
    raw = bytearray(src.read_bytes())
    op = data.draw(st.sampled_from(["flip", "cut", "append"]))
    at = data.draw(st.integers(0, len(raw) - 1))
    if op == "flip":
        raw[at] ^= data.draw(st.integers(1, 255))
    elif op == "cut":
        raw = raw[:at]
    else:
        raw += data.draw(st.binary(min_size=1, max_size=64))
    folder = tmp_path_factory.mktemp("fuzz")
    (folder / src.name).write_bytes(bytes(raw))
    try:
        sample = open_dumps(folder, hidden_size=64, vocab_size=256).read(0)
    except DumpError:
        return
    assert sample.aux.shape == (len(sample), 192) and bool(torch.isfinite(sample.last).all())


# --------------------------------------------------------------------------- the verdict's band

def test_bands_are_paired_and_a_straddling_verdict_names_both_options():
    hits = [[8, 6, 4]] * 20
    counted = [[10, 10, 10]] * 20
    same = tau_bands(hits, counted, hits, counted, reps=200)
    assert same["kept"].low == pytest.approx(1.0) and same["kept"].high == pytest.approx(1.0)
    g = torch.Generator().manual_seed(0)
    noisy_b = (torch.tensor(hits) - torch.randint(0, 3, (20, 3), generator=g)).clamp_min(0).tolist()
    bands = tau_bands(hits, counted, noisy_b, counted, reps=500)
    assert bands["tau_b"].low <= 1 + sum(sum(r[i] for r in noisy_b) / 200 for i in range(3)) <= bands["tau_b"].high
    straddle = {"kept": Band(0.85, 0.95), "tau_a": Band(2.0, 2.2), "tau_b": Band(1.9, 2.1), "sequences": 20}
    d = plugin_verdict(2.1, 2.0, straddle)
    assert d.between == (Option.PLUG_IN, Option.WARM_START) and "too close to call" in d.label
    assert d.to_json()["between"] == ["plug in", "warm start"]
    clear = {**straddle, "kept": Band(0.91, 0.99)}
    assert plugin_verdict(2.1, 2.0, clear).between == () and plugin_verdict(2.1, 2.0, clear).action == Option.PLUG_IN
    low = {"kept": Band(0.1, 0.3), "tau_a": Band(2.0, 2.2), "tau_b": Band(1.2, 1.4), "sequences": 20}
    assert plugin_verdict(2.1, 1.32, low).between == (Option.WARM_START, Option.FROM_SCRATCH)
    assert plugin_verdict(2.1, 2.0).between == () and PLUGIN_KEEP == 0.9


def test_errors_are_typed(world_states):
    assert issubclass(DumpError, EaglelabError)


# --------------------------------------------------------------------------- #42 item 2: the similarity pass's feeding

def random_batch(g: torch.Generator, masks: list[list[int]], H: int = 6):
    """HiddenStates of len(masks) samples padded to the longest, random states, the given counted positions."""
    from eaglelab.data.states import HiddenStates

    B, S = len(masks), max(len(m) for m in masks)
    mask = torch.zeros(B, S, dtype=torch.bool)
    for i, m in enumerate(masks):
        mask[i, :len(m)] = torch.tensor(m, dtype=torch.bool)
    return HiddenStates(torch.zeros(B, S, dtype=torch.long), mask, torch.randn(B, S, 3 * H, generator=g),
                        torch.randn(B, S, H, generator=g))


@settings(max_examples=25, deadline=None)
@given(masks=st.lists(st.lists(st.integers(0, 1), min_size=1, max_size=30), min_size=1, max_size=5),
       seed=st.integers(0, 2**16), cka_batch=st.sampled_from([4, 9, 256]))
def test_rows_by_slices_feed_the_numbers_of_the_boolean_gather(masks, seed, cka_batch):
    """update_similarity (slices, a gather only for a gapped mask) feeds the accumulator the tokens of one boolean
    gather per layer over the whole batch, in the same order: the same numbers."""
    from eaglelab.probe.plugin import update_similarity
    from eaglelab.probe.similarity import SimilarityAccumulator

    def gathered_update(acc, a, b, argmax_a, argmax_b, tv):  # the previous form: one boolean gather per layer
        mask = a.loss_mask.reshape(-1)
        xs, ys = ([p.reshape(-1, p.shape[-1])[mask] for p in (*s.aux.chunk(3, dim=-1), s.last_hidden)] for s in (a, b))
        acc.update(xs, ys, argmax_a.reshape(-1)[mask], argmax_b.reshape(-1)[mask], tv.reshape(-1)[mask])

    g = torch.Generator().manual_seed(seed)
    a, b = random_batch(g, masks), random_batch(g, masks)
    B, S = a.input_ids.shape
    argmax_a, argmax_b = torch.randint(0, 3, (B, S), generator=g), torch.randint(0, 3, (B, S), generator=g)
    tv = torch.rand(B, S, generator=g)
    labels = ["low (1)", "mid (2)", "high (3)", "last"]
    gathered, sliced = SimilarityAccumulator(labels, cka_batch), SimilarityAccumulator(labels, cka_batch)
    gathered_update(gathered, a, b, argmax_a, argmax_b, tv)
    update_similarity(sliced, a, b, argmax_a, argmax_b, tv)
    want, got = gathered.result(), sliced.result()
    assert got["tokens"] == want["tokens"] == int(a.loss_mask.sum())
    for x, y in zip(got["layers"], want["layers"]):
        for f in ("cosine_mean", "rel_l2", "norm_ratio", "cka"):
            assert getattr(x, f) == pytest.approx(getattr(y, f), abs=1e-6, nan_ok=True), (x.layer, f)
    for key in ("argmax_agreement", "tv"):
        assert got[key] == pytest.approx(want[key], nan_ok=True)
    for label in labels:
        assert torch.equal(torch.as_tensor(got["cosines"][label]), torch.as_tensor(want["cosines"][label]))


def test_stack_batch_over_reused_buffers_equals_a_fresh_stack(world_states):
    """A batch stacked over the storage of a longer one: the same tensors as a fresh stack, its padding zeros
    (nothing of the earlier batch shows through), in the dtype asked for."""
    from eaglelab.probe.dumps import StackBuffers, stack_batch

    w = world_states
    folder = open_dumps(w["root"] / "sf-a")
    heads = read_target_heads(str(w["world"].target_a))
    samples = [folder.read(i) for i in sorted(folder.files)[:4]]
    buffers = StackBuffers()
    long_first = sorted(samples, key=len, reverse=True)
    stack_batch(long_first, heads, torch.device("cpu"), torch.float32, buffers).aux.fill_(7.0)
    for dtype in (torch.float32, torch.bfloat16):
        reused = stack_batch(samples[1:], heads, torch.device("cpu"), dtype, buffers)
        fresh = stack_batch(samples[1:], heads, torch.device("cpu"), dtype)
        for name in ("input_ids", "loss_mask", "aux", "last_hidden"):
            x, y = getattr(reused, name), getattr(fresh, name)
            assert x.dtype == y.dtype and torch.equal(x, y), name
        assert reused.aux.dtype == dtype and not bool((reused.aux == 7.0).any())


def test_the_dump_layouts_are_declared_once_for_the_settings():
    """#57 item 4: DumpSettings checked its layout in __post_init__ against LAYOUTS beside the option's own choices;
    the option is the one check now, and it names the layouts the reader knows."""
    from dataclasses import fields

    from eaglelab.data.dumps import LAYOUTS
    from eaglelab.errors import ParameterError
    from eaglelab.jobs.probe import DumpSettings

    layout = next(f for f in fields(DumpSettings) if f.name == "layout")
    assert tuple(layout.metadata["choices"]) == LAYOUTS
    with pytest.raises(ParameterError, match="--layout: must be one of specforge, vllm"):
        DumpSettings("t", "d", "o", layout="sglang")
