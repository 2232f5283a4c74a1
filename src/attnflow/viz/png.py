"""The PNG heatmap: one [row x token] panel per method (matplotlib's Agg canvas, no pyplot state),
split into pages so that no picture is larger than `MAX_PNG_PIXELS` on a side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attnflow.io import write_bytes
from attnflow.viz.terminal import _printable

# Shading colour of the HTML page and the PNG colour map.
_RGB = (214, 39, 40)
PNG_CMAP = "Reds"
# Cells of muted columns (special tokens) in the PNG, RGBA.
MUTED_RGBA = (0.88, 0.88, 0.88, 1.0)
# No PNG is larger than this on a side (pixels); long inputs are split into pages (`pages`).
MAX_PNG_PIXELS = 4000
# Write values into the PNG cells up to this many columns.
ANNOTATE_MAX_COLUMNS = 40


def heatmap_figure(
    matrices: Mapping[str, Any],
    *,
    columns: Sequence[str],
    rows: Sequence[str],
    title: str | None = None,
    row_name: str = "layer",
    column_name: str = "token",
    scale: str = "panel",
    muted_columns: Sequence[int] = (),
    annotate: bool | None = None,
) -> Any:
    """A matplotlib Figure (Agg canvas, no pyplot): one heatmap [row, column] per method, stacked.

    scale="row": each row is shaded relative to its own largest value (which token matters most
    in that layer / for that generated token); scale="panel": one 0..max scale per method, with a
    colour bar. muted_columns (e.g. [CLS] / [SEP], which often take most of the mass) are drawn
    grey and left out of the shading scale. annotate writes each value in percent into its cell
    (default: when there are at most ANNOTATE_MAX_COLUMNS columns).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not matrices:
        raise ValueError("no matrices to draw")
    if scale not in ("row", "panel"):
        raise ValueError(f"scale must be 'row' or 'panel', got {scale!r}")
    mats = {m: np.asarray(v, dtype=np.float64) for m, v in matrices.items()}
    for m, v in mats.items():
        if v.shape != (len(rows), len(columns)):
            raise ValueError(f"matrix {m!r} has shape {v.shape}, expected ({len(rows)}, {len(columns)})")
    muted = np.zeros(len(columns), dtype=bool)
    muted[[c for c in muted_columns if 0 <= c < len(columns)]] = True
    if annotate is None:
        annotate = len(columns) <= ANNOTATE_MAX_COLUMNS
    labels = [_printable(t, 20) for t in columns]
    longest = max((len(t) for t in labels), default=1)
    cell = 0.42 if annotate else 0.3  # inches per cell: room for "12" and a rotated label
    width = max(5.0, 1.6 + cell * len(columns))
    panel_h = 0.45 + cell * len(rows)
    label_h = 0.25 + 0.075 * longest  # rotated token labels under each panel
    title_h = 0.2 + (0.25 * (title.count("\n") + 1) if title else 0.0)
    height = title_h + len(mats) * (panel_h + label_h + 0.3) + 0.3
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(mats), 1, squeeze=False)[:, 0]
    cmap = _cmap()
    for ax, (method, v) in zip(axes, mats.items(), strict=True):
        shown = np.where(muted[None, :], 0.0, np.nan_to_num(v))
        if scale == "row":
            top = shown.max(axis=1, keepdims=True)
            shaded = np.divide(shown, top, out=np.zeros_like(shown), where=top > 0)
            vmax = 1.0
        else:
            shaded = shown
            vmax = float(shown.max()) if shown.size and shown.max() > 0 else 1.0
        rgba = cmap(np.clip(shaded / vmax, 0.0, 1.0))
        rgba[:, muted] = MUTED_RGBA
        ax.imshow(rgba, aspect="auto", interpolation="nearest")
        if annotate:
            for (i, j), value in np.ndenumerate(v):
                dark = not muted[j] and shaded[i, j] / vmax > 0.55
                ax.text(j, i, f"{100 * value:.0f}", ha="center", va="center", fontsize=7,
                        color="white" if dark else "#333")  # fmt: skip
        ax.set_title(method, fontsize=11, loc="left", fontweight="bold")
        ax.set_xticks(
            range(len(columns)), labels, rotation=60, ha="right", rotation_mode="anchor", fontsize=9
        )
        ax.set_yticks(range(len(rows)), list(rows), fontsize=9)
        ax.set_ylabel(row_name, fontsize=9)
        ax.set_xticks(np.arange(-0.5, len(columns)), minor=True)
        ax.set_yticks(np.arange(-0.5, len(rows)), minor=True)
        ax.grid(which="minor", color="white", linewidth=0.8)
        ax.tick_params(which="both", length=0)
        for side in ax.spines.values():
            side.set_visible(False)
        if scale == "panel":
            from matplotlib.cm import ScalarMappable
            from matplotlib.colors import Normalize
            from matplotlib.ticker import PercentFormatter

            bar = fig.colorbar(
                ScalarMappable(Normalize(0, vmax), cmap), ax=ax, fraction=0.025, pad=0.01, aspect=12
            )
            bar.ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=None))
            bar.ax.tick_params(labelsize=8)
    notes = []
    if annotate:
        notes.append("numbers: score in %")
    if scale == "row":
        notes.append(f"shading: relative to each {row_name}'s largest score")
    if muted.any():
        notes.append("grey: left out of the shading")
    axes[-1].set_xlabel(column_name + ("   (" + "; ".join(notes) + ")" if notes else ""), fontsize=8)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def _cmap() -> Any:
    from matplotlib import colormaps

    return colormaps[PNG_CMAP]


def page_slices(n: int, per_page: int) -> list[slice]:
    """`n` rows in pages of at most `per_page` (at least one page).

    >>> page_slices(5, 2)
    [slice(0, 2, None), slice(2, 4, None), slice(4, 5, None)]
    """
    if per_page < 1:
        raise ValueError(f"per_page must be >= 1, got {per_page}")
    return [slice(k, min(k + per_page, n)) for k in range(0, max(n, 1), per_page)]


def save_png(path: str | Path, fig: Any, *, dpi: int = 150) -> Path:
    """Write a matplotlib Figure to `path` as PNG (atomically), at most MAX_PNG_PIXELS on a side:
    a taller or wider figure is drawn at a lower resolution."""
    import io

    width, height = fig.get_size_inches()
    dpi = min(float(dpi), MAX_PNG_PIXELS / max(width, height))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return write_bytes(path, buf.getvalue())


def write_png(path: str | Path, matrices: Mapping[str, Any], *, dpi: int = 150, **kwargs: Any) -> Path:
    """Draw `heatmap_figure(matrices, **kwargs)` and write it to `path` as PNG (atomically)."""
    return save_png(path, heatmap_figure(matrices, **kwargs), dpi=dpi)
