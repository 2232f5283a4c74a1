"""The MLflow run of one stage, nested under the parent run of its study config (see the package
docstring of :mod:`attnflow.tracking`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import mlflow
from mlflow.entities import Metric, Param

from .names import config_hash, file_md5, flatten, inputs_md5, layer_steps, metric_name, numeric

__all__ = [
    "EXPERIMENT_KIND",
    "HEADLINE_VIEW",
    "HTTP_DEFAULTS",
    "StageRun",
    "TrackingUnavailable",
    "close_stale_runs",
    "config_hash",
    "file_md5",
    "flatten",
    "headline_columns",
    "inputs_md5",
    "layer_steps",
    "lightning_logger",
    "probe",
    "stage_run",
    "tracking_uri",
    "ui_url",
    "wait_bound_s",
    "waiting",
]

_MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
_BATCH = 100  # MLflow's limit on params per log_batch call
_METRIC_BATCH = 1000  # and on metrics
PROBE_TIMEOUT_S = 3.0  # a tracking server that does not answer in this time is called unreachable
# The experiment is model development, not GenAI. MLflow 3.17's UI ignores this tag when it picks
# the landing page: it follows the sidebar's "GenAI | Machine learning" switch (default GenAI,
# remembered in the browser) or the URL query ``workflowType``, hence :data:`UI_QUERY`.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
UI_QUERY = "workflowType=machine_learning"  # opens an experiment on its runs table
NOTE_TAG = "mlflow.note.content"  # a run's description in the UI
# Files that `dvc repro` / `dvc exp run` rewrite while the stages run: not code, so their changes
# do not make the commit "+dirty" (the params are logged, the outputs are what the run made).
GENERATED = ("dvc.lock", "params.yaml", "reports")
PARENT_TAG = "attnflow.study_run"  # marks the parent run of one config's stage runs
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


class TrackingUnavailable(RuntimeError):
    """The configured tracking server does not answer."""


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


def probe(uri: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Raise :class:`TrackingUnavailable` when ``uri`` is an HTTP(S) server that does not answer
    ``/health`` within ``timeout_s`` (local stores need no probe)."""
    import urllib.error
    import urllib.request
    from urllib.parse import urlparse

    if urlparse(uri).scheme not in ("http", "https"):
        return
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout_s):
            return
    except urllib.error.HTTPError:
        return  # it answered (a proxy or an older server without /health)
    except (urllib.error.URLError, OSError) as exc:
        raise TrackingUnavailable(
            f"MLflow tracking server {uri} did not answer within {timeout_s:g} s "
            f"({getattr(exc, 'reason', exc)}). Start it, or use the embedded store: unset "
            "MLFLOW_TRACKING_URI and set tracking.uri=sqlite:///mlflow.db (or tracking.enabled=false)."
        ) from None


def _bound_http_retries() -> None:
    for name, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(name, value)


def _tracking_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) came from MLflow or its HTTP client."""
    seen: BaseException | None = exc
    while seen is not None:
        module = type(seen).__module__
        if module.startswith(("mlflow", "requests", "urllib3")):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _lost(uri: str, stage: str, exc: BaseException) -> TrackingUnavailable | None:
    """A :class:`TrackingUnavailable` naming the stage when ``exc`` came from a tracking server
    that no longer answers; None when the error is something else."""
    if isinstance(exc, TrackingUnavailable) or not _tracking_error(exc):
        return None
    try:
        probe(uri)
    except TrackingUnavailable:
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return TrackingUnavailable(
            f"MLflow tracking server {uri} stopped answering during stage {stage!r} ({reason}); the "
            "stage stopped, and its run stays RUNNING until the next run of the stage closes it as "
            "KILLED. Restart the server and run the stage again, or use the embedded store: unset "
            "MLFLOW_TRACKING_URI and set tracking.uri=sqlite:///mlflow.db (or tracking.enabled=false)."
        )
    return None


def tracking_uri(configured: str | None) -> str:
    """``MLFLOW_TRACKING_URI`` when set (a real server), else the configured URI."""
    return os.environ.get("MLFLOW_TRACKING_URI") or configured or "sqlite:///mlflow.db"


def _git_commit() -> str:
    """HEAD, ``+dirty`` when a tracked file other than :data:`GENERATED` differs from it."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        exclude = [f":(top,exclude){name}" for name in GENERATED]
        dirty = subprocess.run(
            ["git", "-C", top, "status", "--porcelain", "--untracked-files=no", "--", ".", *exclude],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{sha}+dirty" if dirty else sha


def _param_value(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, list | dict) else str(value)
    return text if len(text) <= _MAX_PARAM_CHARS else text[: _MAX_PARAM_CHARS - 3] + "..."


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


def _experiment(client: mlflow.MlflowClient, name: str) -> str:
    """The experiment's id (created if needed), marked as model development for the UI."""
    found = client.get_experiment_by_name(name)
    experiment_id = found.experiment_id if found else client.create_experiment(name, tags=EXPERIMENT_KIND)
    if found and found.tags.get("mlflow.experimentKind") != EXPERIMENT_KIND["mlflow.experimentKind"]:
        client.set_experiment_tag(experiment_id, *next(iter(EXPERIMENT_KIND.items())))
    return experiment_id


# The runs table's default columns: a view stored on the experiment (MLflow's shared-view tag) that
# the link of `ui_url(..., view=HEADLINE_VIEW)` opens: the choices, the seed and the headline metrics.
HEADLINE_VIEW = "attnflow-headline"
_VIEW_TAG = "mlflow.sharedViewState."


def headline_columns(tasks: Sequence[str]) -> list[str]:
    """The runs table's columns of the headline view, in MLflow's column ids.

    >>> headline_columns(["sst2"])
    ['tags.`seed`', 'tags.`protocol`', 'tags.`recipe`', 'tags.`switch`', 'metrics.`sst2/accuracy`', 'metrics.`sst2/corr/blank_out/rollout`', 'metrics.`sst2/corr/blank_out/flow`']
    """
    columns = [f"tags.`{k}`" for k in ("seed", "protocol", "recipe", "switch")]
    for task in tasks:
        columns += [f"metrics.`{task}/accuracy`"]
        columns += [f"metrics.`{task}/corr/blank_out/{m}`" for m in ("rollout", "flow")]  # last layer
    return columns


def _headline_view(client: mlflow.MlflowClient, experiment_id: str, tasks: Sequence[str]) -> None:
    """Store the headline view on the experiment (MLflow's saved-view envelope: name, times, state)."""
    state = {"selectedColumns": headline_columns(tasks), "columnOrder": headline_columns(tasks),
             "runsHiddenMode": "SHOW_ALL", "searchFilter": "", "orderByKey": "attributes.start_time",
             "orderByAsc": False}  # fmt: skip
    envelope = {"name": "attnflow headline", "createdAt": 0, "updatedAt": 0, "state": json.dumps(state)}
    client.set_experiment_tag(experiment_id, _VIEW_TAG + HEADLINE_VIEW, json.dumps(envelope))


def ui_url(server: str, experiment_id: str, run_id: str | None = None, *, view: str | None = None) -> str:
    """Where a browser opens the experiment's runs table (or one run) on an MLflow server;
    ``view=HEADLINE_VIEW``: with the headline columns (seed, choices, accuracy, last-layer
    correlations) and every run shown in charts.

    >>> ui_url("http://127.0.0.1:5000/", "1")
    'http://127.0.0.1:5000/#/experiments/1/runs?workflowType=machine_learning'
    >>> ui_url("http://127.0.0.1:5000/", "1", view=HEADLINE_VIEW)
    'http://127.0.0.1:5000/#/experiments/1/runs?workflowType=machine_learning&viewStateShareKey=attnflow-headline'
    """
    page = f"runs/{run_id}" if run_id else "runs"
    shared = f"&viewStateShareKey={view}" if view else ""
    return f"{server.rstrip('/')}/#/experiments/{experiment_id}/{page}?{UI_QUERY}{shared}"


def _parent_note(study: str, digest: str, overrides: Mapping[str, Any]) -> str:
    changed = "\n".join(f"- `{k}={_param_value(v)}`" for k, v in sorted(overrides.items()))
    return (
        f"Study `{study}`, config `{digest}`: one child run per stage (`dvc repro` or one sweep job). "
        "Metrics: accuracy per task, every Table 1-3 cell as `<task>/corr/<reference>/<method>` "
        "(step = layer), the faithfulness table, wall time per stage; artifacts: the report.\n\n"
        + (
            f"Overrides of the defaults (params: the whole config):\n{changed}"
            if changed
            else "Default config."
        )
    )


def run_name(choices: Mapping[str, str], seed: Any, digest: str) -> str:
    """The parent run's name: seed, config-group choices (a switch with a "+"), config hash, in
    that order, since the runs table cuts names at ~22 characters: a protocol run and a seed run
    never look alike there (the study is the experiment's name; every value is also a tag).

    >>> run_name({"protocol": "final_notebook", "recipe": "authors"}, 0, "0123456789ab")
    'seed=0 final_notebook authors 0123456'
    >>> run_name({"protocol": "paper", "recipe": "authors", "switch": "no_eos"}, 2, "0123456789ab")
    'seed=2 paper authors +no_eos 0123456'
    """
    parts = [] if seed is None else [f"seed={seed}"]
    parts += [f"+{v}" if k == "switch" else str(v) for k, v in choices.items()]
    return " ".join([*parts, digest[:7]])


def _parent_run(
    client: mlflow.MlflowClient,
    experiment_id: str,
    digest: str,
    config: Mapping[str, Any],
    overrides: Mapping[str, Any] | Callable[[], Mapping[str, Any]],
    choices: Mapping[str, str] | None = None,
) -> str:
    """The parent run grouping every stage run of one config (created on first use, with the whole
    config as params, the overrides in its description, the config-group choices as tags and in
    its name)."""
    query = f"tags.`{PARENT_TAG}` = 'true' and tags.config_hash = '{digest}'"
    found = client.search_runs([experiment_id], query, max_results=1)
    if found:
        return found[0].info.run_id
    study = str(config.get("study", ""))
    choices = dict(choices or {})
    name = run_name(choices, config.get("seed"), digest)
    tags = {PARENT_TAG: "true", "config_hash": digest, "git_commit": _git_commit(), **choices,
            "mlflow.runName": name, NOTE_TAG: _parent_note(study, digest, overrides() if callable(overrides) else overrides)}  # fmt: skip
    if "seed" in config:
        tags["seed"] = str(config["seed"])
    run = client.create_run(experiment_id, tags=tags)
    _log_params(client, run.info.run_id, flatten(config))
    client.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id


def _log_params(client: mlflow.MlflowClient, run_id: str, flat: Mapping[str, Any]) -> None:
    params = [Param(k, _param_value(v)) for k, v in sorted(flat.items())]
    for i in range(0, len(params), _BATCH):
        client.log_batch(run_id, params=params[i : i + _BATCH])


def close_stale_runs(client: mlflow.MlflowClient, experiment_id: str, tags: Mapping[str, str]) -> list[str]:
    """End as KILLED the RUNNING runs of the same stage, dataset and config (a killed process
    cannot end its own run); returns their ids."""
    query = " and ".join(
        [f"tags.{k} = '{tags[k]}'" for k in ("stage", "dataset", "config_hash")]
        + ["attributes.status = 'RUNNING'"]
    )
    stale = [r.info.run_id for r in client.search_runs([experiment_id], query)]
    for run_id in stale:
        client.set_terminated(run_id, "KILLED")
    return stale


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
