"""The MLflow run of one stage, nested under the parent run of its study config (see the package
docstring of :mod:`attnflow.tracking`)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import mlflow
from mlflow.entities import Metric

from .experiment import (
    EXPERIMENT_KIND,
    GENERATED,
    HEADLINE_VIEW,
    NOTE_TAG,
    PARENT_TAG,
    UI_QUERY,
    _experiment,
    _git_commit,
    _headline_view,
    _log_params,
    _parent_run,
    close_stale_runs,
    headline_columns,
    run_name,
    ui_url,
)
from .names import config_hash, file_md5, flatten, inputs_md5, layer_steps, metric_name, numeric
from .store import (
    PROBE_TIMEOUT_S,
    SQLITE_MAGIC,
    TrackingUnavailable,
    _lost,
    _store_revisions,  # noqa: F401  (imported from here by the store tests)
    check_sqlite_store,
    probe,
    tracking_uri,
)

__all__ = [
    "EXPERIMENT_KIND",
    "GENERATED",
    "HEADLINE_VIEW",
    "HTTP_DEFAULTS",
    "NOTE_TAG",
    "PARENT_TAG",
    "PROBE_TIMEOUT_S",
    "SQLITE_MAGIC",
    "UI_QUERY",
    "StageRun",
    "TrackingUnavailable",
    "check_sqlite_store",
    "close_stale_runs",
    "config_hash",
    "file_md5",
    "flatten",
    "headline_columns",
    "inputs_md5",
    "layer_steps",
    "lightning_logger",
    "probe",
    "run_name",
    "stage_run",
    "tracking_uri",
    "ui_url",
    "wait_bound_s",
    "waiting",
]

_METRIC_BATCH = 1000  # MLflow's limit on metrics per log_batch call
# MLflow's HTTP client, bounded: a killed server (connection refused) fails a call in about 4 s
# (3 tries, waits 0 and 2 s plus jitter), a hung one in about 100 s; a variable already set wins.
HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}


# A tracking call still waiting after this many seconds is said on stderr: the server is not answering.
NOTICE_S = 5.0
# Ending a run on a server found not answering: one try of this many seconds, no retries (the run
# stays RUNNING there; the next run of the stage closes it as KILLED).
QUICK_END_S = 1.0


def wait_bound_s() -> float:
    """The longest a stage waits in all on a tracking server that stopped answering: one call's HTTP
    budget (MLflow's tries x timeout, plus its backoff), the probe that confirms it, and a quick end
    of the run. About 100 s with `HTTP_DEFAULTS`."""
    env = {k: os.environ.get(k, v) for k, v in HTTP_DEFAULTS.items()}
    retries = int(env["MLFLOW_HTTP_REQUEST_MAX_RETRIES"])
    backoff = float(env["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"]) * sum(2**i for i in range(retries))
    one_call = (retries + 1) * float(env["MLFLOW_HTTP_REQUEST_TIMEOUT"]) + backoff
    return one_call + PROBE_TIMEOUT_S + QUICK_END_S + 1.0  # 1 s: jitter and bookkeeping


@contextmanager
def waiting(uri: str, what: str) -> Iterator[None]:
    """Run the tracking calls in the block; if they are still waiting after `NOTICE_S` seconds, say
    once on stderr that the server is not answering, what waits, and how long it may wait in all."""

    def notice() -> None:
        with suppress(Exception):
            print(
                f"attnflow: MLflow tracking server {uri} is not answering ({what}); waiting at most "
                f"{wait_bound_s():.0f} s in all, then the stage stops with an error",
                file=sys.stderr,
                flush=True,
            )

    timer = threading.Timer(NOTICE_S, notice)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _answers(uri: str) -> bool:
    """Whether the tracking server at `uri` answers its probe (a local store always does)."""
    try:
        probe(uri)
    except TrackingUnavailable:
        return False
    return True


def _end_quickly(status: str) -> None:
    """End the active run on a server that stopped answering: one short try, no retries, no error
    (MLflow pops the active run before it calls the server)."""
    quick = {
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": f"{QUICK_END_S:g}",
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "0",
    }
    saved = {k: os.environ.get(k) for k in quick}
    os.environ.update(quick)
    try:
        with suppress(Exception):
            mlflow.end_run(status)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _bound_http_retries() -> None:
    for name, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(name, value)


class StageRun:
    """The active MLflow run of one stage, with logging helpers that accept nested dicts; the
    ``parent=True`` variants write to the study's parent run instead."""

    def __init__(
        self,
        run: mlflow.ActiveRun,
        client: mlflow.MlflowClient,
        uri: str,
        experiment: str,
        parent_id: str = "",
    ):
        self.run = run
        self.client = client
        self.uri = uri
        self.experiment = experiment
        self.parent_id = parent_id

    @property
    def enabled(self) -> bool:
        return self.run is not None

    @property
    def run_id(self) -> str:
        return self.run.info.run_id

    def log_metrics(
        self, metrics: Mapping[str, Any], *, step: int | None = None, prefix: str = "", parent: bool = False
    ) -> None:
        """Log every finite number of a (nested) dict as a metric named by its dotted path; a
        segment ``L<k>`` becomes step ``k`` (:func:`layer_steps`) unless ``step`` is given."""
        values = numeric(flatten(metrics, prefix))
        if not values:
            return
        now = int(time.time() * 1000)
        rows = [(k, None, v) for k, v in values.items()] if step is not None else layer_steps(values)
        batch = [Metric(metric_name(k), v, now, step if step is not None else (s or 0)) for k, s, v in rows]
        run_id = self.parent_id if parent else self.run_id
        if not run_id:
            return
        with waiting(self.uri, "logging metrics"):
            for i in range(0, len(batch), _METRIC_BATCH):
                self.client.log_batch(run_id, metrics=batch[i : i + _METRIC_BATCH])

    def log_artifact(
        self, path: str | Path, artifact_path: str | None = None, *, parent: bool = False
    ) -> None:
        p = Path(path)
        run_id = self.parent_id if parent else self.run_id
        with waiting(self.uri, f"logging {p.name}"):
            if p.is_dir():
                self.client.log_artifacts(run_id, str(p), artifact_path=artifact_path or p.name)
            elif p.exists():
                self.client.log_artifact(run_id, str(p), artifact_path=artifact_path)

    def log_dict(self, payload: Mapping[str, Any], name: str) -> None:
        with waiting(self.uri, f"logging {name}"):
            mlflow.log_dict(dict(payload), name)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        with waiting(self.uri, "setting tags"):
            mlflow.set_tags({k: str(v) for k, v in tags.items()})


class _DisabledRun(StageRun):
    """What ``stage_run`` yields with ``tracking.enabled=false``: every call does nothing."""

    def __init__(self) -> None:  # no MLflow run, client or server behind it
        self.run = None  # type: ignore[assignment]
        self.client = None  # type: ignore[assignment]
        self.uri = ""
        self.experiment = ""
        self.parent_id = ""

    @property
    def run_id(self) -> str:  # the base property reads self.run, which is None here
        return ""

    def log_metrics(self, *args: Any, **kwargs: Any) -> None:
        pass

    def log_artifact(self, *args: Any, **kwargs: Any) -> None:
        pass

    def log_dict(self, *args: Any, **kwargs: Any) -> None:
        pass

    def set_tags(self, *args: Any, **kwargs: Any) -> None:
        pass


def _end(run: StageRun, status: str, started: float, key: str) -> None:
    """Log the stage's wall time (on its run, and as ``wall_time_s/<key>`` on the parent), then end
    the run. A server that no longer answers its probe gets no more calls but a quick end
    (`_end_quickly`): ending costs at most the probe, and never hides the stage's own error."""
    if not _answers(run.uri):
        _end_quickly(status)
        return
    wall = round(time.monotonic() - started, 3)
    with suppress(Exception):  # a lost server must not hide the status below
        run.log_metrics({"wall_time_s": wall})
        run.log_metrics({f"wall_time_s/{key}": wall}, parent=True)
        run.client.set_terminated(run.parent_id, "FINISHED")  # the parent spans its stages
    mlflow.end_run(status)


@contextmanager
def stage_run(
    config: Mapping[str, Any],
    *,
    stage: str,
    dataset: str | None = None,
    inputs: Sequence[str | Path] = (),
    uri: str | None = None,
    experiment: str | None = None,
    params: Mapping[str, Any] | None = None,
    description: str | None = None,
    overrides: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
    choices: Mapping[str, str] | None = None,
) -> Iterator[StageRun]:
    """Open an MLflow run for one stage execution, nested under its config's parent run.

    It ends FINISHED, FAILED if the body raises, KILLED on Ctrl-C or SIGTERM (which the stage
    scripts turn into SystemExit), with its wall time logged (``wall_time_s``). ``config`` is the
    resolved study config as plain dicts; ``uri`` and ``experiment`` default to
    ``config["tracking"]``. ``params``: what the stage reads, logged as its params (default: the
    whole config); ``description``: the run's note in the UI; ``overrides``: the config's changes
    from the defaults (or a function returning them, called only when the parent is created),
    listed in the parent's note; ``choices``: the config-group choices (protocol, recipe, switch),
    tags of both runs and part of the parent's name.
    """
    track = config.get("tracking", {})
    if not track.get("enabled", True):
        yield _DisabledRun()
        return
    started = time.monotonic()
    uri = tracking_uri(uri or track.get("uri"))
    _bound_http_retries()  # before the first MLflow call: a lost server fails, never hangs
    probe(uri)
    experiment = experiment or track.get("experiment") or config.get("study") or "attnflow"
    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient(uri)
    with waiting(uri, f"opening the run of stage {stage!r}"):
        experiment_id = _experiment(client, experiment)
        mlflow.set_experiment(experiment_id=experiment_id)
        _headline_view(client, experiment_id, list(config.get("tasks") or []))
    digest, per_file = inputs_md5(inputs)
    tags = {
        "stage": stage,
        "dataset": dataset or "all",
        "git_commit": _git_commit(),
        "config_hash": config_hash(config),
        "inputs_md5": digest,
        "mlflow.runName": f"{stage}@{dataset}" if dataset else stage,
        **dict(choices or {}),
    }
    if "seed" in config:
        tags["seed"] = str(config["seed"])
    if description:
        tags[NOTE_TAG] = description
    for env in ("DVC_EXP_NAME", "DVC_EXP_BASELINE_REV"):
        if os.environ.get(env):
            tags[env.lower()] = os.environ[env]
    with waiting(uri, f"opening the run of stage {stage!r}"):
        parent_id = _parent_run(client, experiment_id, tags["config_hash"], config, overrides or {}, choices)
        tags["mlflow.parentRunId"] = parent_id
        close_stale_runs(client, experiment_id, tags)
        run = mlflow.start_run(tags=tags)
    stage_run_ = StageRun(run, client, uri, experiment, parent_id)
    wall_key = f"{stage}/{dataset or 'all'}"
    try:
        with waiting(uri, f"logging the params of stage {stage!r}"):
            _log_params(client, run.info.run_id, flatten(config if params is None else params))
            if per_file:
                mlflow.log_dict(per_file, "inputs.json")
        yield stage_run_
    except (KeyboardInterrupt, SystemExit) as exc:
        clean = isinstance(exc, SystemExit) and exc.code in (0, None)
        _end(stage_run_, "FINISHED" if clean else "KILLED", started, wall_key)
        raise
    except BaseException as exc:
        lost = _lost(uri, stage, exc)
        if lost is None:
            _end(stage_run_, "FAILED", started, wall_key)
            raise
        # end_run pops the run even when the dead server cannot record the status: it stays
        # RUNNING there, and the next run of the stage closes it as KILLED. One short try: the
        # whole wait stays one call's budget plus the probe (wait_bound_s), not two budgets.
        _end_quickly("FAILED")
        raise lost from exc
    _end(stage_run_, "FINISHED", started, wall_key)


def lightning_logger(stage: StageRun, **kwargs: Any):
    """A Lightning ``MLFlowLogger`` that writes into the stage's run (no second run is made).

    None when tracking is disabled.
    """
    if isinstance(stage, _DisabledRun):
        return None
    from pytorch_lightning.loggers import MLFlowLogger

    return MLFlowLogger(
        experiment_name=stage.experiment, tracking_uri=stage.uri, run_id=stage.run_id, **kwargs
    )
