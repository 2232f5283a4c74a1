"""How long each stage of the study took, from the wall time its MLflow run logged.

Every stage run logs ``wall_time_s`` (:func:`attnflow.tracking.stage_run`): the seconds from the
run's start to the end of the stage's body, on the machine that ran it. For one study config
(its ``config_hash`` tag) the latest finished run of each ``stage@task`` is the one ``dvc repro``
last ran; :func:`stage_times` returns them as a tidy table, one row per stage run::

    stage, task, seconds, commit

``task`` is empty for the stages that run once (``report``, ``convert_lm``, ...). The docs' table
(:func:`markdown`) puts one stage per line, one column per task, and the totals of the training
and of every other stage under it. ``python -m pipelines.stage_times`` writes
``reports/stage_times.csv`` from the store and the table between ``<!-- results:stage_times -->``
and ``<!-- /results:stage_times -->`` in ``docs/results.md`` from that file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = [
    "COLUMNS",
    "MARKERS",
    "SAME_CODE",
    "TRAINING",
    "from_store",
    "markdown",
    "read_table",
    "stage_times",
    "totals",
    "untimed",
    "with_code",
    "with_this_run",
]

COLUMNS = ("stage", "task", "seconds", "commit")
MARKERS = ("<!-- results:stage_times -->\n", "<!-- /results:stage_times -->")
TRAINING = ("train",)  # the stages that fit models; every other stage is "non-training"
ONCE = "all"  # the dataset tag of the stages that run once (attnflow.tracking.stage_run)
SAME_CODE = "same"  # `code` of a stage whose declared code files are those of the checkout


def stage_times(runs: Sequence[Any], order: Sequence[str] = ()) -> pd.DataFrame:
    """The latest finished run of each (stage, task) among ``runs`` (MLflow ``Run`` objects of one
    config), with its wall time and commit, in ``order`` of stages (then by name)."""
    latest: dict[tuple[str, str], Any] = {}
    for run in runs:
        tags, metrics = run.data.tags, run.data.metrics
        if run.info.status != "FINISHED" or "stage" not in tags or "wall_time_s" not in metrics:
            continue
        dataset = tags.get("dataset") or ""
        key = (tags["stage"], "" if dataset == ONCE else dataset)
        if key not in latest or run.info.end_time > latest[key].info.end_time:
            latest[key] = run
    rank = {name: i for i, name in enumerate(order)}
    rows = [
        {
            "stage": stage,
            "task": task,
            "seconds": round(float(run.data.metrics["wall_time_s"]), 1),
            "commit": _short(run.data.tags.get("git_commit") or ""),
        }
        for (stage, task), run in latest.items()
    ]
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    table["_rank"] = table["stage"].map(lambda s: rank.get(s, len(rank)))
    return table.sort_values(["_rank", "stage", "task"]).drop(columns="_rank").reset_index(drop=True)


def _short(commit: str) -> str:
    """A commit's 12 first characters, keeping ``+dirty`` (the run was of uncommitted changes)."""
    sha, plus, rest = commit.partition("+")
    return sha[:12] + plus + rest


def from_store(uri: str, experiment: str, config_hash: str, order: Sequence[str] = ()) -> pd.DataFrame:
    """`stage_times` of the runs tagged ``config_hash`` in the MLflow ``experiment`` at ``uri``
    (ValueError naming both when the experiment is not there)."""
    import mlflow

    client = mlflow.MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise ValueError(f"no MLflow experiment {experiment!r} in {uri}: run `dvc repro` first")
    runs = client.search_runs([found.experiment_id], f"tags.config_hash = '{config_hash}'", max_results=5000)
    return stage_times(runs, order)


def with_code(
    table: pd.DataFrame,
    root: Path,
    deps: Callable[[str], Sequence[str]],
    head: str,
    lock: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """``table`` with a column ``code``: for each stage run, whether the code files its stage declares
    (``deps(stage)``: dvc.yaml's deps) are those of the checkout at ``head``: :data:`SAME_CODE`,
    "changed: <files>", or "unknown" (nothing can tell). ``lock``: dvc.lock, parsed. Where its md5s
    of the stage execution's dependencies (`attnflow.lockfile.lock_deps`) cover every declared file,
    they are compared with the checkout's (`attnflow.lockfile.lock_md5`, each path hashed once): the code the
    outputs were made with, whether the run was of a commit or of uncommitted changes (a commit
    ending ``+dirty``), as ``dvc status`` compares them. Elsewhere git compares the commit that ran
    it with the checkout. A stage whose declared code did not change since is the code of ``head``;
    one commit then stands behind every number.
    """
    from functools import cache

    from attnflow.lockfile import lock_deps, lock_md5
    from attnflow.sweep import changed_since

    checkout = cache(lambda path: lock_md5(Path(root) / path))  # a folder shared by many stages: once

    def said(changed: Sequence[str] | None) -> str:
        if changed is None:
            return "unknown"
        return SAME_CODE if not changed else "changed: " + ", ".join(changed)

    def code(row: Any) -> str:
        files = list(deps(row.stage))
        ran = lock_deps(lock, row.stage, row.task or None) if lock else {}
        if ran and files and all(f in ran for f in files):
            return said([f for f in files if checkout(f) != ran[f]])
        if not row.commit:
            return "unknown"
        if head.startswith(row.commit):
            return SAME_CODE
        return said(changed_since(root, row.commit, files))

    return table.assign(code=[code(r) for r in table.itertuples(index=False)])


def with_this_run(table: pd.DataFrame, stage: str, code: Mapping[str, Any]) -> pd.DataFrame:
    """``table`` (with its ``code`` column) with the rows of ``stage`` replaced by the run now
    writing it: the store's latest finished run of a stage that reads the table is the one before
    it. This one runs ``code`` (:func:`attnflow.sweep.code_state`): its commit, ``+dirty`` when its
    code folders differ from it, and the checkout's code by definition; its seconds are not known yet."""
    commit = _short(str(code.get("commit") or "") + ("+dirty" if code.get("dirty") else ""))
    row = {"stage": stage, "task": "", "seconds": float("nan"), "commit": commit, "code": SAME_CODE}
    return pd.concat([table[table["stage"] != stage], pd.DataFrame([row])], ignore_index=True)


def read_table(path: Path) -> pd.DataFrame:
    """The csv `python -m pipelines.stage_times` writes (empty task and commit cells stay "")."""
    return pd.read_csv(path, keep_default_na=False, dtype={"commit": str, "task": str})


def totals(table: pd.DataFrame) -> dict[str, float]:
    """Seconds of the training stages and of every other stage, summed over tasks."""
    training = table["stage"].isin(TRAINING)
    return {
        "training": round(float(table.loc[training, "seconds"].sum()), 1),
        "non-training": round(float(table.loc[~training, "seconds"].sum()), 1),
    }


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def untimed(table: pd.DataFrame, lock: Mapping[str, Any]) -> list[str]:
    """The stage executions of ``lock`` (dvc.lock, parsed; named ``<stage>@<task>`` or ``<stage>``)
    that ``table`` has no row for, in the lock's order."""
    from attnflow.lockfile import lock_key, unrecorded

    have = {lock_key(r.stage, r.task or None) for r in table.itertuples(index=False)}
    return [lock_key(stage, task) for stage, task in unrecorded(lock, have)]


def markdown(table: pd.DataFrame, missing: Sequence[str] = ()) -> str:
    """The docs' table: a stage per line, a column per task ("" = the stages that run once).
    ``missing``: the stage executions of dvc.lock without a run in the table (`untimed`), named
    under it, since the totals leave them out."""
    if table.empty:
        raise ValueError("no stage times: run `dvc repro` first (with tracking enabled)")
    tasks = sorted(t for t in table["task"].unique() if t)
    head = ["stage", *tasks, "once"] if (table["task"] == "").any() else ["stage", *tasks]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for stage, rows in table.groupby("stage", sort=False):
        got = dict(zip(rows["task"], rows["seconds"], strict=True))
        cells = [_duration(got[t]) if t in got else "" for t in tasks]
        if "once" in head:
            cells.append(_duration(got[""]) if "" in got else "")
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    total = totals(table)
    by_commit = {
        commit or "not recorded": ", ".join(dict.fromkeys(rows["stage"]))
        for commit, rows in table.groupby("commit", sort=False)
    }
    code = "; ".join(f"{commit}: {stages}" for commit, stages in by_commit.items())
    text = (
        f"Training: {_duration(total['training'])}; every other stage: {_duration(total['non-training'])}. "
        f"Code (commit: stages): {code}."
    )
    if missing:
        text += (
            f" No finished run of this config in the store for {', '.join(missing)} (dvc.lock holds its "
            "outputs): the totals leave it out."
        )
    if "code" in table:
        report = table.loc[table["stage"] == "report", "commit"]
        head = report.iloc[-1] if len(report) else "the checkout"
        other = table[table["code"] != SAME_CODE]
        text += (
            f" The declared code of every stage is that of {head} (dvc.lock records, for a stage that ran at "
            "another commit or on uncommitted changes, the same code files as this checkout)."
            if other.empty
            else " Stages whose code differs from the report's: "
            + "; ".join(f"{r.stage}@{r.task or 'once'} ({r.code})" for r in other.itertuples())
            + "."
        )
    return "\n".join([*lines, "", text])
