"""Stage ``prepare@TASK``: parse, split and summarise the raw data into parquet."""

from __future__ import annotations

import shutil
from pathlib import Path

from omegaconf import DictConfig

from attnflow import tracking
from attnflow.data.linzen import SplitFractions, prepare_agreement
from attnflow.data.sst2 import prepare_sst2
from attnflow.io import atomic_path
from pipelines import _config, _stage


def run(cfg: DictConfig, task: str) -> None:
    raw, out = Path(cfg.paths.raw) / task, Path(cfg.paths.prepared) / task
    with tracking.stage_run(_config.to_dict(cfg), stage="prepare", dataset=task, inputs=[raw]) as mlrun:
        if task == "agreement":
            opts = cfg.data.agreement
            summary = prepare_agreement(
                raw,
                out,
                fractions=SplitFractions(**opts.split),
                seed=cfg.seed,
                dedupe=opts.dedupe,
                min_count=opts.min_count,
            )
        else:
            summary = prepare_sst2(raw, out)
        # The summary is a DVC metric: a copy lives under reports/, which git tracks.
        with atomic_path(Path(cfg.paths.reports) / task / "data_summary.json") as tmp:
            shutil.copyfile(out / "data_summary.json", tmp)
        mlrun.log_metrics(summary)
        mlrun.log_artifact(out / "data_summary.json")


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.prepare {agreement|sst2}")
