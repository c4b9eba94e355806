"""The GPU table: sane figures, a source for each, the lookup's folding and its one-line refusal."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglelab.errors import ParameterError
from eaglelab.serving.gpus import GPUS, LINK_KINDS, LINK_SOURCES, LINKS, Gpu, allreduce_bytes_s, gpu, link_key

REQUIRED = ["h100-sxm", "h100-pcie", "h100-nvl", "h800", "h200", "h20", "a100-80g", "a100-40g", "a800", "l40s", "l20",
            "l4", "rtx-pro-6000", "rtx-4090", "rtx-3090", "b200", "gb200", "mi300x", "mi325x", "mi355x"]


def _rates(g: Gpu) -> list[float]:
    return [g.memory_bytes, g.bandwidth_bytes_s, g.bf16_flops_s, g.link_bytes_s] + ([g.fp8_flops_s] * (g.fp8_flops_s is not None))


def test_every_required_gpu_is_in_the_table():
    assert [k for k in REQUIRED if k not in GPUS] == []


@pytest.mark.parametrize("key", list(GPUS))
def test_every_figure_is_positive_finite_and_in_a_sane_range(key):
    g = GPUS[key]
    assert all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in _rates(g))
    assert 16e9 <= g.memory_bytes <= 300e9, "device memory between 16 GB and 300 GB"
    assert 200e9 <= g.bandwidth_bytes_s <= 10e12, "memory bandwidth between 200 GB/s and 10 TB/s"
    assert 50e12 <= g.bf16_flops_s <= 3e15, "dense BF16 between 50 TFLOP/s and 3 PFLOP/s"
    assert g.link in LINK_KINDS
    assert 10e9 <= g.link_bytes_s <= 1e12


@pytest.mark.parametrize("key", [k for k, g in GPUS.items() if g.fp8_flops_s is not None])
def test_dense_fp8_is_above_dense_bf16(key):
    g = GPUS[key]
    assert g.bf16_flops_s < g.fp8_flops_s <= 2.05 * g.bf16_flops_s, "FP8 runs about twice BF16 (L40S: 733 / 362.05)"


def test_the_parts_without_fp8_are_the_ampere_ones():
    assert sorted(k for k, g in GPUS.items() if g.fp8_flops_s is None) == ["a100-40g", "a100-80g", "a800", "rtx-3090"]


@pytest.mark.parametrize("key", list(GPUS))
def test_every_gpu_names_a_source_url_and_an_all_reduce_figure(key):
    g = GPUS[key]
    assert "https://" in g.source
    assert link_key(g) in LINKS, "each GPU's link has a measured (or derived) all-reduce bus bandwidth"
    assert 0 < allreduce_bytes_s(g) < 2 * g.link_bytes_s


def test_every_link_figure_has_a_source_and_is_finite():
    assert set(LINK_SOURCES) == set(LINKS)
    assert all(math.isfinite(v) and v > 0 for v in LINKS.values())
    assert all("https://" in s for s in LINK_SOURCES.values())
    assert LINKS["pcie-32"] < LINKS["pcie-64"] < LINKS["nvlink-300"] < LINKS["nvlink-450"] < LINKS["nvlink-900"]


def test_the_datasheet_dense_figures_are_half_the_sparse_ones():
    """The dense/sparse trap: H100 SXM's datasheet prints 1,979 TFLOPS BF16 with sparsity, 989 dense."""
    assert GPUS["h100-sxm"].bf16_flops_s == pytest.approx(989.4e12)
    assert GPUS["h100-sxm"].link_bytes_s == 450e9, "900 GB/s NVLink is both directions added"
    assert GPUS["h800"].link_bytes_s == 200e9
    assert allreduce_bytes_s(GPUS["h100-pcie"]) < allreduce_bytes_s(GPUS["h100-sxm"]) / 10


@pytest.mark.parametrize("spelling", ["H100-SXM", "h100_sxm", "  H100_sxm ", "h100 sxm"])
def test_the_lookup_folds_case_underscores_and_spaces(spelling):
    assert gpu(spelling) is GPUS["h100-sxm"]


def test_an_unknown_gpu_is_refused_in_one_line_naming_the_flag_and_the_choices():
    with pytest.raises(ParameterError) as e:
        gpu("h100\nsxm9")
    message = str(e.value)
    assert e.value.where == "--gpu"
    assert len(message.splitlines()) == 1
    assert "h100-sxm" in message and "mi355x" in message


_KEYS = st.sampled_from(list(GPUS))


@settings(max_examples=300, deadline=None)
@given(name=st.text() | _KEYS.map(str.upper) | _KEYS.map(lambda k: k.replace("-", "_")))
def test_any_string_resolves_to_an_entry_or_is_refused_with_a_parameter_error(name):
    try:
        found = gpu(name)
    except ParameterError as e:
        assert e.where == "--gpu" and len(str(e).splitlines()) == 1
    else:
        assert found in GPUS.values()
