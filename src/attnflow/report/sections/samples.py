"""Tables 1-2 on both samples: the paper's stated one (2,000 random test items, the default) beside
the one of the notebook that printed the published tables (its first 100 validation items).

The default sample is this run plus the seed sweep (``reports/sweep/``); the notebook's is a sweep
of the same seeds with the switch, into its own folder (the trainings are taken from the stage
cache, so only the later stages run again)::

    python -m pipelines.study -m seed=0,1,2 +switch=notebook_sample 'tasks=[agreement]' \\
        hydra.callbacks.aggregate.into=samples

Each cell is the mean over the seeds of that sample's per-seed means; Δ = ours − paper.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from attnflow.io import read_json

from ..context import Context, get
from ..document import Heading, Paragraph
from ..inputs import read_sweep_table
from .recipes import recipe_cells, switch_tables

__all__ = ["DEFAULT_SAMPLE", "SAMPLES_SWEEP", "both_samples", "section"]

SAMPLES_SWEEP = (
    "samples"  # the aggregate folder of the notebook-sample sweep (hydra.callbacks.aggregate.into)
)
DEFAULT_SAMPLE = "default sample"


def both_samples(default: pd.DataFrame, other: pd.DataFrame) -> pd.DataFrame:
    """The default sample's seed tables (label :data:`DEFAULT_SAMPLE`) stacked with the other
    sample's, labelled by their overrides, agreement rows only, for :func:`recipe_cells`.

    >>> a = pd.DataFrame({"task": ["agreement", "sst2"], "seed": 0, "mean": [0.1, 0.2]})
    >>> b = pd.DataFrame({"task": ["agreement"], "seed": 0, "mean": [0.3], "overrides": ["+switch=x"]})
    >>> both_samples(a, b)[["overrides", "mean"]].values.tolist()
    [['default sample', 0.1], ['+switch=x', 0.3]]
    """
    default = default[default["task"] == "agreement"].assign(overrides=DEFAULT_SAMPLE)
    other = other[other["task"] == "agreement"]
    return pd.concat([default, other], ignore_index=True)


def _jobs(ctx: Context) -> list[dict[str, Any]]:
    path = ctx.paths.sweep_jobs_file(SAMPLES_SWEEP)
    return [j for j in read_json(path)["jobs"] if j.get("status") == "finished"] if path.is_file() else []


def section(ctx: Context) -> None:
    other = read_sweep_table(ctx.paths.sweep_table(SAMPLES_SWEEP))
    default = ctx.sweep
    if default is None and "agreement" in ctx.inputs and ctx.inputs["agreement"].table is not None:
        default = ctx.inputs["agreement"].table.assign(task="agreement", seed=get(ctx.config, "seed"))
    ctx.add(Heading("Tables 1-2 on both samples", 2))
    if other is None or default is None:
        ctx.add(
            Paragraph(
                "The notebook's sample was not run beside this one (see `attnflow.report.sections.samples` for the sweep)."
            )
        )
        return
    stacked = both_samples(default, other)
    cells = recipe_cells(stacked).set_index(["overrides", "task", "importance", "method", "layer"])
    seeds = stacked.groupby("overrides")["seed"].nunique().to_dict()
    capture = get(ctx.config, "task.agreement.capture") or {}
    accuracy = {j.get("overrides") or "": j.get("accuracy", {}) for j in _jobs(ctx)}
    main = (ctx.inputs.get("agreement") and ctx.inputs["agreement"].train_metrics) or {}
    accuracy[DEFAULT_SAMPLE] = {"agreement": {"accuracy": main.get("accuracy"),
                                              "teacher_accuracy": (main.get("teacher") or {}).get("accuracy")}}  # fmt: skip
    ctx.add(
        Paragraph(
            f"The paper's captions state the sample: 2,000 test items. The default here follows them "
            f"({capture.get('n_samples')} {capture.get('select')} items of the {capture.get('split')} split, "
            f"{seeds.get(DEFAULT_SAMPLE, 0)} seeds); the published numbers were printed by the authors' notebook "
            "from its first 100 validation items, run here as `+switch=notebook_sample` "
            + ", ".join(f"({n} seeds: {name})" for name, n in seeds.items() if name != DEFAULT_SAMPLE)
            + ". The same trained models answer both; only the sample differs. Accuracy is each model's test accuracy."
        ),
        *switch_tables(cells, accuracy, "per sample"),
    )
