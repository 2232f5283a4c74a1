"""Seed sweeps: stack the correlation tables of a sweep's jobs into one table, and say which failed.

A sweep (``python -m pipelines.study -m seed=0,1,2``) runs each job in its own folder
``<sweep>/<job number>/`` with its ``params.yaml`` and the same layout as ``dvc repro``. A job is
*finished* when every task's correlation table exists; a failed job left ``error.txt``. The stacked
table (one row per job and cell, columns of the correlation table plus ``seed`` and ``job``) goes to
``reports/sweep/correlations.csv``, the jobs' faithfulness tables to ``reports/sweep/faithfulness.csv``;
the report groups them by cell.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from attnflow.io import read_json, read_parquet, write_json, write_text
from attnflow.paths import StudyPaths

__all__ = ["stack_jobs"]


def _last_line(path: Path) -> str:
    lines = [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "failed (no message)"


def _accuracy(path: Path) -> dict[str, Any]:
    """A job's accuracies from its train_metrics.json: test, teacher, per attractor count, and the
    number of training items (a learning curve's x)."""
    if not path.is_file():
        return {}
    metrics = read_json(path)
    attractors = metrics.get("extra_eval", {}).get("attractors", {})
    return {
        "accuracy": metrics.get("accuracy"),
        "teacher_accuracy": (metrics.get("teacher") or {}).get("accuracy"),
        "accuracy_by_attractors": attractors.get("accuracy_by_attractors"),
        "n_train": metrics.get("n_train"),
    }


def stack_jobs(
    sweep_dir: Path,
    paths: Mapping[str, Any],
    tasks: Sequence[str],
    out: StudyPaths,
    *,
    error_file: str = "error.txt",
    name: str = "sweep",
) -> dict[str, Any]:
    """Write ``out.sweep_table(name)`` (stacked tables of the finished jobs, with their ``seed``,
    ``job`` and the job's ``overrides`` other than the seed) and ``out.sweep_jobs_file(name)`` (every
    job: seed, overrides, recipe (the overrides but the seed), status, error, and each task's test / teacher / per-attractor accuracy);
    return the latter's content."""
    import yaml

    table_file, jobs_file = out.sweep_table(name), out.sweep_jobs_file(name)  # a bad name: refused first
    jobs = sorted(  # a job that failed before writing its params.yaml (a refused config) still counts
        (p for p in Path(sweep_dir).iterdir() if (p / "params.yaml").is_file() or (p / error_file).is_file()),
        key=lambda p: (len(p.name), p.name),
    )
    records, tables, faithfulness = [], [], []
    for job in jobs:
        params_file = job / "params.yaml"
        params = yaml.safe_load(params_file.read_text(encoding="utf-8")) if params_file.is_file() else {}
        job_paths = StudyPaths.from_config(paths, root=job)
        overrides = job / ".hydra" / "overrides.yaml"
        given = yaml.safe_load(overrides.read_text()) if overrides.is_file() else []
        seed = params.get("seed", next((o.split("=", 1)[1] for o in given if o.startswith("seed=")), None))
        record = {
            "job": job.name,
            "seed": int(seed) if seed is not None else None,
            "overrides": " ".join(given),
            "recipe": " ".join(
                o for o in given if not o.startswith("seed=")
            ),  # what the job varies besides the seed
        }
        done = all(job_paths.correlations(t).is_file() for t in tasks)
        if (job / error_file).is_file():
            record.update(status="failed", error=_last_line(job / error_file))
        elif not done:
            record.update(status="incomplete", error="no correlation table for every task")
        else:
            record["status"] = "finished"
            record["accuracy"] = {t: _accuracy(job_paths.train_metrics(t)) for t in tasks}
            tables += [
                read_parquet(job_paths.correlations(t)).assign(
                    seed=record["seed"], job=job.name, overrides=record["recipe"]
                )
                for t in tasks
            ]
            faithfulness += [
                read_parquet(job_paths.faithfulness(t)).assign(seed=record["seed"], job=job.name, task=t)
                for t in tasks
                if job_paths.faithfulness(t).is_file()
            ]
        records.append(record)
    payload = {
        "jobs": records,
        "failed": [r for r in records if r["status"] != "finished"],
        "seeds": sorted(r["seed"] for r in records if r["status"] == "finished"),
    }
    stacked = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    write_text(table_file, stacked.to_csv(index=False))
    faith = pd.concat(faithfulness, ignore_index=True) if faithfulness else pd.DataFrame()
    write_text(out.sweep_faithfulness(name), faith.to_csv(index=False))
    write_json(jobs_file, payload)
    return payload
