"""The whole study as one Hydra app, for sweeps: ``python -m pipelines.study -m seed=0,1,2``.

Each job runs every stage in its own folder (``multirun/<study>/<job number>/``), logs to the shared
MLflow store, and writes the same files as ``dvc repro`` below that folder. When the sweep ends,
:class:`AggregateSeeds` writes ``reports/sweep/aggregate.json`` (mean and spread of every cell over
the jobs), which the report stage shows (``dvc repro -f -s report`` to refresh it). Launchers:
``hydra/launcher=joblib`` (default, local processes) or ``hydra/launcher=cluster`` (SLURM).
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.experimental.callback import Callback
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf

from pipelines import _config, attribute, capture, correlate, download, explain, prepare, train

TASK_STAGES = (download, prepare, train, capture, explain, attribute, correlate)


def localize(cfg: DictConfig) -> DictConfig:
    """Make the paths that must be shared across jobs absolute (mirrors, the sqlite MLflow store)."""
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    cfg.data.mirrors = [to_absolute_path(m) for m in cfg.data.mirrors]
    uri = cfg.tracking.uri
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        cfg.tracking.uri = "sqlite:///" + to_absolute_path(uri[len("sqlite:///") :])
    return _config.validate(cfg)


def run(cfg: DictConfig) -> None:
    """Run every stage for every task in the current folder."""
    _config.write(cfg, Path("params.yaml"))
    for task in cfg.tasks:
        for stage in TASK_STAGES:
            stage.run(cfg, task)


@hydra.main(config_path=str(_config.CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # runs end FAILED, not RUNNING
    run(localize(cfg))


class AggregateSeeds(Callback):
    """After a sweep: aggregate each task's correlations over the jobs into reports/sweep/."""

    def __init__(self, out: str = "reports/sweep/aggregate.json") -> None:
        self.out = out

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from attnflow.io import write_json
        from attnflow.report.aggregate import sweep_payload

        sweep = Path(config.hydra.sweep.dir)
        jobs = sorted(p for p in sweep.iterdir() if (p / "params.yaml").is_file())
        # Only jobs that finished every task enter, so seeds and per-task results stay paired.
        done = [
            p
            for p in jobs
            if all((p / config.paths.reports / t / "correlations.json").is_file() for t in config.tasks)
        ]
        runs_by_task = {
            t: [json.loads((p / config.paths.reports / t / "correlations.json").read_text()) for p in done]
            for t in config.tasks
        }
        payload = sweep_payload(
            runs_by_task if done else {}, [int(OmegaConf.load(p / "params.yaml").seed) for p in done]
        )
        payload["jobs"] = [p.name for p in done]
        payload["incomplete_jobs"] = [p.name for p in jobs if p not in done]
        write_json(Path(to_absolute_path(self.out)), payload)


if __name__ == "__main__":
    main()
