"""Figures: per-layer correlation curves, Figure 2/3-style maps, per-head correlations, attention graph.

Every function builds a :class:`matplotlib.figure.Figure` without pyplot (no global state, no
backend needed; a notebook displays the returned figure), and :func:`save_figure` writes it
atomically. Axis conventions: layers are 1-based on the y axis, layer 1 at the bottom.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from attnflow.io import atomic_path

__all__ = [
    "COLORS",
    "mixed_attention",
    "plot_attention_graph",
    "plot_curves",
    "plot_head_correlations",
    "plot_maps",
    "save_figure",
]

COLORS = {"raw": "#4c72b0", "rollout": "#dd8452", "flow": "#55a868"}
_EPS = 1e-12  # guard for row normalisation
DPI = 110


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as PNG atomically; returns the path."""
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, metadata={"Software": None})
    return path


def _layer_number(key: str) -> int:
    return int(str(key).lstrip("L"))


def plot_curves(
    ours: Mapping[str, Mapping[str, Mapping[str, Any]]],
    paper: Mapping[str, Mapping[int, tuple[float, float]]] | None = None,
    *,
    title: str = "",
    ylabel: str = "Spearman ρ (mean over samples)",
) -> Figure:
    """Mean correlation per layer: ours solid with its CI band, the paper's dashed (same colour).

    ``ours``: ``{explainer: {"L1": {"mean", "ci_low", "ci_high"}, ...}}`` (one importance block of
    ``correlations.json``); ``paper``: ``{explainer: {layer: (mean, std)}}`` or None.
    """
    fig = Figure(figsize=(5.5, 3.6), layout="constrained")
    ax = fig.add_subplot()
    for explainer, by_layer in ours.items():
        color = COLORS.get(explainer)
        layers = sorted(by_layer, key=_layer_number)
        x = np.array([_layer_number(k) for k in layers])
        mean = np.array([_num(by_layer[k].get("mean")) for k in layers])
        lo = np.array([_num(by_layer[k].get("ci_low")) for k in layers])
        hi = np.array([_num(by_layer[k].get("ci_high")) for k in layers])
        (line,) = ax.plot(x, mean, "-o", color=color, ms=3.5, label=f"{explainer} (ours)")
        if np.isfinite(lo).any():
            ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    for explainer, by_layer in (paper or {}).items():
        x = np.array(sorted(by_layer))
        ax.plot(
            x,
            [by_layer[k][0] for k in x],
            "--",
            color=COLORS.get(explainer),
            marker="x",
            ms=4,
            label=f"{explainer} (paper)",
        )
    ax.axhline(0.0, color="#999", linewidth=0.6)
    ax.set_xlabel("layer")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=7, ncol=2, loc="best")
    ax.grid(alpha=0.3)
    return fig


def _num(x: Any) -> float:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else float("nan")


def plot_maps(maps: Mapping[str, np.ndarray], tokens: Sequence[str], *, title: str = "") -> Figure:
    """Figure 2/3 style: one panel per method, y = layers (1 at the bottom), x = input tokens.

    ``maps[method]`` is the ``(L, T)`` explanation row at each layer (e.g. the CLS row).
    """
    names = list(maps)
    n_tok = len(tokens)
    width = min(6.0, 1.2 + 0.32 * n_tok)
    fig = Figure(figsize=(width * len(names), 3.2), layout="constrained")
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    for ax, name in zip(axes, names, strict=True):
        m = np.asarray(maps[name], dtype=np.float64)  # (L, T)
        if m.ndim != 2 or m.shape[1] != n_tok:
            raise ValueError(f"{name}: map of shape {m.shape} does not fit {n_tok} tokens")
        image = ax.imshow(
            m,
            origin="lower",
            aspect="auto",
            cmap="Blues",
            vmin=0.0,
            vmax=max(float(np.nanmax(m)), _EPS) if m.size else 1.0,
        )
        ax.set_yticks(range(m.shape[0]), [f"L{k + 1}" for k in range(m.shape[0])], fontsize=7)
        ax.set_xticks(range(n_tok), list(tokens), rotation=90, fontsize=7)
        ax.set_title(name, fontsize=10)
        fig.colorbar(image, ax=ax, shrink=0.8)
    if title:
        fig.suptitle(title, fontsize=9)
    return fig


def plot_head_correlations(
    per_head: Mapping[str, Mapping[str, Mapping[str, Mapping[str, Any]]]], *, title: str = ""
) -> Figure | None:
    """Mean correlation per (layer, head): one panel per importance × method; None without data.

    ``per_head``: ``{importance: {"<method>@h<k>": {"L1": {"mean": ...}}}}`` (heads 0-based).
    """
    panels: dict[tuple[str, str], dict[tuple[int, int], float]] = {}
    for importance, explainers in per_head.items():
        for name, layers in explainers.items():
            method, sep, head = name.partition("@h")
            if not sep or not head.isdigit():
                continue
            cells = panels.setdefault((importance, method), {})
            for layer, stats in layers.items():
                cells[(_layer_number(layer), int(head))] = _num(stats.get("mean"))
    if not panels:
        return None
    importances = list(dict.fromkeys(k[0] for k in panels))
    methods = list(dict.fromkeys(k[1] for k in panels))
    fig = Figure(figsize=(3.2 * len(methods) + 0.8, 2.8 * len(importances)), layout="constrained")
    axes = fig.subplots(len(importances), len(methods), squeeze=False)
    image = None
    for i, importance in enumerate(importances):
        for j, method in enumerate(methods):
            ax = axes[i][j]
            cells = panels.get((importance, method), {})
            if not cells:
                ax.set_axis_off()
                continue
            n_layers = max(k[0] for k in cells)
            n_heads = max(k[1] for k in cells) + 1
            grid = np.full((n_layers, n_heads), np.nan)  # (L, H)
            for (layer, head), value in cells.items():
                grid[layer - 1, head] = value
            image = ax.imshow(grid, origin="lower", aspect="auto", cmap="RdBu_r", vmin=-1.0, vmax=1.0)
            for (r, c), value in np.ndenumerate(grid):
                if np.isfinite(value):
                    ax.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=6)
            ax.set_yticks(range(n_layers), [f"L{k + 1}" for k in range(n_layers)], fontsize=7)
            ax.set_xticks(range(n_heads), [f"h{k}" for k in range(n_heads)], fontsize=7)
            ax.set_title(f"{method} vs {importance}", fontsize=9)
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label="mean Spearman ρ")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def mixed_attention(attn: np.ndarray, *, residual: float = 0.5) -> np.ndarray:
    """Head-averaged attention with the residual mixed in: A = (1 − r)·mean_h W + r·I, rows renormalised.

    ``attn`` is ``(L, H, T, T)`` (query, key); returns ``(L, T, T)``. With r = 0.5 this is the
    paper's A = 0.5·W + 0.5·I.

    >>> w = np.array([[[[0.0, 1.0], [1.0, 0.0]]]])  # (1, 1, 2, 2)
    >>> mixed_attention(w)[0].tolist()
    [[0.5, 0.5], [0.5, 0.5]]
    """
    w = np.asarray(attn, dtype=np.float64).mean(axis=1)  # (L, T, T)
    eye = np.eye(w.shape[-1])[None]  # (1, T, T)
    a = (1.0 - residual) * w + residual * eye
    return a / np.maximum(a.sum(axis=-1, keepdims=True), _EPS)


def plot_attention_graph(
    attn: np.ndarray,
    tokens: Sequence[str],
    *,
    residual: float = 0.5,
    min_weight: float = 0.02,
    source: int | None = 0,
) -> Figure:
    """The attention graph: nodes = tokens × layers (0 = input embeddings), edges weighted by attention.

    An edge joins node (layer l, position k) to (layer l − 1, position j) with weight A_l[k, j] of
    :func:`mixed_attention`; it is drawn with alpha ∝ weight (edges below ``min_weight`` are left
    out). ``source`` marks a node at the top layer (the CLS token by default).
    """
    a = mixed_attention(attn, residual=residual)  # (L, T, T)
    n_layers, n_tok = a.shape[0], a.shape[-1]
    segments, colors = [], []
    peak = max(float(a.max()), _EPS)
    for layer in range(n_layers):
        for k in range(n_tok):
            for j in range(n_tok):
                weight = a[layer, k, j]
                if weight >= min_weight:
                    segments.append([(j, layer), (k, layer + 1)])
                    colors.append((0.1, 0.2, 0.5, float(min(1.0, weight / peak))))
    fig = Figure(figsize=(max(4.0, 0.45 * n_tok + 1.5), 0.7 * n_layers + 1.8), layout="constrained")
    ax = fig.add_subplot()
    ax.add_collection(LineCollection(segments, colors=colors, linewidths=1.2))
    xs, ys = np.meshgrid(np.arange(n_tok), np.arange(n_layers + 1))
    ax.scatter(xs.ravel(), ys.ravel(), s=14, color="#333", zorder=3)
    if source is not None:
        ax.scatter(
            [source], [n_layers], s=60, facecolors="none", edgecolors="#c44e52", linewidths=1.5, zorder=4
        )
    ax.set_xticks(range(n_tok), list(tokens), rotation=90, fontsize=7)
    ax.set_yticks(range(n_layers + 1), ["input"] + [f"L{k + 1}" for k in range(n_layers)], fontsize=7)
    ax.set_xlim(-0.5, n_tok - 0.5)
    ax.set_ylim(-0.3, n_layers + 0.3)
    ax.set_title(f"attention graph (heads averaged, residual {residual:g})", fontsize=9)
    for spine in ax.spines.values():
        spine.set_visible(False)
    return fig
