"""Tracking that fails safe: ``tracking.enabled=false`` runs every stage's tracking path with no
MLflow at all, and a tracking server lost mid-run fails the next log call in bounded time with one
clear message (issue: reliability, cases 1 and 2)."""

from __future__ import annotations

import json
import os
import signal
import time

import mlflow
import pytest

from attnflow import tracking


@pytest.fixture()
def disabled(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    return {
        "study": "s",
        "seed": 0,
        "tracking": {"uri": "sqlite:///mlflow.db", "experiment": "s", "enabled": False},
    }


def test_disabled_tracking_runs_the_whole_stage_api_and_writes_no_store(disabled, tmp_path):
    artifact = tmp_path / "metrics.json"
    artifact.write_text("{}")
    with tracking.stage_run(disabled, stage="train", dataset="agreement", inputs=[artifact]) as run:
        assert run.run_id == ""
        assert tracking.lightning_logger(run) is None  # the train stage's logger
        run.log_metrics({"acc": 0.5, "nested": {"loss": 1.0}}, step=1)
        run.log_artifact(artifact)
        run.log_artifact(tmp_path)  # a folder
        run.log_dict({"a": 1}, "a.json")
        run.set_tags({"k": "v"})
    assert mlflow.active_run() is None
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


def test_disabled_tracking_still_raises_the_stage_error(disabled):
    with pytest.raises(RuntimeError, match="boom"), tracking.stage_run(disabled, stage="capture"):
        raise RuntimeError("boom")


def test_real_stages_run_with_tracking_disabled(tmp_path, monkeypatch):
    """download, prepare and train of the tiny agreement task, as the e2e test sets them up."""
    from attnflow.data import download
    from pipelines import _config, compose
    from pipelines import download as download_stage
    from pipelines import prepare as prepare_stage
    from pipelines import train as train_stage
    from tests.e2e.test_study_e2e import _write_mirror

    mirror = _write_mirror(tmp_path / "mirror")
    monkeypatch.setattr(download, "known_digests", dict)  # fixture files: digests recorded, not checked
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    overrides = [
        f"data.mirrors=[{mirror}]",
        "tasks=[agreement]",
        "task.agreement.data.urls=[]",
        "task.agreement.model.n_layer=1",
        "task.agreement.model.n_head=2",
        "task.agreement.model.n_embd=8",
        "task.agreement.train.max_epochs=1",
        "task.agreement.train.batch_size=32",
        "trainer.progress_bar=false",
        "tracking.enabled=false",
    ]
    compose.run(overrides, path=tmp_path / "params.yaml")
    cfg = _config.load(tmp_path / "params.yaml")
    for stage in (download_stage, prepare_stage, train_stage):
        stage.run(cfg, "agreement")
    paths = train_stage._stage.paths(cfg)
    assert 0 <= json.loads(paths.train_metrics("agreement").read_text())["accuracy"] <= 1
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


@pytest.fixture()
def server(tmp_path, monkeypatch):
    """A real ``mlflow server`` (test_mlflow_server.running_mlflow_server); yields its URL and
    process, and stops whatever is left of it."""
    from tests.integration.test_mlflow_server import running_mlflow_server

    for name in tracking.HTTP_DEFAULTS:  # the project's bounds, not whatever the shell set
        monkeypatch.delenv(name, raising=False)
    with running_mlflow_server(tmp_path) as started:
        yield started


@pytest.mark.slow  # starting the server takes 10-60 s
def test_a_server_killed_mid_run_fails_the_stage_in_bounded_time_with_one_message(
    server, tmp_path, monkeypatch
):
    url, proc = server
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    monkeypatch.chdir(tmp_path)
    config = {"study": "s", "seed": 0, "tracking": {"uri": "unused", "experiment": "s", "enabled": True}}
    with pytest.raises(tracking.TrackingUnavailable) as info:
        with tracking.stage_run(config, stage="train", dataset="agreement") as run:
            run.log_metrics({"loss": 1.0}, step=0)  # the server answers
            os.killpg(proc.pid, signal.SIGKILL)  # the server and its workers, as `kill -9` would
            proc.wait(timeout=20)
            start = time.monotonic()
            with pytest.raises(Exception) as failed:  # the next log call fails, it does not hang
                run.log_metrics({"loss": 0.5}, step=1)
            logged = time.monotonic() - start
            raise failed.value
    elapsed = time.monotonic() - start  # the log call, then ending the run
    assert logged < 15 and elapsed < 30, f"log call {logged:.0f} s, whole stage {elapsed:.0f} s"
    message = str(info.value)
    assert url in message and "stopped answering during stage 'train'" in message
    assert "tracking.enabled=false" in message and "\n" not in message
    assert mlflow.active_run() is None
