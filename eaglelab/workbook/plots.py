"""Figures. Every function here draws what it is given and returns the figure; none computes.

One :func:`savefig` writes ``<name>.png`` and ``<name>.pdf`` plus a ``<name>.json`` sidecar of
the parameters that made the figure. One style (:func:`use_style`) for all plots.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from eaglelab.outputs import open_output_folder

PALETTE = ["#1f4e79", "#d1495b", "#edae49", "#00798c", "#66a182", "#8d6a9f", "#30638e"]


def use_style() -> None:
    """Apply eaglelab's plotting style (seaborn whitegrid, readable sizes)."""
    import matplotlib as mpl
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook", palette=PALETTE)
    mpl.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "axes.titleweight": "bold",
                         "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 9,
                         "figure.constrained_layout.use": True})


def _fig(w: float = 6.4, h: float = 4.0):
    import matplotlib.pyplot as plt

    use_style()
    return plt.subplots(figsize=(w, h))


def _panels(w: float, h: float, n: int):
    """A figure with n side-by-side axes: (figure, list of n axes)."""
    import matplotlib.pyplot as plt

    use_style()
    fig, axes = plt.subplots(1, n, figsize=(w, h), squeeze=False)
    return fig, list(axes[0])


def _integer_ticks(axis) -> None:
    """Whole-number ticks on an axis that counts (draft positions, tokens, steps)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def savefig(fig, name: str, figures_dir: str | Path = "figures", params: Mapping[str, Any] | None = None) -> None:
    """Write ``name``.png, ``name``.pdf and a ``name``.json sidecar into ``figures_dir``, atomically.

    Returns nothing, so a notebook cell that ends with it shows the figure, not a list of paths.
    """
    with open_output_folder(figures_dir, "figures", shared=True) as out:  # never over a file eaglelab did not write
        for ext in ("png", "pdf"):
            with out.writing(f"{name}.{ext}") as tmp:
                fig.savefig(tmp, format=ext, bbox_inches="tight")
        out.write_json(f"{name}.json", {"figure": name, "params": json.loads(json.dumps(dict(params or {}), default=str))})


# --------------------------------------------------------------------------- notebook 01

def plot_tps_vs_accept_len(accept_lens: np.ndarray, curves: Mapping[str, np.ndarray], baseline_tps: float,
                           points: Sequence[tuple[float, float, str]] = (), goals: Sequence[float] = ()):
    """Effective tok/s against acceptance length, one curve per cycle time.

    Args:
        accept_lens: x values [A].
        curves: label -> tok/s [A].
        baseline_tps: horizontal line of plain decoding.
        points: measured (accept_len, tok/s, label) points.
        goals: horizontal lines at the throughputs wanted.
    """
    fig, ax = _fig()
    for (label, tps), color in zip(curves.items(), PALETTE):
        ax.plot(accept_lens, tps, label=label, color=color)
    ax.axhline(baseline_tps, color="black", ls="--", lw=1, label=f"no speculation ({baseline_tps:g} tok/s)")
    for t in goals:
        ax.axhline(t, color="grey", ls=":", lw=1)
        ax.text(accept_lens[0], t, f" target {t:g}", va="bottom", fontsize=8, color="grey")
    for x, y, label in points:
        ax.scatter([x], [y], color="#d1495b", zorder=5, s=40)
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(6, -10), fontsize=8)
    ax.set_xlabel("acceptance length τ (tokens per verify, bonus included)")
    ax.set_ylabel("effective tok/s")
    ax.set_title("Throughput = τ / cycle time")
    ax.legend(loc="upper left")
    return fig


def plot_speedup_map(speedup: np.ndarray, accept_lens: np.ndarray, cycle_ms: np.ndarray,
                     target_speedup: float | None = None, points: Sequence[tuple[float, float, str]] = ()):
    """Speedup over plain decoding on (τ, cycle ms), a diverging scale centred on 1.0 (where speculation pays).

    Args:
        speedup: effective tok/s over the baseline's, [C, A] (rows: cycle ms, columns: τ).
        target_speedup: the throughput target over the baseline, drawn as a second contour.
        points: (τ, cycle ms, label) marks, e.g. the measured operating point.
    """
    from matplotlib.colors import LogNorm

    fig, ax = _fig(6.4, 4.4)
    lo, hi = float(np.nanmin(speedup)), float(np.nanmax(speedup))
    span = max(hi, 1 / lo, 1.05)  # a log scale symmetric about 1: 0.5x and 2x get equally strong colours
    mesh = ax.pcolormesh(accept_lens, cycle_ms, speedup, shading="auto", cmap="RdBu", norm=LogNorm(1 / span, span))
    ticks = [t for t in (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0, 8.0) if 1 / span <= t <= span]
    bar = fig.colorbar(mesh, ax=ax, label="speedup over plain decoding (1.0 = break-even)", ticks=ticks)
    bar.ax.set_yticklabels([f"{t:g}×" for t in ticks])
    bar.ax.minorticks_off()
    cs = ax.contour(accept_lens, cycle_ms, speedup, levels=[1.0], colors="black", linewidths=2)
    ax.clabel(cs, fmt=lambda v: "break-even", fontsize=8)
    if target_speedup is not None and lo < target_speedup < hi:
        ct = ax.contour(accept_lens, cycle_ms, speedup, levels=[target_speedup], colors="#edae49", linewidths=2,
                        linestyles="--")
        ax.clabel(ct, fmt=lambda v: f"target ({v:.2f}×)", fontsize=8)
    for (tau, ms, label), color in zip(points, ["black", *PALETTE[2:]]):
        ax.scatter([tau], [ms], color=color, edgecolor="white", s=70, zorder=5, label=label)
    if points:
        ax.legend(loc="upper left", fontsize=8)
    ax.set_xlabel("acceptance length τ")
    ax.set_ylabel("cycle time (ms)")
    ax.set_title("Where speculation pays")
    return fig


def plot_tau_vs_accuracy(alphas: np.ndarray, curves: Mapping[str, np.ndarray], marks: Sequence[tuple[float, float, str]] = ()):
    """τ against per-position acceptance for several draft lengths (and tree variants)."""
    fig, ax = _fig()
    for (label, taus), color in zip(curves.items(), PALETTE):
        ax.plot(alphas, taus, label=label, color=color, ls="--" if "tree" in label else "-")
    for x, y, label in marks:
        ax.scatter([x], [y], color="black", zorder=5, s=30)
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.set_xlabel("per-position acceptance α")
    ax.set_ylabel("expected τ")
    ax.set_title("τ = (1 − α^(k+1)) / (1 − α)")
    ax.legend(loc="upper left")
    return fig


def plot_moe_verify(tokens: np.ndarray, parts: Mapping[str, np.ndarray], measured_ms: float | None = None):
    """Stacked verify-time components (ms) against tokens per forward."""
    fig, ax = _fig()
    ax.stackplot(tokens, *parts.values(), labels=list(parts), alpha=0.85, colors=PALETTE[: len(parts)])
    if measured_ms is not None:
        ax.axhline(measured_ms, color="black", ls="--", lw=1, label=f"measured verify ({measured_ms:g} ms)")
    _integer_ticks(ax.xaxis)
    ax.set_xlabel("tokens in the forward (1 = decode, k+1 = verify)")
    ax.set_ylabel("ms per forward")
    ax.set_title("MoE verify cost: distinct experts + all-reduces")
    ax.legend(loc="upper left")
    return fig


def plot_log_points(records: Sequence[Mapping[str, Any]], accept_lens: np.ndarray,
                    curves: Mapping[str, np.ndarray], baseline_tps: float | None = None):
    """Measured (accept_len, throughput) points from server logs over the model's curves."""
    fig, ax = _fig()
    for (label, tps), color in zip(curves.items(), PALETTE[1:]):
        ax.plot(accept_lens, tps, color=color, lw=1, label=label)
    by_src: dict[str, list] = {}
    for r in records:
        if r.get("throughput") is not None:
            by_src.setdefault(f"{r['source']} batch {r.get('batch_size') or '?'}", []).append(r)
    for (label, rs), marker in zip(by_src.items(), "os^Dv<>"):
        ax.scatter([r["accept_len"] for r in rs], [r["throughput"] for r in rs], marker=marker, s=25, label=label,
                   color="black", alpha=0.7)
    if baseline_tps:
        ax.axhline(baseline_tps, color="black", ls="--", lw=1, label="no speculation")
    ax.set_xlabel("accept len (from the log)")
    ax.set_ylabel("tok/s (from the log)")
    ax.set_title("Serving logs against the model")
    ax.legend(loc="upper left", fontsize=8)
    return fig


def plot_closed_loop(labels: Sequence[str], measured: Sequence[float], predicted: Sequence[float]):
    """Measured vs predicted tok/s, side by side per configuration."""
    fig, ax = _fig()
    x = np.arange(len(labels))
    ax.bar(x - 0.2, measured, 0.4, label="measured", color=PALETTE[0])
    ax.bar(x + 0.2, predicted, 0.4, label="model: τ / cycle", color=PALETTE[2])
    ax.set_xticks(x, labels)
    ax.set_ylabel("tok/s")
    ax.set_title("Performance model vs measurement")
    ax.legend()
    return fig


# --------------------------------------------------------------------------- notebook 02

def plot_params_by_module(a: Mapping[str, int], b: Mapping[str, int], labels: tuple[str, str] = ("A", "B")):
    """Parameters per module group of two checkpoints (horizontal bars, millions)."""
    fig, ax = _fig()
    groups = sorted(set(a) | set(b), key=lambda g: -(a.get(g, 0) + b.get(g, 0)))
    y = np.arange(len(groups))
    ax.barh(y - 0.2, [a.get(g, 0) / 1e6 for g in groups], 0.4, label=labels[0], color=PALETTE[0])
    ax.barh(y + 0.2, [b.get(g, 0) / 1e6 for g in groups], 0.4, label=labels[1], color=PALETTE[1])
    ax.set_yticks(y, groups)
    ax.invert_yaxis()
    ax.set_xlabel("parameters (millions)")
    ax.set_title("Where the parameters are")
    ax.legend()
    return fig


_STATUS_COLORS = {"same": "#66a182", "dtype": "#edae49", "shape": "#d1495b", "only-a": "#8d6a9f",
                  "only-b": "#30638e"}


def plot_mismatch_map(rows: Sequence[Mapping[str, Any]]):
    """One row per tensor, coloured by status (same / dtype / shape / only-a / only-b)."""
    fig, ax = _fig(6.4, max(2.5, 0.26 * len(rows) + 1))
    for i, r in enumerate(rows):
        ax.barh(i, 1, color=_STATUS_COLORS[r["status"]])
        ax.text(0.02, i, f"{r['name']}   {r['a_shape']} vs {r['b_shape']}", va="center", fontsize=7, color="white")
    ax.set_yticks([])
    ax.set_xticks([])
    ax.invert_yaxis()
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=c, label=s) for s, c in _STATUS_COLORS.items()], loc="lower center",
              bbox_to_anchor=(0.5, 1.0), ncol=5, fontsize=8, frameon=False)
    ax.set_title("Tensor by tensor", pad=24)
    return fig


# --------------------------------------------------------------------------- notebook 03

def plot_cosine_distributions(per_layer: Mapping[str, np.ndarray]):
    """Per-token cosine similarity of target A vs B, one violin per captured layer."""
    fig, ax = _fig()
    labels = list(per_layer)
    parts = ax.violinplot([np.asarray(per_layer[k]) for k in labels], showmedians=True)
    for body, color in zip(parts["bodies"], PALETTE):
        body.set_facecolor(color)
        body.set_alpha(0.6)
    ax.set_xticks(np.arange(1, len(labels) + 1), labels)
    ax.set_ylabel("cosine(h_A, h_B) per token")
    ax.set_title("How far the hidden states moved")
    return fig


def plot_cka_map(cka: np.ndarray, labels_a: Sequence[str], labels_b: Sequence[str]):
    """Layer x layer linear-CKA map between target A (rows) and target B (columns)."""
    import seaborn as sns

    fig, ax = _fig(5.6, 4.6)
    sns.heatmap(cka, ax=ax, vmin=0, vmax=1, cmap="mako", annot=cka.shape[0] <= 12, fmt=".2f",
                xticklabels=labels_b, yticklabels=labels_a, cbar_kws={"label": "linear CKA"})
    ax.set_xlabel("target B layer output")
    ax.set_ylabel("target A layer output")
    ax.set_title("Representation similarity (CKA)")
    return fig


def plot_position_acceptance(curves: Mapping[str, Sequence[float]], ylabel: str = "accuracy at draft position"):
    """Per-position acceptance (or accuracy) curves, e.g. the old drafter on A vs on B."""
    fig, ax = _fig()
    for (label, ys), color in zip(curves.items(), PALETTE):
        ax.plot(np.arange(1, len(ys) + 1), ys, marker="o", label=label, color=color)
    _integer_ticks(ax.xaxis)  # positions are counts: no 1.5th draft
    ax.set_xlabel("draft position")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1)
    ax.set_title("Does the old drafter still work?")
    ax.legend()
    return fig


# --------------------------------------------------------------------------- notebook 04

def plot_learning_curves(runs: Mapping[str, Sequence[Mapping[str, Any]]], key: str = "loss",
                         ylabel: str | None = None):
    """One metric over steps for several runs (e.g. warm start vs scratch)."""
    fig, ax = _fig()
    for (label, rows), color in zip(runs.items(), PALETTE):
        pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if pts:
            ax.plot(*zip(*pts), marker=".", label=label, color=color)
    _integer_ticks(ax.xaxis)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel or key)
    ax.set_title(f"{ylabel or key} during fine-tuning")
    ax.legend()
    return fig


def plot_scaling(points: Mapping[str, Sequence[tuple[float, float]]],
                 fits: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
                 lines: Mapping[str, float] = (), title: str = "Held-out τ against new-target data"):
    """Measured τ per data budget (every seed a dot), the fitted law with its band, and required-τ lines.

    Args:
        points: label -> (samples, τ) points; a warm start's point at 0 samples is the old drafter as is.
        fits: label -> (samples grid, central τ, low, high), same labels as ``points``.
        lines: label -> τ drawn as a horizontal line (break-even, target, the k + 1 ceiling).
    """
    fig, ax = _fig()
    positive = [n for pts in points.values() for n, _ in pts if n > 0]
    for (label, pts), color in zip(points.items(), PALETTE):
        xs, ys = zip(*pts) if pts else ((), ())
        ax.scatter(xs, ys, color=color, s=22, alpha=0.8, zorder=4, label=f"{label} (measured)")
        if label in fits:
            grid, c, lo, hi = fits[label]
            ax.plot(grid, c, color=color, lw=1.8, label=f"{label} (fit)")
            ax.fill_between(grid, lo, hi, color=color, alpha=0.15, lw=0)
    if positive:  # log beyond half the smallest budget, linear below it (where 0 sits)
        ax.set_xscale("symlog", linthresh=min(positive) / 2)
        ax.set_xlim(left=0)
    for (label, tau), style in zip(dict(lines).items(), (":", "--", "-.", (0, (1, 3)))):
        ax.axhline(tau, color="#555555", lw=1, ls=style)
        ax.text(0.01, tau, f" {label}", transform=ax.get_yaxis_transform(), va="bottom", ha="left", fontsize=8,
                color="#333333")
    ax.set_xlabel("new-target training samples (0 = the old drafter as is)")
    ax.set_ylabel("held-out τ (bonus included)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left")
    return fig


def plot_concurrency(curves: Mapping[str, Mapping[str, np.ndarray]], tau: float,
                     points: Mapping[str, tuple] = (),
                     crossover: float | None = None, title: str = "Speculation under load"):
    """Speedup (left) and break-even τ (right) against concurrency, log-scaled, with measured points.

    Args:
        curves: label -> ``{"concurrency", "speedup", "break_even_tau"}`` arrays (a model's).
        tau: the drafter's τ: the right panel's horizontal line (it pays where the curve is below).
        points: label -> (concurrencies, measured speedups[, (low, high) per point: the runs' range,
            drawn as error bars]), on the left.
        crossover: the last concurrency that pays, marked.
    """
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, c in curves.items():
        left.plot(c["concurrency"], c["speedup"], label=label)
        right.plot(c["concurrency"], c["break_even_tau"], label=label)
    for (label, (xs, ys, *spread)), marker in zip(dict(points).items(), "osD^v"):
        bars = None
        if spread:
            bars = np.array([[y - lo for y, (lo, _) in zip(ys, spread[0])], [hi - y for y, (_, hi) in zip(ys, spread[0])]])
        left.errorbar(xs, ys, yerr=bars, fmt=marker, ms=6, capsize=3, zorder=3, label=label)
    left.axhline(1.0, color="0.4", lw=1, ls="--")
    right.axhline(tau, color="0.4", lw=1, ls="--", label=f"τ = {tau:.2f}")
    if crossover is not None:
        for ax in (left, right):
            ax.axvline(crossover, color="tab:red", lw=1, ls=":", label=f"pays up to {crossover:g}")
    for ax, ylabel in ((left, "speedup over plain decoding"), (right, "break-even τ")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent requests")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_cost_fit(measured: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                  model: Mapping[str, tuple[Sequence[float], Sequence[float]]], title: str = "Measured steps and the fit"):
    """Measured plain steps and cycles (markers) against concurrency, beside the fitted model's (lines), ms, log-log."""
    fig, ax = _fig()
    for (label, (xs, ys)), color in zip(model.items(), PALETTE):
        ax.plot(xs, ys, color=color, label=label)
    for (label, (xs, ys)), marker in zip(measured.items(), "osD^v"):
        ax.plot(xs, ys, marker, ms=6, alpha=0.8, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("ms per plain step / per cycle")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def plot_options(rows: Sequence[Mapping[str, Any]], break_even: float, goal: float, ceiling: float,
                 title: str = "Options against what your scenario needs"):
    """Each option's projected τ with its band, against the τ of break-even and the τ the goal throughput needs.

    Args:
        rows: dicts with ``option``, ``tau``, ``tau_lo``, ``tau_hi`` (a decision table's rows).
        title: what the options rest on (notebook 01 draws its own numbers; the game plan redraws them with 03 / 04).
    """
    fig, ax = _fig(6.8, 0.32 * len(rows) + 1.6)
    ys = np.arange(len(rows))[::-1]
    for y, r in zip(ys, rows):
        color = PALETTE[0] if r["tau"] >= break_even else PALETTE[1]
        ax.plot([r["tau_lo"], r["tau_hi"]], [y, y], color=color, lw=4, alpha=0.35, solid_capstyle="butt")
        ax.scatter([r["tau"]], [y], color=color, zorder=4, s=28)
    for x, label, style in ((break_even, f"break-even τ {break_even:.2f}", "--"), (goal, f"goal τ {goal:.2f}", "-"),
                            (ceiling, f"k + 1 = {ceiling:g}", ":")):
        ax.axvline(x, color="#333333", lw=1, ls=style, label=label)
    ax.set_yticks(ys, [r["option"] for r in rows], fontsize=8)
    ax.set_xlabel("projected τ in your scenario (band: the law's range)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    return fig


# --------------------------------------------------------------------------- notebook 05

FAMILY_MARKERS = {"none": "*", "path": "o", "quant": "s", "train": "^", "pair": "D"}
FAMILY_COLORS = dict(zip(FAMILY_MARKERS, PALETTE))  # one colour per drift family in every figure


def plot_tau_vs_measures(points: Sequence[Mapping[str, Any]], panels: Mapping[str, str],
                         laws: Mapping[str, tuple[np.ndarray, np.ndarray]] = (), tau_a: float | None = None):
    """Teacher-forced τ on each drifted target against each measure, all families on one axes per measure.

    Args:
        points: dicts with ``family``, ``tau`` and one value per measure key of ``panels``.
        panels: measure key -> axis label.
        laws: measure key -> (x grid, τ of the fitted law on it).
        tau_a: the drafter's τ on A (dotted line).
    """
    fig, axes = _panels(3.3 * len(panels), 3.4, len(panels))
    families = list(dict.fromkeys(p["family"] for p in points))
    colors = {f: FAMILY_COLORS.get(f, "#555555") for f in families}
    for ax, (key, label) in zip(axes, panels.items()):
        for fam in families:
            pts = [p for p in points if p["family"] == fam]
            ax.scatter([p[key] for p in pts], [p["tau"] for p in pts], color=colors[fam], s=30, zorder=4,
                       marker=FAMILY_MARKERS.get(fam, "o"), label=fam)
        if key in dict(laws):
            xs, ys = dict(laws)[key]
            ax.plot(xs, ys, color="#333333", lw=1.4, label="fitted law")
        if tau_a is not None:
            ax.axhline(tau_a, color="#777777", lw=1, ls=":")
        ax.set_xlabel(label)
    axes[0].set_ylabel("old drafter's τ on B' (teacher forced)")
    axes[0].legend(fontsize=8)
    fig.suptitle("How τ falls as the target moves", fontweight="bold")
    return fig


def plot_predicted_vs_measured(rows: Sequence[Mapping[str, Any]], tolerance: float = 0.10):
    """Predicted τ against the teacher-forced truth (every point), and teacher-forced against measured decoding.

    Args:
        rows: dicts with ``family``, ``predicted``, ``teacher_forced``, ``measured`` (None where not measured)
            and ``walk_own_text`` (teacher forced on the text decoding produced, replayed cycle by cycle;
            hollow markers).
    """
    fig, (ax, bx) = _panels(9.6, 4.0, 2)
    families = list(dict.fromkeys(r["family"] for r in rows))
    colors = {f: FAMILY_COLORS.get(f, "#555555") for f in families}
    taus = [v for r in rows for v in (r["predicted"], r["teacher_forced"], r["measured"], r.get("walk_own_text"))
            if v is not None]
    lo, hi = min(taus) * 0.95, max(taus) * 1.05
    grid = np.linspace(lo, hi, 50)
    for axis in (ax, bx):
        axis.plot(grid, grid, color="#333333", lw=1)
        axis.fill_between(grid, grid * (1 - tolerance), grid * (1 + tolerance), color="#999999", alpha=0.2, lw=0,
                          label=f"±{100 * tolerance:.0f}%")
        axis.set_xlim(lo, hi)
        axis.set_ylim(lo, hi)
    for fam in families:
        rs = [r for r in rows if r["family"] == fam]
        ax.scatter([r["teacher_forced"] for r in rs], [r["predicted"] for r in rs], color=colors[fam], s=30,
                   marker=FAMILY_MARKERS.get(fam, "o"), label=fam, zorder=4)
        ms = [r for r in rs if r["measured"] is not None]
        bx.scatter([r["measured"] for r in ms], [r["teacher_forced"] for r in ms], color=colors[fam], s=30,
                   marker=FAMILY_MARKERS.get(fam, "o"), label=f"{fam}: on A's replies", zorder=4)
        own = [r for r in ms if r.get("walk_own_text") is not None]
        bx.scatter([r["measured"] for r in own], [r["walk_own_text"] for r in own], facecolors="none",
                   edgecolors=colors[fam], s=36, marker=FAMILY_MARKERS.get(fam, "o"),
                   label=f"{fam}: decoded text, cycle walk", zorder=4)
    ax.set_xlabel("teacher-forced τ on B'")
    ax.set_ylabel("predicted τ (held out)")
    ax.set_title("Predicted before running the drafter")
    bx.set_xlabel("measured τ (real speculative decoding)")
    bx.set_ylabel("teacher-forced τ")
    bx.set_title("Teacher forcing against decoding")
    ax.legend(fontsize=8)
    bx.legend(fontsize=7)
    return fig


def plot_position_vs_magnitude(series: Mapping[str, Mapping[str, Any]]):
    """Per-draft acceptance of the old drafter on B' along each family's magnitude (one panel per family).

    Args:
        series: panel title -> {``magnitudes``: [m], ``acc``: [m][k] per-draft accuracy, ``labels``: [m]
            point labels written at the first draft's markers, ``xlabel``: str}.
    """
    fig, axes = _panels(3.6 * len(series), 3.4, len(series))
    for ax, (fam, s) in zip(axes, series.items()):
        acc = np.asarray(s["acc"], dtype=float)
        for i, color in zip(range(acc.shape[1]), PALETTE):
            ax.plot(s["magnitudes"], acc[:, i], marker="o", color=color, label=f"draft {i + 1}")
        for x, y, label in zip(s["magnitudes"], acc[:, 0], s.get("labels", ())):
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(2, 4), fontsize=7, color="#333333")
        ax.set_xlabel(s["xlabel"])
        ax.set_ylim(0, 1)
        ax.set_title(fam)
    axes[0].set_ylabel("accuracy at draft position (teacher forced)")
    axes[0].legend(fontsize=8)
    return fig
