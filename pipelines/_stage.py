"""What every stage script shares: the task argument, the study paths and the MLflow run."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from omegaconf import DictConfig

from attnflow import tracking
from attnflow.data._lines import DataFormatError
from attnflow.io import ArtifactError
from attnflow.paths import StudyPaths
from attnflow.tracking import TrackingUnavailable
from pipelines import _config


def paths(cfg: DictConfig) -> StudyPaths:
    return StudyPaths.from_config(cfg.paths)


@contextmanager
def stage_run(cfg: DictConfig, stage: str, task: str | None = None, inputs: Sequence[Path] = ()) -> Iterator:
    """The stage's MLflow run (see :func:`attnflow.tracking.stage_run`)."""
    with tracking.stage_run(_config.to_dict(cfg), stage=stage, dataset=task, inputs=inputs) as run:
        yield run


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
