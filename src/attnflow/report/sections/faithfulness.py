"""Faithfulness beyond rank correlation: perturbation scores, curves, and agreement between methods."""

from __future__ import annotations

import pandas as pd

from attnflow.metrics.faithfulness import HIGHER_IS_BETTER, RANDOM
from attnflow.metrics.tables import at_last_layer

from ..context import Context
from ..document import Heading, Paragraph, Table
from ..figures import plot_layer_scores, plot_perturbation_curves
from ..tables import EXPLAINER_LABELS, Grid, fmt_mean_std

LABELS = {**EXPLAINER_LABELS, "blank_out": "blank-out (reference)", "input_gradients": "input gradients (reference)",
          RANDOM: "random (floor)"}  # fmt: skip
METRICS = {
    "comprehensiveness": "comprehensiveness ↑",
    "sufficiency": "sufficiency ↓",
    "auc_positive": "AUC MoRF ↓",
    "auc_negative": "AUC LeRF ↑",
    "auc_positive_accuracy": "AUC MoRF acc ↓",
    "auc_negative_accuracy": "AUC LeRF acc ↑",
}


def best(scores: pd.DataFrame, metric: str) -> str:
    """The method (not a reference, not the floor) with the most faithful mean of ``metric``."""
    rows = scores[(scores["metric"] == metric) & scores["layer"].notna()].dropna(subset=["mean"])
    pick = rows["mean"].idxmax() if HIGHER_IS_BETTER[metric] else rows["mean"].idxmin()
    return str(rows.loc[pick, "method"])


def section(ctx: Context) -> None:
    tasks = {t: g for t, g in ctx.inputs.items() if g.faithfulness is not None}
    if not tasks:
        return
    ctx.add(
        Heading("Faithfulness beyond rank correlation", 2),
        Paragraph(
            "Perturbation tests on a seeded subset of the captured samples (`task.<name>.faithfulness.n_samples`; "
            "tokens deleted, CLS/SEP kept): AOPC comprehensiveness and sufficiency as ferret defines them "
            "(fractions 0.1..1.0), and the area under Chefer et al.'s most-relevant-first (MoRF) and "
            "least-relevant-first (LeRF) curves of the predicted class's probability and of the accuracy. "
            "Each explanation method at the last layer beside the references (blank-out and input gradients "
            "used as rankings) and the seeded random floor; mean ± std over samples, [95% CI of the mean]."
        ),
    )
    for task, got in tasks.items():
        last = at_last_layer(got.faithfulness)
        grid = Grid(header=[f"{task} (last layer)", *METRICS.values()], rows=[])
        for method, rows in last.groupby("method", sort=False):
            by = rows.set_index("metric")
            grid.rows.append([LABELS.get(method, method)] + [
                f"{fmt_mean_std(by.at[m, 'mean'], by.at[m, 'std'])} [{by.at[m, 'ci_low']:.2f}, {by.at[m, 'ci_high']:.2f}]"
                if m in by.index else "n/a" for m in METRICS
            ])  # fmt: skip
        ctx.add(Heading(task, 3), Table(grid))
        ctx.add(Paragraph("Most faithful method at the last layer: " + "; ".join(
            f"{METRICS[m]}: {LABELS.get(best(last, m), best(last, m))}" for m in ("comprehensiveness", "sufficiency", "auc_positive", "auc_negative")
        ) + "."))  # fmt: skip
        if got.table is not None:
            ctx.add(Paragraph(_against_spearman(got.table, last)))
        if got.curves is not None:
            ctx.figure(plot_perturbation_curves(got.curves, title=f"{task}: perturbation curves (last layer)"),
                       f"perturbation_{task}.png", f"{task} perturbation curves")  # fmt: skip
        ctx.figure(plot_layer_scores(got.faithfulness, "comprehensiveness", title=f"{task}: AOPC comprehensiveness per layer"),
                   f"aopc_{task}.png", f"{task} AOPC per layer")  # fmt: skip
        if got.agreement is not None:
            ctx.add(_agreement(task, got.agreement))


def _agreement(task: str, agreement: pd.DataFrame) -> Table:
    """Kendall tau between methods at the last layer (the references: over all their tokens)."""
    rows = agreement[
        (agreement["metric"] == "kendall_tau")
        & (agreement["layer"].isna() | (agreement["layer"] == agreement["layer"].max()))
    ]
    names = list(dict.fromkeys([*rows["method_a"], *rows["method_b"]]))
    value = {(r.method_a, r.method_b): r.mean for r in rows.itertuples()}
    grid = Grid(header=["Kendall τ", *(LABELS.get(n, n) for n in names)], rows=[],
                caption=f"{task}: agreement between methods (mean Kendall τ over samples, last layer)")  # fmt: skip
    for a in names:
        grid.rows.append([LABELS.get(a, a)] + [
            "1" if a == b else f"{value.get((a, b), value.get((b, a), float('nan'))):.2f}" for b in names
        ])  # fmt: skip
    return Table(grid)


def _against_spearman(table: pd.DataFrame, last: pd.DataFrame) -> str:
    """The methods ordered by rank correlation (last layer) beside their order by comprehensiveness."""
    from attnflow.metrics.tables import configured

    main = configured(table)
    main = main[main["layer"] == main["layer"].max()]
    comp = last[(last["metric"] == "comprehensiveness") & last["layer"].notna()].set_index("method")["mean"]
    order = list(comp.sort_values(ascending=False).index)
    parts = [f"by comprehensiveness: {' > '.join(order)}"]
    for importance, rows in main.groupby("importance", sort=False):
        by = rows.set_index("method")["mean"].reindex(order).dropna().sort_values(ascending=False)
        same = list(by.index) == [m for m in order if m in by.index]
        parts.append(
            f"by Spearman with {importance}: {' > '.join(by.index)} ({'the same order' if same else 'a different order'})"
        )
    return "Methods at the last layer, most faithful first: " + "; ".join(parts) + "."
