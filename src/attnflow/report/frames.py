"""Pure computations on the correlation tables for the report: merges, group-bys and pivots.

- paper comparison = our configured all-heads cells merged onto the paper's published cells;
- seeds = a group-by over the stacked job tables of a sweep (spread of the per-seed means);
- per head = a pivot of the per-head rows to (layer x head);
- metrics.json and the MLflow cells = the configured cells, nested / flattened for their readers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from attnflow.metrics.tables import configured

from .inputs import TaskInputs
from .paper import paper_frame

__all__ = ["comparison_frame", "head_grid", "metric_cells", "metrics_payload", "seed_frame"]

KEYS = ["task", "importance", "method", "layer"]


def comparison_frame(tables: Mapping[str, pd.DataFrame | None]) -> pd.DataFrame:
    """One row per published cell (Tables 1-3) with ours beside it (NaN where we have none)."""
    ours = [configured(t) for t in tables.values() if t is not None]
    stats = ["mean", "std", "ci_low", "ci_high", "n", "n_undefined"]
    mine = pd.concat(ours, ignore_index=True)[KEYS + stats] if ours else pd.DataFrame(columns=KEYS + stats)
    mine = mine.astype({"layer": "int64"})
    return paper_frame().merge(mine, on=KEYS, how="left")


def seed_frame(sweep: pd.DataFrame) -> pd.DataFrame:
    """Per configured all-heads cell, over the jobs of a sweep: mean, std (ddof 1), min, max and
    n_seeds of the per-seed means (finite ones only).

    >>> rows = pd.DataFrame({"task": "t", "importance": "i", "method": "m", "head": pd.NA, "layer": 1,
    ...     "variant": "configured", "mean": [0.5, 0.7, 0.6], "seed": [0, 1, 2]})
    >>> seed_frame(rows)[["mean", "std", "min", "max", "n_seeds"]].round(6).values.tolist()
    [[0.6, 0.1, 0.5, 0.7, 3.0]]
    """
    cells = configured(sweep)
    cells = cells[np.isfinite(cells["mean"].astype(float))]
    grouped = cells.groupby(KEYS, sort=False)["mean"]
    out = grouped.agg(["mean", "std", "min", "max", "count"]).rename(columns={"count": "n_seeds"})
    return out.reset_index()


def head_grid(table: pd.DataFrame, importance: str, method: str) -> pd.DataFrame:
    """Mean correlation of each (layer, head) of one method vs one importance: layers x heads."""
    rows = table[(table["variant"] == "configured") & table["head"].notna()]
    rows = rows[(rows["importance"] == importance) & (rows["method"] == method)]
    return rows.pivot(index="layer", columns="head", values="mean").sort_index()


def metrics_payload(inputs: Mapping[str, TaskInputs]) -> dict[str, Any]:
    """``{task: {"accuracy": a, "corr": {importance: {method: {"L1": mean, ...}}}}}``; non-finite left out."""
    out: dict[str, Any] = {}
    for task, got in inputs.items():
        entry: dict[str, Any] = {}
        acc = (got.train_metrics or {}).get("accuracy")
        if isinstance(acc, int | float) and np.isfinite(acc):
            entry["accuracy"] = float(acc)
        corr: dict[str, Any] = {}
        cells = configured(got.table) if got.table is not None else None
        for r in cells.itertuples() if cells is not None else ():
            if np.isfinite(r.mean):
                corr.setdefault(r.importance, {}).setdefault(r.method, {})[f"L{r.layer}"] = float(r.mean)
        if corr:
            entry["corr"] = corr
        if entry:
            out[task] = entry
    return out


# headline.json: short task names, so `dvc exp show` of the headline fits a terminal.
HEADLINE_TASKS = {"agreement": "agr", "sst2": "sst2"}
HEADLINE_REFERENCE = "blank_out"  # Table 1's first reference: blank-out importance
HEADLINE_METHODS = ("rollout", "flow")


def headline_payload(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The few numbers a reader compares runs by (``reports/headline.json``): per task its
    held-out accuracy and the last layer's Spearman correlation of rollout and flow with blank-out
    importance (the paper's Table 1), under a short task name (HEADLINE_TASKS), 3 decimals.

    >>> headline_payload({"agreement": {"accuracy": 0.93825, "corr": {"blank_out": {
    ...     "flow": {"L1": 0.29, "L6": 0.63560}, "rollout": {"L1": 0.29, "L6": 0.65476}}}}})
    {'agr': {'acc': 0.938, 'rollout': 0.655, 'flow': 0.636}}
    """
    out: dict[str, Any] = {}
    for task, entry in metrics.items():
        short = HEADLINE_TASKS.get(task, task)
        row: dict[str, float] = {}
        if "accuracy" in entry:
            row["acc"] = round(float(entry["accuracy"]), 3)
        by_method = entry.get("corr", {}).get(HEADLINE_REFERENCE, {})
        for method in HEADLINE_METHODS:
            layers = by_method.get(method, {})
            if layers:
                last = max(layers, key=lambda k: int(k[1:]))  # "L6"
                row[method] = round(float(layers[last]), 3)
        if row:
            out[short] = row
    return out


def metric_cells(inputs: Mapping[str, TaskInputs], comparison: pd.DataFrame) -> dict[str, float]:
    """MLflow metrics, one per cell: ``<task>/corr/<importance>/<method>/L<k>`` (our mean),
    ``<task>/delta/...`` (ours - paper where the paper has the cell) and ``<task>/accuracy``."""
    cells: dict[str, float] = {}
    for task, entry in metrics_payload(inputs).items():
        if "accuracy" in entry:
            cells[f"{task}/accuracy"] = entry["accuracy"]
    for task, got in inputs.items():
        rows = configured(got.table) if got.table is not None else pd.DataFrame(columns=[*KEYS, "mean"])
        for r in rows[np.isfinite(rows["mean"].astype(float))].itertuples():
            cells[f"{task}/corr/{r.importance}/{r.method}/L{r.layer}"] = float(r.mean)
    for r in comparison.dropna(subset=["mean"]).itertuples():
        cells[f"{r.task}/delta/{r.importance}/{r.method}/L{r.layer}"] = float(r.mean - r.paper_mean)
    return cells
