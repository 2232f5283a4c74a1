"""A sweep creates its MLflow store and experiment before its jobs start (pipelines.study.open_store):
jobs started together on a new sqlite store would each migrate its schema, and one would fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
from omegaconf import OmegaConf

from pipelines import study

ROOT = Path(__file__).resolve().parents[2]


def _config(uri: str, *, enabled: bool = True):
    return OmegaConf.create({"study": "s", "tracking": {"uri": uri, "experiment": "s", "enabled": enabled}})


def test_the_store_and_the_experiment_are_created_once_from_where_the_sweep_starts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    study.open_store(_config("sqlite:///stores/mlflow.db"))  # relative: from where the sweep starts
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'stores' / 'mlflow.db'}")
    first = client.get_experiment_by_name("s")
    assert first is not None
    study.open_store(_config("sqlite:///stores/mlflow.db"))  # a second sweep on the same store
    assert sorted(e.name for e in client.search_experiments()) == ["Default", "s"]


def test_a_sweep_without_tracking_creates_no_store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    study.open_store(_config("sqlite:///mlflow.db", enabled=False))
    assert list(tmp_path.iterdir()) == []


def test_a_server_that_does_not_answer_ends_the_sweep_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # the discard port: nothing listens
    with pytest.raises(
        SystemExit, match=r"^error: MLflow tracking server http://127\.0\.0\.1:9 did not answer"
    ):
        study.open_store(_config("sqlite:///mlflow.db"))
    assert list(tmp_path.iterdir()) == []


JOB = """
import sys
from attnflow.tracking.runs import stage_run
config = {"study": "s", "seed": int(sys.argv[2]), "tracking": {"uri": sys.argv[1], "enabled": True}}
with stage_run(config, stage="download"):
    pass
"""


@pytest.mark.slow
def test_two_jobs_started_together_on_the_opened_store_both_log(tmp_path, monkeypatch):
    # Without open_store, one of two such jobs fails in nearly every try on a 2-core machine (the
    # schema migration, then the experiment's creation); with it, both log their runs.
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    study.open_store(_config(uri))
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    jobs = [
        subprocess.Popen([sys.executable, "-c", JOB, uri, str(seed)], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
        for seed in (0, 1)
    ]  # fmt: skip
    errors = [job.communicate(timeout=120)[1] for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], errors
    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("s").experiment_id])
    assert sorted(r.data.tags.get("stage", "") for r in runs if r.data.tags.get("stage")) == [
        "download",
        "download",
    ]
