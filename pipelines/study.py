"""The whole study as one Hydra app, for sweeps: ``python -m pipelines.study -m seed=0,1,2``.

Each job runs every stage in its own folder (``multirun/<study>/<job number>/``), logs to the shared
MLflow store (created, with the study's experiment, by the sweep before its jobs start:
:func:`open_store`), and writes the same files as ``dvc repro`` below that folder. When the sweep ends,
:class:`AggregateSeeds` stacks the correlation tables of the jobs that finished into
``reports/sweep/correlations.csv`` (columns ``seed`` and ``commit`` added) and lists every job, failed
ones with their error, with the code that ran it (``provenance.json``: commit, dirty flag, digest of
src/, pipelines/, conf/) in ``reports/sweep/jobs.json``; the report stage reads both (a declared dependency, so
``dvc repro`` refreshes the report). Committed results are replaced only by a whole sweep: when
every job finished, the three files are written beside and swapped in together; when some failed,
``reports/sweep/`` is left as it was, the finished jobs are stacked in ``<sweep>/aggregate/``
(``hydra.callbacks.aggregate.partial=true`` publishes them too) and the sweep exits non-zero naming the
failed jobs; when none finished, nothing is written and the sweep exits non-zero in one line. A
single run (no ``-m``) that fails exits non-zero too. Launchers: ``hydra/launcher=local`` (default, joblib
processes), ``hydra/launcher=cluster`` (SLURM) or ``hydra/launcher=submitit_local``.

A job does not train again what an earlier job trained on the same inputs: with the callback
``hydra.callbacks.reuse`` (on by default; ``~hydra.callbacks.reuse`` trains every job), ``train@TASK``
is looked up in a stage cache (:mod:`attnflow.stage_cache`, folder ``hydra.callbacks.reuse.cache``)
under the key of everything it reads: the files of its code (the deps ``dvc.yaml`` lists, computed
by :mod:`pipelines.dvc_deps`), the prepared data, its declared params (seed, trainer, the task's
model and train blocks) and the machine. A hit copies the stored model and curves in place of the
run; a miss trains and stores. Each job's ``reuse.json`` says which trainings were taken and from
which commit; ``jobs.json`` carries it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

import hydra
from hydra.experimental.callback import Callback
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf

from pipelines import (
    _config,
    _stage,
    attribute,
    capture,
    correlate,
    download,
    dvc_deps,
    explain,
    faithfulness,
    prepare,
    train,
)

TASK_STAGES = (download, prepare, train, capture, explain, attribute, correlate, faithfulness)
ERROR_FILE = "error.txt"  # a failed job writes its traceback here, in its own folder
REUSE_FILE = "reuse.json"  # per task: the stage-cache key of its training, and whether it was taken


def localize(cfg: DictConfig) -> DictConfig:
    """Make the paths that must be shared across jobs absolute (mirrors, the sqlite MLflow store)."""
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    cfg.data.mirrors = [to_absolute_path(m) for m in cfg.data.mirrors]
    cfg.tracking.uri = _shared_uri(cfg.tracking.uri)
    return _config.validate(cfg)


def _shared_uri(uri: str) -> str:
    """A relative sqlite store made absolute from where the sweep starts (jobs run in their folders)."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + to_absolute_path(uri[len("sqlite:///") :])
    return uri


def open_store(config: DictConfig) -> None:
    """Before the jobs start: create the MLflow store and the study's experiment once, in the sweep's
    process. Jobs started together on a new sqlite store both run its schema migration, and one
    fails (alembic: "expected to match one row ... 0 found"); two that find no experiment both
    create it, and one fails. A server that does not answer ends the sweep here, in one line."""
    from attnflow.tracking.runs import TrackingUnavailable, probe, tracking_uri

    track = config.get("tracking")
    if track is None or not track.enabled:
        return
    uri = tracking_uri(_shared_uri(track.uri))
    try:
        probe(uri)
    except TrackingUnavailable as exc:
        sys.exit(f"error: {exc}")
    import mlflow

    client = mlflow.MlflowClient(uri)
    name = track.experiment or config.study
    if client.get_experiment_by_name(name) is None:
        client.create_experiment(name)


def run(cfg: DictConfig) -> None:
    """Run every stage for every task in the current folder, after recording which code runs them."""
    from attnflow.io import write_json
    from attnflow.sweep import PROVENANCE_FILE, code_state

    state = code_state(_config.ROOT)
    write_json(Path(PROVENANCE_FILE), state)
    _config.write(cfg, Path("params.yaml"))
    cache, reused, fill = train_cache(), {}, fill_only()
    for task in cfg.tasks:
        for stage in TASK_STAGES[: TASK_STAGES.index(train) + 1] if fill else TASK_STAGES:
            if stage is train and cache is not None:
                reused[task] = train_or_reuse(cfg, task, cache, commit=state["commit"])
                write_json(Path(REUSE_FILE), reused)
            else:
                stage.run(cfg, task)


def fill_only() -> bool:
    """``hydra.callbacks.reuse.fill=true``: the jobs train (or find) each task's model in the stage
    cache and stop there, so that trainings run while the code of the later stages still changes
    (:func:`fill_requested`)."""
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.initialized() and fill_requested(HydraConfig.get().callbacks)


def fill_requested(callbacks: Any) -> bool:
    """Whether the sweep's callbacks ask for a cache fill; a fill that would still aggregate (and
    so fail on jobs without results) is refused in one line naming the override to add."""
    reuse = callbacks.get("reuse") if callbacks else None
    if not (reuse and reuse.get("fill")):
        return False
    if callbacks.get("aggregate") is not None:
        raise ValueError(
            "hydra.callbacks.reuse.fill=true stops after training: add ~hydra.callbacks.aggregate"
        )
    return True


def train_cache() -> Path | None:
    """The stage cache of this sweep's trainings (``hydra.callbacks.reuse.cache``, absolute); None
    outside Hydra or without the callback."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    node = HydraConfig.get().callbacks.get("reuse")
    return Path(to_absolute_path(str(node.cache))) if node else None


def train_key(cfg: DictConfig, task: str) -> str:
    """The stage-cache key of ``train@TASK`` in this folder: its code files (dvc.yaml's deps of the
    stage), the prepared data, its declared params and this machine."""
    from attnflow import stage_cache, tracking

    code = {dep: _config.ROOT / dep for dep in dvc_deps.stage_deps("train", [])}
    params = tracking.declared(_stage.DVC_YAML, "train", item=task, config=_config.to_dict(cfg)).params
    inputs = {**code, "prepared": _stage.paths(cfg).prepared_data(task)}
    return stage_cache.stage_key(inputs, params, stage_cache.machine())


def train_or_reuse(cfg: DictConfig, task: str, cache: Path, *, commit: str | None) -> dict[str, Any]:
    """Run ``train@TASK``, or take the stored run of the same key: its model folder and timing, and
    the reported copies made from them as the stage makes them. Returns what ``reuse.json`` keeps."""
    from attnflow import stage_cache

    paths, key = _stage.paths(cfg), train_key(cfg, task)
    outputs = {"model": paths.model_dir(task), "timing": paths.train_timing(task)}
    try:
        record, refused = stage_cache.restore(cache, key, outputs), False
    except stage_cache.CacheEntryError as exc:  # damaged or misfiled: never taken; trained and replaced
        print(f"[train {task}] stage cache entry refused: {exc}; training instead", file=sys.stderr)
        record, refused = None, True
    if record is None:
        train.run(cfg, task)
        record = {"commit": commit, "task": task, "seed": cfg.seed}
        stage_cache.store(cache, key, outputs, record, replace=refused)
        return {"key": key, "reused": False, "trained_by": commit}
    with _stage.stage_run(cfg, "train", task, inputs=[paths.prepared_data(task)]) as mlrun:
        mlrun.set_tags({"reused_from": key, "trained_by": record.get("commit")})
        for name, target in train.REPORTED.items():
            _stage_copy(paths.model_dir(task) / name, paths.task_reports(task) / target)
            mlrun.log_artifact(paths.model_dir(task) / name)
        mlrun.log_artifact(paths.train_timing(task))
    print(
        f"[train {task}] taken from the stage cache ({key[:12]}, trained by {str(record.get('commit'))[:12]})"
    )
    return {"key": key, "reused": True, "trained_by": record.get("commit")}


def _stage_copy(src: Path, dst: Path) -> None:
    from attnflow.io import atomic_path

    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)


@hydra.main(config_path=str(_config.CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # runs end, not RUNNING
    try:
        run(localize(cfg))
    except Exception as exc:  # recorded, so the other jobs run and the aggregate names this one
        Path(ERROR_FILE).write_text(traceback.format_exc(), encoding="utf-8")
        print(traceback.format_exc(), file=sys.stderr)
        if not _in_sweep():  # a single run has no aggregate to say it failed: its exit code does
            first = (str(exc).splitlines() or [""])[0]
            sys.exit(
                f"error: the run failed ({type(exc).__name__}: {first}); see {Path(ERROR_FILE).resolve()}"
            )
    except BaseException:  # SIGTERM, Ctrl-C: recorded, and the sweep stops
        Path(ERROR_FILE).write_text(traceback.format_exc(), encoding="utf-8")
        raise


def _in_sweep() -> bool:
    """Whether this job is one of a sweep (``-m``): its failure is reported by the aggregate."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


class ReuseTraining(Callback):
    """``hydra.callbacks.reuse``: sweep jobs take trainings of identical inputs from the stage cache
    ``cache`` (see the module docstring); the job reads the node, this says where it is."""

    def __init__(self, cache: str = ".cache/train", fill: bool = False) -> None:
        self.cache, self.fill = cache, fill

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        print(f"sweep: trainings of identical inputs are taken from {to_absolute_path(self.cache)}")


def _refuse_used_folder(folder: str, key: str) -> None:
    """No two runs or sweeps write into one folder: a folder that already holds files is refused."""
    path = Path(to_absolute_path(folder))
    if path.is_dir() and any(p.name != ".hydra" for p in path.iterdir()):
        sys.exit(f"error: {key}={folder} already holds another run's files; choose a new folder")


class AggregateSeeds(Callback):
    """After a sweep: stack the finished jobs' correlation tables into reports/<into>/ (``sweep``
    for seeds; ``hydra.callbacks.aggregate.into=recipes`` for a sweep over recipe choices)."""

    def __init__(self, into: str = "sweep", partial: bool = False) -> None:
        self.into = into
        self.partial = partial  # publish the finished jobs of a sweep where some failed

    def _check_names(self, config: DictConfig) -> None:
        """Refuse, before Hydra makes a folder, a study or aggregate name that leads outside its
        folder (``multirun/<study>/``, ``reports/<into>/``): one line naming the key."""
        from attnflow.paths import UnsafeName, inside

        try:
            inside("multirun", str(config.study), key="study")
            inside(str(config.paths.reports), str(self.into), key="hydra.callbacks.aggregate.into")
        except UnsafeName as exc:
            sys.exit(f"error: {exc}")

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check_names(config)
        _refuse_used_folder(config.hydra.run.dir, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check_names(config)
        _refuse_used_folder(config.hydra.sweep.dir, "hydra.sweep.dir")
        try:  # Hydra would turn an exception here into a warning and start the jobs anyway
            open_store(config)
        except Exception as exc:
            first = (str(exc).splitlines() or [""])[0]
            sys.exit(f"error: the sweep's MLflow store cannot be opened ({type(exc).__name__}: {first})")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        # Hydra turns an exception raised here into a warning and the sweep would exit 0: every
        # failure, ours or unforeseen, ends the sweep with SystemExit, which Hydra lets through
        try:
            message = self.aggregate(config)
        except Exception as exc:
            first = (str(exc).splitlines() or [""])[0]
            sys.exit(
                f"sweep: the aggregate failed, reports/{self.into}/ left as it was: {type(exc).__name__}: {first}"
            )
        if message:
            sys.exit(message)

    def aggregate(self, config: DictConfig) -> str | None:
        """Stack the sweep's finished jobs into reports/<into>/ when every job finished (the files
        swapped in together); else leave reports/<into>/ as it was, stack the finished ones
        in ``<sweep>/aggregate/`` (with ``partial``: into reports/<into>/ as well) and return the
        line that ends the sweep non-zero. None: every job finished."""
        from attnflow.paths import StudyPaths
        from attnflow.sweep import (
            NothingToAggregate,
            aggregate_files,
            failures,
            gather_jobs,
            published_files,
            write_jobs,
        )

        out = StudyPaths.from_config(config.paths, root=to_absolute_path("."))
        target = published_files(out, self.into)
        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            gathered = gather_jobs(
                sweep_dir, config.paths, list(config.tasks), error_file=ERROR_FILE, reuse_file=REUSE_FILE
            )
        except NothingToAggregate as exc:
            return f"sweep: {exc}; {target['table'].parent} left as it was"
        failed = gathered.payload["failed"]
        if not failed:
            write_jobs(gathered, target)
            return None
        total = len(gathered.payload["jobs"])
        beside = sweep_dir / "aggregate"
        write_jobs(gathered, aggregate_files(beside))
        if self.partial:
            write_jobs(gathered, target)
            where = f"aggregated the other {gathered.finished} in {target['table'].parent} and {beside}"
        else:
            where = (
                f"{target['table'].parent} left as it was; the other {gathered.finished} stacked in {beside} "
                "(hydra.callbacks.aggregate.partial=true publishes them)"
            )
        return f"sweep: {len(failed)} of {total} job(s) failed, {where}: {failures(gathered.payload)}"


def _children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid`` (Linux's /proc; none found elsewhere)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, ppid = stat.read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue  # ended meanwhile
        if ppid == str(pid) and state != "Z":
            found.append(int(stat.parent.name))
    return found


def _end_sweep(signum: int, frame: Any, *, grace_s: float = 30.0) -> None:
    """SIGTERM to a sweep's parent: pass it on to the job processes it started (joblib's workers,
    which would run on), give them ``grace_s`` to record it in their error.txt and end their MLflow
    runs (leaving first would let the launcher kill them mid-way), then exit."""
    import time

    children = _children(os.getpid())
    for child in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while set(children) & set(_children(os.getpid())) and time.monotonic() < deadline:
        time.sleep(0.2)
    sys.exit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _end_sweep)  # a job run in this process (basic launcher) sets its own
    main()
