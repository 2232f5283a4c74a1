"""Tables 1-3 beside the paper (ours, paper, Δ per method), then every cell the paper does not print."""

from __future__ import annotations

from attnflow.metrics.tables import configured

from ..context import Context
from ..document import Heading, Paragraph, Table
from ..paper import TABLES, paper_frame
from ..tables import (
    EXPLAINER_LABELS,
    IMPORTANCE_LABELS,
    MARK_FAR,
    MARK_MATCH,
    Grid,
    comparison_cells,
    comparison_grid,
    fmt_mean_std,
)


def section(ctx: Context) -> None:
    ctx.add(
        Heading("Tables 1-3: ours beside the paper", 2),
        Paragraph(
            "Three rows per method: ours (mean ± std over samples), the paper's, and Δ. "
            f"Marks on Δ: {MARK_MATCH} the paper's mean lies inside our confidence interval of "
            f"the mean; {MARK_FAR} |Δ| > 2 × the paper's std."
        ),
    )
    for paper in TABLES:
        got = ctx.inputs.get(paper.task)
        title = f"Table {paper.number}: {paper.caption}. Ours: task {paper.task} vs {IMPORTANCE_LABELS[paper.importance]}"
        cells = comparison_cells(ctx.comparison, paper.number)
        if not any(c.ours for c in cells):
            why = "not in this run's tasks" if got is None else "no correlations for it"
            ctx.add(Heading(f"Table {paper.number}", 3), Paragraph(f"{title}: {why}."))
            continue
        n = sorted({c.n for c in cells if c.n is not None})
        span = "n/a" if not n else str(n[0]) if n[0] == n[-1] else f"{n[0]}-{n[-1]}"
        ctx.add(
            Heading(f"Table {paper.number}", 3),
            Table(comparison_grid(paper, cells, caption=f"{title} (n defined per cell: {span})")),
        )
    other = _other_cells(ctx)
    if other:
        ctx.add(Heading("Other cells", 3), *other)


def _other_cells(ctx: Context) -> list[Table]:
    """One table per (task, importance) with a cell the paper does not print (all its layers)."""
    printed = paper_frame()
    out = []
    for task, got in ctx.inputs.items():
        if got.table is None:
            continue
        ours = configured(got.table)
        for importance, block in ours.groupby("importance", sort=False):
            known = printed[(printed["task"] == task) & (printed["importance"] == importance)]
            shown = set(zip(known["method"], known["layer"], strict=True))
            if set(zip(block["method"], block["layer"], strict=True)) <= shown:
                continue
            layers = sorted(block["layer"].unique())
            label = IMPORTANCE_LABELS.get(importance, importance)
            note = "the paper prints fewer cells)" if len(known) else "no published counterpart)"
            grid = Grid(
                header=[f"{task} vs {label}", *(f"L{k}" for k in layers)],
                rows=[],
                caption=f"{task}, {importance}: all layers (ours; {note}",
            )
            for method, rows in block.groupby("method", sort=False):
                by = rows.set_index("layer")
                grid.rows.append(
                    [EXPLAINER_LABELS.get(method, method)]
                    + [fmt_mean_std(by["mean"].get(k), by["std"].get(k)) for k in layers]
                )
            out.append(Table(grid))
    return out
