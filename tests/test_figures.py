"""#57 item 1: a report's figure is drawn from the report (``eaglelab.workbook.figures``), so a notebook section reads
job, table, figure; each figure carries the report's own numbers."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from eaglelab.jobs.load import LoadSettings, speculation_under_load  # noqa: E402
from eaglelab.planning.scaling import DataLaw, ScalingSweep, fit_scaling  # noqa: E402
from eaglelab.serving.speculation import Speculation  # noqa: E402
from eaglelab.workbook import figures  # noqa: E402


def _labels(fig) -> set[str]:
    """The legends' entries and the texts written on the axes (a horizontal line's label)."""
    legends = {t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()}
    return legends | {t.get_text() for ax in fig.axes for t in ax.texts}


@settings(max_examples=4, deadline=None)
@given(plugin=st.floats(1.2, 2.0), b=st.floats(0.2, 0.5))
def test_the_scaling_figure_draws_both_laws_the_old_drafter_and_the_lines_given(plugin, b):
    budgets = (4, 8, 16, 32, 64)
    scratch = [(n, float(DataLaw(0.9, b, 3).tau(n))) for n in budgets]
    warm = [(0, plugin)] + [(n, float(DataLaw(0.6, b / 2, 3).tau(n))) for n in budgets]
    sweep = ScalingSweep({"from scratch": scratch, "warm start": warm}, fit_scaling(scratch, warm, k=3, n_boot=20),
                         budgets, (0,), 10, 2.0)
    fig = figures.scaling_figure(sweep, {"break-even τ": 1.8}, "[demo]")
    labels = " ".join(_labels(fig))
    assert f"old drafter as is (τ {plugin:.2f})" in labels and "break-even τ" in labels
    assert "warm start" in labels and "from scratch" in labels and "[demo]" in fig.axes[0].get_title()
    plt.close(fig)


def test_the_load_figure_is_the_reports_tau_and_crossover():
    load = speculation_under_load(LoadSettings(concurrency=(1, 4, 16), baseline_tps=82.0, cycle_ms=30.0,
                                               accept_len=2.5, k=3))
    fig = figures.load_figure(load, {"measured": ([1, 4], [1.5, 1.2])})
    titles = [fig.get_suptitle(), *(ax.get_title() for ax in fig.axes)]
    assert any(f"τ {load.tau:.2f}, k = 3" in t for t in titles), titles
    assert "measured" in " ".join(_labels(fig))
    plt.close(fig)


@pytest.mark.parametrize("tau", [1.5, 2.4])
def test_the_closed_loop_figure_bars_are_the_measured_and_the_modelled_rates(tau):
    loop = Speculation(3, 2, 2, 20, tau, [[20, 10]], 100.0, 80.0, True, 0.002, 0.012, 0.001, [0.8], True)
    fig = figures.closed_loop_figure(loop)
    heights = sorted(round(p.get_height(), 6) for p in fig.axes[0].patches)
    assert heights == sorted(round(h, 6) for h in (80.0, 100.0, 80.0, loop.predicted_tokens_per_s))
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["greedy", "EAGLE-3 k=3"]
    plt.close(fig)
