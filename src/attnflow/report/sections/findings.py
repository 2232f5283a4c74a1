"""Where we match the paper and where we differ: sentences computed from the numbers above."""

from __future__ import annotations

from ..context import Context, get
from ..document import Bullets, Heading, Paragraph
from ..findings import table_findings
from ..paper import PAPER_ACCURACY, TABLES
from ..tables import IMPORTANCE_LABELS, comparison_cells, finite, fmt_delta


def section(ctx: Context) -> None:
    ctx.add(
        Heading("Where we match and where we differ", 2),
        Paragraph(
            "Computed from the numbers above; no other claim is made. "
            "The CI is our bootstrap interval of the mean (sampling error only); "
            "the paper's ± is its spread over samples, not an error of its mean."
        ),
    )
    items = []
    for task, got in ctx.inputs.items():
        acc, paper_acc = (got.train_metrics or {}).get("accuracy"), PAPER_ACCURACY.get(task)
        if finite(acc) and paper_acc is not None:
            items.append(
                f"{task} accuracy: ours {acc:.3f} vs paper {paper_acc:.2f} (Δ {fmt_delta(acc - paper_acc)})."
            )
    for paper in TABLES:
        sentences = table_findings(paper, comparison_cells(ctx.comparison, paper.number))
        if sentences:
            items.append(
                f"**Table {paper.number}** ({paper.task} vs {IMPORTANCE_LABELS[paper.importance]}): "
                + " ".join(sentences)
            )
    items += _class_specific(ctx)
    split = get(ctx.config, "task.sst2.capture.split")
    sst2 = ctx.inputs.get("sst2")
    if sst2 is not None and sst2.table is not None and split:
        items.append(
            f"Table 3 setting: ours scores the SST-2 `{split}` split; the authors' script scored "
            "GLUE test sentences, whose labels are hidden (REPLICATION.md)."
        )
    ctx.add(Bullets(items) if items else Paragraph("Nothing to compare: no correlations were found."))


def _class_specific(ctx: Context) -> list[str]:
    """Chefer et al.'s class-specific relevance beside rollout and flow: last layer and layer mean."""
    from attnflow.metrics.tables import configured

    out = []
    for task, got in ctx.inputs.items():
        if got.table is None:
            continue
        main = configured(got.table)
        if not {"chefer", "chefer_lrp"} & set(main["method"]):
            continue
        for importance, rows in main.groupby("importance", sort=False):
            last = rows[rows["layer"] == rows["layer"].max()].set_index("method")["mean"]
            mean = rows.groupby("method", sort=False)["mean"].mean()
            cells = ", ".join(
                f"{m} {last[m]:.2f} (layer mean {mean[m]:.2f})" for m in last.index if m != "raw"
            )
            out.append(
                f"Class-specific relevance, {task} vs {IMPORTANCE_LABELS.get(importance, importance)}, last layer: {cells}."
            )
    return out
