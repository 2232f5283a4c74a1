"""Which switch moves which cell: each hidden choice flipped alone, Δ against this run's cells.

Two sources: the correlate stage's re-scorings (``variant = "<config key>=<value>"``: correlation
switches on the same maps and importance, and blank-out recomputed under each attribution switch),
and the switch sweep (``python -m pipelines.study -m 'tasks=[agreement]'
+switch=no_eos,first_samples,train_10k,train_20k hydra.callbacks.aggregate.into=recipes``):
whole study runs with one training or sample switch changed, compared at the same seed.
"""

from __future__ import annotations

import pandas as pd

from attnflow.metrics.tables import CONFIGURED, SWITCH_REFERENCE, configured

from ..context import Context
from ..document import Heading, Paragraph, Table
from ..paper import TABLES
from ..tables import EXPLAINER_LABELS, IMPORTANCE_LABELS, Grid, fmt_delta

KEYS = ["importance", "method", "layer"]


def switch_deltas(
    table: pd.DataFrame, reference: pd.DataFrame, subset: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per (variant, importance, method, layer): the variant's mean minus the reference's
    (all-heads cells; ``reference`` holds the configured cells). ``subset``: the configured cells of
    the samples the ``attribution.*`` switches were recomputed on (variant ``SWITCH_REFERENCE``), the
    reference of those variants where given.

    >>> ref = pd.DataFrame({"importance": "i", "method": "m", "layer": [1], "mean": [0.5]})
    >>> var = pd.DataFrame({"variant": ["x=1", "attribution.y=2"], "importance": "i", "method": "m",
    ...                     "layer": 1, "mean": [0.7, 0.7]})
    >>> switch_deltas(var, ref)[["variant", "delta"]].round(6).values.tolist()
    [['x=1', 0.2], ['attribution.y=2', 0.2]]
    >>> sub = ref.assign(mean=0.6)
    >>> switch_deltas(var, ref, sub)[["variant", "delta"]].round(6).values.tolist()
    [['x=1', 0.2], ['attribution.y=2', 0.1]]
    """
    base = reference.set_index(KEYS)["mean"].rename("base")
    out = table.join(base, on=KEYS)
    if subset is not None and not subset.empty:
        on_subset = out["variant"].astype(str).str.startswith("attribution.")
        sub_base = out[KEYS].join(subset.set_index(KEYS)["mean"].rename("base"), on=KEYS)["base"]
        out["base"] = out["base"].where(~on_subset, sub_base)
    return out.assign(delta=out["mean"].astype(float) - out["base"].astype(float))


def _sweep_variants(ctx: Context, task: str) -> pd.DataFrame | None:
    """The switch sweep's cells at this run's seed; ``variant`` = the job's overrides (``tasks=``
    left out), this run's own rows ("defaults") dropped."""
    if ctx.recipes is None or ctx.recipes.empty:
        return None
    rows = configured(ctx.recipes)
    rows = rows[(rows["task"] == task) & (rows["seed"] == ctx.config.get("seed", 0))]
    names = rows["overrides"].fillna("").astype(str)
    rows = rows.assign(variant=[" ".join(w for w in n.split() if not w.startswith("tasks=")) for n in names])
    return rows[~names.isin(["defaults", ""])]


def section(ctx: Context) -> None:
    blocks, subsets = [], []
    for task, got in ctx.inputs.items():
        if got.table is None:
            continue
        table = got.table[got.table["head"].isna()]
        reference = table[table["variant"] == CONFIGURED]
        subset = table[table["variant"] == SWITCH_REFERENCE]
        if not subset.empty:
            subsets.append(f"{task}: {int(subset['n'].max())} samples")
        parts = [table[~table["variant"].isin([CONFIGURED, SWITCH_REFERENCE])]]
        if (sweep := _sweep_variants(ctx, task)) is not None:
            parts.append(sweep)
        deltas = switch_deltas(
            pd.concat(parts, ignore_index=True)[["variant", *KEYS, "mean"]], reference, subset
        )
        for paper in TABLES:
            if paper.task != task:
                continue
            block = deltas[
                (deltas["importance"] == paper.importance) & deltas["method"].isin(list(paper.cells))
            ]
            if block.empty:
                continue
            wide = block.pivot_table(index=["variant", "method"], columns="layer", values="delta", sort=False)
            grid = Grid(
                header=["switch (flipped alone)", "method", *(f"Δ L{k}" for k in paper.layers)],
                rows=[
                    [v, EXPLAINER_LABELS.get(m, m), *(fmt_delta(row.get(k)) for k in paper.layers)]
                    for (v, m), row in wide.iterrows()
                ],
                caption=f"Table {paper.number} ({task} vs {IMPORTANCE_LABELS[paper.importance]}): "
                "Δ of each cell when one switch is flipped (variant − this run)",
            )
            blocks.append(Table(grid))
    if blocks:
        ctx.add(
            Heading("Sensitivity: which switch moves which cell", 2),
            Paragraph(
                "One row per switch flipped alone from this run's settings; Δ = the cell under that switch "
                "minus this run's cell (mean over samples, no bootstrap). `correlate.*` rows re-score the "
                "same maps and importance; `attribution.*` rows recompute blank-out (CLS is ranked against "
                "blank-out only where it was blanked); `+switch=*` rows are whole study runs at this seed "
                "with that one change (a retrained model for `no_eos` and the training-size rows)."
                + (
                    " `attribution.*` rows are computed on a seeded subset (`attribution.switch_samples`; "
                    + "; ".join(subsets)
                    + "), and their Δ is taken against this run's cells of the same samples."
                    if subsets
                    else ""
                )
            ),
            *blocks,
        )
