"""Tables as one structure (:class:`Grid`) rendered to markdown and to HTML, and the paper's Tables 1-3.

A comparison table keeps the paper's layout (rows raw / rollout / flow, columns the layers) and
gives each explainer three rows: ours ``mean ± std``, the paper's ``mean ± std``, and
``Δ = ours − paper`` of the means.

>>> grid = Grid(header=["a", "b"], rows=[["1", "x|y"]])
>>> print(to_markdown(grid))
| a | b |
|---|---|
| 1 | x\\|y |
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from attnflow.methods import labels as method_labels

from .paper import PaperTable

__all__ = [
    "EXPLAINER_LABELS",
    "IMPORTANCE_LABELS",
    "MARK_FAR",
    "MARK_MATCH",
    "Cell",
    "Grid",
    "comparison_cells",
    "comparison_grid",
    "finite",
    "fmt",
    "fmt_delta",
    "fmt_mean_std",
    "to_html",
    "to_markdown",
]

EXPLAINER_LABELS = method_labels()  # every method's display name, from its record (attnflow.methods)
IMPORTANCE_LABELS = {"blank_out": "blank-out", "input_gradients": "input gradients"}
DIGITS = 2  # the paper prints two decimals


def finite(x: Any) -> bool:
    """A real number that is neither NaN nor infinite (bools and None are not)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


MARK_FAR = "‼"  # |Δ| > 2 · paper std
MARK_MATCH = "✓"  # the paper's mean inside our CI of the mean


@dataclass
class Grid:
    """A table of already-formatted strings; ``classes`` optionally tags cells (HTML ``class``)."""

    header: list[str]
    rows: list[list[str]]
    caption: str = ""
    classes: dict[tuple[int, int], str] = field(default_factory=dict)  # (row, col) -> css class


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(grid: Grid) -> str:
    """GitHub-flavoured markdown; the caption (if any) as an italic line above the table."""
    lines = [f"*{grid.caption}*", ""] if grid.caption else []
    lines.append("| " + " | ".join(map(_md_cell, grid.header)) + " |")
    lines.append("|" + "---|" * len(grid.header))
    lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in grid.rows]
    return "\n".join(lines)


def to_html(grid: Grid) -> str:
    """An HTML ``<table>`` with the caption as ``<caption>``; text is escaped."""
    out = ["<table>"]
    if grid.caption:
        out.append(f"<caption>{html.escape(grid.caption)}</caption>")
    out.append("<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in grid.header) + "</tr></thead>")
    out.append("<tbody>")
    for i, row in enumerate(grid.rows):
        cells = []
        for j, text in enumerate(row):
            css = grid.classes.get((i, j))
            attr = f' class="{css}"' if css else ""
            tag = "th" if j == 0 else "td"
            cells.append(f"<{tag}{attr}>{html.escape(text)}</{tag}>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def fmt(x: Any, digits: int = 3) -> str:
    """A plain value for a table: floats to ``digits`` decimals, None / NaN as ``n/a``.

    >>> fmt(0.93751), fmt(None), fmt(float("nan")), fmt("test")
    ('0.938', 'n/a', 'n/a', 'test')
    """
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return f"{x:.{digits}f}" if math.isfinite(x) else "n/a"
    return str(x)


def fmt_mean_std(mean: float | None, std: float | None = None) -> str:
    """``0.71 ± 0.24``; ``n/a`` for a missing or undefined mean.

    >>> fmt_mean_std(0.705, 0.2449), fmt_mean_std(-0.1, None), fmt_mean_std(float("nan"), 0.1)
    ('0.70 ± 0.24', '-0.10', 'n/a')
    """
    if not finite(mean):
        return "n/a"
    text = f"{mean + 0.0:.{DIGITS}f}"
    return f"{text} ± {std:.{DIGITS}f}" if finite(std) else text


def fmt_delta(delta: float | None) -> str:
    """Signed, two decimals, no ``-0.00``.

    >>> fmt_delta(-0.1), fmt_delta(0.001), fmt_delta(-0.001), fmt_delta(None)
    ('-0.10', '+0.00', '+0.00', 'n/a')
    """
    if not finite(delta):
        return "n/a"
    return f"{round(delta, DIGITS) + 0.0:+.{DIGITS}f}"


@dataclass(frozen=True)
class Cell:
    """One (explainer, layer) of a comparison: our summary, the paper's, and Δ of the means."""

    explainer: str
    layer: int
    mean: float | None = None
    std: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int | None = None
    n_undefined: int | None = None
    paper_mean: float | None = None
    paper_std: float | None = None

    @property
    def ours(self) -> bool:
        return finite(self.mean)

    @property
    def delta(self) -> float | None:
        """ours − paper (means); None when either is missing."""
        if not (finite(self.mean) and finite(self.paper_mean)):
            return None
        return float(self.mean) - float(self.paper_mean)  # type: ignore[arg-type]

    @property
    def paper_in_ci(self) -> bool | None:
        """Whether the paper's mean lies in our confidence interval of the mean (None: no CI)."""
        if not (finite(self.ci_low) and finite(self.ci_high) and finite(self.paper_mean)):
            return None
        return bool(self.ci_low <= self.paper_mean <= self.ci_high)  # type: ignore[operator]

    @property
    def far(self) -> bool | None:
        """|Δ| > 2 · paper std: outside the paper's own spread over samples."""
        d = self.delta
        if d is None or not finite(self.paper_std):
            return None
        return abs(d) > 2.0 * float(self.paper_std)  # type: ignore[arg-type]


def comparison_cells(comparison: Any, number: int) -> list[Cell]:
    """The cells of published table ``number`` from :func:`attnflow.report.frames.comparison_frame`
    (ours None where we have no value), in the paper's order."""
    rows = comparison[comparison["table"] == number]

    def value(x: Any) -> Any:
        return None if x is None or x != x else x  # NaN (no value of ours) -> None

    return [
        Cell(
            explainer=r.method,
            layer=int(r.layer),
            mean=value(r.mean),
            std=value(r.std),
            ci_low=value(r.ci_low),
            ci_high=value(r.ci_high),
            n=None if value(r.n) is None else int(r.n),
            n_undefined=None if value(r.n_undefined) is None else int(r.n_undefined),
            paper_mean=r.paper_mean,
            paper_std=r.paper_std,
        )
        for r in rows.itertuples()
    ]


def comparison_grid(paper: PaperTable, cells: Sequence[Cell], *, caption: str | None = None) -> Grid:
    """The paper's layout, three rows per explainer: ours, paper, Δ (ours − paper).

    Δ cells with |Δ| > 2 · paper std get the class ``far`` and the mark ``MARK_FAR``; those whose
    paper mean lies in our CI get ``match`` and ``MARK_MATCH`` (the marks show in markdown too).
    """
    by_key = {(c.explainer, c.layer): c for c in cells}
    header = [f"vs {IMPORTANCE_LABELS.get(paper.importance, paper.importance)}"] + [
        f"L{k}" for k in paper.layers
    ]
    grid = Grid(header=header, rows=[], caption=caption if caption is not None else f"Table {paper.number}")
    for explainer in paper.cells:
        label = EXPLAINER_LABELS.get(explainer, explainer)
        row_cells = [by_key.get((explainer, k)) for k in paper.layers]
        grid.rows.append(
            [f"{label} (ours)"] + [fmt_mean_std(c.mean, c.std) if c else "n/a" for c in row_cells]
        )
        grid.rows.append(
            [f"{label} (paper)"]
            + [fmt_mean_std(c.paper_mean, c.paper_std) if c else "n/a" for c in row_cells]
        )
        grid.rows.append([f"{label} Δ"] + [fmt_delta(c.delta) if c else "n/a" for c in row_cells])
        i = len(grid.rows) - 1
        for j, c in enumerate(row_cells, start=1):
            if c is None:
                continue
            if c.far:
                grid.classes[(i, j)] = "far"
                grid.rows[i][j] += f" {MARK_FAR}"
            elif c.paper_in_ci:
                grid.classes[(i, j)] = "match"
                grid.rows[i][j] += f" {MARK_MATCH}"
    return grid
