"""Everything MLflow: one experiment per study, one parent run per study config (a ``dvc repro``,
or one job of a sweep), one child run per stage execution.

The experiment is a classic ML experiment (``mlflow.experimentKind=custom_model_development``);
MLflow 3.17's UI still opens every experiment on its GenAI page unless the URL carries
``?workflowType=machine_learning`` (:func:`ui_url`) or the sidebar switch is set to "Machine
learning" once (the browser remembers it).

A stage run carries as params the config values the stage reads (its ``params`` in ``dvc.yaml``),
a description (the stage script's docstring), the tags ``stage``, ``dataset``, ``git_commit``
(``+dirty`` when tracked code differs from HEAD; ``dvc.lock``, ``params.yaml`` and ``reports/``,
which a run rewrites, do not count), ``config_hash`` and ``inputs_md5`` (an md5 over the stage's
inputs; for a single file it equals the md5 that DVC writes to dvc.lock), ``inputs.json``, its
declared outputs (:mod:`.outputs`), its metrics files as metrics and ``wall_time_s``. A path
segment ``L<k>`` of a metric name becomes step ``k``: ``corr/blank_out/flow`` has one point per
layer, so MLflow's chart of a run is the paper's per-layer figure.

The parent run of a config carries the whole config as params, the overrides in its description,
and the headline metrics of its stages: ``<task>/accuracy``, ``<task>/corr/<reference>/<method>``
(step = layer: every Table 1-3 cell), ``<task>/faithfulness/<method>/<measure>``,
``wall_time_s/<stage>/<task>``, and the report as an artifact. A trained classifier is logged as an
MLflow model and registered as ``attnflow-<task>`` (:mod:`.models`).

The tracking URI comes from ``MLFLOW_TRACKING_URI`` when set, else from the config (default: the
embedded store ``sqlite:///mlflow.db``). A tracking server is probed before a stage starts (a dead
one fails in seconds, naming the URI), a run that a kill left RUNNING is closed as KILLED by the
next run of the same stage and config, and an interrupted stage (Ctrl-C, SIGTERM) ends KILLED, a
failing one FAILED. A server lost mid-run fails the stage in bounded time with
:class:`TrackingUnavailable`: MLflow's own HTTP retries are cut to ``HTTP_DEFAULTS`` unless the
environment sets them.
"""

from .outputs import Declared, declared, file_summary, headline, log_outputs
from .runs import (
    EXPERIMENT_KIND,
    GENERATED,
    HEADLINE_VIEW,
    HTTP_DEFAULTS,
    NOTE_TAG,
    PARENT_TAG,
    PROBE_TIMEOUT_S,
    UI_QUERY,
    StageRun,
    TrackingUnavailable,
    close_stale_runs,
    config_hash,
    file_md5,
    flatten,
    headline_columns,
    inputs_md5,
    layer_steps,
    lightning_logger,
    probe,
    stage_run,
    tracking_uri,
    ui_url,
)

__all__ = [
    "EXPERIMENT_KIND",
    "GENERATED",
    "HEADLINE_VIEW",
    "HTTP_DEFAULTS",
    "NOTE_TAG",
    "PARENT_TAG",
    "PROBE_TIMEOUT_S",
    "UI_QUERY",
    "Declared",
    "StageRun",
    "TrackingUnavailable",
    "close_stale_runs",
    "config_hash",
    "declared",
    "file_md5",
    "file_summary",
    "flatten",
    "headline",
    "headline_columns",
    "inputs_md5",
    "layer_steps",
    "lightning_logger",
    "log_outputs",
    "probe",
    "stage_run",
    "tracking_uri",
    "ui_url",
]
