"""Whole-run switches: what each training or sample choice does to agreement accuracy and the Table 1/2 cells.

Reads the switch sweep (``python -m pipelines.study -m 'tasks=[agreement]'
+switch=no_eos,first_samples,train_10k,train_20k hydra.callbacks.aggregate.into=recipes``; any
other sweep into ``recipes`` works the same): one line per choice, its seed mean beside the paper,
and the largest |Δ| over the rollout and flow cells.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..context import Context, get
from ..document import Heading, Paragraph, Table
from ..frames import seed_frame
from ..paper import TABLES
from ..tables import EXPLAINER_LABELS, IMPORTANCE_LABELS, Grid, fmt, fmt_delta


def recipe_cells(stacked: pd.DataFrame) -> pd.DataFrame:
    """Per (overrides, task, importance, method, layer): the mean over seeds of the per-seed means.

    >>> rows = pd.DataFrame({"task": "t", "importance": "i", "method": "m", "head": pd.NA, "layer": 1,
    ...     "variant": "configured", "mean": [0.5, 0.7, 0.1], "seed": [0, 1, 0], "overrides": ["a", "a", "b"]})
    >>> recipe_cells(rows)[["overrides", "mean", "n_seeds"]].values.tolist()
    [['a', 0.6, 2], ['b', 0.1, 1]]
    """
    stacked = stacked.assign(overrides=stacked["overrides"].fillna("").astype(str))
    frames = [
        seed_frame(group).assign(overrides=name) for name, group in stacked.groupby("overrides", sort=True)
    ]
    return pd.concat(frames, ignore_index=True).astype({"n_seeds": "int64"})


def section(ctx: Context) -> None:
    if ctx.recipes is None or ctx.recipes.empty:
        return
    cells = recipe_cells(ctx.recipes).set_index(["overrides", "task", "importance", "method", "layer"])
    accuracy = {
        job["recipe"]: job.get("accuracy", {}) for job in ctx.recipe_jobs if job.get("status") == "finished"
    }
    accuracy["defaults"] = {  # this study's own run
        task: {"accuracy": (got.train_metrics or {}).get("accuracy"),
               "teacher_accuracy": ((got.train_metrics or {}).get("teacher") or {}).get("accuracy")}
        for task, got in ctx.inputs.items()
    }  # fmt: skip
    ctx.add(
        Heading("Whole-run switches", 2),
        Paragraph(
            "Each training or sample choice for the agreement model as its own study run (`pipelines.study` "
            "switch sweep, reports/recipes/) beside this study's defaults: test accuracy on the "
            f"task's test set, the teacher's, and every published Table 1/2 cell, mean over the seeds "
            f"run; Δ = ours − paper. Defaults: teacher={get(ctx.config, 'task.agreement.train.teacher')}, "
            f"attn/resid/embd dropout={get(ctx.config, 'task.agreement.model.attn_pdrop')}/"
            f"{get(ctx.config, 'task.agreement.model.resid_pdrop')}/{get(ctx.config, 'task.agreement.model.embd_pdrop')}, "
            f"data.source={get(ctx.config, 'task.agreement.data.source')}."
        ),
    )
    ctx.add(*switch_tables(cells, accuracy, "per switch"))


def switch_tables(cells: pd.DataFrame, accuracy: dict[str, Any], per: str) -> list[Table]:
    """Tables 1-2 with one block of rows per choice: `cells` indexed by (overrides, task, importance,
    method, layer) with a ``mean`` column (:func:`recipe_cells`), `accuracy` {choice: {task: {accuracy,
    teacher_accuracy}}}; each cell shows ours (Δ = ours − paper) and each row its largest |Δ|."""
    tables = []
    for paper in TABLES:
        if paper.task != "agreement":
            continue
        grid = Grid(
            header=["choice", "accuracy (teacher)", "method", *(f"L{k}" for k in paper.layers), "max |Δ|"],
            rows=[],
            caption=f"Table {paper.number} (agreement vs {IMPORTANCE_LABELS[paper.importance]}) {per}",
        )
        for choice in sorted({k[0] for k in cells.index}):
            acc = accuracy.get(choice, {}).get(paper.task, {})
            acc_text = f"{fmt(acc.get('accuracy'))} ({fmt(acc.get('teacher_accuracy'))})"
            for method, by_layer in paper.cells.items():
                ours = [
                    cells["mean"].get((choice, paper.task, paper.importance, method, k)) for k in paper.layers
                ]
                deltas = [
                    o - by_layer[k][0] for o, k in zip(ours, paper.layers, strict=True) if o is not None
                ]
                grid.rows.append(
                    [choice or "(defaults)", acc_text, EXPLAINER_LABELS.get(method, method)]
                    + [
                        f"{fmt(o, 2)} ({fmt_delta(o - by_layer[k][0])})" if o is not None else "n/a"
                        for o, k in zip(ours, paper.layers, strict=True)
                    ]
                    + [fmt(max(abs(d) for d in deltas), 2) if deltas else "n/a"]
                )
        tables.append(Table(grid))
    return tables
