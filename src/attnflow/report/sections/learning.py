"""The agreement learning curve: test accuracy against the number of training items.

Points: this run (all training items) and the switch sweep's training-size jobs
(``+switch=train_10k,train_20k``, reports/recipes/jobs.json), at the same seed and recipe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..context import Context
from ..document import Heading, Paragraph, Table
from ..paper import PAPER_ACCURACY
from ..tables import Grid, fmt

TASK = "agreement"


def curve_points(jobs: Sequence[Mapping[str, Any]], main: Mapping[str, Any]) -> list[dict[str, Any]]:
    """This run and every finished job trained on another number of items, by n_train.

    >>> jobs = [{"status": "finished", "recipe": "+switch=train_10k",
    ...          "accuracy": {"agreement": {"accuracy": 0.9, "teacher_accuracy": 0.95, "n_train": 10000}}},
    ...         {"status": "finished", "recipe": "+switch=no_eos",
    ...          "accuracy": {"agreement": {"accuracy": 0.93, "n_train": 42000}}}]
    >>> main = {"accuracy": 0.94, "teacher": {"accuracy": 0.97}, "n_train": 42000}
    >>> [(p["n_train"], p["accuracy"]) for p in curve_points(jobs, main)]
    [(10000, 0.9), (42000, 0.94)]
    """
    points = [{"n_train": main.get("n_train"), "accuracy": main.get("accuracy"),
               "teacher_accuracy": (main.get("teacher") or {}).get("accuracy"), "run": "this run"}]  # fmt: skip
    for job in jobs:
        got = (job.get("accuracy") or {}).get(TASK) or {}
        if job.get("status") == "finished" and got.get("n_train") not in (None, main.get("n_train")):
            points.append({**got, "run": job.get("recipe", "")})
    return sorted((p for p in points if p["n_train"] is not None), key=lambda p: p["n_train"])


def section(ctx: Context) -> None:
    got = ctx.inputs.get(TASK)
    main = (got.train_metrics if got is not None else None) or {}
    points = curve_points(ctx.recipe_jobs, main)
    if len(points) < 2:
        return
    grid = Grid(
        header=["training items", "student test accuracy", "LSTM teacher", "run"],
        rows=[
            [fmt(p["n_train"]), fmt(p["accuracy"]), fmt(p.get("teacher_accuracy")), p["run"]] for p in points
        ],
        caption="Agreement accuracy on the natural-distribution test set against the training-set size",
    )
    first, last = points[0], points[-1]
    gain = (last["accuracy"] or 0) - (first["accuracy"] or 0)
    ctx.add(
        Heading("Learning curve (agreement)", 2),
        Paragraph(
            f"The paper reports {fmt(PAPER_ACCURACY.get(TASK), 2)} with ≈140k training items (10% of Linzen's full "
            f"file); the offline mirror's natural sample holds {fmt(last['n_train'])} after the leak rule. "
            f"From {fmt(first['n_train'])} to {fmt(last['n_train'])} items the student gains {gain:+.3f}: "
            "read the curve for how much of the gap more data would close."
        ),
        Table(grid),
    )
