"""Streaming CKA against direct computations; invariances; A vs A."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import eaglelab.probe.similarity as similarity
from eaglelab.probe.similarity import (
    SimilarityAccumulator,
    StreamingCKA,
    cosine_per_token,
    hsic_unbiased,
    linear_cka_full,
    relative_l2_per_token,
)
from tests.reference_cka import direct_cka


def hsic_u_statistic(K: torch.Tensor, L: torch.Tensor) -> float:
    """Song et al. (2012) unbiased HSIC as the literal U-statistic over ordered 4-tuples (tiny n only)."""
    n = K.shape[0]
    total = 0.0
    for i, j, q, r in itertools.permutations(range(n), 4):
        total += K[i, j] * L[i, j] + K[i, j] * L[q, r] - 2 * K[i, j] * L[i, q]
    return float(total) / (n * (n - 1) * (n - 2) * (n - 3))


def test_unbiased_hsic_equals_the_u_statistic():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(7, 3, generator=g, dtype=torch.float64), torch.randn(7, 4, generator=g, dtype=torch.float64)
    K, L = x @ x.T, y @ y.T
    assert float(hsic_unbiased(K, L)) == pytest.approx(hsic_u_statistic(K, L), rel=1e-9)


def test_streaming_cka_equals_full_matrix_cka():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3000, 16, generator=g)
    y = x @ torch.randn(16, 12, generator=g) + 0.5 * torch.randn(3000, 12, generator=g)
    single = StreamingCKA(1, 1)
    single.update([x], [y])
    streamed = StreamingCKA(1, 1)
    for i in range(0, 3000, 500):
        streamed.update([x[i:i + 500]], [y[i:i + 500]])
    full = linear_cka_full(x, y)
    assert float(single.value()) == pytest.approx(full, abs=0.01)  # unbiased vs biased estimator, large n
    assert float(streamed.value()) == pytest.approx(full, abs=0.02)


def test_cka_invariances():
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(600, 10, generator=g), torch.randn(600, 10, generator=g)
    y = y + x
    q, _ = torch.linalg.qr(torch.randn(10, 10, generator=g))

    def cka(a, b):
        s = StreamingCKA(1, 1)
        for i in range(0, 600, 200):
            s.update([a[i:i + 200]], [b[i:i + 200]])
        return float(s.value())

    base = cka(x, y)
    assert cka(x @ q, y) == pytest.approx(base, abs=1e-5)
    assert cka(x, 7.5 * y) == pytest.approx(base, abs=1e-5)
    assert cka(x, x) == pytest.approx(1.0, abs=1e-6)


def test_per_token_measures_and_accumulator_for_identical_inputs():
    g = torch.Generator().manual_seed(3)
    states = [torch.randn(300, 8, generator=g) for _ in range(2)]
    assert torch.allclose(cosine_per_token(states[0], states[0]), torch.ones(300))
    assert torch.allclose(relative_l2_per_token(states[0], 2 * states[0]), torch.ones(300))
    acc = SimilarityAccumulator(["x", "y"], cka_batch=128)
    for i in range(0, 300, 100):
        arg = torch.arange(100)
        acc.update([s[i:i + 100] for s in states], [s[i:i + 100] for s in states], arg, arg)
    res = acc.result()
    for layer in res["layers"]:
        assert layer.cosine_mean == pytest.approx(1.0) and layer.cka == pytest.approx(1.0, abs=1e-6)
        assert layer.rel_l2 == pytest.approx(0.0, abs=1e-6) and layer.norm_ratio == pytest.approx(1.0)
    assert res["argmax_agreement"] == 1.0 and res["tokens"] == 300


# --------------------------------------------------------------------------- the float32 products against float64

def reference_similarity(pairs: list[tuple[torch.Tensor, torch.Tensor]], cka_batch: int) -> dict:
    """Every number of one layer computed directly in float64 from the states as given: per-token cosine, relative
    L2 and norms, and the minibatch CKA over the accumulator's minibatches (``cka_batch`` tokens in stream order,
    the last one kept when it holds 4 or more), each centred on its own mean with no scaling."""
    a = torch.cat([p[0] for p in pairs]).double()
    b = torch.cat([p[1] for p in pairs]).double()
    na, nb, nd = a.norm(dim=-1), b.norm(dim=-1), (a - b).norm(dim=-1)
    cos = ((a * b).sum(-1) / (na * nb).clamp_min(1e-300)).float().double()

    batches = [(a[i:i + cka_batch], b[i:i + cka_batch]) for i in range(0, len(a), cka_batch)]
    cka = direct_cka([(x, y) for x, y in batches if len(x) >= 4])
    return {"cosine_mean": float(cos.mean()), "rel_l2": float((nd / na.clamp_min(1e-300)).mean()),
            "norm_ratio": float(nb.sum() / na.sum()), "cka": min(max(cka, 0.0), 1.0)}


def accumulate(pairs, cka_batch: int):
    acc = SimilarityAccumulator(["x"], cka_batch=cka_batch)
    for x, y in pairs:
        acc.update([x], [y])
    return acc.result()["layers"][0]


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**16), sizes=st.lists(st.integers(1, 300), min_size=1, max_size=4),
       d=st.sampled_from([1, 3, 16, 200, 1024]), noise=st.sampled_from([0.0, 1e-6, 1e-3, 0.3, 3.0]),
       offset=st.sampled_from([0.0, 1.0, 1e3, 1e5, -3e6]), scale=st.sampled_from([1e-30, 1e-6, 1.0, 7.5, 1e4, 1e15]),
       cka_batch=st.sampled_from([4, 37, 256]), dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float64]))
def test_accumulator_equals_a_float64_computation_to_four_decimals(seed, sizes, d, noise, offset, scale, cka_batch,
                                                                   dtype):
    """#42 item 2: the float32 Gram products, the float32 row norms and the one-pass centring report the numbers
    the float64 computation gives, to the 4 decimals the probe prints, on hostile states: offsets far above the
    spread (one channel, as a massive activation), tiny and huge scales, near-identical pairs, narrow and wide
    states, updates that straddle minibatches, bf16 as dumped."""
    g = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    a = torch.randn(n, d, generator=g, dtype=torch.float64)
    b = a + noise * torch.randn(n, d, generator=g, dtype=torch.float64)
    channel = torch.zeros(d, dtype=torch.float64)
    channel[seed % d] = offset
    a, b = (a * scale + channel).to(dtype), (b * scale + channel).to(dtype)  # the reference reads these, as stored
    cuts = torch.tensor([0, *sizes]).cumsum(0).tolist()
    pairs = [(a[i:j], b[i:j]) for i, j in zip(cuts, cuts[1:])]
    got, want = accumulate(pairs, cka_batch), reference_similarity(pairs, cka_batch)
    for name, expected in want.items():
        value = getattr(got, name)
        if math.isnan(expected) or not math.isfinite(expected):
            continue  # states that do not vary as stored: the CKA is undefined either way
        assert value == pytest.approx(expected, abs=5e-5), (name, value, expected)


@pytest.mark.parametrize("onednn", [True, False])
def test_wide_bf16_states_straddling_minibatches_match_float64(onednn, monkeypatch):
    """At a target's width (the Gram products by row strips; oneDNN's product, and torch's mm where oneDNN is
    absent), bf16 states read in pieces that straddle minibatches give the float64 numbers to 4 decimals, on four
    layers of differing drift."""
    if not onednn:
        monkeypatch.setattr(similarity, "_onednn_gram", lambda: None)
    elif similarity._onednn_gram() is None:
        pytest.skip("this torch has no oneDNN product")
    g = torch.Generator().manual_seed(7)
    sizes, d = [300, 129, 511, 3], 2048
    base = torch.randn(sum(sizes), d, generator=g)
    base[:, 5] += 40.0  # a massive-activation channel
    layers_a = [base * (i + 1) for i in range(4)]
    layers_b = [x + s * torch.randn(x.shape, generator=g) * x.std() for x, s in zip(layers_a, (0.0, 0.01, 0.3, 2.0))]
    layers_a, layers_b = [x.bfloat16() for x in layers_a], [x.bfloat16() for x in layers_b]
    acc = SimilarityAccumulator(["a", "b", "c", "d"])
    start = 0
    for size in sizes:
        acc.update([x[start:start + size] for x in layers_a], [y[start:start + size] for y in layers_b])
        start += size
    res = acc.result()
    for i, layer in enumerate(res["layers"]):
        want = reference_similarity([(layers_a[i], layers_b[i])], 256)
        for name, expected in want.items():
            assert getattr(layer, name) == pytest.approx(expected, abs=1e-5), (layer.layer, name)
    assert res["layers"][0].cka == pytest.approx(1.0, abs=1e-6) and res["layers"][0].rel_l2 == 0.0


def test_an_offset_far_above_the_spread_and_a_batch_past_float32_give_the_float64_numbers(monkeypatch):
    """Where float32 alone would fail, the float64 numbers all the same: an offset of 1e5 on states of 1e-6 in
    bf16 (hypothesis's find), a constant channel far above the others' spread (float32's mean leaves a residue
    of it above their spread: centred twice), and a minibatch 1e25 times the first one's size (its Gram product
    overflows float32: taken in float64)."""
    centred = similarity._centred_scaled
    g = torch.Generator().manual_seed(0)
    a = torch.randn(234, 3, generator=g, dtype=torch.float64) * 1e-6
    a[:, 0] += 1e5
    pairs = [(a[:1], a[:1]), (a[1:2], a[1:2]), (a[2:], a[2:])]
    pairs = [(x.bfloat16(), y.bfloat16()) for x, y in pairs]
    got = accumulate(pairs, 256)
    assert got.cka == pytest.approx(1.0, abs=1e-6) and got.rel_l2 == 0.0
    x = torch.randn(300, 8, generator=g, dtype=torch.float64) * 1e-6
    y = x @ torch.randn(8, 8, generator=g, dtype=torch.float64) + 1e-6 * torch.randn(x.shape, generator=g,
                                                                                      dtype=torch.float64)
    x[:, 0] = 123456.7890625  # one channel that does not vary, 1e11 times the others' spread: float32's mean of
    pairs = [(x[i:i + 100].float(), y[i:i + 100].float()) for i in (0, 100, 200)]  # 37 rows misses it by 0.008
    twice = []
    monkeypatch.setattr(similarity, "_centred_scaled", lambda *a, **kw: twice.append(kw.get("twice")) or centred(*a, **kw))
    got, want = accumulate(pairs, 37), reference_similarity(pairs, 37)
    assert any(twice) and got.cka == pytest.approx(want["cka"], abs=5e-5)  # once only: 0.697 against 0.692
    monkeypatch.undo()
    x = torch.randn(64, 40, generator=g)
    y = x + 0.5 * torch.randn(64, 40, generator=g)
    x[32:] *= 1e25
    y[32:] *= 1e25
    pairs = [(x[:32], y[:32]), (x[32:], y[32:])]
    got, want = accumulate(pairs, 32), reference_similarity(pairs, 32)
    for name, expected in want.items():
        assert getattr(got, name) == pytest.approx(expected, abs=5e-5), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_caller_may_write_over_its_states_after_update(dtype):
    """Rows still buffered after ``update`` (under a CKA minibatch) are the accumulator's own: a caller that writes
    the next batch into the same tensors (the dump probe's reused stacks) changes nothing already added."""
    g = torch.Generator().manual_seed(3)
    labels = ["low (1)", "last"]
    first = [torch.randn(100, 16, generator=g, dtype=dtype) for _ in range(4)]
    second = [torch.randn(100, 16, generator=g, dtype=dtype) for _ in range(4)]
    reused = SimilarityAccumulator(labels, cka_batch=256)
    kept = SimilarityAccumulator(labels, cka_batch=256)
    buffers = [x.clone() for x in first]  # whole tensors, no views: nothing to tell them from the caller's own
    reused.update(buffers[:2], buffers[2:])
    kept.update([x.clone() for x in first[:2]], [x.clone() for x in first[2:]])
    for buf, new in zip(buffers, second):
        buf.copy_(new)  # the next batch, written over the first
    reused.update(buffers[:2], buffers[2:])
    kept.update(second[:2], second[2:])
    a, b = reused.result(), kept.result()
    for x, y in zip(a["layers"], b["layers"]):
        assert (x.cosine_mean, x.rel_l2, x.norm_ratio, x.cka) == (y.cosine_mean, y.rel_l2, y.norm_ratio, y.cka)
