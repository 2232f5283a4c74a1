"""Build the study report: ``report.md``, ``report.html``, ``figures/*.png``, ``metrics.json``, ``comparison.csv``.

Reads every task's stage outputs (:mod:`.inputs`) and the seed sweep's stacked tables, computes
the comparison with the paper once (:mod:`.frames`), lets each section (:mod:`.sections`) add its
blocks, and renders markdown and HTML from the same blocks. All writes are atomic.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from attnflow.io import ArtifactError, json_text, read_json, write_together
from attnflow.paths import StudyPaths

from .context import FIGURES, Context
from .document import render_html, render_markdown
from .frames import comparison_frame, headline_payload, metric_cells, metrics_payload
from .inputs import check_inputs, load_task, read_sweep_table
from .sections import SECTIONS, provenance

__all__ = ["Report", "build_report", "read_sweep_table", "with_main_run"]

COMPARISON_COLUMNS = ["table", "task", "importance", "method", "layer", "mean", "std", "ci_low", "ci_high",
                      "n", "n_undefined", "paper_mean", "paper_std"]  # fmt: skip


@dataclass
class Report:
    """What :func:`build_report` made: the texts, the metrics, and every file it wrote."""

    markdown: str
    html: str
    metrics: dict[str, Any]  # the content of metrics.json
    cells: dict[str, float]  # MLflow metric name -> value
    files: list[Path] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)


def with_main_run(
    stacked: pd.DataFrame | None,
    inputs: Mapping[str, Any],
    seed: int | None,
    *,
    overrides: str | None = None,
    table: str = "table",
) -> pd.DataFrame | None:
    """A sweep's table plus this study's own run (job ``main``) as one more job, unless the sweep
    already ran the same seed (same seed => identical tables) or has no finished job. A seed sweep
    over seeds 1, 2 next to ``dvc repro`` at seed 0 thus reports three seeds without re-running 0;
    ``overrides`` labels the main run in a recipe sweep. `table`: which table of each task's inputs
    ("table": the correlations, "faithfulness": the perturbation scores)."""
    if stacked is None or seed is None:
        return stacked
    if overrides is None and seed in set(stacked["seed"]):
        return stacked
    extra = {"overrides": overrides} if overrides else {}
    main = [
        getattr(got, table).assign(seed=seed, job="main", task=task, **extra)
        for task, got in inputs.items()
        if getattr(got, table) is not None
    ]
    return pd.concat([stacked, *main], ignore_index=True)


def build_report(
    *,
    tasks: Sequence[str],
    paths: StudyPaths,
    config: Mapping[str, Any] | None = None,
    code: Mapping[str, Any] | None = None,
    strict: bool = False,
    stages: pd.DataFrame | None = None,
) -> Report:
    """Read the stage outputs of ``tasks``, write the report files under ``paths.reports``.

    ``config`` (the resolved study config as plain dicts) feeds the configuration summary and the
    ``report`` options (examples, n_examples, allow_mixed_code). ``code``: this run's code
    (:func:`attnflow.sweep.code_state`); given, seed-sweep jobs run by other code are left out of
    every seed table and named (unless report.allow_mixed_code). PNGs of
    earlier runs that this run did not draw are removed from ``figures/``.

    Nothing under ``paths.reports`` changes until the whole report is made: the figures are drawn
    beside it and moved in, and the texts swapped in together, at the end. ``strict`` (the report
    stage): a missing input (:func:`.inputs.check_inputs`) or an unreadable one raises
    :class:`attnflow.io.ArtifactError` naming it before anything is written; else the report
    is made from what exists and lists what is missing. ``stages``: the stage runs behind the
    outputs with their commit and whether their code is this checkout's
    (:func:`attnflow.report.stage_times.with_code`), for the provenance section.
    """
    if strict:
        check_inputs(tasks, paths)
    inputs = {task: load_task(task, paths) for task in tasks}
    problems = [p for got in inputs.values() for p in got.problems]
    if strict and problems:
        raise ArtifactError(f"{problems[0]}; the report was left as it was")
    paths.reports.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".figures.", dir=paths.reports))
    try:
        return _build(
            inputs, tasks=tasks, paths=paths, config=config, code=code, staging=staging, stages=stages
        )
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _build(
    inputs: dict[str, Any],
    *,
    tasks: Sequence[str],
    paths: StudyPaths,
    config: Mapping[str, Any] | None,
    code: Mapping[str, Any] | None,
    staging: Path,
    stages: pd.DataFrame | None = None,
) -> Report:
    """:func:`build_report` once the inputs are read: figures drawn into ``staging``, every file
    swapped into place only after the last one is made."""
    comparison = comparison_frame({t: got.table for t, got in inputs.items()})
    sweep_jobs = read_json(paths.sweep_jobs)["jobs"] if paths.sweep_jobs.is_file() else []
    allow = bool(((config or {}).get("report") or {}).get("allow_mixed_code"))
    skip = provenance.left_out(code, sweep_jobs, allow=allow)  # seeds of other code: never pooled

    def seeds_of_this_code(table: pd.DataFrame | None) -> pd.DataFrame | None:
        if table is None or not skip or "seed" not in table:
            return table
        kept = table[~table["seed"].isin(list(skip))]
        return kept if not kept.empty else None

    ctx = Context(
        paths=paths,
        inputs=inputs,
        config=dict(config or {}),
        comparison=comparison,
        sweep=with_main_run(
            seeds_of_this_code(read_sweep_table(paths.sweep)), inputs, (config or {}).get("seed")
        ),
        recipes=with_main_run(
            read_sweep_table(paths.recipes), inputs, (config or {}).get("seed"), overrides="defaults"
        ),
        recipe_jobs=read_json(paths.recipe_jobs)["jobs"] if paths.recipe_jobs.is_file() else [],
        sweep_jobs=sweep_jobs,
        code=code,
        stages=stages,
        left_out=skip,
        staging=staging,
        sweep_faithfulness=with_main_run(
            seeds_of_this_code(read_sweep_table(paths.sweep_faithfulness())),
            inputs,
            (config or {}).get("seed"),
            table="faithfulness",
        ),
    )
    for section in SECTIONS:
        section(ctx)

    title = f"Attention flow re-run: report ({ctx.config.get('study', 'attnflow')})"
    md, html_text = render_markdown(ctx.blocks), render_html(ctx.blocks, title=title)
    metrics = metrics_payload(inputs)
    files = {
        name: paths.reports / name
        for name in ("report.md", "report.html", "metrics.json", "headline.json", "comparison.csv")
    }
    published = comparison[comparison["task"].isin(list(tasks)) & comparison["mean"].notna()]
    texts = {
        files["comparison.csv"]: published[COMPARISON_COLUMNS].to_csv(index=False),
        files["metrics.json"]: json_text(metrics),
        files["headline.json"]: json_text(headline_payload(metrics)),  # `dvc exp show` reads this one
        files["report.md"]: md,
        files["report.html"]: html_text,
    }
    cells = metric_cells(inputs, comparison)
    # every file is made: now swap them in (figures first, so the texts never name a missing one)
    (paths.reports / FIGURES).mkdir(parents=True, exist_ok=True)
    for final in dict.fromkeys(ctx.figures):  # a name drawn twice: its last drawing, once
        os.replace(staging / final.name, final)
    write_together(texts)
    keep = {p.resolve() for p in ctx.figures}
    for stale in (paths.reports / FIGURES).glob("*.png"):
        if stale.resolve() not in keep:
            stale.unlink()
    return Report(
        md, html_text, metrics, cells, files=[*files.values(), *ctx.figures], figures=list(ctx.figures)
    )
