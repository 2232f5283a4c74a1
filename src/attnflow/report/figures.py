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

from attnflow.explain.graph import attention_graph
from attnflow.io import atomic_path
from attnflow.viz import SCALE_LEGEND, uniform_rgba

__all__ = [
    "COLORS",
    "plot_attention_graph",
    "plot_curves",
    "plot_generation",
    "plot_head_correlations",
    "plot_layer_scores",
    "plot_maps",
    "plot_perturbation_curves",
    "save_figure",
]

COLORS = {
    "raw": "#4c72b0",
    "rollout": "#dd8452",
    "flow": "#55a868",
    "chefer": "#c44e52",
    "chefer_lrp": "#8172b3",
}
_EPS = 1e-12  # guard for row normalisation
DPI = 110


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as PNG atomically; returns the path."""
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, metadata={"Software": None})
    return path


def plot_curves(
    ours: Any,
    paper: Mapping[str, Mapping[int, tuple[float, float]]] | None = None,
    *,
    title: str = "",
    ylabel: str = "Spearman ρ (mean over samples)",
) -> Figure:
    """Mean correlation per layer: ours solid with its CI band, the paper's dashed (same colour).

    ``ours``: rows of a correlation table (columns method, layer, mean, ci_low, ci_high) for one
    importance score; ``paper``: ``{method: {layer: (mean, std)}}`` or None.
    """
    fig = Figure(figsize=(5.5, 3.6), layout="constrained")
    ax = fig.add_subplot()
    for method, rows in ours.groupby("method", sort=False):
        rows = rows.sort_values("layer")
        x = rows["layer"].to_numpy()
        (line,) = ax.plot(x, rows["mean"], "-o", color=COLORS.get(method), ms=3.5, label=f"{method} (ours)")
        lo, hi = rows["ci_low"].to_numpy(dtype=float), rows["ci_high"].to_numpy(dtype=float)
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


def plot_maps(maps: Mapping[str, np.ndarray], tokens: Sequence[str], *, title: str = "") -> Figure:
    """Figure 2/3: one [layer x token] panel per method, in the look of the CLI and the notebook
    (`attnflow.viz.heatmap_figure`: L1 on top, each token's share of the method's strongest layer
    against the uniform share 1/n, one scale for every layer).

    ``maps[method]`` is the ``(L, T)`` explanation row at each layer (e.g. the CLS row).
    """
    from attnflow.display import layer_labels
    from attnflow.viz import heatmap_figure

    n_tok = len(tokens)
    for name, m in maps.items():
        if np.ndim(m) != 2 or np.shape(m)[1] != n_tok:
            raise ValueError(f"{name}: map of shape {np.shape(m)} does not fit {n_tok} tokens")
    layers = np.shape(next(iter(maps.values())))[0] if maps else 0
    return heatmap_figure(maps, columns=tokens, rows=layer_labels(layers), title=title or None)


def plot_head_correlations(per_head: Any, *, title: str = "") -> Figure | None:
    """Mean correlation per (layer, head): one panel per importance x method; None without data.

    ``per_head``: the per-head rows of a correlation table (columns importance, method, head,
    layer, mean; heads 0-based).
    """
    if per_head is None or per_head.empty:
        return None
    importances = list(dict.fromkeys(per_head["importance"]))
    methods = list(dict.fromkeys(per_head["method"]))
    fig = Figure(figsize=(3.2 * len(methods) + 0.8, 2.8 * len(importances)), layout="constrained")
    axes = fig.subplots(len(importances), len(methods), squeeze=False)
    image = None
    for i, importance in enumerate(importances):
        for j, method in enumerate(methods):
            ax = axes[i][j]
            rows = per_head[(per_head["importance"] == importance) & (per_head["method"] == method)]
            if rows.empty:
                ax.set_axis_off()
                continue
            grid = rows.pivot(index="layer", columns="head", values="mean").sort_index()  # (L, H)
            values = grid.to_numpy(dtype=float)
            image = ax.imshow(values, origin="lower", aspect="auto", cmap="RdBu_r", vmin=-1.0, vmax=1.0)
            for (r, c), value in np.ndenumerate(values):
                if np.isfinite(value):
                    ax.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=6)
            ax.set_yticks(range(len(grid.index)), [f"L{k}" for k in grid.index], fontsize=7)
            ax.set_xticks(range(len(grid.columns)), [f"h{k}" for k in grid.columns], fontsize=7)
            ax.set_title(f"{method} vs {importance}", fontsize=9)
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label="mean Spearman ρ")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def plot_attention_graph(
    attn: np.ndarray,
    tokens: Sequence[str],
    *,
    residual: float = 0.5,
    heads: str | int = "mean",
    min_weight: float = 0.02,
    source: int | None = 0,
) -> Figure:
    """The attention graph: nodes = tokens × layers (0 = input embeddings), edges weighted by attention.

    An edge joins node (layer l, position k) to (layer l − 1, position j) with weight A_l[k, j] of
    :func:`attnflow.explain.graph.attention_graph` (heads aggregated by ``heads``); it is drawn with alpha ∝ weight (edges below ``min_weight`` are left
    out). ``source`` marks a node at the top layer (the CLS token by default).
    """
    a = attention_graph(
        np.asarray(attn, dtype=np.float64), residual=residual, heads=heads, renormalize=True
    )  # (L, T, T)
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
    ax.set_title(f"attention graph (heads: {heads}, residual {residual:g})", fontsize=9)
    for spine in ax.spines.values():
        spine.set_visible(False)
    return fig


def plot_perturbation_curves(curves: Any, *, title: str = "") -> Figure:
    """Most- and least-relevant-first curves (Chefer et al.'s fractions) at the last layer: the
    predicted class's mean probability as tokens are removed, one line per ranking."""
    fig = Figure(figsize=(9.5, 3.6), layout="constrained")
    axes = fig.subplots(1, 2)
    last = curves["layer"].max()
    rows = curves[curves["layer"].isna() | (curves["layer"] == last)]
    for ax, protocol, name in zip(
        axes, ("positive", "negative"), ("most relevant first", "least relevant first"), strict=True
    ):
        for method, r in rows[rows["protocol"] == protocol].groupby("method", sort=False):
            style = ":" if method == "random" else "--" if r["layer"].isna().all() else "-"
            ax.plot(r["fraction"], r["prob"], style, marker="o", ms=3, color=COLORS.get(method), label=method)
        ax.set(xlabel="fraction of tokens removed", ylabel="p(predicted class)", title=name)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def plot_layer_scores(scores: Any, metric: str, *, title: str = "") -> Figure:
    """One faithfulness score per layer for each method; references and the random floor as lines."""
    fig = Figure(figsize=(5.5, 3.6), layout="constrained")
    ax = fig.add_subplot()
    rows = scores[scores["metric"] == metric]
    for method, r in rows[rows["layer"].notna()].groupby("method", sort=False):
        r = r.sort_values("layer")
        ax.plot(r["layer"].astype(int), r["mean"], "-o", ms=3.5, color=COLORS.get(method), label=method)
    for r in rows[rows["layer"].isna()].itertuples():
        ax.axhline(r.mean, linestyle=":" if r.method == "random" else "--", color="#777", linewidth=1)
        ax.annotate(
            r.method, (1, r.mean), xycoords=("axes fraction", "data"), fontsize=6, ha="right", va="bottom"
        )
    ax.set(xlabel="layer", ylabel=metric, title=title)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return fig


def plot_generation(
    explanations: Mapping[Any, Any], *, method: str = "rollout", extra: str = "chefer"
) -> Figure:
    """Generated token x prompt token maps (mean over layers), one column of panels per option
    ({(sinks, receptive_field): GenerationExplanation}), rows: ``method`` and ``extra``."""
    options = list(explanations)
    names = [m for m in (method, extra) if all(m in e.maps for e in explanations.values())]
    first = next(iter(explanations.values()))
    fig = Figure(
        figsize=(4.2 * len(options) + 1, 0.35 * first.n_generated * len(names) + 2.5), layout="constrained"
    )
    axes = fig.subplots(len(names), len(options), squeeze=False)
    for j, option in enumerate(options):
        e = explanations[option]
        for i, m in enumerate(names):
            ax, matrix = axes[i][j], e.matrix(m, "mean")[:, : e.n_prompt]  # (generated, prompt)
            ax.imshow(
                uniform_rgba(matrix), aspect="auto", interpolation="nearest"
            )  # the rule of every picture
            ax.set_yticks(range(e.n_generated), e.generated_tokens, fontsize=6)
            ax.set_xticks(range(e.n_prompt), e.prompt_tokens, rotation=90, fontsize=6)
            ax.set_title(f"{m}: sinks {option[0]}, receptive field {option[1]}", fontsize=8)
    fig.supxlabel(SCALE_LEGEND, fontsize=7)
    return fig
