"""The training optimizer: fused AdamW on the CPU (one kernel for all parameters), the per-tensor
AdamW on a GPU, where Lightning's mixed-precision gradient clipping refuses a fused optimizer
(the study's first CUDA run crashed in train with trainer.precision=auto -> bf16-mixed)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from attnflow.lit.module import ClassifierModule


class _Made(Exception):
    pass


def _fused(monkeypatch, device: str) -> bool:
    """The ``fused`` flag the module passes to AdamW for parameters on ``device`` (a stand-in
    parameter: no GPU is needed to see the choice)."""
    seen = {}

    def adamw(groups, **kwargs):
        seen.update(kwargs)
        raise _Made

    monkeypatch.setattr(torch.optim, "AdamW", adamw)
    module = ClassifierModule(nn.Linear(3, 2), lr=1e-3, weight_decay=0.1, warmup_ratio=0.1)
    param = SimpleNamespace(
        requires_grad=True, dim=lambda: 2, is_floating_point=lambda: True, device=torch.device(device)
    )
    with pytest.raises(_Made):
        module._optimizers([param])
    return seen["fused"]


def test_adamw_is_fused_on_the_cpu(monkeypatch):
    assert _fused(monkeypatch, "cpu") is True


def test_adamw_is_not_fused_on_a_gpu(monkeypatch):
    assert _fused(monkeypatch, "cuda") is False


def test_the_real_optimizer_on_the_cpu_is_fused():
    module = ClassifierModule(nn.Linear(3, 2), lr=1e-3, weight_decay=0.1, warmup_ratio=0.1)
    module._trainer = SimpleNamespace(estimated_stepping_batches=10)  # what _optimizers reads
    assert module._optimizers(list(module.model.parameters()))["optimizer"].defaults["fused"] is True
