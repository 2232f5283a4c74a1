"""Per-head correlations (the paper's Appendix A.1): a (layer x head) grid per method and score."""

from __future__ import annotations

from ..context import Context
from ..document import Heading, Paragraph
from ..figures import plot_head_correlations


def section(ctx: Context) -> None:
    ctx.add(Heading("Per-head correlations", 2))
    drawn, counts = [], []
    for task, got in ctx.inputs.items():
        table = got.table
        rows = None if table is None else table[(table["variant"] == "configured") & table["head"].notna()]
        fig = plot_head_correlations(rows, title=f"{task}: mean correlation per head")
        if fig is not None:
            drawn.append((task, fig))
            every = table[(table["variant"] == "configured") & table["head"].isna()]
            counts.append(f"{task} {cell_samples(rows)} of {cell_samples(every)}")
    if not drawn:
        ctx.add(Paragraph("No per-head correlations were found (`explain.per_head=false`)."))
        return
    ctx.add(
        Paragraph(
            "Each head k at each layer, as in the paper's appendix A.1 (heads 0-based), on a seeded subset "
            f"of the samples (`explain.per_head_samples`): {', '.join(counts)}. "
            "the archived `benchmarks/per_head_subset.py` (benchmarks/results/ARCHIVE.md) compares the subset's cells with every sample's."
        )
    )
    for task, fig in drawn:
        ctx.figure(fig, f"heads_{task}.png", f"{task} per-head correlations")


def cell_samples(rows) -> int:
    """Samples behind the cells of a correlation table: the most correlations a cell averages (under
    `correlate.undefined=zero` every cell averages every sample; under `nan` the defined ones)."""
    return int(rows["n"].max())
