"""The report stage adapter: one MLflow run, every table cell a metric, the report files as artifacts."""

from __future__ import annotations

import shutil

import mlflow

from pipelines import _config
from pipelines import report as report_stage

COMPLETING = ("train_timing.json", "faithfulness.parquet", "perturbation_curves.parquet",
              "method_agreement.parquet", "method_cost.parquet")  # fmt: skip


def test_stage_logs_cells_and_artifacts(tmp_path, monkeypatch, make_stage_outputs):
    monkeypatch.chdir(tmp_path)  # MLflow's artifact folder lands under the working directory
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    make_stage_outputs(tmp_path, tasks=("agreement",))
    for name in COMPLETING:  # the stage refuses missing inputs: the committed ones complete the set
        shutil.copyfile(
            _config.ROOT / "reports" / "agreement" / name, tmp_path / "reports" / "agreement" / name
        )
    overrides = ["tasks=[agreement]", "report.n_examples=1"]
    cfg = _config.compose(overrides)
    report_stage.run(cfg)
    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(cfg.tracking.experiment).experiment_id])
    (run,) = [r for r in runs if "stage" in r.data.tags]  # beside it: the parent run of this config
    assert run.data.tags["stage"] == "report"
    metrics = run.data.metrics
    assert metrics["agreement/accuracy"] == 0.9375
    assert sum(k.startswith("agreement/corr/") for k in metrics) == 2 * 3  # one per (reference, method)
    history = client.get_metric_history(run.info.run_id, "agreement/corr/blank_out/raw")
    assert [m.step for m in history] == [1, 2, 3, 4, 5, 6] and history[0].value == 0.59  # step = layer
    listed = {a.path for a in client.list_artifacts(run.info.run_id, "outputs/reports")}
    assert {
        f"outputs/reports/{n}"
        for n in ("report.md", "report.html", "metrics.json", "comparison.csv", "figures")
    } <= listed
    figures = {a.path for a in client.list_artifacts(run.info.run_id, "outputs/reports/figures")}
    assert "outputs/reports/figures/curves_agreement_blank_out.png" in figures
    parent = run.data.tags["mlflow.parentRunId"]  # the report and the deltas to the paper go on the parent
    assert {"report.md", "report.html"} <= {a.path for a in client.list_artifacts(parent)}
    assert any(k.startswith("agreement/delta/") for k in client.get_run(parent).data.metrics)
