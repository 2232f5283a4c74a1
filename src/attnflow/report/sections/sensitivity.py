"""Our correlations re-scored under each variant of the correlation's own hidden choices."""

from __future__ import annotations

from ..context import Context
from ..document import Heading, Paragraph, Table
from ..tables import EXPLAINER_LABELS, IMPORTANCE_LABELS, Grid, fmt


def section(ctx: Context) -> None:
    blocks = []
    for task, got in ctx.inputs.items():
        table = got.table
        if table is None:
            continue
        variants = table[(table["variant"] != "configured") & table["head"].isna()]
        for importance, block in variants.groupby("importance", sort=False):
            wide = block.pivot_table(index=["variant", "method"], columns="layer", values="mean", sort=False)
            grid = Grid(
                header=["variant", "method", *(f"L{k}" for k in wide.columns)],
                rows=[
                    [v, EXPLAINER_LABELS.get(m, m), *(fmt(float(x), 2) for x in row)]
                    for (v, m), row in wide.iterrows()
                ],
                caption=f"{task} vs {IMPORTANCE_LABELS.get(importance, importance)}: mean ρ per layer",
            )
            blocks.append(Table(grid))
    if blocks:
        ctx.add(
            Heading("Sensitivity to the correlation's hidden choices", 2),
            Paragraph(
                "The same maps and importance scores, correlated under each variant: the Spearman "
                "formula (average ranks, or the authors' dense ranks with the no-ties formula) and "
                "whether CLS is among the ranked positions (authors: out for blank-out, in for "
                "gradients). No bootstrap here; the tables above use the configured variant."
            ),
            *blocks,
        )
