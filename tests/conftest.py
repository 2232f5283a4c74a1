"""Shared test set-up: offline, quiet, and never touching the repository's own MLflow store."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")


@pytest.fixture(autouse=True)
def _tracking_uri_as_before():
    """Each test ends with ``MLFLOW_TRACKING_URI`` as it began: ``mlflow.set_tracking_uri`` (which
    `attnflow.tracking.stage_run` calls) also writes it to ``os.environ``, where it would override
    the configured store of every later test in the same worker (the order-dependent failure of
    `test_a_stage_run_on_a_folder_store_stops_before_mlflow_in_one_line`; the library's side of it:
    `test_a_second_stage_run_in_one_process_goes_to_its_own_configured_store`)."""
    before = os.environ.get("MLFLOW_TRACKING_URI")
    yield
    if before is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = before


@pytest.fixture
def no_host_copies(monkeypatch):
    """Any .numpy(), .cpu() or .tolist() of a torch tensor fails the test (device-native code);
    `no_host_copies.undo()` lifts it."""
    import torch

    def refuse(name):
        def call(self, *args, **kwargs):
            raise AssertionError(f"Tensor.{name}() in code that must stay on the tensors' device")

        return call

    for name in ("numpy", "cpu", "tolist"):
        monkeypatch.setattr(torch.Tensor, name, refuse(name))
    return monkeypatch
