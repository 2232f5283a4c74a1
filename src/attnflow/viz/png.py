"""The PNG heatmap: one [row x token] panel per method (matplotlib's Agg canvas, no pyplot state),
split into pages so that no picture is larger than `MAX_PNG_PIXELS` on a side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attnflow.io import write_bytes
from attnflow.viz.scale import row_percent, scale_legend, uniform_shade
from attnflow.viz.terminal import _printable

# Shading colours of the HTML page and the PNG: positive scores, negative scores (scale="uniform").
_RGB = (214, 39, 40)
_BLUE = (31, 119, 180)
_BLUE_MPL = tuple(c / 255 for c in _BLUE)
# The shading rules heatmap_figure knows; "uniform" is the default of every picture.
SCALES = ("uniform", "row", "panel")
PNG_CMAP = "Reds"
# Cells of muted columns (special tokens) in the PNG, RGBA.
MUTED_RGBA = (0.88, 0.88, 0.88, 1.0)
# No PNG is larger than this on a side (pixels); long inputs are split into pages (`pages`).
MAX_PNG_PIXELS = 4000
# A score below -SIGN_TOL x the panel's largest |score| makes the panel signed (a diverging colour bar).
SIGN_TOL = 1e-6
# Write values into the PNG cells up to this many columns.
ANNOTATE_MAX_COLUMNS = 40
# Text properties of every artist drawn from a user's string (tokens, titles, labels): plain text,
# never mathtext or LaTeX, so "$5 and $10" is drawn as typed instead of crashing the figure.
PLAIN_TEXT = {"parse_math": False, "usetex": False}


def heatmap_figure(
    matrices: Mapping[str, Any],
    *,
    columns: Sequence[str],
    rows: Sequence[str],
    title: str | None = None,
    row_name: str = "layer",
    column_name: str = "token",
    scale: str = "uniform",
    muted_columns: Sequence[int] = (),
    annotate: bool | None = None,
) -> Any:
    """A matplotlib Figure (Agg canvas, no pyplot): one heatmap [row, column] per method, stacked.

    scale="uniform" (the default, the rule of every attnflow picture, `attnflow.viz.scale`): each
    cell's share of the panel's strongest row against the uniform share 1/n, one scale for every
    row of the panel: white at or below 1/n, full colour when that row is all on one token (log
    scale; red > 0, blue < 0: diverging when a method has negative scores), so a uniform map and a
    row holding almost nothing are drawn white. scale="row": each row relative to its own largest
    value (which token matters most in that layer, however little it holds); scale="panel": one
    0..max scale per method. Each panel has a colour bar saying which. muted_columns (e.g. [CLS] /
    [SEP], which often take most of the mass) are drawn grey and left out of the shading. annotate
    writes each cell's `row_percent` (signed % of its row's total |score|), one decimal, into it
    (default: when there are at most ANNOTATE_MAX_COLUMNS columns).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not matrices:
        raise ValueError("no matrices to draw")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(map(repr, SCALES))}, got {scale!r}")
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
    cell = 0.46 if annotate else 0.3  # inches per cell: room for "12.3" and a rotated label
    width = max(5.0, 1.6 + cell * len(columns))
    panel_h = 0.45 + cell * len(rows)
    label_h = 0.25 + 0.075 * longest  # rotated token labels under each panel
    title_h = 0.2 + (0.25 * (title.count("\n") + 1) if title else 0.0)
    height = title_h + len(mats) * (panel_h + label_h + 0.3) + 0.6
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(mats), 1, squeeze=False)[:, 0]
    cmap = _cmap()
    n_shaded = int((~muted).sum())
    for ax, (method, v) in zip(axes, mats.items(), strict=True):
        shown = np.where(muted[None, :], 0.0, np.nan_to_num(v))
        if scale == "uniform":
            shaded = uniform_shade(v, np.flatnonzero(muted))  # (rows, columns) in [-1, 1]
            # a diverging colour bar for any negative score (not for float noise around 0)
            signed = bool((shown < -SIGN_TOL * np.abs(shown).max(initial=0.0)).any())
            rgba = uniform_rgba(v, np.flatnonzero(muted))
            strength = np.abs(shaded)
        else:
            if scale == "row":
                top = shown.max(axis=1, keepdims=True)
                shaded = np.divide(shown, top, out=np.zeros_like(shown), where=top > 0)
                vmax = 1.0
            else:
                shaded = shown
                vmax = float(shown.max()) if shown.size and shown.max() > 0 else 1.0
            strength = np.clip(shaded / vmax, 0.0, 1.0)
            rgba = cmap(strength)
        rgba[:, muted] = MUTED_RGBA
        ax.imshow(rgba, aspect="auto", interpolation="nearest")
        if annotate:
            for (i, j), value in np.ndenumerate(row_percent(v)):
                dark = not muted[j] and strength[i, j] > 0.55
                ax.text(j, i, _cell_label(value), ha="center", va="center", fontsize=6.5,
                        color="white" if dark else "#333", **PLAIN_TEXT)  # fmt: skip
        ax.set_title(method, fontsize=11, loc="left", fontweight="bold", **PLAIN_TEXT)
        ax.set_xticks(
            range(len(columns)),
            labels,
            rotation=60,
            ha="right",
            rotation_mode="anchor",
            fontsize=9,
            **PLAIN_TEXT,
        )
        ax.set_yticks(range(len(rows)), list(rows), fontsize=9, **PLAIN_TEXT)
        ax.set_ylabel(row_name, fontsize=9, **PLAIN_TEXT)
        ax.set_xticks(np.arange(-0.5, len(columns)), minor=True)
        ax.set_yticks(np.arange(-0.5, len(rows)), minor=True)
        ax.grid(which="minor", color="white", linewidth=0.8)
        ax.tick_params(which="both", length=0)
        for side in ax.spines.values():
            side.set_visible(False)
        from matplotlib.cm import ScalarMappable
        from matplotlib.colors import Normalize

        if scale == "uniform":
            low = -1.0 if signed else 0.0
            bar = fig.colorbar(
                ScalarMappable(Normalize(low, 1.0), _diverging() if signed else _positive()),
                ax=ax, fraction=0.025, pad=0.01, aspect=12,
            )  # fmt: skip
            ticks = ([-1.0] if signed else []) + [0.0, 0.5, 1.0]
            names = (["all (-)"] if signed else []) + ["≤ 1/n", f"{np.sqrt(max(n_shaded, 1)):.1f}/n", "all"]
            bar.set_ticks(ticks, labels=names, **PLAIN_TEXT)
            bar.set_label(f"share of the strongest {row_name} (n = {n_shaded})", fontsize=7, **PLAIN_TEXT)
        elif scale == "panel":
            from matplotlib.ticker import PercentFormatter

            bar = fig.colorbar(
                ScalarMappable(Normalize(0, vmax), cmap), ax=ax, fraction=0.025, pad=0.01, aspect=12
            )
            bar.ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=1))
        else:
            bar = fig.colorbar(
                ScalarMappable(Normalize(0, 1), cmap), ax=ax, fraction=0.025, pad=0.01, aspect=12
            )
            bar.set_ticks([0.0, 1.0], labels=["0", f"{row_name} max"], **PLAIN_TEXT)
        bar.ax.tick_params(labelsize=7)
    notes = []
    if annotate:
        notes.append(f"numbers: % of the {row_name}'s total (signed scores: of its total |score|)")
    if scale == "uniform":
        notes.append(scale_legend(row_name))
    elif scale == "row":
        notes.append(f"shading: relative to each {row_name}'s largest score")
    if muted.any():
        notes.append("grey: left out of the shading")
    import textwrap

    note = column_name + ("   (" + "; ".join(notes) + ")" if notes else "")
    note = textwrap.fill(note, width=max(40, int(width * 13)))  # ~13 characters an inch at 8 pt
    axes[-1].set_xlabel(note, fontsize=8, **PLAIN_TEXT)
    if title:
        fig.suptitle(title, fontsize=11, **PLAIN_TEXT)
    return fig


def _cmap() -> Any:
    from matplotlib import colormaps

    return colormaps[PNG_CMAP]


def uniform_rgba(matrix: Any, muted_columns: Sequence[int] = (), *, reference: Any = None) -> np.ndarray:
    """(rows, columns, 4) colours of `matrix` by the rule of every picture (`attnflow.viz.scale`):
    white at or below the uniform share 1/n of the matrix's strongest row, red above it (blue when
    negative). `reference`: as `uniform_shade`'s (e.g. one per row when rows are different methods)."""
    return _diverging()(0.5 + 0.5 * uniform_shade(matrix, muted_columns, reference=reference))


def _diverging() -> Any:
    """Blue (-1) .. white (0) .. red (+1): the colours of scale="uniform"."""
    from matplotlib.colors import LinearSegmentedColormap

    red = tuple(c / 255 for c in _RGB)
    return LinearSegmentedColormap.from_list("attnflow", [_BLUE_MPL, (1.0, 1.0, 1.0), red])


def _positive() -> Any:
    """White (0) .. red (1): the colour bar of scale="uniform" when no score is negative."""
    from matplotlib.colors import LinearSegmentedColormap

    return LinearSegmentedColormap.from_list("attnflow+", [(1.0, 1.0, 1.0), tuple(c / 255 for c in _RGB)])


def _cell_label(pct: float) -> str:
    """A cell's number: a percentage (`row_percent`), one decimal ("6.4"); "100" for the whole row.

    >>> _cell_label(6.43), _cell_label(100.0), _cell_label(-0.2)
    ('6.4', '100', '-0.2')
    """
    pct = float(pct)
    return f"{pct:.0f}" if abs(pct) >= 99.95 else f"{pct:.1f}"


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
