"""The docs' table of how long each stage of the study took, from the last ``dvc repro``.

    python -m pipelines.stage_times           # reports/stage_times.csv from the MLflow store, then the docs table
    python -m pipelines.stage_times --check   # exit 1 when docs/results.md's table differs from the csv (a test runs this)

The csv holds the wall time each stage's MLflow run logged, for the runs of the config in
``params.yaml`` (the latest finished run of each stage@task: what ``dvc repro`` last ran); the table
sits between ``<!-- results:stage_times -->`` and ``<!-- /results:stage_times -->`` in
``docs/results.md``. Never typed by hand.
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd
import yaml
from omegaconf import DictConfig

from attnflow.io import write_text
from attnflow.lockfile import read_lock
from attnflow.paths import StudyPaths
from attnflow.report.glance import refresh
from attnflow.report.stage_times import MARKERS, from_store, markdown, read_table, untimed, with_code
from attnflow.sweep import code_state
from attnflow.tracking import config_hash, tracking_uri
from pipelines import _config, dvc_deps

CSV = StudyPaths.from_config(_config.load(_config.ROOT / _config.PARAMS).paths, root=_config.ROOT).stage_times
DOC = _config.ROOT / "docs" / "results.md"
LOCK = _config.ROOT / "dvc.lock"


def stage_code(cfg: DictConfig) -> pd.DataFrame:
    """Every stage's latest run of this config in the MLflow store, with whether its declared code
    is the checkout's (`with_code`); ValueError when the store has no such experiment."""
    order = list(yaml.safe_load((_config.ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"])
    uri, cfg_hash = tracking_uri(cfg.tracking.uri), config_hash(_config.to_dict(cfg))
    table = from_store(uri, cfg.tracking.experiment, cfg_hash, order)
    head = code_state(_config.ROOT)["commit"] or ""
    return with_code(
        table, _config.ROOT, lambda stage: dvc_deps.stage_deps(stage, []), head, lock=read_lock(LOCK)
    )


def docs_table() -> str:
    """The docs' table of the csv, naming the stages of dvc.lock the csv has no run for."""
    table = read_table(CSV)
    return markdown(table, untimed(table, read_lock(LOCK)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the docs table is stale")
    args = parser.parse_args()
    if not args.check:
        try:
            table = stage_code(_config.load(_config.ROOT / _config.PARAMS))
        except ValueError as exc:
            sys.exit(f"error: {exc}")
        write_text(CSV, table.to_csv(index=False))
    return refresh(DOC, docs_table(), check=args.check, what="the stage-time table",
                   command="python -m pipelines.stage_times", markers=MARKERS)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
