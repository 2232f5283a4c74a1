"""Tables 1-3's analogues with the norm- and decomposition-based methods: per task and importance,
the mean Spearman correlation at every layer of raw attention, rollout and flow (the correlate
stage) beside attention norm, GlobEnc, ALTI, value zeroing and DecompX (the decompose stage), each
with its bootstrap interval, and whether each new method's best layer beats flow's best layer."""

from __future__ import annotations

import json

import pandas as pd

from attnflow.compare.layers import SKIPPED, TABLE
from attnflow.io import read_parquet
from attnflow.metrics.tables import configured

from ..context import Context
from ..document import Bullets, Heading, Paragraph, Table
from ..tables import Grid

BASELINES = ("raw", "rollout", "flow")
IMPORTANCE = {"blank_out": "blank-out", "input_gradients": "input gradients"}


def section(ctx: Context) -> None:
    tasks = [t for t in ctx.inputs if (ctx.paths.task_reports(t) / TABLE).is_file()]
    if not tasks:
        return
    ctx.add(
        Heading("Tables 1-3 with the norm- and decomposition-based methods", 2),
        Paragraph(
            "Mean Spearman correlation (95 % bootstrap interval) over the study's samples between each method's "
            "row at a layer and the importance of each token, computed as the paper's tables are (the correlate "
            "stage's settings); raw attention, rollout and flow as above, beside attention norm (Kobayashi et al. "
            "2020), GlobEnc (Modarressi et al. 2022), ALTI (Ferrando et al. 2022), value zeroing (Mohebbi et al. "
            "2023) and DecompX (Modarressi et al. 2023)."
        ),
    )  # fmt: skip
    for task in tasks:
        new = read_parquet(ctx.paths.task_reports(task) / TABLE)
        skipped = json.loads((ctx.paths.task_reports(task) / SKIPPED).read_text())["skipped"]
        old = ctx.inputs[task].table
        parts = [configured(old[old["method"].isin(BASELINES)]), *([configured(new)] if len(new) else [])]
        both = pd.concat(parts, ignore_index=True)
        verdicts = []
        for importance, label in IMPORTANCE.items():
            cells = both[both["importance"] == importance]
            if cells.empty:
                continue
            ctx.add(Table(_grid(cells, f"{task}: Spearman with {label}, per layer")))
            verdicts += _verdicts(cells, f"{task}, {label}")
        if skipped:
            verdicts += [f"{task}: {m} not run: {why}" for m, why in skipped.items()]
        ctx.add(Bullets(verdicts))


def _grid(cells: pd.DataFrame, caption: str) -> Grid:
    layers = sorted(cells["layer"].unique())
    rows = []
    for method in dict.fromkeys(cells["method"]):
        mine = cells[cells["method"] == method].set_index("layer")
        rows.append([method, *(_ci(mine.loc[k]) if k in mine.index else "" for k in layers)])
    return Grid(header=["method", *(f"L{k}" for k in layers)], rows=rows, caption=caption)


def _ci(row: pd.Series) -> str:
    return f"{row['mean']:.2f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"


def _verdicts(cells: pd.DataFrame, head: str) -> list[str]:
    """Each non-baseline method's best layer against flow's best layer: above (its interval wholly
    above flow's), below, or overlapping."""
    best = cells.loc[cells.groupby("method")["mean"].idxmax()].set_index("method")
    if "flow" not in best.index:
        return []
    flow = best.loc["flow"]
    out = []
    for method, row in best.drop(index=[m for m in BASELINES if m in best.index]).iterrows():
        word = ("above" if row["ci_low"] > flow["ci_high"] else "below" if row["ci_high"] < flow["ci_low"]
                else "within the interval of")  # fmt: skip
        out.append(f"{head}: {method}'s best layer L{row['layer']} {_ci(row)} is {word} flow's best, "
                   f"L{flow['layer']} {_ci(flow)}")  # fmt: skip
    return out
