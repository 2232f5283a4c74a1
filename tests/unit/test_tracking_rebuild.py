"""The MLflow store rebuilt from committed reports holds what a live run logs: the same experiment
(kind, headline view), the same parent run (name, tags, params, headline metrics) and the same stage
runs (names, tags, params, metrics with their layer steps, artifacts). Only what a rebuild cannot
know differs: ``git_commit`` (the reports' commit), ``inputs_md5`` (dvc.lock's deps), wall times
(the stage-time table's), MLflow's own bookkeeping tags, and the rebuilt-from tag.

The tiny study: one task "a", a per-task stage ``correlate`` (its body logs the mean of each
correlation cell, then log_outputs logs correlations.json) and a whole-study stage ``report``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

mlflow = pytest.importorskip("mlflow")

from attnflow import tracking  # noqa: E402
from attnflow.tracking import rebuild  # noqa: E402

DVC_YAML = """
stages:
  correlate:
    foreach: ${tasks}
    do:
      cmd: python -m pipelines.correlate ${item}
      params: [seed, correlate]
      outs:
        - outputs/${item}
      metrics:
        - ${paths.reports}/${item}/correlations.json:
            cache: false
  report:
    cmd: python -m pipelines.report
    params: [report]
    metrics:
      - ${paths.reports}/metrics.json:
          cache: false
"""
PARAMS = """
study: tiny
seed: 3
tasks: [a]
tracking: {uri: sqlite:///mlflow.db, experiment: tiny, enabled: true}
paths: {reports: reports}
correlate: {n_boot: 100, lr: 1.0e-3}
report: {title: Tiny}
"""
CHOICES = {"protocol": "paper", "recipe": "authors"}
# correlations.json: mean +- std per reference, method and layer (binary-exact values)
CORRELATIONS = {"blank_out": {"flow": {"L1": {"mean": 0.5, "std": 0.25}, "L2": {"mean": 0.75, "std": 0.125}}}}
METRICS = {"a": {"accuracy": 0.875, "corr": {"blank_out": {"flow": {"L2": 0.75}}}}}
# A committed sweep (reports/sweep/): one finished job (seed 1), its tables
SWEEP_JOB = {"job": "0", "seed": 1, "overrides": "seed=1", "status": "finished",
             "provenance": {"commit": "abcdef012345"}, "accuracy": {"a": {"accuracy": 0.75, "n_train": 8}}}  # fmt: skip
SWEEP_CORRELATIONS = """task,importance,method,head,layer,variant,mean,job
a,blank_out,flow,,1,configured,0.25,0
a,blank_out,flow,,2,configured,0.5,0
a,blank_out,flow,0,2,configured,0.125,0
a,blank_out,flow,,2,correlate.spearman=average,0.0625,0
a,blank_out,flow,,2,configured,0.875,1
"""
SWEEP_FAITHFULNESS = """method,layer,metric,mean,task,job
flow,1,comprehensiveness,0.125,a,0
flow,2,comprehensiveness,0.25,a,0
random,,comprehensiveness,0.0625,a,0
"""
# what a rebuild cannot know, or MLflow fills in itself
UNKNOWABLE_TAGS = {"git_commit", "inputs_md5", rebuild.REBUILT_TAG, "mlflow.user", "mlflow.source.name",
                   "mlflow.source.type", "mlflow.source.git.commit", "mlflow.parentRunId"}  # fmt: skip


@pytest.fixture()
def study(tmp_path, monkeypatch) -> Path:
    """A committed tiny study: params.yaml, dvc.yaml, the stage scripts' docstrings, reports/."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "dvc.yaml").write_text(DVC_YAML)
    (tmp_path / "params.yaml").write_text(PARAMS)
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "correlate.py").write_text('"""Correlate the maps with the references."""\n')
    (tmp_path / "pipelines" / "report.py").write_text('"""Write the report."""\n')
    (tmp_path / "reports" / "a").mkdir(parents=True)
    (tmp_path / "reports" / "a" / "correlations.json").write_text(json.dumps(CORRELATIONS))
    (tmp_path / "reports" / "metrics.json").write_text(json.dumps(METRICS))
    (tmp_path / "reports" / "stage_times.csv").write_text(
        "stage,task,seconds,commit\ncorrelate,a,2.5,0123456789ab\nreport,,1.5,0123456789ab\n"
    )
    sweep = tmp_path / "reports" / "sweep"
    sweep.mkdir()
    (sweep / "jobs.json").write_text(json.dumps({"jobs": [SWEEP_JOB, {"job": "1", "status": "failed"}]}))
    (sweep / "correlations.csv").write_text(SWEEP_CORRELATIONS)
    (sweep / "faithfulness.csv").write_text(SWEEP_FAITHFULNESS)
    return tmp_path


def _live(root: Path, store: str, monkeypatch) -> None:
    """What `dvc repro` of the tiny study logs: pipelines/_stage.py's stage_run + log_outputs."""
    monkeypatch.chdir(root)
    config = rebuild.read_config(root / "params.yaml")
    for stage, task in (("correlate", "a"), ("report", None)):
        declared = tracking.declared(root / "dvc.yaml", stage, item=task, config=config)
        doc = rebuild.stage_description(root, stage)
        with tracking.stage_run(config, stage=stage, dataset=task, uri=store, params=declared.params,
                                description=doc, overrides={}, choices=CHOICES) as run:  # fmt: skip
            if stage == "correlate":  # pipelines/correlate.py's body
                run.log_metrics({"corr/blank_out/flow/L1": 0.5, "corr/blank_out/flow/L2": 0.75})
            tracking.log_outputs(run, declared, task=task)


def _snapshot(store: str) -> dict:
    client = mlflow.MlflowClient(store)
    (experiment,) = [e for e in client.search_experiments() if e.name == "tiny"]
    runs = {}
    for r in client.search_runs([experiment.experiment_id]):
        history = {k: sorted((m.step, m.value) for m in client.get_metric_history(r.info.run_id, k))
                   for k in r.data.metrics}  # fmt: skip
        artifacts = sorted(a.path for a in client.list_artifacts(r.info.run_id))
        runs[r.info.run_name] = {
            "tags": {k: v for k, v in r.data.tags.items() if k not in UNKNOWABLE_TAGS},
            "params": r.data.params,
            "metrics": {k: v for k, v in history.items() if not k.startswith("wall_time_s")},
            "wall": {k: v for k, v in history.items() if k.startswith("wall_time_s")},
            "artifacts": artifacts,
            "status": r.info.status,
            "parent": r.data.tags.get("mlflow.parentRunId") is not None,
        }
    return {"experiment_tags": experiment.tags, "runs": runs}


@pytest.mark.slow  # two MLflow sqlite stores: ~15-45 s on 2 busy cores
def test_the_rebuilt_store_holds_the_runs_tags_params_and_metrics_of_a_live_run(study, tmp_path, monkeypatch):
    live_store, rebuilt_store = f"sqlite:///{tmp_path / 'live.db'}", f"sqlite:///{tmp_path / 'rebuilt.db'}"
    _live(study, live_store, monkeypatch)
    for f in (study / "reports" / "sweep").iterdir():  # `dvc repro` alone: no sweep
        f.unlink()
    made = rebuild.rebuild_store(study, rebuilt_store, choices=CHOICES)
    live, rebuilt = _snapshot(live_store), _snapshot(rebuilt_store)
    assert sorted(rebuilt["runs"]) == sorted(live["runs"])
    assert sorted(live["runs"])[:2] == ["correlate@a", "report"] and len(live["runs"]) == 3
    assert made.runs.keys() == {"correlate@a", "report"}
    assert rebuilt["experiment_tags"] == live["experiment_tags"]
    for name, run in live["runs"].items():
        got = rebuilt["runs"][name]
        for part in ("tags", "params", "metrics", "status", "parent"):
            assert got[part] == run[part], (name, part)
        assert got["artifacts"] == run["artifacts"], name
        assert sorted(got["wall"]) == sorted(run["wall"]), name  # the same wall-time metrics ...
    # ... holding the committed times; and the headline of correlations.json on the parent, step = layer
    assert rebuilt["runs"]["correlate@a"]["wall"] == {"wall_time_s": [(0, 2.5)]}
    parent = next(r for n, r in rebuilt["runs"].items() if n.startswith("seed=3"))
    assert parent["metrics"]["a/corr/blank_out/flow"] == [(1, 0.5), (2, 0.75)]
    assert parent["wall"] == {"wall_time_s/correlate/a": [(0, 2.5)], "wall_time_s/report/all": [(0, 1.5)]}


@pytest.mark.slow  # two MLflow sqlite stores: ~15-45 s on 2 busy cores
def test_rebuilt_runs_say_what_they_were_rebuilt_from_and_a_second_rebuild_is_refused(study, tmp_path):
    store = f"sqlite:///{tmp_path / 'rebuilt.db'}"
    made = rebuild.rebuild_store(study, store)
    client = mlflow.MlflowClient(store)
    tags = client.get_run(made.runs["correlate@a"]).data.tags
    assert tags[rebuild.REBUILT_TAG] == "reports/ at 0123456789ab" and tags["git_commit"] == "0123456789ab"
    # the sweep job: a parent run named and tagged as a live job's, with its headline (step = layer)
    sweep = client.get_run(made.sweeps["sweep/0"])
    assert sweep.data.tags["mlflow.runName"].startswith("seed=1 ") and sweep.data.tags["seed"] == "1"
    assert sweep.data.tags["attnflow.study_run"] == "true" and sweep.data.params["seed"] == "1"
    history = client.get_metric_history(sweep.info.run_id, "a/corr/blank_out/flow")
    assert sorted((m.step, m.value) for m in history) == [(1, 0.25), (2, 0.5)]
    with pytest.raises(FileExistsError, match="already holds config"):
        rebuild.rebuild_store(study, store)


def test_a_folder_without_the_stage_time_table_is_named(study, tmp_path):
    (study / "reports" / "stage_times.csv").unlink()
    assert rebuild.main(["--root", str(study), "--store", f"sqlite:///{tmp_path / 'x.db'}"]) == 1
    with pytest.raises(FileNotFoundError, match=r"stage_times\.csv: no stage-time table"):
        rebuild.stage_runs(study / "reports")


def test_a_sweep_jobs_headline_is_its_accuracy_its_configured_head_mean_cells_and_its_last_layer(study):
    # per job: the configured variant's head-mean cells (a head's cell, a variant and job 1 left out),
    # faithfulness at the last layer (2) plus the references (no layer), accuracies as train_metrics'
    got = rebuild.sweep_headline(study / "reports" / "sweep", SWEEP_JOB)
    assert got == {"a/accuracy": 0.75, "a/corr/blank_out/flow/L1": 0.25, "a/corr/blank_out/flow/L2": 0.5,
                   "a/faithfulness/flow/comprehensiveness": 0.25,
                   "a/faithfulness/random/comprehensiveness": 0.0625}  # fmt: skip
    assert [job["job"] for _, job in rebuild.sweep_jobs(study / "reports")] == ["0"]  # the failed one is not


def test_a_stage_of_dvc_lock_the_stage_time_table_lacks_is_still_rebuilt_untimed(study):
    # train@agreement's run was not found when the table was written (its config changed under it):
    # its outputs are committed all the same, so its run (and the accuracy on the parent) is rebuilt
    (study / "reports" / "stage_times.csv").write_text(
        "stage,task,seconds,commit\nreport,,1.5,0123456789ab\n"
    )
    lock = {"schema": "2.0", "stages": {"correlate@a": {"deps": []}, "report": {"deps": []}}}
    got = rebuild.stage_runs(study / "reports", lock)
    assert got == [
        rebuild.StageExecution("report", None, 1.5, "0123456789ab"),
        rebuild.StageExecution("correlate", "a", None, rebuild.UNKNOWN),
    ]
    assert rebuild.stage_runs(study / "reports") == got[:1]  # no lock: the table's rows only


@pytest.mark.slow  # one MLflow sqlite store: ~10-20 s on 2 busy cores
def test_the_untimed_stage_gets_its_run_and_its_metrics_on_the_parent_without_a_wall_time(study, tmp_path):
    (study / "reports" / "stage_times.csv").write_text(
        "stage,task,seconds,commit\nreport,,1.5,0123456789ab\n"
    )
    (study / "dvc.lock").write_text("schema: '2.0'\nstages:\n  correlate@a: {}\n  report: {}\n")
    store = f"sqlite:///{tmp_path / 'rebuilt.db'}"
    made = rebuild.rebuild_store(study, store)
    client = mlflow.MlflowClient(store)
    run = client.get_run(made.runs["correlate@a"])
    assert run.data.tags["git_commit"] == rebuild.UNKNOWN and "wall_time_s" not in run.data.metrics
    assert run.data.metrics["corr/blank_out/flow"] == 0.75  # (its last step: layer 2)
    parent = client.get_run(made.parent_id)
    assert parent.data.tags["git_commit"] == "0123456789ab"  # the timed stages' commit
    assert "a/corr/blank_out/flow" in parent.data.metrics
