"""The whole study as one Hydra app, for sweeps: ``python -m pipelines.study -m seed=0,1,2``.

Each job runs every stage in its own folder (``multirun/<study>/<job number>/``), logs to the shared
MLflow store, and writes the same files as ``dvc repro`` below that folder. When the sweep ends,
:class:`AggregateSeeds` stacks the correlation tables of the jobs that finished into
``reports/sweep/correlations.csv`` (columns ``seed`` and ``commit`` added) and lists every job, failed
ones with their error, with the code that ran it (``provenance.json``: commit, dirty flag, digest of
src/, pipelines/, conf/) in ``reports/sweep/jobs.json``; the report stage reads both (a declared dependency, so
``dvc repro`` refreshes the report). Launchers: ``hydra/launcher=local`` (default, joblib
processes), ``hydra/launcher=cluster`` (SLURM) or ``hydra/launcher=submitit_local``.
"""

from __future__ import annotations

import signal
import sys
import traceback
from pathlib import Path
from typing import Any

import hydra
from hydra.experimental.callback import Callback
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf

from pipelines import _config, attribute, capture, correlate, download, explain, faithfulness, prepare, train

TASK_STAGES = (download, prepare, train, capture, explain, attribute, correlate, faithfulness)
ERROR_FILE = "error.txt"  # a failed job writes its traceback here, in its own folder


def localize(cfg: DictConfig) -> DictConfig:
    """Make the paths that must be shared across jobs absolute (mirrors, the sqlite MLflow store)."""
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    cfg.data.mirrors = [to_absolute_path(m) for m in cfg.data.mirrors]
    uri = cfg.tracking.uri
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        cfg.tracking.uri = "sqlite:///" + to_absolute_path(uri[len("sqlite:///") :])
    return _config.validate(cfg)


def run(cfg: DictConfig) -> None:
    """Run every stage for every task in the current folder, after recording which code runs them."""
    from attnflow.io import write_json
    from attnflow.sweep import PROVENANCE_FILE, code_state

    write_json(Path(PROVENANCE_FILE), code_state(_config.ROOT))
    _config.write(cfg, Path("params.yaml"))
    for task in cfg.tasks:
        for stage in TASK_STAGES:
            stage.run(cfg, task)


@hydra.main(config_path=str(_config.CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # runs end, not RUNNING
    try:
        run(localize(cfg))
    except Exception:  # recorded, so the other jobs run and the aggregate names this one
        Path(ERROR_FILE).write_text(traceback.format_exc(), encoding="utf-8")
        print(traceback.format_exc(), file=sys.stderr)
    except BaseException:  # SIGTERM, Ctrl-C: recorded, and the sweep stops
        Path(ERROR_FILE).write_text(traceback.format_exc(), encoding="utf-8")
        raise


def _refuse_used_folder(folder: str, key: str) -> None:
    """No two runs or sweeps write into one folder: a folder that already holds files is refused."""
    path = Path(to_absolute_path(folder))
    if path.is_dir() and any(p.name != ".hydra" for p in path.iterdir()):
        sys.exit(f"error: {key}={folder} already holds another run's files; choose a new folder")


class AggregateSeeds(Callback):
    """After a sweep: stack the finished jobs' correlation tables into reports/<into>/ (``sweep``
    for seeds; ``hydra.callbacks.aggregate.into=recipes`` for a sweep over recipe choices)."""

    def __init__(self, into: str = "sweep") -> None:
        self.into = into

    def _check_names(self, config: DictConfig) -> None:
        """Refuse, before Hydra makes a folder, a study or aggregate name that leads outside its
        folder (``multirun/<study>/``, ``reports/<into>/``): one line naming the key."""
        from attnflow.paths import UnsafeName, inside

        try:
            inside("multirun", str(config.study), key="study")
            inside(str(config.paths.reports), str(self.into), key="hydra.callbacks.aggregate.into")
        except UnsafeName as exc:
            sys.exit(f"error: {exc}")

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check_names(config)
        _refuse_used_folder(config.hydra.run.dir, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check_names(config)
        _refuse_used_folder(config.hydra.sweep.dir, "hydra.sweep.dir")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from attnflow.paths import StudyPaths
        from attnflow.sweep import stack_jobs

        out = StudyPaths.from_config(config.paths, root=to_absolute_path("."))
        report = stack_jobs(
            Path(config.hydra.sweep.dir),
            config.paths,
            list(config.tasks),
            out,
            error_file=ERROR_FILE,
            name=self.into,
        )
        if report["failed"]:
            names = "; ".join(f"job {j['job']} ({j['overrides']}): {j['error']}" for j in report["failed"])
            sys.exit(f"sweep: {len(report['failed'])} job(s) failed, aggregated the others: {names}")


if __name__ == "__main__":
    main()
