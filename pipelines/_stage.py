"""What every stage script shares: the task argument, the study paths and the MLflow run.

The MLflow run of a stage is generic: its params are the config values the stage declares in
``dvc.yaml``, its description the stage script's docstring, and when the body returns, the stage's
declared outputs, metrics files and exported classifier are logged (:func:`attnflow.tracking.log_outputs`).
"""

from __future__ import annotations

import importlib
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from attnflow import tracking
from attnflow.data.lines import DataFormatError
from attnflow.io import ArtifactError
from attnflow.paths import StudyPaths
from attnflow.tracking import TrackingUnavailable
from pipelines import _config


def paths(cfg: DictConfig) -> StudyPaths:
    return StudyPaths.from_config(cfg.paths)


DVC_YAML = _config.ROOT / "dvc.yaml"


def overrides(config: dict[str, Any]) -> dict[str, Any]:
    """What this config changes from conf/'s defaults (flattened keys; the Hydra overrides inside a
    sweep job); where the run happens (``paths``, ``tracking``, ``data.mirrors``) is left out."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return dict(o.split("=", 1) for o in HydraConfig.get().overrides.task if "=" in o)
    try:
        defaults = tracking.flatten(_config.to_dict(_config.compose()))
    except _config.ConfigError:
        return {}
    skip = ("paths.", "tracking.", "data.mirrors")
    return {
        k: v for k, v in tracking.flatten(config).items() if defaults.get(k) != v and not k.startswith(skip)
    }


@contextmanager
def stage_run(cfg: DictConfig, stage: str, task: str | None = None, inputs: Sequence[Path] = ()) -> Iterator:
    """The stage's MLflow run (see :func:`attnflow.tracking.stage_run`)."""
    from attnflow.tracking.models import registered_name

    config = _config.to_dict(cfg)
    declared = tracking.declared(DVC_YAML, stage, item=task, config=config)
    module = importlib.import_module(f"pipelines.{stage}")  # run as __main__, its docstring is here
    with tracking.stage_run(
        config, stage=stage, dataset=task, inputs=inputs, params=declared.params,
        description=(module.__doc__ or "").strip() or None, overrides=lambda: overrides(config),
        choices=_config.group_choices(config),
    ) as run:  # fmt: skip
        yield run
        tracking.log_outputs(run, declared, task=task, model_name=registered_name(task) if task else None)


def main(run: Callable[[DictConfig, str], None], *, usage: str) -> None:
    """``python -m pipelines.<stage> TASK``: load params.yaml, validate, run for TASK."""
    # SIGTERM (a timeout, a scheduler's limit, kill) becomes SystemExit, so the MLflow run of the
    # stage ends instead of staying RUNNING.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if len(sys.argv) != 2:
        sys.exit(f"usage: {usage}")
    try:
        cfg = _config.load()
    except _config.ConfigError as exc:
        sys.exit(f"error: {exc}")
    task = sys.argv[1]
    if task not in cfg.tasks:
        sys.exit(f"{usage}: unknown task {task!r}; params.yaml tasks: {', '.join(cfg.tasks)}")
    try:
        run(cfg, task)
    except (TrackingUnavailable, ArtifactError, DataFormatError) as exc:  # said plainly, no traceback
        sys.exit(f"error: {exc}")


def main_all(run: Callable[[DictConfig], None]) -> None:
    """``python -m pipelines.<stage>`` for a stage over the whole study (no task argument)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        run(_config.load())
    except (_config.ConfigError, TrackingUnavailable, ArtifactError, DataFormatError) as exc:
        sys.exit(f"error: {exc}")
