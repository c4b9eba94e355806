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

PALETTE = ["#1f4e79", "#d1495b", "#edae49", "#00798c", "#66a182", "#8d6a9f", "#30638e"]


def use_style() -> None:
    """Apply eaglelab's plotting style (seaborn whitegrid, readable sizes)."""
    import matplotlib as mpl
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook", palette=PALETTE)
    mpl.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "axes.titleweight": "bold",
                         "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 9,
                         "figure.constrained_layout.use": True})


def _fig(w: float = 6.4, h: float = 4.0, ncols: int = 1):
    import matplotlib.pyplot as plt

    use_style()
    return plt.subplots(1, ncols, figsize=(w, h), squeeze=ncols == 1)


def savefig(fig, name: str, figures_dir: str | Path = "figures", params: Mapping[str, Any] | None = None) -> list[Path]:
    """Write ``name``.png, ``name``.pdf and a ``name``.json sidecar into ``figures_dir``, atomically.

    Returns:
        the three paths written.
    """
    from eaglelab.atomic import atomic_path, write_json_atomic

    out = Path(figures_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "pdf"):
        with atomic_path(out / f"{name}.{ext}") as tmp:
            fig.savefig(tmp, format=ext, bbox_inches="tight")
        paths.append(out / f"{name}.{ext}")
    sidecar = {"figure": name, "params": json.loads(json.dumps(dict(params or {}), default=str))}
    paths.append(write_json_atomic(out / f"{name}.json", sidecar))
    return paths


# --------------------------------------------------------------------------- notebook 01

def plot_tps_vs_accept_len(accept_lens: np.ndarray, curves: Mapping[str, np.ndarray], baseline_tps: float,
                           points: Sequence[tuple[float, float, str]] = (), targets: Sequence[float] = ()):
    """Effective tok/s against acceptance length, one curve per cycle time.

    Args:
        accept_lens: x values [A].
        curves: label -> tok/s [A].
        baseline_tps: horizontal line of plain decoding.
        points: measured (accept_len, tok/s, label) points.
        targets: horizontal lines of throughput targets.
    """
    fig, ax = _fig()
    for (label, tps), color in zip(curves.items(), PALETTE):
        ax.plot(accept_lens, tps, label=label, color=color)
    ax.axhline(baseline_tps, color="black", ls="--", lw=1, label=f"no speculation ({baseline_tps:g} tok/s)")
    for t in targets:
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


def plot_tps_heatmap(grid: np.ndarray, accept_lens: np.ndarray, cycle_ms: np.ndarray, baseline_tps: float,
                     point: tuple[float, float] | None = None):
    """tok/s over (τ, cycle ms) with the break-even contour at ``baseline_tps``.

    Args:
        grid: tok/s [C, A] (rows: cycle ms, columns: τ).
    """
    fig, ax = _fig(6.4, 4.4)
    mesh = ax.pcolormesh(accept_lens, cycle_ms, grid, shading="auto", cmap="viridis")
    fig.colorbar(mesh, ax=ax, label="tok/s")
    cs = ax.contour(accept_lens, cycle_ms, grid, levels=[baseline_tps], colors="white", linewidths=2)
    ax.clabel(cs, fmt=lambda v: f"break-even {v:g} tok/s", fontsize=8)
    if point is not None:
        ax.scatter([point[0]], [point[1]], color="#d1495b", s=60, zorder=5, label="measured")
        ax.legend(loc="upper right")
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
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel or key)
    ax.set_title(f"{ylabel or key} during fine-tuning")
    ax.legend()
    return fig


def plot_budget_sweep(budgets: Sequence[int], curves: Mapping[str, Sequence[float]], ylabel: str = "held-out τ"):
    """A metric against the amount of new-target data, one curve per initialisation."""
    fig, ax = _fig()
    for (label, ys), color in zip(curves.items(), PALETTE):
        ax.plot(budgets, ys, marker="o", label=label, color=color)
    ax.set_xlabel("training sequences from the new target")
    ax.set_ylabel(ylabel)
    ax.set_title("How much data does warm start save?")
    ax.legend()
    return fig
