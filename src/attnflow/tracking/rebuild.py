"""An MLflow store rebuilt from a checkout's committed study (``params.yaml``, ``dvc.yaml``,
``dvc.lock`` and ``reports/``), in seconds, so the study can be browsed without re-running it.

    python -m pipelines.rebuild_mlflow --store sqlite:///mlflow.db     # in a checkout (choices from conf/)
    python -m attnflow.tracking.rebuild --root . --store sqlite:///mlflow.db --choice protocol=final_notebook
    mlflow ui --backend-store-uri sqlite:///mlflow.db

What `dvc repro` logs (:func:`attnflow.tracking.stage_run` and
:func:`attnflow.tracking.log_outputs`), made from the committed files with the same helpers: the
experiment (``tracking.experiment``, marked model development, with the headline view), the parent
run of the config (the whole config as params, the choices and seed as tags, the same name and
``config_hash``), and one child run per stage execution of ``dvc.lock`` and
``reports/stage_times.csv`` (a stage the table lacks is rebuilt untimed, of commit "unknown")
(``<stage>@<task>``: tags ``stage``, ``dataset``, ``config_hash``, ``seed``, the choices; the
stage's ``dvc.yaml`` params as params; its docstring as description; its committed outputs as
artifacts and ``outputs.json``; its metrics files as metrics and their headline on the parent;
``wall_time_s`` from the stage-time table). Each finished job of a committed sweep
(``reports/<sweep>/jobs.json``, with its correlations.csv and faithfulness.csv) becomes a parent run
as a live sweep job's (name, tags, params of its composed config) holding its headline metrics
(:func:`sweep_headline`), so the seeds and switches compare side by side; its stage runs are not
rebuilt (a sweep keeps tables, not per-stage files).

What differs from a live run, by necessity: ``git_commit`` is the commit the stage-time table
records for the stage (the reports' commit, 12 characters), ``inputs_md5`` and ``inputs.json``
cover the stage's ``dvc.lock`` dependencies (a live run hashes its data inputs, absent from a
clone), outputs not in git (models, captures) are not artifacts and no model is registered, and
the metrics a stage body logs from values held only in memory (capture and explain counts,
Lightning's training curves, the faithfulness costs, the report's cells) are absent; those a body
logs from a committed file are rebuilt (:data:`BODY_METRICS`). Every rebuilt run carries the tag
:data:`REBUILT_TAG`. Rebuilding into a store that already holds the config's parent run is refused.
"""

from __future__ import annotations

import argparse
import ast
import csv
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnflow.lockfile import lock_deps, lock_key, read_lock, unrecorded

from .experiment import NOTE_TAG, PARENT_TAG, _experiment, _headline_view, _log_params, _parent_run, run_name
from .names import config_hash, flatten
from .outputs import declared, headline, log_outputs
from .runs import StageRun

__all__ = [
    "BODY_METRICS",
    "REBUILT_TAG",
    "UNKNOWN",
    "Rebuilt",
    "StageExecution",
    "main",
    "read_config",
    "rebuild_store",
    "stage_runs",
    "sweep_headline",
    "sweep_jobs",
]

REBUILT_TAG = "attnflow.rebuilt_from"  # value: "reports/ at <commit>": this run was not a live one
STAGE_TIMES = "stage_times.csv"
UNKNOWN = "unknown"  # the commit of a stage execution the stage-time table does not record


def _correlation_cells(payload: Mapping[str, Any]) -> dict[str, float]:
    """correlate's body: ``corr/<importance>/<method>/L<k>`` = the mean of correlations.json's cell."""
    flat = flatten(payload)
    return {"corr/" + k[: -len(".mean")].replace(".", "/"): v for k, v in flat.items() if k.endswith(".mean")}


# What a stage's body logs (besides log_outputs) that a committed metrics file holds: the file's
# stem, and the metrics made of its payload. prepare, generate and pronouns log the file's payload
# as it is; correlate the mean of each cell; answer its "metrics" node.
BODY_METRICS: dict[str, tuple[str, Callable[[Mapping[str, Any]], Mapping[str, Any]]]] = {
    "prepare": ("data_summary", dict),
    "generate": ("summary", dict),
    "pronouns": ("summary", dict),
    "correlate": ("correlations", _correlation_cells),
    "answer": ("summary", lambda payload: payload["metrics"]),
}


@dataclass(frozen=True)
class Rebuilt:
    """What :func:`rebuild_store` made: the experiment, the parent run, one child run id per
    ``<stage>@<task>`` (``<stage>`` for a stage over the whole study), and one parent run per job
    of a committed sweep (``reports/<sweep>/jobs.json``)."""

    experiment: str
    experiment_id: str
    parent_id: str
    runs: dict[str, str] = field(default_factory=dict)
    sweeps: dict[str, str] = field(default_factory=dict)  # "<sweep folder>/<job>" -> its parent run id


@dataclass(frozen=True)
class StageExecution:
    """One row of the stage-time table: a stage, its task (None: the whole study), its wall time
    and the commit its outputs were made at."""

    stage: str
    task: str | None
    seconds: float | None
    commit: str


def stage_runs(reports: Path, lock: Mapping[str, Any] | None = None) -> list[StageExecution]:
    """The stage executions of ``reports/stage_times.csv`` (columns stage, task, seconds, commit),
    in its order, then every stage of ``lock`` (dvc.lock) the table lacks, in the lock's order,
    untimed and of commit :data:`UNKNOWN` (its outputs are committed; its MLflow run was not found
    when the table was written). Raises FileNotFoundError naming the file when it is missing."""
    path = Path(reports) / STAGE_TIMES
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no stage-time table; the committed study writes it (dvc repro), so this is not one"
        )
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    missing = {"stage", "task", "seconds", "commit"} - set(rows[0] if rows else {})
    if missing:
        raise ValueError(f"{path}: missing column(s) {sorted(missing)}")
    timed = [
        StageExecution(
            stage=r["stage"],
            task=r["task"] or None,
            seconds=float(r["seconds"]) if r["seconds"] else None,
            commit=r["commit"],
        )
        for r in rows
    ]
    seen = {lock_key(ex.stage, ex.task) for ex in timed}
    return timed + [StageExecution(s, t, None, UNKNOWN) for s, t in unrecorded(lock or {}, seen)]


def _lock_inputs(lock: Mapping[str, Any], stage: str, task: str | None) -> tuple[str, dict[str, str]]:
    """md5 per dependency of the stage in dvc.lock, and one md5 over them (as ``inputs_md5``)."""
    per_file = lock_deps(lock, stage, task)
    if not per_file:
        return "none", per_file
    if len(per_file) == 1:
        return next(iter(per_file.values())), per_file
    blob = json.dumps(per_file, sort_keys=True).encode()
    return hashlib.md5(blob, usedforsecurity=False).hexdigest(), per_file


def stage_description(root: Path, stage: str) -> str | None:
    """The stage script's docstring (``pipelines/<stage>.py``), read without importing it."""
    path = Path(root) / "pipelines" / f"{stage}.py"
    if not path.is_file():
        return None
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    return doc.strip() if doc else None


@contextmanager
def _inside(folder: Path) -> Iterator[None]:
    """Run the block in ``folder``: dvc.yaml's paths are relative to the repository root, and a
    live stage logs them as such."""
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def read_config(path: str | Path) -> dict[str, Any]:
    """params.yaml as the stages read it (OmegaConf, resolved: ``1e-3`` is a float there, a string
    to PyYAML), so its ``config_hash`` is a live run's."""
    from omegaconf import OmegaConf

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found; run from the repository root or pass --root")
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)  # type: ignore[return-value]


def rebuild_store(
    root: str | Path,
    store: str,
    *,
    choices: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    reports: str | Path | None = None,
    describe: Callable[[Sequence[str]], tuple[Mapping[str, Any], Mapping[str, str]]] | None = None,
) -> Rebuilt:
    """Build an MLflow store at ``store`` (a tracking URI) from the committed study under ``root``.

    ``choices``: the config-group choices (protocol, recipe, switch), tags of every run as in a live
    run (``pipelines.rebuild_mlflow`` reads them from conf/); ``overrides``: the config's changes
    from conf/'s defaults, listed in the parent's description; ``reports``: the reports folder
    (default: ``paths.reports`` of params.yaml); ``describe``: a sweep job's Hydra overrides ->
    (its config, its choices), as the sweep composed them (default: params.yaml with the job's
    seed, and ``choices``). Raises FileExistsError when the store already holds this config's
    parent run.
    """
    import mlflow

    root = Path(root).resolve()
    config = read_config(root / "params.yaml")
    lock = read_lock(root / "dvc.lock")
    reports_dir = root / (reports or config.get("paths", {}).get("reports", "reports"))
    executions = stage_runs(reports_dir, lock)
    choices = dict(choices or {})
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(store)
    try:
        # in root, as `dvc repro`: dvc.yaml's paths are relative to it, and a local store's
        # artifacts go to root/mlruns as a live run's do
        with _inside(root):
            client = mlflow.MlflowClient(store)
            made = _rebuild(client, store, root, config, lock, executions, reports_dir, choices,
                            dict(overrides or {}))  # fmt: skip

            def seeded(args: Sequence[str]) -> tuple[Mapping[str, Any], Mapping[str, str]]:
                seeds = [a.split("=", 1)[1] for a in args if a.startswith("seed=")]
                return ({**config, "seed": int(seeds[-1])} if seeds else config), choices

            for name, job in sweep_jobs(reports_dir):
                made.sweeps[f"{name}/{job['job']}"] = _sweep_parent(
                    client, made.experiment_id, reports_dir / name, job, describe or seeded
                )
            return made
    finally:
        mlflow.set_tracking_uri(previous)


def _rebuild(
    client: Any,
    store: str,
    root: Path,
    config: Mapping[str, Any],
    lock: Mapping[str, Any],
    executions: Sequence[StageExecution],
    reports_dir: Path,
    choices: Mapping[str, str],
    overrides: Mapping[str, Any],
) -> Rebuilt:
    experiment = (config.get("tracking") or {}).get("experiment") or config.get("study") or "attnflow"
    digest = config_hash(config)
    experiment_id = _experiment(client, experiment)
    query = f"tags.`{PARENT_TAG}` = 'true' and tags.config_hash = '{digest}'"
    if client.search_runs([experiment_id], query, max_results=1):
        raise FileExistsError(
            f"{store}: experiment {experiment!r} already holds config {digest}; use a new store"
        )
    _headline_view(client, experiment_id, list(config.get("tasks") or []))
    parent_id = _parent_run(client, experiment_id, digest, config, overrides, choices)
    timed = [ex.commit for ex in executions if ex.commit != UNKNOWN]
    last_commit = timed[-1] if timed else UNKNOWN
    for key, value in {"git_commit": last_commit, REBUILT_TAG: f"reports/ at {last_commit}"}.items():
        client.set_tag(parent_id, key, value)
    # declared() resolves ${paths.reports} from the config: point it at the folder given
    resolving = {
        **config,
        "paths": {**config.get("paths", {}), "reports": os.path.relpath(reports_dir, root)},
    }
    made: dict[str, str] = {}
    for ex in executions:
        run_id = _stage_run(client, store, experiment, experiment_id, parent_id, config, resolving,
                            lock, ex, choices, root)  # fmt: skip
        made[lock_key(ex.stage, ex.task)] = run_id
    client.set_terminated(parent_id, "FINISHED")
    return Rebuilt(experiment=experiment, experiment_id=experiment_id, parent_id=parent_id, runs=made)


def sweep_jobs(reports: Path) -> list[tuple[str, dict[str, Any]]]:
    """(sweep folder, job) for every finished job of ``reports/<folder>/jobs.json``, in order."""
    found = []
    for jobs_file in sorted(Path(reports).glob("*/jobs.json")):
        for job in json.loads(jobs_file.read_text(encoding="utf-8")).get("jobs", []):
            if job.get("status", "finished") == "finished":
                found.append((jobs_file.parent.name, job))
    return found


def _rows(path: Path, job: str) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return [r for r in csv.DictReader(f) if r.get("job") == job]


def sweep_headline(folder: Path, job: Mapping[str, Any]) -> dict[str, float]:
    """The headline metrics a sweep job's stages put on its parent run, from the sweep's committed
    tables: ``<task>/accuracy`` (jobs.json), ``<task>/corr/<reference>/<method>/L<k>`` (the
    configured variant's head-mean cells of correlations.csv), ``<task>/faithfulness/<method>/<measure>``
    (the last layer of faithfulness.csv, as faithfulness.json holds it)."""
    out: dict[str, float] = {}
    for task, payload in (job.get("accuracy") or {}).items():
        out.update(headline("train_metrics", task, payload))
    for r in _rows(Path(folder) / "correlations.csv", str(job["job"])):
        if r["variant"] == "configured" and not r["head"] and r["mean"]:
            out[f"{r['task']}/corr/{r['importance']}/{r['method']}/L{r['layer']}"] = float(r["mean"])
    faithfulness = _rows(Path(folder) / "faithfulness.csv", str(job["job"]))
    last: dict[tuple[str, str], int] = {}
    for r in faithfulness:
        if r["layer"]:
            key = (r["task"], r["method"])
            last[key] = max(last.get(key, 0), int(r["layer"]))
    for r in faithfulness:
        if r["mean"] and (not r["layer"] or int(r["layer"]) == last[(r["task"], r["method"])]):
            out[f"{r['task']}/faithfulness/{r['method']}/{r['metric']}"] = float(r["mean"])
    return out


def _sweep_parent(
    client: Any,
    experiment_id: str,
    folder: Path,
    job: Mapping[str, Any],
    describe: Callable[[Sequence[str]], tuple[Mapping[str, Any], Mapping[str, str]]],
) -> str:
    """The parent run of one sweep job (its stage runs are not rebuilt: the sweep keeps tables, not
    per-stage files): named, tagged and given params as a live job's, with its headline metrics."""
    import shlex

    from mlflow.entities import Metric

    from .names import layer_steps

    config, choices = describe(shlex.split(str(job.get("overrides") or "")))
    digest = config_hash(config)
    commit = str((job.get("provenance") or {}).get("commit") or "unknown")
    tags = {PARENT_TAG: "true", "config_hash": digest, "git_commit": commit, **dict(choices),
            "mlflow.runName": run_name(choices, config.get("seed"), digest),
            NOTE_TAG: f"Sweep `{folder.name}` job {job['job']}: `{job.get('overrides') or 'defaults'}` "
                      "(rebuilt from its tables: no stage runs).",
            "sweep": folder.name, "sweep_job": str(job["job"]), REBUILT_TAG: f"reports/{folder.name} at {commit}"}  # fmt: skip
    if "seed" in config:
        tags["seed"] = str(config["seed"])
    run_id = client.create_run(experiment_id, tags=tags).info.run_id
    _log_params(client, run_id, flatten(config))
    now = int(time.time() * 1000)
    metrics = [Metric(k, v, now, step or 0) for k, step, v in layer_steps(sweep_headline(folder, job))]
    for i in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[i : i + 1000])
    client.set_terminated(run_id, "FINISHED")
    return run_id


def _stage_run(
    client: Any,
    store: str,
    experiment: str,
    experiment_id: str,
    parent_id: str,
    config: Mapping[str, Any],
    resolving: Mapping[str, Any],
    lock: Mapping[str, Any],
    ex: StageExecution,
    choices: Mapping[str, str],
    root: Path,
) -> str:
    """One stage execution's run, as stage_run + log_outputs make it (see the module docstring)."""
    import mlflow

    stage = declared(root / "dvc.yaml", ex.stage, item=ex.task, config=resolving)
    params = declared(root / "dvc.yaml", ex.stage, item=ex.task, config=config).params
    digest, per_file = _lock_inputs(lock, ex.stage, ex.task)
    tags = {
        "stage": ex.stage,
        "dataset": ex.task or "all",
        "git_commit": ex.commit,
        "config_hash": config_hash(config),
        "inputs_md5": digest,
        "mlflow.runName": lock_key(ex.stage, ex.task),
        **dict(choices),
        "mlflow.parentRunId": parent_id,
        REBUILT_TAG: f"reports/ at {ex.commit}",
    }
    if "seed" in config:
        tags["seed"] = str(config["seed"])
    description = stage_description(root, ex.stage)
    if description:
        tags[NOTE_TAG] = description
    run = client.create_run(experiment_id, tags=tags)
    run_id = run.info.run_id
    _log_params(client, run_id, flatten(params))
    with mlflow.start_run(run_id=run_id) as active:
        if per_file:
            mlflow.log_dict(per_file, "inputs.json")
        logged = StageRun(active, client, store, experiment, parent_id)
        if ex.stage in BODY_METRICS:
            stem, cells = BODY_METRICS[ex.stage]
            for path in stage.metrics:
                if path.stem == stem and path.is_file():
                    logged.log_metrics(cells(json.loads(path.read_text(encoding="utf-8"))))
        log_outputs(logged, stage, task=ex.task, model_name=None)
        if ex.seconds is not None:
            logged.log_metrics({"wall_time_s": ex.seconds})
            logged.log_metrics({f"wall_time_s/{ex.stage}/{ex.task or 'all'}": ex.seconds}, parent=True)
    return run_id


def _choice(text: str) -> tuple[str, str]:
    group, sep, option = text.partition("=")
    if not sep or not group or not option:
        raise argparse.ArgumentTypeError(
            f"--choice {text!r}: expected GROUP=OPTION, e.g. protocol=final_notebook"
        )
    return group, option


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m attnflow.tracking.rebuild",
        description="Build an MLflow store from the committed study (params.yaml, dvc.yaml, dvc.lock, reports/).",
    )
    parser.add_argument("--root", default=".", help="the repository root (default: .)")
    parser.add_argument(
        "--reports", default=None, help="the reports folder (default: paths.reports of params.yaml)"
    )
    parser.add_argument(
        "--store", default="sqlite:///mlflow.db", help="the tracking URI to write (default: %(default)s)"
    )
    parser.add_argument("--choice", action="append", type=_choice, default=[], metavar="GROUP=OPTION",
                        help="a config-group choice to tag the runs with (repeatable)")  # fmt: skip
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    choices: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    describe: Callable[[Sequence[str]], tuple[Mapping[str, Any], Mapping[str, str]]] | None = None,
) -> int:
    """The command line: rebuild, then say what was made and how to browse it."""
    args = build_parser().parse_args(argv)
    try:
        made = rebuild_store(args.root, args.store, choices={**dict(args.choice), **dict(choices or {})},
                             overrides=overrides, reports=args.reports, describe=describe)  # fmt: skip
    except (FileNotFoundError, FileExistsError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.store}: experiment {made.experiment!r} ({made.experiment_id}), parent run {made.parent_id}, "
          f"{len(made.runs)} stage runs, {len(made.sweeps)} sweep jobs; "
          f"browse: mlflow ui --backend-store-uri {args.store}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
