"""Stage runs in MLflow: grouped under a parent per config, closed honestly when killed, and a dead
tracking server refused in seconds (issue: hardening, cases 4 and 8, and the MLflow UI)."""

from __future__ import annotations

import time

import mlflow
import pytest

from attnflow import tracking


@pytest.fixture()
def config(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    return {"study": "s", "seed": 0, "tracking": {"uri": uri, "experiment": "s", "enabled": True}}


def _runs(config):
    client = mlflow.MlflowClient(config["tracking"]["uri"])
    experiment = client.get_experiment_by_name("s")
    return client, experiment, client.search_runs([experiment.experiment_id])


def test_stage_runs_nest_under_one_parent_per_config_and_open_on_the_runs_table(config):
    for stage in ("prepare", "train"):
        with tracking.stage_run(config, stage=stage, dataset="agreement"):
            pass
    _, experiment, runs = _runs(config)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    parents = [r for r in runs if r.data.tags.get(tracking.PARENT_TAG) == "true"]
    stages = [r for r in runs if "stage" in r.data.tags]
    assert len(parents) == 1 and len(stages) == 2
    assert {r.data.tags["mlflow.parentRunId"] for r in stages} == {parents[0].info.run_id}
    assert {r.info.status for r in stages} == {"FINISHED"}


def test_interrupted_stage_ends_killed_and_a_failing_one_failed(config):
    with pytest.raises(KeyboardInterrupt), tracking.stage_run(config, stage="train", dataset="a"):
        raise KeyboardInterrupt
    with pytest.raises(SystemExit), tracking.stage_run(config, stage="train", dataset="b"):
        raise SystemExit(143)  # SIGTERM, as the stage scripts turn it into SystemExit
    with pytest.raises(RuntimeError), tracking.stage_run(config, stage="train", dataset="c"):
        raise RuntimeError("boom")
    _, _, runs = _runs(config)
    status = {r.data.tags.get("dataset"): r.info.status for r in runs if "stage" in r.data.tags}
    assert status == {"a": "KILLED", "b": "KILLED", "c": "FAILED"}


def test_a_run_left_running_by_a_kill_is_closed_as_killed_by_the_next_run(config):
    with tracking.stage_run(config, stage="capture", dataset="sst2") as first:
        stale_id = first.run_id
    client, _, _ = _runs(config)
    client.update_run(stale_id, status="RUNNING")  # what a SIGKILLed process leaves behind
    with tracking.stage_run(config, stage="capture", dataset="agreement"):
        pass  # another stage/dataset: not touched
    assert client.get_run(stale_id).info.status == "RUNNING"
    with tracking.stage_run(config, stage="capture", dataset="sst2"):
        pass
    assert client.get_run(stale_id).info.status == "KILLED"


def test_unreachable_tracking_server_fails_in_seconds_naming_the_uri(config, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # discard port: nothing listens
    start = time.monotonic()
    with pytest.raises(tracking.TrackingUnavailable, match=r"http://127\.0\.0\.1:9 .*sqlite:///mlflow\.db"):
        with tracking.stage_run(config, stage="correlate", dataset="agreement"):
            pytest.fail("the stage body must not run")
    assert time.monotonic() - start < tracking.PROBE_TIMEOUT_S + 2
