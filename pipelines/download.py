"""Stage ``download@TASK``: fetch the raw data set (official URL, else the mirrors), verified."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from attnflow import tracking
from attnflow.data.download import download
from pipelines import _config, _stage


def run(cfg: DictConfig, task: str) -> None:
    data = cfg.data
    dest = Path(cfg.paths.raw) / task
    with tracking.stage_run(_config.to_dict(cfg), stage="download", dataset=task) as mlrun:
        manifest = download(
            task,
            dest,
            urls=list(data[task].urls),
            mirrors=list(data.mirrors),
            timeout_s=data.timeout_s,
            optional=lambda f: data[task].get("fetch_full_tsv", False) or not f.relpath.endswith(".tsv"),
        )
        mlrun.log_metrics(
            {"files": len(manifest["files"]), "bytes": sum(f["bytes"] for f in manifest["files"].values())}
        )
        mlrun.log_artifact(dest / "download.json")


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.download {agreement|sst2}")
