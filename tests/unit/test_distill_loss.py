"""The distillation loss on hand-computed logits (issue: replication)."""

import math

import pytest
import torch

from attnflow.lit.distill import distillation_loss

S = torch.tensor([[2.0, 0.0], [0.0, 1.0]])  # student logits
T = torch.tensor([[1.0, 1.0], [0.0, 3.0]])  # teacher logits
Y = torch.tensor([0, 1])


def _ce(logits, label):
    return -(logits[label] - torch.logsumexp(logits, 0)).item()


def test_rate_zero_is_plain_cross_entropy():
    expected = (math.log(1 + math.exp(-2)) + math.log(1 + math.exp(-1))) / 2
    assert distillation_loss(S, T, Y, rate=0.0, temperature=1.0).item() == pytest.approx(expected)
    assert distillation_loss(S, T, Y, rate=0.0, temperature=5.0).item() == pytest.approx(expected)


def test_rate_one_is_the_kl_from_the_teacher_at_temperature_over_t_squared():
    # sample 1 at T = 2: teacher softmax([.5, .5]) = [.5, .5]; student softmax([1, 0])
    # KL = sum p_t (log p_t - log p_s); sample 2: teacher softmax([0, 1.5]), student softmax([0, .5])
    def kl(s, t):
        ps, pt = torch.softmax(s, 0), torch.softmax(t, 0)
        return float((pt * (pt.log() - ps.log())).sum())

    expected = (kl(S[0] / 2, T[0] / 2) + kl(S[1] / 2, T[1] / 2)) / 2 / 4
    assert distillation_loss(S, T, Y, rate=1.0, temperature=2.0).item() == pytest.approx(expected)


def test_mixture_and_teacher_gets_no_gradient():
    s, t = S.clone().requires_grad_(True), T.clone().requires_grad_(True)
    mixed = distillation_loss(s, t, Y, rate=0.9, temperature=1.0)
    pure = distillation_loss(S, T, Y, rate=1.0, temperature=1.0)
    ce = distillation_loss(S, T, Y, rate=0.0, temperature=1.0)
    assert mixed.item() == pytest.approx(0.9 * pure.item() + 0.1 * ce.item())
    mixed.backward()
    assert t.grad is None and s.grad is not None  # the student learns from a detached teacher
    assert distillation_loss(T, T, Y, rate=1.0, temperature=1.0).item() == pytest.approx(0.0, abs=1e-7)


def test_bad_rate_or_temperature_is_refused():
    with pytest.raises(ValueError, match="rate"):
        distillation_loss(S, T, Y, rate=1.5, temperature=1.0)
    with pytest.raises(ValueError, match="temperature"):
        distillation_loss(S, T, Y, rate=0.5, temperature=0.0)
