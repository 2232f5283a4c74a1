"""A run whose loss or weights turn non-finite stops with an error naming the step and epoch, and
exports nothing (issue: reliability, case 3: ``lr=1e308`` trained to NaN weights, exported them
and reported a finite accuracy)."""

from __future__ import annotations

import re

import pytest
import torch

from attnflow.lit import NonFiniteError
from attnflow.lit.callbacks import check_finite_weights
from tests.integration.test_training import _train, agreement_data  # noqa: F401  (fixture)


def test_huge_learning_rate_stops_at_the_first_nonfinite_step_and_exports_nothing(agreement_data, tmp_path):  # noqa: F811
    with pytest.raises(NonFiniteError, match=r"non-finite .* step \d+ \(epoch 1\b.*lr") as info:
        _train(agreement_data, tmp_path, train={"lr": 1e308, "max_epochs": 2})
    step = int(re.search(r"step (\d+)", str(info.value)).group(1))
    assert 1 <= step <= 12  # 192 samples / batch 16: within the first epoch
    for name in ("model", "metrics.json", "curve.csv", "curve.png", "best.ckpt", "last.ckpt"):
        assert not (tmp_path / name).exists(), name


def test_weight_check_names_the_nonfinite_parameter():
    layer = torch.nn.Linear(2, 2)
    check_finite_weights(layer, "here")  # finite: no error
    with torch.no_grad():
        layer.bias[1] = float("inf")
    with pytest.raises(NonFiniteError, match=r"'bias' here"):
        check_finite_weights(layer, "here")
