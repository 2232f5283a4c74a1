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

import yaml

from attnflow.io import write_text
from attnflow.paths import StudyPaths
from attnflow.report.glance import refresh
from attnflow.report.stage_times import MARKERS, from_store, markdown, read_table
from attnflow.tracking import config_hash, tracking_uri
from pipelines import _config

CSV = StudyPaths.from_config(_config.load(_config.ROOT / _config.PARAMS).paths, root=_config.ROOT).stage_times
DOC = _config.ROOT / "docs" / "results.md"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the docs table is stale")
    args = parser.parse_args()
    if not args.check:
        cfg = _config.load(_config.ROOT / _config.PARAMS)
        order = list(yaml.safe_load((_config.ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"])
        try:
            table = from_store(
                tracking_uri(cfg.tracking.uri),
                cfg.tracking.experiment,
                config_hash(_config.to_dict(cfg)),
                order,
            )
        except ValueError as exc:
            sys.exit(f"error: {exc}")
        write_text(CSV, table.to_csv(index=False))
    return refresh(DOC, markdown(read_table(CSV)), check=args.check, what="the stage-time table",
                   command="python -m pipelines.stage_times", markers=MARKERS)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
