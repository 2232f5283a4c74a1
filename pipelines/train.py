"""Stage ``train@TASK``: Lightning training (or evaluation of an already fine-tuned checkpoint)."""

from __future__ import annotations

import shutil
from pathlib import Path

from omegaconf import DictConfig

from attnflow import tracking
from attnflow.io import atomic_path
from attnflow.lit.train import train_task
from pipelines import _config, _stage

# Copied to reports/<task>/ so git tracks them as DVC metrics and plots.
REPORTED = {"metrics.json": "train_metrics.json", "curve.csv": "curve.csv", "curve.png": "curve.png"}


def run(cfg: DictConfig, task: str) -> None:
    data_dir = Path(cfg.paths.prepared) / task
    out_dir = Path(cfg.paths.models) / task
    with tracking.stage_run(_config.to_dict(cfg), stage="train", dataset=task, inputs=[data_dir]) as mlrun:
        metrics = train_task(
            task,
            data_dir=data_dir,
            out_dir=out_dir,
            model_cfg=_config.to_dict(cfg.model[task]),
            train_cfg=_config.to_dict(cfg.train[task]),
            seed=cfg.seed,
            logger=tracking.lightning_logger(mlrun),
        )
        reports = Path(cfg.paths.reports) / task
        for name, target in REPORTED.items():
            with atomic_path(reports / target) as tmp:
                shutil.copyfile(out_dir / name, tmp)
        mlrun.log_metrics({"final": metrics})
        for name in REPORTED:
            mlrun.log_artifact(out_dir / name)


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.train {agreement|sst2}")
