"""Chefer et al.'s relevance rules (generic, ICCV 2021; LRP-based, CVPR 2021): the math by hand."""

import numpy as np
import pytest
import torch

from attnflow.explain import CLS_SELF, chefer_generic, chefer_lrp

CLOSE = 1e-12  # float64, binary-exact inputs

# Two tokens, one head, two layers (binary-exact weights).
A1 = np.array([[1.0, 0.0], [0.5, 0.5]])
A2 = np.array([[0.5, 0.5], [0.0, 1.0]])
G1 = np.array([[1.0, 1.0], [2.0, -2.0]])  # G1 ⊙ A1 = [[1, 0], [1, -1]]  -> positive part [[1, 0], [1, 0]]
G2 = np.array([[2.0, -2.0], [1.0, 1.0]])  # G2 ⊙ A2 = [[1, -1], [0, 1]]  -> positive part I


def one_head(*layers):
    return np.array(layers)[:, None]  # (L, 1, T, T)


def test_generic_rule_by_hand():
    # R(1) = I + [[1, 0], [1, 0]] = [[2, 0], [1, 1]]
    # R(2) = R(1) + I R(1) = 2 R(1) = [[4, 0], [2, 2]]
    out = chefer_generic(one_head(A1, A2), one_head(G1, G2))
    np.testing.assert_allclose(out, [[[2, 0], [1, 1]], [[4, 0], [2, 2]]], atol=CLOSE)


def test_generic_rule_from_a_later_start_layer_begins_with_the_identity():
    # start_layer = 1: R(1) = I (nothing composed yet), R(2) = I + I I = 2 I
    out = chefer_generic(one_head(A1, A2), one_head(G1, G2), start_layer=1)
    np.testing.assert_allclose(out, [np.eye(2), 2 * np.eye(2)], atol=CLOSE)


def test_generic_rule_with_unit_gradient_and_one_head_is_the_product_of_identity_plus_attention():
    # ∇A = 1: (1 ⊙ A)⁺ = A, so R(l) = (I + A(l)) R(l-1) = Π_k (I + A(k)), later layers on the left
    rng = np.random.default_rng(0)
    attn = rng.dirichlet(np.ones(4), size=(3, 1, 4))  # (L, 1, T, T) rows sum to 1
    out = chefer_generic(attn, np.ones_like(attn))
    expected = np.eye(4)
    for layer in range(3):
        expected = (np.eye(4) + attn[layer, 0]) @ expected
        np.testing.assert_allclose(out[layer], expected, atol=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_generic_relevance_minus_identity_is_nonnegative(seed):
    # each step adds (>= 0) @ (>= 0) to R, from R = I
    rng = np.random.default_rng(seed)
    attn = rng.dirichlet(np.ones(5), size=(3, 2, 5))  # (L, H, T, T)
    out = chefer_generic(attn, rng.standard_normal(attn.shape))
    assert np.all(out - np.eye(5) >= 0)


# LRP rule: R(A) of either sign; the rule keeps (∇A ⊙ R(A))⁺, adds I, normalises rows.
R1 = np.array([[-1.0, 0.0], [0.5, 0.25]])
H1 = np.array([[1.0, 3.0], [4.0, 4.0]])  # H1 ⊙ R1 = [[-1, 0], [2, 1]] -> I + (.)⁺ = [[1, 0], [2, 2]]
R2 = np.array([[0.5, 1.0], [-1.0, 0.5]])
H2 = np.array([[2.0, 2.0], [1.0, 2.0]])  # H2 ⊙ R2 = [[1, 2], [-1, 1]] -> I + (.)⁺ = [[2, 2], [0, 2]]


def test_lrp_rule_by_hand():
    # C(1) = rownorm([[1, 0], [2, 2]]) = [[1, 0], [.5, .5]]
    # C(2) = rownorm([[2, 2], [0, 2]]) C(1) = [[.5, .5], [0, 1]] @ [[1, 0], [.5, .5]] = [[.75, .25], [.5, .5]]
    out = chefer_lrp(one_head(R1, R2), one_head(H1, H2))
    np.testing.assert_allclose(out, [[[1, 0], [0.5, 0.5]], [[0.75, 0.25], [0.5, 0.5]]], atol=CLOSE)


def test_cls_self_options_by_hand():
    # "min": C[0, 0] = min(C[0]) (the CVPR code): layer 1 row [1, 0] -> 0; layer 2 row [.75, .25] -> .25
    # "zero": C[0, 0] = 0 (the ICCV code); other entries are untouched
    args = one_head(R1, R2), one_head(H1, H2)
    assert CLS_SELF == ("keep", "min", "zero")
    np.testing.assert_allclose(chefer_lrp(*args, cls_self="min")[:, 0], [[0, 0], [0.25, 0.25]], atol=CLOSE)
    np.testing.assert_allclose(chefer_lrp(*args, cls_self="zero")[:, 0], [[0, 0], [0, 0.25]], atol=CLOSE)
    np.testing.assert_allclose(chefer_lrp(*args, cls_self="zero")[:, 1], chefer_lrp(*args)[:, 1], atol=CLOSE)
    # generic R(2)[0] = [4, 0]: "min" and "zero" both give [0, 0]
    np.testing.assert_allclose(
        chefer_generic(one_head(A1, A2), one_head(G1, G2), cls_self="min")[1, 0], [0, 0]
    )


def test_cls_self_min_looks_at_real_keys_only():
    # sample 0 has 2 real tokens of 3: min over [.75, .25], not the padded 0
    rel = np.zeros((2, 2, 1, 3, 3))
    grad = np.zeros((2, 2, 1, 3, 3))
    rel[0, :, 0, :2, :2], grad[0, :, 0, :2, :2] = (R1, R2), (H1, H2)
    rel[1, :, 0, :2, :2], grad[1, :, 0, :2, :2] = (R1, R2), (H1, H2)
    out = chefer_lrp(rel, grad, cls_self="min", lengths=[2, 3])
    assert out[0, 1, 0, 0] == pytest.approx(0.25)
    assert out[1, 1, 0, 0] == 0.0  # sample 1: the third token is real and its C[0, 2] = 0


def test_head_aggregation_options():
    # two heads, one layer: positive parts P0 = [[1, 0], [1, 0]], P1 = I
    attn = np.stack([A1, A2])[None]  # (1 layer, 2 heads, 2, 2)
    grad = np.stack([G1, G2])[None]
    p0, p1 = np.array([[1.0, 0.0], [1.0, 0.0]]), np.eye(2)
    eye = np.eye(2)
    np.testing.assert_allclose(chefer_generic(attn, grad)[0], eye + (p0 + p1) / 2, atol=CLOSE)
    np.testing.assert_allclose(chefer_generic(attn, grad, heads="sum")[0], eye + p0 + p1, atol=CLOSE)
    np.testing.assert_allclose(
        chefer_generic(attn, grad, heads="max")[0], eye + np.maximum(p0, p1), atol=CLOSE
    )
    np.testing.assert_allclose(chefer_generic(attn, grad, heads=0)[0], eye + p0, atol=CLOSE)


@pytest.mark.parametrize("fn", [chefer_generic, chefer_lrp])
def test_batch_equals_each_sample_and_numpy_equals_torch(fn):
    rng = np.random.default_rng(3)
    attn = rng.dirichlet(np.ones(4), size=(3, 2, 2, 4))  # (B, L, H, T, T)
    first = attn if fn is chefer_generic else attn * rng.standard_normal(attn.shape)  # A or R(A)
    grad = rng.standard_normal(attn.shape)
    out = fn(first, grad)
    for b in range(3):
        np.testing.assert_allclose(out[b], fn(first[b], grad[b]), atol=CLOSE)
    as_torch = fn(torch.tensor(first), torch.tensor(grad))
    assert isinstance(as_torch, torch.Tensor) and as_torch.dtype == torch.float64
    np.testing.assert_allclose(as_torch.numpy(), out, atol=CLOSE)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start_layer": 2}, "start_layer 2 out of range"),
        ({"start_layer": 0.5}, "start_layer must be an int"),
        ({"cls_self": "drop"}, "cls_self must be one of"),
        ({"heads": "median"}, "heads must be one of"),
    ],
)
@pytest.mark.parametrize("fn", [chefer_generic, chefer_lrp])
def test_bad_options_are_rejected(fn, kwargs, message):
    with pytest.raises(ValueError, match=message):
        fn(one_head(A1, A2), one_head(G1, G2), **kwargs)


def test_bad_companion_inputs_are_rejected():
    attn, grad = one_head(A1, A2), one_head(G1, G2)
    with pytest.raises(ValueError, match="attn_grad must have the shape of attn"):
        chefer_generic(attn, grad[:1])
    with pytest.raises(ValueError, match="attn_grad contains NaN or inf"):
        chefer_generic(attn, np.where(grad > 1, np.nan, grad))
    with pytest.raises(ValueError, match="chefer_generic needs attn_grad"):
        chefer_generic(attn, None)
    with pytest.raises(ValueError, match="attn_relevance must have 4 dims"):
        chefer_lrp(attn[0], grad[0])
    with pytest.raises(ValueError, match="sum to 1"):
        chefer_generic(attn * 1.5, grad)  # attn itself must be attention probabilities
    # garbage in padded positions is ignored
    rel = np.full((1, 2, 1, 3, 3), np.nan)
    rel[0, :, :, :2, :2] = one_head(R1, R2)
    out = chefer_lrp(rel, np.ones_like(rel), lengths=[2])
    assert np.all(out[0, :, 2] == 0) and np.all(out[0, :, :, 2] == 0)
