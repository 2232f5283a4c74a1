"""The LRP rules of Chefer et al. (2021): hand cases, and conservation of relevance through each rule."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnflow.lrp import (
    STABILIZER,
    add_relevance,
    attention_relevance,
    linear_relevance,
    matmul_relevance,
    safe_divide,
)

CONSERVED = 1e-9  # float64 rounding on sums of order 1
FAST = settings(max_examples=25, deadline=None)


def rand(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def slack(r, z):
    """What the stabiliser may lose: R / z vs R / (z + STABILIZER), summed over z != 0, plus rounding."""
    loss = r.abs() * STABILIZER / (z.abs() - STABILIZER)
    return float(torch.where(z != 0, loss, 0.0).sum()) + CONSERVED


def test_safe_divide_is_zero_where_the_denominator_is_zero_and_stabilised_elsewhere():
    out = safe_divide(
        torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64), torch.tensor([0.0, 2.0, 0.0], dtype=torch.float64)
    )
    assert out.tolist() == [0.0, 1.0 / (2.0 + STABILIZER), 0.0]


def test_linear_alpha_one_hand_case():
    # y0 = 1*x0 + 2*x1, y1 = -1*x0 + 1*x1 with x = [1, 1]; positive parts x⁺w⁺: y0 -> [1, 2] (Z = 3),
    # y1 -> [0, 1] (Z = 1; x0's -1 inhibits and gets nothing at α = 1).
    # R(y) = [3, 1] -> R(x) = 3 * [1/3, 2/3] + 1 * [0, 1] = [1, 3]; bias ignored.
    x = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    w = torch.tensor([[1.0, 2.0], [-1.0, 1.0]], dtype=torch.float64)
    r = linear_relevance(x, w, torch.tensor([[3.0, 1.0]], dtype=torch.float64))
    torch.testing.assert_close(r, torch.tensor([[1.0, 3.0]], dtype=torch.float64), atol=1e-8, rtol=0)


def test_linear_negative_inputs_share_through_negative_weights():
    # x = [-1, 2], w = [[-3, 1]]: activating parts x⁻w⁻ = 3 and x⁺w⁺ = 2 (Z = 5) -> R = [.6, .4]
    x = torch.tensor([[-1.0, 2.0]], dtype=torch.float64)
    w = torch.tensor([[-3.0, 1.0]], dtype=torch.float64)
    r = linear_relevance(x, w, torch.tensor([[1.0]], dtype=torch.float64))
    torch.testing.assert_close(r, torch.tensor([[0.6, 0.4]], dtype=torch.float64), atol=1e-8, rtol=0)


@FAST
@given(st.integers(0, 10_000), st.sampled_from([1.0, 2.0]))
def test_linear_rule_conserves_relevance(seed, alpha):
    # Σ_j R_j = α Σ_i R_i [Z⁺_i != 0] - β Σ_i R_i [Z⁻_i != 0], β = α - 1: so ΣR is conserved over the
    # outputs with a nonzero activating (and, for β > 0, inhibiting) part. An output whose every
    # contribution inhibits passes nothing on at α = 1 (the αβ rule's known leak).
    gen = torch.Generator().manual_seed(seed)
    x, w, r = rand(gen, 2, 3, 5), rand(gen, 4, 5), rand(gen, 2, 3, 4)
    out = linear_relevance(x, w, r, alpha=alpha)
    assert out.shape == x.shape
    xp, xn, wp, wn = x.clamp(min=0), x.clamp(max=0), w.clamp(min=0), w.clamp(max=0)
    z_act, z_inh = xp @ wp.T + xn @ wn.T, xp @ wn.T + xn @ wp.T  # (2, 3, 4)
    beta = alpha - 1
    expected = alpha * r[z_act != 0].sum() - beta * r[z_inh != 0].sum()
    bound = alpha * slack(r, z_act) + beta * slack(r, z_inh)
    assert abs(float(out.sum() - expected)) <= bound
    if bool((z_act != 0).all()) and (beta == 0 or bool((z_inh != 0).all())):
        assert abs(float(out.sum() - r.sum())) <= bound


def test_linear_alpha_one_gives_relevance_only_through_activating_contributions():
    # positive R and x >= 0, w >= 0 everywhere but one weight: that input-output pair gets nothing
    x = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    w = torch.tensor([[1.0, -1.0]], dtype=torch.float64)
    r = linear_relevance(x, w, torch.tensor([[1.0]], dtype=torch.float64))
    assert r.tolist() == [[pytest.approx(1.0), 0.0]]


@FAST
@given(st.integers(0, 10_000))
def test_add_rule_conserves_each_samples_total_and_bounds_each_share(seed):
    gen = torch.Generator().manual_seed(seed)
    u, v = rand(gen, 3, 4, 5), rand(gen, 3, 4, 5)
    r = rand(gen, 3, 4, 5).abs()  # ΣR >= 0 per sample
    ru, rv = add_relevance(u, v, r)
    total = r.sum((1, 2))
    torch.testing.assert_close(ru.sum((1, 2)) + rv.sum((1, 2)), total, atol=CONSERVED * 100, rtol=0)
    for share in (ru.sum((1, 2)), rv.sum((1, 2))):
        assert torch.all(share >= -CONSERVED) and torch.all(share <= total + CONSERVED)


def test_add_rule_hand_case_with_a_negative_share():
    # z = u + v = [2, 2]; LRP-0: R̃u = u R / z = [-.5, .25] (sum -.25), R̃v = [1, .25] (sum 1.25);
    # shares |−.25| / 1.5 = 1/6 and 1.25 / 1.5 = 5/6 of ΣR = 1: Ru = R̃u * (1/6) / (-.25) = [1/3, -1/6]
    u = torch.tensor([[-2.0, 1.0]], dtype=torch.float64)
    v = torch.tensor([[4.0, 1.0]], dtype=torch.float64)
    ru, rv = add_relevance(u, v, torch.tensor([[0.5, 0.5]], dtype=torch.float64))
    torch.testing.assert_close(ru, torch.tensor([[1 / 3, -1 / 6]], dtype=torch.float64), atol=1e-8, rtol=0)
    torch.testing.assert_close(rv, torch.tensor([[2 / 3, 1 / 6]], dtype=torch.float64), atol=1e-8, rtol=0)


def test_add_rule_keeps_samples_apart():
    gen = torch.Generator().manual_seed(0)
    u, v, r = rand(gen, 2, 3, 4), rand(gen, 2, 3, 4), rand(gen, 2, 3, 4)
    ru, rv = add_relevance(u, v, r)
    ru1, rv1 = add_relevance(u[1:], v[1:], r[1:])
    torch.testing.assert_close(ru[1:], ru1)
    torch.testing.assert_close(rv[1:], rv1)


def test_add_rule_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="one shape"):
        add_relevance(torch.ones(1, 2), torch.ones(1, 3), torch.ones(1, 2))


def test_matmul_rule_hand_case():
    # z = a @ b = .5 * 1 + .5 * 3 = 2; LRP-0 gives a and b each [.25, .75] of R = 1; both halved
    a = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    b = torch.tensor([[1.0], [3.0]], dtype=torch.float64)
    ra, rb = matmul_relevance(a, b, torch.tensor([[1.0]], dtype=torch.float64))
    torch.testing.assert_close(ra, torch.tensor([[0.125, 0.375]], dtype=torch.float64), atol=1e-8, rtol=0)
    torch.testing.assert_close(rb, torch.tensor([[0.125], [0.375]], dtype=torch.float64), atol=1e-8, rtol=0)


@FAST
@given(st.integers(0, 10_000))
def test_matmul_and_attention_rules_conserve_relevance(seed):
    gen = torch.Generator().manual_seed(seed)
    a, b, r = rand(gen, 2, 3, 4, 5), rand(gen, 2, 3, 5, 6), rand(gen, 2, 3, 4, 6)
    ra, rb = matmul_relevance(a, b, r)
    assert abs(float(ra.sum() + rb.sum() - r.sum())) <= slack(r, a @ b)
    # attention: R(A) + R(v) = R(context); R(q) + R(k) = R(A)
    q, k, v = rand(gen, 2, 3, 4, 5), rand(gen, 2, 3, 4, 5), rand(gen, 2, 3, 4, 5)
    attn = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
    r_ctx = rand(gen, 2, 3, 4, 5)
    r_attn, r_q, r_k, r_v = attention_relevance(q, k, v, attn, r_ctx)
    assert r_attn.shape == attn.shape and r_q.shape == r_k.shape == r_v.shape == q.shape
    assert abs(float(r_attn.sum() + r_v.sum() - r_ctx.sum())) <= slack(r_ctx, attn @ v)
    assert abs(float(r_q.sum() + r_k.sum() - r_attn.sum())) <= slack(r_attn, q @ k.transpose(-1, -2))


def test_attention_relevance_is_zero_where_attention_is_zero():
    # R(A) = A ⊙ (S vᵀ) / 2: a masked key (A = 0) gets exactly nothing
    gen = torch.Generator().manual_seed(1)
    q, k, v = rand(gen, 1, 1, 3, 2), rand(gen, 1, 1, 3, 2), rand(gen, 1, 1, 3, 2)
    attn = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
    attn = attn * torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64)
    r_attn, *_ = attention_relevance(q, k, v, attn, rand(gen, 1, 1, 3, 2))
    assert torch.all(r_attn[..., 2] == 0)
