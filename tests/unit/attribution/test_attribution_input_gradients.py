"""input_gradients: reductions on a linear model by hand, targets vs closed forms and finite differences."""

from __future__ import annotations

import math

import pytest
import torch

from attnflow.attribution import ATTRIBUTIONS, input_gradients

F64 = torch.float64
PAD, CLS = 0, 2

# Linear model logits_c = sum_t mask_t <W[c, t], x_t>; the gradient of logit c at x_t is W[c, t].
# Embeddings: e[cls] = [1, 0], e[4] = [2, -1], e[pad] = [5, 5] (others unused).
EMB = torch.tensor([[5, 5], [0, 0], [1, 0], [0, 0], [2, -1]], dtype=F64)
W = torch.tensor(
    [
        [[1, 2], [3, -1], [7, 7]],  # class 0, positions 0..2
        [[0, -1], [-2, 2], [4, 4]],  # class 1
    ],
    dtype=F64,
)
IDS = torch.tensor([[CLS, 4, PAD]])
MASK = torch.tensor([[1, 1, 0]])
# z0 = <[1,2],[1,0]> + <[3,-1],[2,-1]> = 1 + 7 = 8;  z1 = <[0,-1],[1,0]> + <[-2,2],[2,-1]> = 0 - 6 = -6.


@pytest.mark.parametrize(
    ("target_class", "reduction", "signed", "expected"),
    [
        # class 1: g_0 = [0, -1], g_1 = [-2, 2]
        (1, "abs_sum", False, [1, 0, 0]),  # |0 - 1| = 1, |-2 + 2| = 0
        (1, "abs_sum", True, [-1, 0, 0]),
        (1, "l2", False, [1, 2 * math.sqrt(2), 0]),  # ||[0,-1]|| = 1, ||[-2,2]|| = 2 sqrt 2
        (1, "grad_x_input", False, [0, 6, 0]),  # |0*1 - 1*0| = 0, |-2*2 + 2*(-1)| = 6
        (1, "grad_x_input", True, [0, -6, 0]),
        # class 0: g_0 = [1, 2], g_1 = [3, -1]
        (0, "abs_sum", False, [3, 2, 0]),
        (0, "l2", False, [math.sqrt(5), math.sqrt(10), 0]),
        (0, "grad_x_input", False, [1, 7, 0]),  # |1*1 + 2*0| = 1, |3*2 + (-1)(-1)| = 7
        ("predicted", "abs_sum", False, [3, 2, 0]),  # z0 = 8 > z1 = -6: class 0
        (-1, "abs_sum", False, [1, 0, 0]),  # -1 = the last class, as the authors' SST-2 label -1
        ("gold", "l2", False, [1, 2 * math.sqrt(2), 0]),  # labels = [1] below
    ],
)
def test_logit_gradient_of_linear_model_is_the_weight_vector(
    position_linear, target_class, reduction, signed, expected
):
    model = position_linear(EMB, W)
    out = input_gradients(
        model,
        IDS,
        MASK,
        target="logit",
        target_class=target_class,
        labels=torch.tensor([1]),
        reduction=reduction,
        signed=signed,
    )
    torch.testing.assert_close(out, torch.tensor([expected], dtype=F64), rtol=0, atol=1e-12)


def test_p0_minus_p1_gradient_matches_closed_form(position_linear):
    # Two classes: p0 - p1 = tanh((z0 - z1) / 2), d/dz0 = 2 p0 p1 = -d/dz1,
    # so g_t = 2 p0 p1 (W[0, t] - W[1, t]).  Soften W so the sigmoid is not saturated (z0 - z1 = 1.4).
    model = position_linear(EMB, W / 10)
    p = torch.softmax(torch.tensor([0.8, -0.6], dtype=F64), 0)
    g = 2 * p[0] * p[1] * (W[0] - W[1]) / 10  # (T, D)
    g[2] = 0  # pad
    out = input_gradients(model, IDS, MASK, target="p0_minus_p1", reduction="abs_sum")
    torch.testing.assert_close(out[0], g.sum(-1).abs(), rtol=0, atol=1e-12)
    out = input_gradients(model, IDS, MASK, target="p0_minus_p1", reduction="l2")
    torch.testing.assert_close(out[0], g.norm(dim=-1), rtol=0, atol=1e-12)


def test_prob_gradient_matches_softmax_jacobian(position_linear):
    # d p_c / d x_t = p_c (W[c, t] - sum_k p_k W[k, t]); 3 classes, random weights.
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(3, 3, 2, generator=gen, dtype=F64) / 3
    model = position_linear(EMB, w)
    x = EMB[IDS[0]] * MASK[0, :, None]  # (T, D)
    p = torch.softmax(torch.einsum("td,ctd->c", x, w), 0)
    for c in range(3):
        g = p[c] * (w[c] - torch.einsum("k,ktd->td", p, w))  # (T, D)
        out = input_gradients(model, IDS, MASK, target="prob", target_class=c, reduction="grad_x_input")
        expected = (g * EMB[IDS[0]]).sum(-1).abs() * MASK[0]
        torch.testing.assert_close(out[0], expected, rtol=0, atol=1e-12)


def test_signed_reductions_match_finite_differences_on_a_transformer(tiny_transformer, ragged_batch):
    # sum_d g_td is the derivative along 1 at token t; sum_d g_td x_td the derivative along x_t.
    model = tiny_transformer().eval()
    ids, mask = ragged_batch
    ids, mask = ids[2:3], mask[2:3]  # length 4 of 5
    sum_g = input_gradients(model, ids, mask, reduction="abs_sum", signed=True)[0]
    gxi = input_gradients(model, ids, mask, reduction="grad_x_input", signed=True)[0]
    x = model.emb(ids).detach()  # (1, T, D)
    eps = 1e-6

    def f(xx):
        p = torch.softmax(model(None, mask, inputs_embeds=xx).logits, -1)
        return (p[0, 0] - p[0, 1]).item()

    with torch.no_grad():
        for t in range(4):
            for direction, got in ((torch.ones_like(x[0, t]), sum_g[t]), (x[0, t], gxi[t])):
                plus, minus = x.clone(), x.clone()
                plus[0, t] += eps * direction
                minus[0, t] -= eps * direction
                assert got.item() == pytest.approx((f(plus) - f(minus)) / (2 * eps), abs=1e-7)
    assert sum_g[4] == 0 and gxi[4] == 0  # the pad


def test_batching_gives_no_cross_sample_leakage(tiny_transformer, ragged_batch):
    # batch_size=1 runs every sample alone: the batched gradients must equal those.
    model = tiny_transformer()
    ids, mask = ragged_batch
    for reduction in ("abs_sum", "l2", "grad_x_input"):
        alone = input_gradients(model, ids, mask, reduction=reduction, batch_size=1)
        for bs in (2, 256):
            batched = input_gradients(model, ids, mask, reduction=reduction, batch_size=bs)
            torch.testing.assert_close(batched, alone, rtol=0, atol=1e-10)
        assert (alone[mask == 0] == 0).all()
        assert (alone[:, 0] > 0).all()  # CLS is scored like any token


def test_inputs_model_flags_and_parameter_grads_are_left_alone(tiny_transformer, ragged_batch):
    model = tiny_transformer()
    model.train()
    model.layer.dropout.eval()
    flags = {name: m.training for name, m in model.named_modules()}
    ids, mask = ragged_batch
    ids0, mask0 = ids.clone(), mask.clone()
    with torch.no_grad():  # the caller's no_grad must not break it
        out = input_gradients(model, ids, mask)
    assert torch.equal(ids, ids0) and torch.equal(mask, mask0)
    assert flags == {name: m.training for name, m in model.named_modules()}
    assert all(p.grad is None for p in model.parameters())
    torch.testing.assert_close(input_gradients(model, ids, mask), out)  # eval mode: dropout off


def test_invalid_options_are_rejected(position_linear):
    model = position_linear(EMB, W)
    with pytest.raises(ValueError, match="no sign"):
        input_gradients(model, IDS, MASK, reduction="l2", signed=True)
    with pytest.raises(ValueError, match="labels"):
        input_gradients(model, IDS, MASK, target="logit", target_class="gold")
    with pytest.raises(ValueError, match="out of range"):
        input_gradients(model, IDS, MASK, target="logit", target_class=2)
    with pytest.raises(ValueError, match="reduction"):
        input_gradients(model, IDS, MASK, reduction="max")
    assert ATTRIBUTIONS["input_gradients"] is input_gradients
