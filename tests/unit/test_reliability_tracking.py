"""Reliability round 4 (issue 34), tracking: a frozen MLflow server costs one bounded wait, said early.

A SIGSTOPped server accepts connections and never answers. A campaign found 189 s of silence before
the stage's clear error, where the code promised about 100 s: the log call that found the server
frozen waited its HTTP budget, and ending the run then waited it again. Now the whole wait is bounded
(`attnflow.tracking.runs.wait_bound_s`: one call's budget, the probe, and a quick end of the run with
no retries), and a line on stderr says after `NOTICE_S` seconds that the server is not answering.

The server here is MLflow's own app, in-process behind a switch that freezes it (every request
then hangs, as under SIGSTOP); the HTTP budget is scaled down (3 s a try, 2 tries) to keep it quick.
"""

from __future__ import annotations

import threading
import time

import pytest

pytestmark = pytest.mark.slow  # importing MLflow's server app takes 10-20 s

TRY_S, TRIES = 3, 2  # the scaled HTTP budget: one call waits about TRY_S * TRIES on a frozen server


@pytest.fixture(scope="module")
def frozen_server(tmp_path_factory):
    """(url, freeze switch) of MLflow's tracking app served from a thread; set the switch to freeze it."""
    import os

    pytest.importorskip("mlflow")
    root = tmp_path_factory.mktemp("mlflow")
    saved = {k: os.environ.get(k) for k in ("_MLFLOW_SERVER_FILE_STORE", "_MLFLOW_SERVER_ARTIFACT_ROOT")}
    os.environ["_MLFLOW_SERVER_FILE_STORE"] = f"sqlite:///{root}/mlflow.db"
    os.environ["_MLFLOW_SERVER_ARTIFACT_ROOT"] = str(root / "artifacts")
    from mlflow.server import app
    from werkzeug.serving import make_server

    frozen = threading.Event()

    def maybe_frozen(environ, start_response):
        if frozen.is_set():
            time.sleep(3600)  # SIGSTOP: the connection is accepted, nothing ever comes back
        return app(environ, start_response)

    server = make_server("127.0.0.1", 0, maybe_frozen, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", frozen
    frozen.clear()
    server.shutdown()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture()
def config(frozen_server, tmp_path, monkeypatch):
    url, frozen = frozen_server
    frozen.clear()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    for name in (
        "MLFLOW_HTTP_REQUEST_TIMEOUT",
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
    ):
        monkeypatch.delenv(name, raising=False)
    from attnflow.tracking import runs

    monkeypatch.setattr(runs, "NOTICE_S", 1.0, raising=False)
    yield {"study": "s", "seed": 0, "tracking": {"uri": "unused", "experiment": "s", "enabled": True}}
    frozen.clear()


def _freeze(frozen, monkeypatch) -> float:
    """Scale the HTTP budget down (the run is open: its setup had the real one), freeze the server."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", str(TRY_S))
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", str(TRIES - 1))
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    frozen.set()
    return time.monotonic()


def test_a_server_frozen_mid_run_is_one_bounded_wait_said_within_seconds(
    frozen_server, config, capfd, monkeypatch
):
    import mlflow

    from attnflow import tracking
    from attnflow.tracking import runs

    _, frozen = frozen_server
    with pytest.raises(tracking.TrackingUnavailable) as info:
        with tracking.stage_run(config, stage="train", dataset="agreement") as run:
            run.log_metrics({"loss": 1.0}, step=0)  # the server answers
            start = _freeze(frozen, monkeypatch)
            run.log_metrics({"loss": 0.5}, step=1)  # it hangs: one call's budget, then the error
    elapsed = time.monotonic() - start
    one_call = TRY_S * TRIES
    print(f"the frozen log call and ending the run took {elapsed:.1f} s")
    # one call's wait + the probe + a quick end of the run
    assert elapsed < one_call + runs.PROBE_TIMEOUT_S + 3.5, f"{elapsed:.1f} s"
    assert "stopped answering during stage 'train'" in str(info.value)
    assert mlflow.active_run() is None
    err = capfd.readouterr().err  # the notice (NOTICE_S into the wait) names the server and the bound
    assert "not answering" in err and "at most" in err, err[-2000:]
    assert elapsed < runs.wait_bound_s() + 1.5  # the bound the notice states


def test_a_stage_error_while_the_server_is_frozen_is_raised_without_the_long_wait(
    frozen_server, config, monkeypatch
):
    import mlflow

    from attnflow import tracking
    from attnflow.tracking import runs

    _, frozen = frozen_server
    with pytest.raises(RuntimeError, match="boom"):
        with tracking.stage_run(config, stage="capture", dataset="agreement"):
            start = _freeze(frozen, monkeypatch)
            raise RuntimeError("boom")  # the stage's own error; ending the run finds the server frozen
    elapsed = time.monotonic() - start
    # the probe + a quick end; before: the wall-time log calls and ending the run each waited, and
    # the tracking error of the last replaced the stage's own error
    print(f"ending the run took {elapsed:.1f} s")
    assert elapsed < runs.PROBE_TIMEOUT_S + 3.5, f"{elapsed:.1f} s"
    assert mlflow.active_run() is None
