"""A stage run logged over HTTP to a real `mlflow server`, read back through its REST API."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from attnflow import tracking

STARTUP_TIMEOUT_S = 90


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


@contextmanager
def running_mlflow_server(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """A real ``mlflow server`` on 127.0.0.1 in its own process group (stopped with all its workers):
    yields its URL and process once /health answers; stops whatever is left of it (a test may kill it)."""
    port = _free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
           "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
           "--artifacts-destination", str(tmp_path / "artifacts")]  # fmt: skip
    with open(tmp_path / "server.log", "wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path, start_new_session=True
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            while True:
                try:
                    urllib.request.urlopen(f"{url}/health", timeout=2)
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        pytest.fail(
                            f"mlflow server did not start: {(tmp_path / 'server.log').read_text()[-2000:]}"
                        )
                    time.sleep(0.5)
            yield url, proc
        finally:
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture()
def mlflow_server(tmp_path):
    with running_mlflow_server(tmp_path) as (url, _):
        yield url


@pytest.mark.slow  # the long tier: keeps the default one under 5 minutes
def test_stage_run_over_http_reads_back_params_metrics_tags(mlflow_server, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)  # the env var wins over the config
    dep = tmp_path / "input.txt"
    dep.write_text("abc")
    config = {
        "study": "server-test",
        "seed": 3,
        "tracking": {"uri": "sqlite:///ignored.db"},
        "explain": {"residual": 0.5, "methods": ["raw", "flow"]},
    }
    with tracking.stage_run(config, stage="prepare", dataset="agreement", inputs=[dep]) as run:
        run.log_metrics({"train": {"n": 10, "label": "x"}, "acc": 0.5})
        run_id = run.run_id
    assert not Path("ignored.db").exists()

    got = _get(f"{mlflow_server}/api/2.0/mlflow/runs/get?run_id={run_id}")["run"]
    params = {p["key"]: p["value"] for p in got["data"]["params"]}
    tags = {t["key"]: t["value"] for t in got["data"]["tags"]}
    metrics = {m["key"]: m["value"] for m in got["data"]["metrics"]}
    assert params["explain.residual"] == "0.5" and params["explain.methods"] == '["raw", "flow"]'
    assert params["seed"] == "3"
    assert metrics == {"train.n": 10.0, "acc": 0.5, "wall_time_s": metrics["wall_time_s"]}
    assert (tags["stage"], tags["dataset"]) == ("prepare", "agreement")
    assert tags["inputs_md5"] == "900150983cd24fb0d6963f7d28e17f72"  # md5("abc"), as DVC would record
    assert tags["config_hash"] == tracking.config_hash(config)
    assert got["info"]["status"] == "FINISHED"
    exp = _get(f"{mlflow_server}/api/2.0/mlflow/experiments/get?experiment_id={got['info']['experiment_id']}")
    assert exp["experiment"]["name"] == "server-test"


def test_failed_stage_marks_the_run_failed(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'local.db'}")
    with pytest.raises(RuntimeError), tracking.stage_run({"study": "s"}, stage="train") as run:
        run_id = run.run_id
        raise RuntimeError("boom")
    import mlflow

    assert mlflow.MlflowClient().get_run(run_id).info.status == "FAILED"
