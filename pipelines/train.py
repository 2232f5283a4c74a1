"""Stage ``train@TASK``: Lightning training (or evaluation of an already fine-tuned checkpoint)."""

from __future__ import annotations

import shutil

from omegaconf import DictConfig

from attnflow import tracking
from attnflow.io import atomic_path
from attnflow.lit import train_task
from pipelines import _stage

# Copied to reports/<task>/ so git tracks them as DVC metrics and plots.
REPORTED = {"metrics.json": "train_metrics.json", "curve.csv": "curve.csv", "curve.png": "curve.png"}


def run(cfg: DictConfig, task: str) -> None:
    paths, settings = _stage.paths(cfg), cfg.task[task]
    data_dir, out_dir = paths.prepared_data(task), paths.model_dir(task)
    with _stage.stage_run(cfg, "train", task, inputs=[data_dir]) as mlrun:
        train_task(
            task,
            data_dir=data_dir,
            out_dir=out_dir,
            model_cfg=settings.model,
            train_cfg=settings.train,
            trainer_cfg=cfg.trainer,
            seed=cfg.seed,
            logger=tracking.lightning_logger(mlrun),
            timing_path=paths.train_timing(task),  # apart: a time differs on every run, the metrics must not
        )
        mlrun.log_artifact(paths.train_timing(task))
        for name, target in REPORTED.items():
            with atomic_path(paths.task_reports(task) / target) as tmp:
                shutil.copyfile(out_dir / name, tmp)
            mlrun.log_artifact(out_dir / name)


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.train TASK")
