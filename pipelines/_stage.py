"""What every stage script shares: the task argument and the MLflow run."""

from __future__ import annotations

import sys
from collections.abc import Callable

from omegaconf import DictConfig

from pipelines import _config


def main(run: Callable[[DictConfig, str], None], *, usage: str) -> None:
    """``python -m pipelines.<stage> TASK``: load params.yaml, validate, run for TASK."""
    if len(sys.argv) != 2:
        sys.exit(f"usage: {usage}")
    cfg = _config.load()
    task = sys.argv[1]
    if task not in cfg.tasks:
        sys.exit(f"{usage}: unknown task {task!r}; params.yaml tasks: {', '.join(cfg.tasks)}")
    run(cfg, task)
