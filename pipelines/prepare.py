"""Stage ``prepare@TASK``: parse, split and summarise the raw data into parquet."""

from __future__ import annotations

from omegaconf import DictConfig

from attnflow.io import write_json
from attnflow.tasks import get_task
from pipelines import _stage


def run(cfg: DictConfig, task: str) -> None:
    paths = _stage.paths(cfg)
    raw, out = paths.raw_data(task), paths.prepared_data(task)
    with _stage.stage_run(cfg, "prepare", task, inputs=[raw]) as mlrun:
        summary = get_task(task).prepare(raw, out, cfg.task[task].data, cfg.seed)
        write_json(paths.data_summary(task), summary)  # a DVC metric; git tracks reports/
        mlrun.log_metrics(summary)
        mlrun.log_artifact(paths.data_summary(task))


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.prepare TASK")
