"""Shared test set-up: offline, quiet, and never touching the repository's own MLflow store."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")


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
