"""attnflow.modes.eval_mode: eval mode for the body, each submodule's own flag back after."""

import pytest
import torch
from torch import nn

from attnflow.modes import eval_mode


def _net():
    net = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.9), nn.Sequential(nn.Dropout(0.9), nn.Linear(3, 1)))
    net.train()
    net[2].eval()  # a part the caller keeps in eval mode
    return net


def test_the_body_runs_without_dropout_and_every_flag_comes_back():
    net, x = _net(), torch.ones(4, 3)
    before = [m.training for m in net.modules()]
    with eval_mode(net):
        assert not any(m.training for m in net.modules())
        torch.testing.assert_close(net(x), net(x))  # no dropout: the same output twice
    assert [m.training for m in net.modules()] == before


def test_the_flags_come_back_when_the_body_raises():
    net = _net()
    before = [m.training for m in net.modules()]
    with pytest.raises(RuntimeError, match="boom"), eval_mode(net):
        raise RuntimeError("boom")
    assert [m.training for m in net.modules()] == before


def test_a_plain_callable_is_left_as_it_is():
    def model(x):
        return x

    with eval_mode(model):
        assert model(2) == 2
