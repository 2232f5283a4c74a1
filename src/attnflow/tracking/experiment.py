"""The experiment and the parent run of one study config: their tags, params, name, note, the
headline view of the runs table and its link (see the package docstring of :mod:`attnflow.tracking`)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import mlflow
from mlflow.entities import Param

from .names import flatten

__all__ = [
    "EXPERIMENT_KIND",
    "GENERATED",
    "HEADLINE_VIEW",
    "NOTE_TAG",
    "PARENT_TAG",
    "UI_QUERY",
    "close_stale_runs",
    "headline_columns",
    "run_name",
    "ui_url",
]

_MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
_BATCH = 100  # MLflow's limit on params per log_batch call
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
