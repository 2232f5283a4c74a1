"""What every stage script shares: the task argument and the MLflow run."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

from omegaconf import DictConfig

from pipelines import _config


def main(run: Callable[[DictConfig, str], None], *, usage: str) -> None:
    """``python -m pipelines.<stage> TASK``: load params.yaml, validate, run for TASK."""
    # SIGTERM (a timeout, a scheduler's limit, kill) becomes SystemExit, so the MLflow run of the
    # stage ends FAILED instead of staying RUNNING.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if len(sys.argv) != 2:
        sys.exit(f"usage: {usage}")
    cfg = _config.load()
    task = sys.argv[1]
    if task not in cfg.tasks:
        sys.exit(f"{usage}: unknown task {task!r}; params.yaml tasks: {', '.join(cfg.tasks)}")
    run(cfg, task)
