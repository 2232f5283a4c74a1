"""Per-layer correlation curves, ours with the CI band of the mean, the paper dashed."""

from __future__ import annotations

from attnflow.metrics.tables import configured

from ..context import Context
from ..document import Heading, Paragraph
from ..figures import plot_curves
from ..paper import paper_table
from ..tables import IMPORTANCE_LABELS


def section(ctx: Context) -> None:
    ctx.add(
        Heading("Per-layer correlation curves", 2),
        Paragraph("Ours solid with the confidence band of the mean; the paper dashed."),
    )
    drawn = False
    for task, got in ctx.inputs.items():
        if got.table is None:
            continue
        for importance, rows in configured(got.table).groupby("importance", sort=False):
            paper = paper_table(task, importance)
            title = f"{task}: vs {IMPORTANCE_LABELS.get(importance, importance)}"
            fig = plot_curves(rows, paper.cells if paper else None, title=title)
            ctx.figure(fig, f"curves_{task}_{importance}.png", f"{task} {importance} curves")
            drawn = True
    if not drawn:
        ctx.add(Paragraph("No correlations were found."))
