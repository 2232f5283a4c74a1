"""Stage ``download@TASK``: fetch the raw data set (official URL, else the mirrors), verified."""

from __future__ import annotations

from omegaconf import DictConfig

from attnflow.data.download import download
from attnflow.tasks import get_task
from pipelines import _stage


def run(cfg: DictConfig, task: str) -> None:
    spec, data, dest = get_task(task), cfg.task[task].data, _stage.paths(cfg).raw_data(task)
    with _stage.stage_run(cfg, "download", task) as mlrun:
        manifest = download(
            spec.dataset,
            dest,
            urls=list(data.urls),
            mirrors=list(cfg.data.mirrors),
            timeout_s=cfg.data.timeout_s,
            optional=lambda f: spec.wants(data, f),
        )
        files = manifest["files"].values()
        mlrun.log_metrics({"files": len(files), "bytes": sum(f["bytes"] for f in files)})
        mlrun.log_artifact(dest / "download.json")


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.download TASK")
