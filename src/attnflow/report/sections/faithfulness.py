"""Faithfulness beyond rank correlation: perturbation scores, curves, and agreement between methods."""

from __future__ import annotations

import pandas as pd

from attnflow.metrics.faithfulness import (
    AT_CLS,
    HIGHER_IS_BETTER,
    NO_ROW,
    OUTPUT,
    RANDOM,
    base_method,
    row_rule,
)
from attnflow.metrics.tables import at_last_layer
from attnflow.metrics.versus_random import seed_intervals, versus_random

from ..context import Context, get
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
RULES = {
    "cls": "CLS row",
    "max": "max over rows",
    "mean": "mean over rows",
    OUTPUT: "prediction",
    NO_ROW: "—",
}
VERSUS = "comprehensiveness"  # the score read against the random floor


def label(method: str) -> str:
    """A method's display name; ``<method>_at_cls``: the method's, read at the CLS row."""
    if method.endswith(AT_CLS):
        return f"{LABELS.get(base_method(method), base_method(method))} @ CLS row"
    return LABELS.get(method, method)


def with_rows(frame: pd.DataFrame, task_rows: str | None) -> pd.DataFrame:
    """``frame`` with its ``rows`` column (the rule each method read), filled where absent (tables
    written before the column) from the method records and the task's rule; "n/a" without one."""
    from attnflow.methods import METHODS

    map_rows = {name: r.rows for name, r in METHODS.items() if r.kind == "attention"}
    derived = [
        row_rule(m, task_rows=task_rows, map_rows=map_rows) if task_rows else "n/a" for m in frame["method"]
    ]
    if "rows" not in frame:
        return frame.assign(rows=derived)
    return frame.assign(
        rows=frame["rows"].where(frame["rows"].notna(), pd.Series(derived, index=frame.index))
    )


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
            "used as rankings) and the seeded random floor; mean ± std over samples, [95% CI of the mean]. "
            "Column rows: the query row of each layer's map a method read: the task's rule (`task.<name>.rows`) "
            "or the CLS row (the class-specific methods); where the task's rule is not CLS, the task-row methods "
            "are also read at the CLS row (“@ CLS row”: the same captured attentions and explain options), so "
            "every attention method is compared on one rule; prediction: a score of the model's output (no "
            "attention row). Against the random floor a method is called above or below random only when the "
            f"95% interval of its {VERSUS} excludes random's mean; else indistinguishable from random."
        ),
    )
    for task, got in tasks.items():
        task_rows = get(ctx.config, f"task.{task}.rows")
        last = with_rows(at_last_layer(got.faithfulness), task_rows)
        versus = _versus_random(ctx, task, last)
        cost = got.cost.set_index("method") if got.cost is not None else None
        header = [f"{task} (last layer)", "rows", *METRICS.values(), "s / sentence", "× one gradient",
                  f"{VERSUS} [95% CI] (seeds)", "vs random"]  # fmt: skip
        grid = Grid(header=header, rows=[])
        for method, rows in last.groupby("method", sort=False):
            by = rows.set_index("metric")
            cells = [label(method), RULES.get(rows["rows"].iloc[0], rows["rows"].iloc[0])] + [
                f"{fmt_mean_std(by.at[m, 'mean'], by.at[m, 'std'])} [{by.at[m, 'ci_low']:.2f}, {by.at[m, 'ci_high']:.2f}]"
                if m in by.index else "n/a" for m in METRICS
            ]  # fmt: skip
            cells += _cost_cells(cost, method) + _versus_cells(versus, method)
            grid.rows.append(cells)
        ctx.add(Heading(task, 3), Table(grid), Paragraph(rules_text(last, task, task_rows)))
        if not versus.empty:
            ctx.add(Paragraph(versus_text(versus)))
        if cost is not None and (cost["skipped"] != "").any():
            ctx.add(Paragraph("Not run: " + "; ".join(f"{label(m)}: {r.skipped}"
                                                     for m, r in cost[cost["skipped"] != ""].iterrows()) + "."))  # fmt: skip
        ctx.add(Paragraph("Most faithful method at the last layer: " + "; ".join(
            f"{METRICS[m]}: {label(best(last, m))}" for m in ("comprehensiveness", "sufficiency", "auc_positive", "auc_negative")
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
    grid = Grid(header=["Kendall τ", *(label(n) for n in names)], rows=[],
                caption=f"{task}: agreement between methods (mean Kendall τ over samples, last layer)")  # fmt: skip
    for a in names:
        grid.rows.append([label(a)] + [
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


def rules_text(last: pd.DataFrame, task: str, task_rows: str | None) -> str:
    """Which row rule each method read, grouped by rule; a warning when attention methods read
    different rules and no CLS-row reading puts them on one."""
    maps = last[~last["rows"].isin([OUTPUT, NO_ROW])].drop_duplicates("method")
    groups = maps.groupby("rows", sort=False)["method"].apply(list)
    parts = [f"{', '.join(label(m) for m in methods)} read the {RULES.get(rule, rule)}"
             + (f" (`task.{task}.rows: {rule}`)" if rule == task_rows and rule != "cls" else "")
             for rule, methods in groups.items()]  # fmt: skip
    text = f"Rows ({task}): " + ("; ".join(parts) if parts else "no attention method") + "."
    mixed = len(groups) > 1 and not maps["method"].str.endswith(AT_CLS).any()
    if mixed:
        text += (" These rules differ and no method was read at the CLS row too: a comparison across them "
                 "mixes the rule with the method (re-run the faithfulness stage for the CLS-row readings).")  # fmt: skip
    return text


def _versus_random(ctx: Context, task: str, last: pd.DataFrame) -> pd.DataFrame:
    """Per method: VERSUS's mean, 95% interval and verdict against random: over a seed sweep's seeds
    (bootstrap over seeds, or seeds × samples when the tables keep per-sample values) where the
    sweep has at least two seeds of the method and of random; else this run's interval over its
    samples. Columns method, mean, ci_low, ci_high, n_seeds, random, verdict, source ("this run",
    "seeds" or "seeds × samples": what the interval resamples)."""
    own = last[(last["metric"] == VERSUS) & last["method"].notna()].drop_duplicates("method")
    floor = own.loc[own["method"] == RANDOM, "mean"]
    here = own.assign(
        n_seeds=1, random=float(floor.iloc[0]) if len(floor) else float("nan"), source="this run",
        verdict=[versus_random(r.ci_low, r.ci_high, float(floor.iloc[0]) if len(floor) else float("nan"))
                 if r.method != RANDOM else "" for r in own.itertuples()],
    )[["method", "mean", "ci_low", "ci_high", "n_seeds", "random", "verdict", "source"]]  # fmt: skip
    stacked = ctx.sweep_faithfulness
    if stacked is None or stacked.empty or "task" not in stacked:
        return here
    rows = stacked[(stacked["task"] == task) & (stacked["metric"] == VERSUS)]
    rows = rows[rows["layer"].isna() | (rows["layer"] == rows["layer"].max())]
    counts = rows.groupby("method")["seed"].nunique()
    if counts.get(RANDOM, 0) < 2:
        return here
    rows = rows[rows["method"].isin(counts[counts >= 2].index)]
    n_boot, seed = int(get(ctx.config, "faithfulness.n_boot") or 1000), int(ctx.config.get("seed") or 0)
    over = "seeds × samples" if "value" in rows else "seeds"  # per-sample values kept, or each seed's mean
    swept = seed_intervals(rows.drop(columns="rows", errors="ignore"), n_boot=n_boot, seed=seed).assign(
        source=over
    )
    return pd.concat([swept, here[~here["method"].isin(swept["method"])]], ignore_index=True)


def _versus_cells(versus: pd.DataFrame, method: str) -> list[str]:
    got = versus[versus["method"] == method]
    if got.empty:
        return ["n/a", "n/a"]
    r = got.iloc[0]
    n = "this run" if r.source == "this run" else f"{r.n_seeds} seeds"
    return [f"{fmt_mean_std(r['mean'])} [{r.ci_low:.2f}, {r.ci_high:.2f}] ({n})", r.verdict or "(the floor)"]


def versus_text(versus: pd.DataFrame) -> str:
    """The methods above, indistinguishable from and below random, per source of the interval."""
    parts = []
    for source, rows in versus.groupby("source", sort=False):
        floor = rows["random"].iloc[0]
        what = (f"Over {int(rows['n_seeds'].max())} seeds (random's mean {floor:.2f}; bootstrap over the {source})"
                if source != "this run" else f"This run only (random {floor:.2f}; interval over its samples)")  # fmt: skip
        groups = []
        for verdict, group in rows[rows["verdict"] != ""].groupby("verdict", sort=False):
            names = ", ".join(f"{label(r.method)} ({r.mean:.2f} [{r.ci_low:.2f}, {r.ci_high:.2f}])"
                              for r in group.itertuples())  # fmt: skip
            groups.append(f"{verdict}: {names}")
        parts.append(f"{what}: " + ("; ".join(groups) or "no method"))
    return f"Against the random floor ({VERSUS}, last layer). " + ". ".join(parts) + "."


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
    text = f" Pick: {label(top)} is the most comprehensive ({comp[top]:.2f}, {ratio[top]:.2g}× a gradient)"
    near = ratio[comp >= comp[top] - TIE].dropna()  # as comprehensive, within TIE
    if not near.empty and near.idxmin() != top:
        n = near.idxmin()
        text += (
            f"; {label(n)} is as comprehensive ({comp[n]:.2f}) at {ratio[n]:.2g}× a gradient, the better buy"
        )
    if not cheap.empty and cheap.idxmax() != top:
        c = cheap.idxmax()
        text += f"; at ≤ {CHEAP:g}× a gradient, {label(c)} ({comp[c]:.2f}, {ratio[c]:.2g}×)"
    return text + "."
