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

from attnflow.io import write_text
from attnflow.report.glance import with_paragraph
from attnflow.report.stage_times import MARKERS, markdown, stage_times
from attnflow.tracking import config_hash, tracking_uri
from pipelines import _config

CSV = _config.ROOT / "reports" / "stage_times.csv"
DOC = _config.ROOT / "docs" / "results.md"


def from_store() -> pd.DataFrame:
    import mlflow

    cfg = _config.load(_config.ROOT / _config.PARAMS)
    digest = config_hash(_config.to_dict(cfg))
    client = mlflow.MlflowClient(tracking_uri(cfg.tracking.uri))
    experiment = client.get_experiment_by_name(cfg.tracking.experiment)
    if experiment is None:
        sys.exit(
            f"no MLflow experiment {cfg.tracking.experiment!r} in {cfg.tracking.uri}: run `dvc repro` first"
        )
    runs = client.search_runs([experiment.experiment_id], f"tags.config_hash = '{digest}'", max_results=5000)
    order = list(yaml.safe_load((_config.ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"])
    return stage_times(runs, order)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the docs table is stale")
    args = parser.parse_args()
    if not args.check:
        write_text(CSV, from_store().to_csv(index=False))
    table = pd.read_csv(CSV, keep_default_na=False, dtype={"commit": str, "task": str})
    text = DOC.read_text(encoding="utf-8")
    new = with_paragraph(text, markdown(table), DOC, markers=MARKERS)
    if new == text:
        return 0
    if args.check:
        print(f"{DOC}: the stage-time table is stale: run python -m pipelines.stage_times")
        return 1
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
