"""The probe's verdict and its dump readers under hostile input: issue #37's items 4, 5, 7, 12 and 16.

- 4: no verdict from no evidence (loss masks of 0, one-token samples, too few samples for a band, NaN
  in a head next to a verdict);
- 5: no verdict when the old drafter gains nothing on its own target A, on every surface;
- 7: a gzip bomb refused near its own size, and torch's unpickling advice never quoted;
- 12: one folder as both targets refused, a symlinked ``rows_*`` folder never skipped in silence;
- 16: streaming CKA in [0, 1] whatever the states' offsets and scales.

Dumps are written with the package's own writer (:func:`eaglelab.data.dump_writers.capture_dumps`) from the
tiny world's targets, under tmp_path.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import shutil
import tracemalloc
import zlib
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eaglelab.cli import main
from eaglelab.data.dump_writers import capture_dumps, specforge_payload
from eaglelab.data.dumps import GZIP_RATIO, NEEDS_PICKLE, gzip_cap, open_dumps, pair_dumps
from eaglelab.data.sets import probe_set
from eaglelab.decisions import (
    MIN_GAIN_ON_A,
    MIN_SEQUENCES,
    NO_VERDICT,
    Band,
    Option,
    missing_evidence,
    plugin_verdict,
    reconcile,
    tau_bands,
)
from eaglelab.errors import DumpError, SourceError
from eaglelab.model.drafter import Eagle3Drafter
from eaglelab.model.drafter_files import load_drafter, save_drafter
from eaglelab.model.heads import TargetHeads, read_target_heads
from eaglelab.model.targets import load_target
from eaglelab.outputs import open_output_folder
from eaglelab.probe.plugin import run_probe
from eaglelab.probe.similarity import CKA_ROUNDING, SimilarityAccumulator, StreamingCKA
from tests.reference_cka import direct_cka

N, S = 8, 24


# --------------------------------------------------------------------------- the tiny world's dumps

def write_dumps(model, spec, ids, counted, folder: Path, layout: str = "specforge", compress: bool = False) -> Path:
    """The package's own writer: the dumps SpecForge (or vLLM) would write for ``model`` on ``ids``."""
    with open_output_folder(folder, "hidden-state dumps") as out:
        capture_dumps(model, spec, ids, counted, out, layout=layout, compress=compress, progress=False)
    return folder


@pytest.fixture(scope="module")
def world(tiny_world, tmp_path_factory):
    """The tiny world's two targets and drafter, the probe's sequences, and clean dumps of both targets."""
    a, tok = load_target(tiny_world.target_a, device="cpu")
    b, _ = load_target(tiny_world.target_b, device="cpu")
    drafter = load_drafter(tiny_world.drafter_a)
    data = probe_set(tok, N, S)
    root = tmp_path_factory.mktemp("hostile-dumps")
    write_dumps(a, drafter.spec, data.ids, data.counted, root / "a")
    write_dumps(b, drafter.spec, data.ids, data.counted, root / "b", layout="vllm")
    return {"tiny": tiny_world, "a": a, "b": b, "drafter": drafter, "data": data, "root": root}


def probe_argv(w, a: Path, b: Path, drafter: str | None = None, *extra: str) -> list[str]:
    t = w["tiny"]
    return ["probe", "--old-states", str(a), "--new-states", str(b), "--old-drafter", drafter or str(t.drafter_a),
            "--old-target", str(t.target_a), "--new-target", str(t.target_b), *extra]


def one_line_exit_2(argv: list[str], capsys) -> str:
    rc = main(argv)
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "verdict" not in captured.out, (rc, err, captured.out)
    return err[0]


def exit_0(argv: list[str], capsys) -> str:
    rc = main(argv)
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    return captured.out


# --------------------------------------------------------------------------- item 4: a verdict only from evidence

def test_dumps_whose_loss_masks_are_all_zero_get_no_verdict(world, tmp_path, capsys):
    """#37 item 4: loss masks of 0 everywhere gave "0 positions counted", τ 1.00 and "verdict: from scratch"."""
    w = world
    zero = torch.zeros_like(w["data"].counted)
    a = write_dumps(w["a"], w["drafter"].spec, w["data"].ids, zero, tmp_path / "a")
    b = write_dumps(w["b"], w["drafter"].spec, w["data"].ids, zero, tmp_path / "b")
    line = one_line_exit_2(probe_argv(w, a, b), capsys)
    assert "0 positions counted" in line and f"in {N} paired samples: nothing to measure" in line, line
    assert str(a) in line and "loss mask" in line


def test_one_token_samples_get_no_verdict(world, tmp_path, capsys):
    """#37 item 4: one-token samples count no position (nothing follows their token): no verdict, one line."""
    w = world
    ids, counted = w["data"].ids[:, :1], torch.ones(N, 1, dtype=torch.bool)
    a = write_dumps(w["a"], w["drafter"].spec, ids, counted, tmp_path / "a")
    b = write_dumps(w["b"], w["drafter"].spec, ids, counted, tmp_path / "b", layout="vllm")
    line = one_line_exit_2(probe_argv(w, a, b), capsys)
    assert "0 positions counted" in line and "one-token sample counts none" in line, line


def test_too_few_samples_for_a_band_get_no_verdict(world, tmp_path, capsys):
    """#37 item 4: a band over sequences needs MIN_SEQUENCES of them counting a position; fewer: no verdict."""
    w = world
    counted = w["data"].counted.clone()
    counted[MIN_SEQUENCES - 1:] = False
    a = write_dumps(w["a"], w["drafter"].spec, w["data"].ids, counted, tmp_path / "a")
    b = write_dumps(w["b"], w["drafter"].spec, w["data"].ids, counted, tmp_path / "b")
    line = one_line_exit_2(probe_argv(w, a, b), capsys)
    assert f"only {MIN_SEQUENCES - 1} of {N} paired samples" in line and f"at least {MIN_SEQUENCES}" in line, line
    assert MIN_SEQUENCES == 4  # 3 sequences: 11% of resamples repeat one sequence, more than the band's tails


def test_live_probe_refuses_sequences_that_count_nothing(world):
    """#37 item 4, live: a loss mask of 0 everywhere is refused naming the data, never a verdict."""
    w = world
    with pytest.raises(SourceError, match="0 positions counted in 8 sequences: nothing to measure"):
        run_probe(w["a"], w["b"], w["drafter"], w["data"].ids, k=3, loss_mask=torch.zeros_like(w["data"].counted))


def test_missing_evidence_names_what_a_verdict_lacks():
    """#37 item 4: every draft position must be counted somewhere, else τ over k drafts is not measured."""
    assert missing_evidence(5, [[3, 2, 1]] * 5, 3) is None
    assert "0 positions counted in 2 sequences" in missing_evidence(2, [[0, 0, 0]] * 2, 3)
    assert "no position counts draft 3" in missing_evidence(6, [[2, 1, 0]] * 6, 3)
    assert "only 1 of 6" in missing_evidence(6, [[4, 3, 2]] + [[0, 0, 0]] * 5, 3)


def test_a_nan_in_a_head_gives_no_verdict_next_to_tv_nan(world):
    """#37 item 4: a NaN in lm_head gave "TV nan" and a verdict; the verdict code refuses non-finite numbers."""
    from eaglelab.checkpoints.drafters.spec import aux_ids_as_layer_outputs
    from eaglelab.probe.dumps import run_dump_probe

    w = world
    heads = read_target_heads(str(w["tiny"].target_a))
    head = heads.lm_head.clone()
    head[7, 3] = float("nan")
    poisoned = TargetHeads(heads.source, heads.norm_weight, heads.eps, head, heads.embedding, heads.names)
    pairs = pair_dumps(open_dumps(w["root"] / "a"), open_dumps(w["root"] / "b"))
    spec = w["drafter"].spec
    outs = aux_ids_as_layer_outputs(spec.aux_layer_ids, spec.aux_convention, w["a"].config.num_hidden_layers)
    with pytest.raises(DumpError, match="not finite") as err:
        run_dump_probe(pairs, heads, poisoned, w["drafter"], outs)
    assert "TV nan" in str(err.value) and "no verdict" in str(err.value)


def test_the_verdict_refuses_non_finite_tau():
    """#37 item 4: plugin_verdict itself reads no verdict from NaN or Inf."""
    for a, b in ((float("nan"), 1.5), (2.0, float("inf")), (2.0, 0.5)):
        with pytest.raises(ValueError, match="finite number of at least 1"):
            plugin_verdict(a, b)


# --------------------------------------------------------------------------- item 5: a drafter that works on A

@pytest.mark.parametrize("tau_a, tau_b", [(1.01, 1.01), (1.0, 1.5), (1 + MIN_GAIN_ON_A, 1.9), (1.04, 1.04)])
def test_a_drafter_that_gains_nothing_on_a_gets_no_verdict(tau_a, tau_b):
    """#37 item 5: τ 1.01 on A and B read "plug in"; τA 1.00, τB 1.50 read "plug in or warm start"."""
    d = plugin_verdict(tau_a, tau_b)
    assert d.action == NO_VERDICT and not d.decided and d.kept is None and d.between == ()
    assert "gains nothing on its own target A" in d.reasons[0] and "cannot decide" in d.reasons[1]
    assert d.to_json()["kept"] is None and d.kept_text().startswith("undefined")


def test_a_band_of_tau_on_a_reaching_down_to_no_gain_gets_no_verdict():
    """#37 item 5: the point τ on A may clear the margin while its band's low end does not: no verdict."""
    hits_a = [[10, 8, 6]] * 2 + [[0, 0, 0]] * 8  # two sequences of ten carry all the gain on A
    counted = [[10, 10, 10]] * 10
    bands = tau_bands(hits_a, counted, hits_a, counted, reps=500)
    tau = 1 + (20 + 16 + 12) / 100
    assert tau > 1 + MIN_GAIN_ON_A >= bands["tau_a"].low  # 0.8^10 = 11% of resamples miss both
    d = plugin_verdict(tau, tau, bands)
    assert d.action == NO_VERDICT and d.kept is None and "band's low end" in d.reasons[0]
    assert set(d.bands) == {"tau_a", "tau_b"}  # no band of a share that is undefined
    clear = plugin_verdict(2.0, 1.95, {"kept": Band(0.92, 0.97), "tau_a": Band(1.9, 2.1), "tau_b": Band(1.85, 2.05),
                                       "sequences": 20})
    assert clear.action == Option.PLUG_IN and clear.decided and clear.kept_text().startswith("95% (90% band")


def test_no_resample_keeps_a_ratio_of_noise():
    """#37 item 5: a resample whose τ on A shows no gain keeps no share of it (not 0, not a huge ratio)."""
    hits = [[0, 0, 0]] * 6
    counted = [[10, 10, 10]] * 6
    bands = tau_bands(hits, counted, [[5, 2, 1]] * 6, counted, reps=100)
    assert math.isnan(bands["kept"].low) and math.isnan(bands["kept"].high)


def test_every_surface_says_when_there_is_no_verdict(world, tmp_path, capsys):
    """#37 item 5: an old drafter that does not work on A (a fresh one): the CLI, JSON, the picker's answer and
    the game plan's sentence all say there is no verdict, and never a share of its gain."""
    w = world
    cfg = json.loads((Path(w["tiny"].target_a) / "config.json").read_text())
    spec = w["drafter"].spec
    fresh = Eagle3Drafter.from_target_config(cfg, draft_vocab_size=spec.draft_vocab_size,
                                             aux_layer_ids=list(spec.aux_layer_ids), seed=3)
    assert fresh.spec.aux_layer_ids == spec.aux_layer_ids
    drafter = str(save_drafter(fresh, tmp_path / "fresh"))
    argv = probe_argv(w, w["root"] / "a", w["root"] / "b", drafter)
    out = exit_0(argv, capsys)
    assert "verdict: no verdict" in out and "gains nothing on its own target A" in out, out
    assert "gain kept undefined" in out and "nan" not in out.lower()
    js = json.loads(exit_0(argv + ["--json"], capsys))
    assert js["verdict"]["level"] == NO_VERDICT and js["verdict"]["kept"] is None
    assert set(js["verdict"]["bands"]) == {"tau_a", "tau_b"} and js["verdict"]["between"] == []

    from eaglelab.jobs.probe import ProbeSettings
    from eaglelab.workbook.answers import probe_answer

    t = w["tiny"]
    settings = ProbeSettings(str(t.target_a), str(t.target_b), str(t.drafter_a), old_states=str(w["root"] / "a"),
                             new_states=str(w["root"] / "b"))
    answer = probe_answer(settings, {"OLD_TARGET": str(t.target_a), "NEW_TARGET": str(t.target_b), "OLD_DRAFTER": drafter})
    assert "NO VERDICT (the old drafter gains nothing on target A)" in answer[0].data
    assert "cannot decide" in answer[0].data
    said = reconcile(js["verdict"], {"action": "warm start", "taus": {"warm start": 1.8}})
    assert "gave no verdict" in said and "**warm start**" in said and "% of the gain kept" not in said


# --------------------------------------------------------------------------- item 7: gzip bombs, torch's advice

def gzip_of_zeros(total: int, level: int = 9) -> bytes:
    """A gzip stream of ``total`` zero bytes, built in 1 MiB pieces (never the whole in memory)."""
    z = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    piece = bytes(1 << 20)
    out = [z.compress(piece) for _ in range(total >> 20)]
    return b"".join(out) + z.flush()


def specforge_file(folder: Path, raw: bytes, name: str = "data_0.ckpt.gz") -> Path:
    path = folder / "rows_0-2000" / name
    path.parent.mkdir(parents=True)
    path.write_bytes(raw)
    return path


def test_a_gzip_bomb_is_refused_before_it_fills_memory(tmp_path):
    """#37 item 7: a 1 MB .ckpt.gz reached 2.4 GB before its refusal (the cap was 16 GiB decompressed)."""
    bomb = gzip_of_zeros(256 << 20)
    path = specforge_file(tmp_path / "bomb", bomb)
    folder = open_dumps(tmp_path / "bomb")
    tracemalloc.start()
    try:
        with pytest.raises(DumpError) as err:
            folder.read(0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(path) in str(err.value) and "gzip bomb" in str(err.value)
    assert peak < 4 * gzip_cap(len(bomb)) < 32 << 20, peak


def test_a_gzip_footer_is_a_hint_never_trusted(tmp_path):
    """#37 item 7: a footer claiming too much is refused at once; one claiming little does not lift the cap."""
    bomb = bytearray(gzip_of_zeros(64 << 20))
    specforge_file(tmp_path / "claims", bytes(bomb))
    with pytest.raises(DumpError, match="its gzip footer claims 67,108,864 bytes"):
        open_dumps(tmp_path / "claims").read(0)
    bomb[-4:] = (100).to_bytes(4, "little")  # a footer that lies low
    specforge_file(tmp_path / "lies", bytes(bomb))
    with pytest.raises(DumpError, match=f"decompresses to over {gzip_cap(len(bomb)):,} bytes"):
        open_dumps(tmp_path / "lies").read(0)


class Payload:  # pickled by reference: weights_only=True refuses it, never calls it
    def __reduce__(self):
        return (os.system, ("echo this must never run",))


@pytest.mark.parametrize("compress", [False, True])
def test_a_pickle_refusal_never_quotes_torchs_advice(tmp_path, compress):
    """#37 item 7: the refusal quoted torch's "re-run with weights_only=False", cut before its security warning."""
    g = torch.Generator().manual_seed(0)
    payload = specforge_payload(torch.arange(6), torch.ones(6, dtype=torch.bool), torch.randn(6, 12, generator=g),
                                torch.randn(6, 4, generator=g))
    payload["extra"] = Payload()
    buf = io.BytesIO()
    torch.save(payload, buf)
    raw = gzip.compress(buf.getvalue()) if compress else buf.getvalue()
    path = specforge_file(tmp_path / "pickle", raw, "data_0.ckpt" + (".gz" if compress else ""))
    with pytest.raises(DumpError) as err:
        open_dumps(tmp_path / "pickle").read(0)
    assert str(err.value) == f"{path}: {NEEDS_PICKLE}"
    assert "weights_only=False" not in str(err.value) and "Re-running" not in str(err.value)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=st.integers(2, 300), h=st.integers(1, 48), dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
       level=st.integers(1, 9), scale=st.floats(1e-3, 1e3), seed=st.integers(0, 2**16))
def test_real_compressed_samples_read_back_within_the_cap(tmp_path_factory, s, h, dtype, level, scale, seed):
    """#37 item 7: the cap near a file's own size never refuses a real sample: float states compress little."""
    g = torch.Generator().manual_seed(seed)
    aux, last = ((torch.randn(s, w, generator=g) * scale).to(dtype) for w in (3 * h, h))
    counted = torch.rand(s, generator=g) < 0.5
    buf = io.BytesIO()
    torch.save(specforge_payload(torch.randint(0, 1000, (s,), generator=g), counted, aux, last), buf)
    raw = gzip.compress(buf.getvalue(), compresslevel=level)
    assert len(buf.getvalue()) <= gzip_cap(len(raw)) and GZIP_RATIO == 8
    folder = tmp_path_factory.mktemp("gz")
    specforge_file(folder, raw)
    sample = open_dumps(folder).read(0)
    n = len(sample)
    assert torch.equal(sample.aux, aux[:n]) and torch.equal(sample.last, last[:n])


# --------------------------------------------------------------------------- item 12: two folders, every sample

def test_one_folder_as_both_targets_is_refused(world, tmp_path, capsys):
    """#37 item 12: --old-states D --new-states D (then spelt --states-a, --states-b) gave a normal-looking verdict."""
    w = world
    a = w["root"] / "a"
    assert "are the same folder" in one_line_exit_2(probe_argv(w, a, a), capsys)
    (tmp_path / "link").symlink_to(a, target_is_directory=True)
    assert "are the same folder" in one_line_exit_2(probe_argv(w, a, tmp_path / "link"), capsys)
    shutil.copytree(a, tmp_path / "copy")
    assert "first 2 samples are byte-identical" in one_line_exit_2(probe_argv(w, a, tmp_path / "copy"), capsys)
    shutil.copytree(a, tmp_path / "hard", copy_function=os.link)
    assert "hold the same files" in one_line_exit_2(probe_argv(w, a, tmp_path / "hard"), capsys)


def test_a_symlinked_rows_folder_is_never_skipped_in_silence(world, tmp_path, capsys):
    """#37 item 12: samples under a symlinked rows_* folder were skipped without a word (4 of 8)."""
    w = world
    rows = w["root"] / "a" / "rows_0-2000"
    outside = tmp_path / "elsewhere" / "rows_4-8"
    outside.mkdir(parents=True)
    split = tmp_path / "split"
    shutil.copytree(w["root"] / "a", split)
    for i in range(4, N):
        (split / "rows_0-2000" / f"data_{i}.ckpt").rename(outside / f"data_{i}.ckpt")
    (split / "rows_4-8").symlink_to(outside, target_is_directory=True)
    line = one_line_exit_2(probe_argv(w, split, w["root"] / "b"), capsys)
    assert str(split / "rows_4-8") in line and "outside the dump folder" in line, line
    inside = tmp_path / "inside"
    shutil.copytree(w["root"] / "a", inside)
    (inside / "store").mkdir()
    (inside / "rows_0-2000").rename(inside / "store" / "rows_0-2000")
    (inside / "rows_0-2000").symlink_to(inside / "store" / "rows_0-2000", target_is_directory=True)
    assert len(open_dumps(inside)) == N == len(list(rows.iterdir()))
    out = exit_0(probe_argv(w, inside, w["root"] / "b"), capsys)
    assert f"{N} paired samples probed of {N} in A and {N} in B; skipped: 0 only in A, 0 only in B" in out, out
    assert f"rows_0-2000 -> store/rows_0-2000 is a symlinked folder inside the dump folder: its {N} samples" in out


# --------------------------------------------------------------------------- item 16: CKA in [0, 1]

def test_cka_of_identical_states_with_a_huge_offset_is_one():
    """#37 item 16: identical states with a 1e5 offset in one channel gave CKA -6.6e34."""
    for seed in range(4):
        z = torch.randn(300, 64, generator=torch.Generator().manual_seed(seed))
        z[:, 3] += 1e5
        acc = SimilarityAccumulator(["x"])
        acc.update([z], [z.clone()])
        res = acc.result()
        assert res["layers"][0].cka == pytest.approx(1.0, abs=1e-9) and res["notes"] == []


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(8, 400), d=st.integers(1, 12), dy=st.integers(1, 12),
       noise=st.floats(0.0, 2.0), offset=st.sampled_from([0.0, 1.0, 1e3, 1e5, -3e6]),
       scale=st.sampled_from([1e-6, 0.01, 1.0, 7.5, 1e4]), batch=st.integers(4, 128),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_streaming_cka_is_in_range_and_equals_a_direct_computation(seed, n, d, dy, noise, offset, scale, batch, dtype):
    """#37 item 16: for states with random offsets and scales, CKA is in [0, 1], equals a direct float64
    computation over the same minibatches, and CKA(X, X) is 1."""
    g = torch.Generator().manual_seed(seed)
    x0 = torch.randn(n, d, generator=g, dtype=torch.float64)
    y0 = x0 @ torch.randn(d, dy, generator=g, dtype=torch.float64) + noise * torch.randn(n, dy, generator=g,
                                                                                         dtype=torch.float64)
    channel = torch.zeros(d, dtype=torch.float64)
    channel[seed % d] = offset  # one channel far from zero, as a massive activation
    x = (x0 * scale + channel).to(dtype)
    y = (y0 * scale - offset).to(dtype)
    cuts = [(i, min(i + batch, n)) for i in range(0, n, batch)]
    cuts = [c for c in cuts if c[1] - c[0] >= 4]
    cka, same = StreamingCKA(1, 1), StreamingCKA(1, 1)
    for i, j in cuts:
        cka.update([x[i:j]], [y[i:j]])
        same.update([x[i:j]], [x[i:j]])
    value = float(cka.value())
    expected = direct_cka([(x[i:j], y[i:j]) for i, j in cuts])  # from the states as stored (float32 rounds offsets)
    if math.isnan(expected):  # a side that does not vary as stored (1e-6 states on a 1e3 offset in float32)
        assert math.isnan(value)
        return
    assert 0.0 <= value <= 1.0
    assert value == pytest.approx(min(max(expected, 0.0), 1.0), abs=1e-6)
    assert float(same.value()) == pytest.approx(1.0, abs=CKA_ROUNDING)


def test_cka_below_zero_is_shown_as_zero_and_named():
    """#37 item 16: the unbiased estimate of unrelated states may fall below 0: shown as 0, and said so."""
    for seed in range(40):
        g = torch.Generator().manual_seed(seed)
        acc = SimilarityAccumulator(["x"], cka_batch=16)
        acc.update([torch.randn(32, 6, generator=g)], [torch.randn(32, 6, generator=g)])
        res = acc.result()
        if res["notes"]:
            assert res["layers"][0].cka == 0.0 and "below 0" in res["notes"][0]
            return
    pytest.fail("no seed gave an estimate below 0")
