"""The seed sweep: every published cell over the seeds (spread of the per-seed means) beside the paper."""

from __future__ import annotations

from ..context import Context
from ..document import Heading, Paragraph, Table
from ..frames import seed_frame
from ..paper import TABLES
from ..tables import EXPLAINER_LABELS, IMPORTANCE_LABELS, Grid, fmt, fmt_delta, fmt_mean_std


def section(ctx: Context) -> None:
    if ctx.sweep is None or ctx.sweep.empty:
        return
    seeds = sorted(int(s) for s in ctx.sweep["seed"].unique())
    ctx.add(
        Heading("Seeds", 2),
        Paragraph(
            f"Per cell over seeds {seeds}: mean ± std of the per-seed means (sample std over seeds), "
            "[min, max], n seeds; the paper's cell and Δ of the seed mean."
        ),
    )
    cells = seed_frame(ctx.sweep).set_index(["task", "importance", "method", "layer"])
    for paper in TABLES:
        if (paper.task, paper.importance) not in {k[:2] for k in cells.index}:
            continue
        caption = f"Table {paper.number} ({paper.task} vs {IMPORTANCE_LABELS[paper.importance]}), aggregated over seeds"
        grid = Grid(
            header=[f"Table {paper.number} over seeds", *(f"L{k}" for k in paper.layers)],
            rows=[],
            caption=caption,
        )
        for method, by_layer in paper.cells.items():
            label = EXPLAINER_LABELS.get(method, method)
            ours = [
                cells.loc[(paper.task, paper.importance, method, k)]
                if (paper.task, paper.importance, method, k) in cells.index
                else None
                for k in paper.layers
            ]
            grid.rows.append([f"{label} (seeds)"] + [
                f"{fmt_mean_std(c['mean'], c['std'])} [{fmt(c['min'], 2)}, {fmt(c['max'], 2)}] n={int(c['n_seeds'])}" if c is not None else "n/a"
                for c in ours
            ])  # fmt: skip
            grid.rows.append([f"{label} (paper)"] + [fmt_mean_std(*by_layer[k]) for k in paper.layers])
            grid.rows.append(
                [f"{label} Δ"]
                + [
                    fmt_delta(c["mean"] - by_layer[k][0]) if c is not None else "n/a"
                    for c, k in zip(ours, paper.layers, strict=True)
                ]
            )
        ctx.add(Table(grid))
