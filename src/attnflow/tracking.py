"""Everything MLflow: one run per stage execution, in one experiment per study config.

Every stage run carries the flattened resolved config as params, the tags ``stage``, ``dataset``,
``git_commit`` (``+dirty`` when the tree has uncommitted changes), ``config_hash`` (the same for
all stages of one config, to group them) and ``inputs_md5`` (an md5 over the stage's inputs; for a
single file it equals the md5 that DVC writes to dvc.lock), plus ``inputs.json`` with each input's
md5. The tracking URI comes from ``MLFLOW_TRACKING_URI`` when set, else from the config
(default: the embedded store ``sqlite:///mlflow.db``).

The stage runs of one study config are grouped under a parent run named after its config hash,
the experiment opens on the runs table (it is marked as model development, not GenAI), a tracking
server is probed before a stage starts (a dead one fails in seconds, naming the URI), a run that
a kill left RUNNING is closed as KILLED by the next run of the same stage and config, and an
interrupted stage (Ctrl-C, SIGTERM) ends KILLED, a failing one FAILED.

A server lost mid-run fails the stage in bounded time with :class:`TrackingUnavailable`: MLflow's
own HTTP retries (7 tries, exponential backoff: minutes of silence per call) are cut to
``HTTP_DEFAULTS`` unless the environment sets them.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import mlflow
from mlflow.entities import Param

__all__ = [
    "EXPERIMENT_KIND",
    "HTTP_DEFAULTS",
    "StageRun",
    "TrackingUnavailable",
    "close_stale_runs",
    "config_hash",
    "file_md5",
    "flatten",
    "inputs_md5",
    "lightning_logger",
    "probe",
    "stage_run",
    "tracking_uri",
]

_MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
_BATCH = 100  # MLflow's limit on params per log_batch call
PROBE_TIMEOUT_S = 3.0  # a tracking server that does not answer in this time is called unreachable
# MLflow 3's UI opens GenAI experiments on an "Overview" page; this kind opens the runs table.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
PARENT_TAG = "attnflow.study_run"  # marks the parent run of one config's stage runs
# MLflow's HTTP client, bounded: a killed server (connection refused) fails a call in about 4 s
# (3 tries, waits 0 and 2 s plus jitter), a hung one in about 100 s; a variable already set wins.
HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}


class TrackingUnavailable(RuntimeError):
    """The configured tracking server does not answer."""


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


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings to dotted keys; lists stay values.

    >>> flatten({"a": {"b": 1, "c": [1, 2]}, "d": "x"})
    {'a.b': 1, 'a.c': [1, 2], 'd': 'x'}
    """
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def config_hash(config: Mapping[str, Any]) -> str:
    """A short stable hash of a resolved config (key order does not matter)."""
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def file_md5(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def inputs_md5(paths: Sequence[str | Path]) -> tuple[str, dict[str, str]]:
    """md5 of each input file (every file under a directory), and one md5 over them all."""
    per_file: dict[str, str] = {}
    for p in map(Path, paths):
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        for f in files:
            if f.exists():
                per_file[f.as_posix()] = file_md5(f)
    if not per_file:
        return "none", per_file
    if len(per_file) == 1:
        return next(iter(per_file.values())), per_file
    combined = hashlib.md5(json.dumps(per_file, sort_keys=True).encode(), usedforsecurity=False)
    return combined.hexdigest(), per_file


def _git_commit() -> str:
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
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
    """The active MLflow run of one stage, with logging helpers that accept nested dicts."""

    def __init__(self, run: mlflow.ActiveRun, client: mlflow.MlflowClient, uri: str, experiment: str):
        self.run = run
        self.client = client
        self.uri = uri
        self.experiment = experiment

    @property
    def run_id(self) -> str:
        return self.run.info.run_id

    def log_metrics(self, metrics: Mapping[str, Any], *, step: int | None = None, prefix: str = "") -> None:
        """Log every finite number of a (nested) dict as a metric named by its dotted path."""
        flat = flatten(metrics, prefix)
        numeric = {
            k: float(v)
            for k, v in flat.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        }
        if numeric:
            mlflow.log_metrics(numeric, step=step)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        p = Path(path)
        if p.is_dir():
            mlflow.log_artifacts(str(p), artifact_path=artifact_path or p.name)
        elif p.exists():
            mlflow.log_artifact(str(p), artifact_path=artifact_path)

    def log_dict(self, payload: Mapping[str, Any], name: str) -> None:
        mlflow.log_dict(dict(payload), name)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        mlflow.set_tags({k: str(v) for k, v in tags.items()})


class _DisabledRun(StageRun):
    """What ``stage_run`` yields with ``tracking.enabled=false``: every call does nothing."""

    def __init__(self) -> None:  # no MLflow run, client or server behind it
        self.run = None  # type: ignore[assignment]
        self.client = None  # type: ignore[assignment]
        self.uri = ""
        self.experiment = ""

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


def _parent_run(client: mlflow.MlflowClient, experiment_id: str, digest: str, study: str) -> str:
    """The parent run grouping every stage run of one config (created on first use)."""
    query = f"tags.`{PARENT_TAG}` = 'true' and tags.config_hash = '{digest}'"
    found = client.search_runs([experiment_id], query, max_results=1)
    if found:
        return found[0].info.run_id
    run = client.create_run(
        experiment_id, tags={PARENT_TAG: "true", "config_hash": digest, "mlflow.runName": f"{study} {digest}"}
    )
    client.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id


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


@contextmanager
def stage_run(
    config: Mapping[str, Any],
    *,
    stage: str,
    dataset: str | None = None,
    inputs: Sequence[str | Path] = (),
    uri: str | None = None,
    experiment: str | None = None,
) -> Iterator[StageRun]:
    """Open an MLflow run for one stage execution, nested under its config's parent run.

    It ends FINISHED, FAILED if the body raises, KILLED on Ctrl-C or SIGTERM (which the stage
    scripts turn into SystemExit). ``config`` is the resolved study config as plain dicts; ``uri``
    and ``experiment`` default to ``config["tracking"]``.
    """
    track = config.get("tracking", {})
    if not track.get("enabled", True):
        yield _DisabledRun()
        return
    uri = tracking_uri(uri or track.get("uri"))
    _bound_http_retries()  # before the first MLflow call: a lost server fails, never hangs
    probe(uri)
    experiment = experiment or track.get("experiment") or config.get("study") or "attnflow"
    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient(uri)
    experiment_id = _experiment(client, experiment)
    mlflow.set_experiment(experiment_id=experiment_id)
    digest, per_file = inputs_md5(inputs)
    tags = {
        "stage": stage,
        "dataset": dataset or "all",
        "git_commit": _git_commit(),
        "config_hash": config_hash(config),
        "inputs_md5": digest,
        "mlflow.runName": f"{stage}@{dataset}" if dataset else stage,
    }
    tags["mlflow.parentRunId"] = _parent_run(
        client, experiment_id, tags["config_hash"], str(config.get("study", ""))
    )
    for env in ("DVC_EXP_NAME", "DVC_EXP_BASELINE_REV"):
        if os.environ.get(env):
            tags[env.lower()] = os.environ[env]
    close_stale_runs(client, experiment_id, tags)
    run = mlflow.start_run(tags=tags)
    try:
        params = [Param(k, _param_value(v)) for k, v in sorted(flatten(config).items())]
        for i in range(0, len(params), _BATCH):
            client.log_batch(run.info.run_id, params=params[i : i + _BATCH])
        if per_file:
            mlflow.log_dict(per_file, "inputs.json")
        yield StageRun(run, client, uri, experiment)
    except (KeyboardInterrupt, SystemExit) as exc:
        clean = isinstance(exc, SystemExit) and exc.code in (0, None)
        mlflow.end_run("FINISHED" if clean else "KILLED")
        raise
    except BaseException as exc:
        lost = _lost(uri, stage, exc)
        if lost is None:
            mlflow.end_run("FAILED")
            raise
        # end_run pops the run even when the dead server cannot record the status: it stays
        # RUNNING there, and the next run of the stage closes it as KILLED
        with suppress(Exception):
            mlflow.end_run("FAILED")
        raise lost from exc
    mlflow.end_run("FINISHED")


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
