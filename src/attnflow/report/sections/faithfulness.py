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
          "input_x_gradient": "input × gradient", "integrated_gradients": "integrated gradients (captum)",
          RANDOM: "random (floor)"}  # fmt: skip
METRICS = {
    "comprehensiveness": "comprehensiveness ↑",
    "sufficiency": "sufficiency ↓",
    "auc_positive": "AUC MoRF ↓",
    "auc_negative": "AUC LeRF ↑",
}
CHEAP = 2.0  # "cheap": at most this many gradients' cost per sentence
TIE = 0.02  # comprehensiveness this close to the best counts as as good


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
        spread = _seed_spread(ctx.sweep_faithfulness, task)
        cost = got.cost.set_index("method") if got.cost is not None else None
        header = [f"{task} (last layer)", *METRICS.values(), "s / sentence", "× one gradient"]
        if spread is not None:
            header.append(f"comprehensiveness over {spread.attrs['n_seeds']} seeds")
        grid = Grid(header=header, rows=[])
        for method, rows in last.groupby("method", sort=False):
            by = rows.set_index("metric")
            cells = [LABELS.get(method, method)] + [
                f"{fmt_mean_std(by.at[m, 'mean'], by.at[m, 'std'])} [{by.at[m, 'ci_low']:.2f}, {by.at[m, 'ci_high']:.2f}]"
                if m in by.index else "n/a" for m in METRICS
            ]  # fmt: skip
            cells += _cost_cells(cost, method)
            if spread is not None:
                cells.append(spread.get(method, "n/a"))
            grid.rows.append(cells)
        ctx.add(Heading(task, 3), Table(grid))
        if cost is not None and (cost["skipped"] != "").any():
            ctx.add(Paragraph("Not run: " + "; ".join(f"{LABELS.get(m, m)}: {r.skipped}"
                                                     for m, r in cost[cost["skipped"] != ""].iterrows()) + "."))  # fmt: skip
        ctx.add(Paragraph("Most faithful method at the last layer: " + "; ".join(
            f"{METRICS[m]}: {LABELS.get(best(last, m), best(last, m))}" for m in ("comprehensiveness", "sufficiency", "auc_positive", "auc_negative")
        ) + "." + _pick(last, cost)))  # fmt: skip
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


def _cost_cells(cost: pd.DataFrame | None, method: str) -> list[str]:
    if cost is None or method not in cost.index or pd.isna(cost.at[method, "seconds_per_sentence"]):
        return ["n/a", "n/a"]
    return [f"{cost.at[method, 'seconds_per_sentence']:.3g}", f"{cost.at[method, 'vs_gradient']:.2g}"]


def _seed_spread(stacked: pd.DataFrame | None, task: str) -> dict[str, str] | None:
    """{method: "mean ± std (n)"} of the per-seed comprehensiveness at the last layer (and the
    references), over a seed sweep's jobs; None without a sweep of at least two seeds."""
    if stacked is None or stacked.empty or "task" not in stacked:
        return None
    rows = stacked[(stacked["task"] == task) & (stacked["metric"] == "comprehensiveness")]
    rows = rows[rows["layer"].isna() | (rows["layer"] == rows["layer"].max())]
    n_seeds = rows["seed"].nunique()
    if n_seeds < 2:
        return None
    out = {m: f"{fmt_mean_std(g['mean'].mean(), g['mean'].std(ddof=1))} ({g['seed'].nunique()})"
           for m, g in rows.groupby("method", sort=False)}  # fmt: skip
    spread = pd.Series(out, dtype=object)
    spread.attrs["n_seeds"] = n_seeds
    return spread


def _pick(last: pd.DataFrame, cost: pd.DataFrame | None) -> str:
    """Which method to use: the most comprehensive overall, and among those costing at most CHEAP
    gradients, with their comprehensiveness and cost."""
    comp = last[(last["metric"] == "comprehensiveness") & (last["method"] != RANDOM)].set_index("method")[
        "mean"
    ]
    if comp.empty or cost is None:
        return ""
    ratio = cost["vs_gradient"].reindex(comp.index)
    top = comp.idxmax()
    cheap = comp[ratio <= CHEAP]
    text = f" Pick: {LABELS.get(top, top)} is the most comprehensive ({comp[top]:.2f}, {ratio[top]:.2g}× a gradient)"
    near = ratio[comp >= comp[top] - TIE].dropna()  # as comprehensive, within TIE
    if not near.empty and near.idxmin() != top:
        n = near.idxmin()
        text += f"; {LABELS.get(n, n)} is as comprehensive ({comp[n]:.2f}) at {ratio[n]:.2g}× a gradient, the better buy"
    if not cheap.empty and cheap.idxmax() != top:
        c = cheap.idxmax()
        text += f"; at ≤ {CHEAP:g}× a gradient, {LABELS.get(c, c)} ({comp[c]:.2f}, {ratio[c]:.2g}×)"
    return text + "."
