"""The method kit (attnflow.explain.kit): what every attention method shares, done once.

A toy algorithm, "head sum", W(l) = sum_h A(l, h) (rows sum to H), is made into a method with the
kit; each test states what the kit adds around it.
"""

import numpy as np
import pytest
import torch

from attnflow.explain import remove_sinks
from attnflow.explain.kit import Batch, attention_method, check_rows, take_rows
from attnflow.methods import EXPLAINERS


@attention_method
def head_sum(batch: Batch, *, heads: str | int) -> np.ndarray:
    return batch.aggregate(batch.heads(), "sum")


@attention_method(needs=("attn_grad",), name="grad_weighted")
def grad_weighted(batch: Batch, *, heads: str | int, attn_grad: np.ndarray, scale: float = 1.0) -> np.ndarray:
    return scale * batch.aggregate(attn_grad * batch.heads(), heads)


def attention(rng, *shape):
    w = rng.random(shape) + 0.1
    return w / w.sum(-1, keepdims=True)


def test_the_algorithm_alone_is_the_method():
    # two heads of [[1, 0], [.5, .5]] and [[0, 1], [.5, .5]]: the sum is [[1, 1], [1, 1]]
    a = np.array([[[[1.0, 0.0], [0.5, 0.5]], [[0.0, 1.0], [0.5, 0.5]]]])  # (1 layer, 2 heads, 2, 2)
    assert head_sum(a).tolist() == [[[1.0, 1.0], [1.0, 1.0]]]


def test_rows_are_checked_and_kept_and_padding_rows_are_refused():
    a = attention(np.random.default_rng(0), 2, 1, 2, 3, 3)
    np.testing.assert_array_equal(head_sum(a, rows=[2, 0]), head_sum(a)[..., [2, 0], :])
    with pytest.raises(ValueError, match="rows"):
        head_sum(a, rows=[3])
    with pytest.raises(ValueError, match="padding in sample 1"):
        head_sum(a, rows=[2], lengths=np.array([3, 2]))


def test_residual_is_checked_and_not_passed_to_an_algorithm_without_one():
    a = attention(np.random.default_rng(1), 1, 2, 3, 3)
    np.testing.assert_array_equal(head_sum(a, residual=0.0), head_sum(a, residual=1.0))
    with pytest.raises(ValueError, match="residual"):
        head_sum(a, residual=2.0)


def test_needs_are_fetched_by_name_checked_and_a_missing_one_is_named():
    rng = np.random.default_rng(2)
    a, g = attention(rng, 2, 2, 3, 3), rng.standard_normal((2, 2, 3, 3))
    np.testing.assert_allclose(grad_weighted(a, attn_grad=g), (g * a).mean(1), atol=1e-12)
    np.testing.assert_allclose(grad_weighted(a, attn_grad=g, scale=2.0), 2 * (g * a).mean(1), atol=1e-12)
    with pytest.raises(ValueError, match="grad_weighted needs attn_grad"):
        grad_weighted(a)
    with pytest.raises(ValueError, match="attn_grad must have the shape of attn"):
        grad_weighted(a, attn_grad=g[:, :, :2])
    with pytest.raises(TypeError, match="unexpected keyword"):
        grad_weighted(a, attn_grad=g, colour="red")
    assert grad_weighted.needs == ("attn_grad",)


def test_padding_is_zero_and_torch_comes_back_as_torch():
    a = attention(np.random.default_rng(3), 2, 1, 2, 3, 3)
    a[1, ..., :2, :2] = attention(np.random.default_rng(4), 1, 2, 2, 2)  # sample 1: two real tokens
    out = head_sum(a, lengths=np.array([3, 2]))
    assert np.all(out[1, :, 2, :] == 0) and np.all(out[1, :, :, 2] == 0)
    t = head_sum(torch.tensor(a[0], dtype=torch.float32))
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float32
    np.testing.assert_allclose(t.numpy(), head_sum(a[0]), atol=1e-6)


def test_the_signature_shows_the_common_keywords_the_needs_options_and_causal_options():
    import inspect

    params = inspect.signature(grad_weighted).parameters
    assert list(params)[:6] == ["attn", "residual", "heads", "rows", "lengths", "mask"]
    assert {"attn_grad", "scale", "sinks", "sink_positions", "receptive_field"} <= set(params)


def causal_attention(rng, layers=2, heads=2, tokens=6):
    w = np.tril(rng.random((layers, heads, tokens, tokens)) + 0.1)
    w[..., 0] += 2.0  # a sink on token 0
    return w / w.sum(-1, keepdims=True)


def test_sinks_reach_every_method_as_the_attention_with_its_sinks_handled():
    rng = np.random.default_rng(4)
    a, g = causal_attention(rng), rng.standard_normal((2, 2, 6, 6))
    for mode in ("drop", "diagonal"):
        handled = remove_sinks(a, mode=mode, sinks=[0])
        np.testing.assert_array_equal(head_sum(a, sinks=mode, sink_positions=[0]), head_sum(handled))
        np.testing.assert_array_equal(
            grad_weighted(a, attn_grad=g, sinks=mode, sink_positions=[0]), grad_weighted(handled, attn_grad=g)
        )
    np.testing.assert_array_equal(head_sum(a, sinks="none"), head_sum(a))


def test_the_receptive_field_of_a_new_method_is_that_of_the_built_in_raw_attention():
    # head_sum = H x raw attention, and the receptive-field normalisation keeps each row's mass:
    # head_sum's normalised maps are H x raw's
    a = causal_attention(np.random.default_rng(5))
    for mode in ("column", "uniform"):
        ours = head_sum(a, receptive_field=mode, rows=[3, 5])
        raw = EXPLAINERS["raw"](a, receptive_field=mode, rows=[3, 5])
        np.testing.assert_allclose(ours, 2 * raw, atol=1e-12)


def test_a_method_with_needs_has_no_uniform_receptive_field():
    # its baseline would be the method on uniform attention, for which the model gave no gradient
    rng = np.random.default_rng(6)
    a = causal_attention(rng)
    with pytest.raises(ValueError, match="takes no receptive_field='uniform': it needs attn_grad"):
        grad_weighted(a, attn_grad=rng.random(a.shape), receptive_field="uniform")


def test_the_column_receptive_field_refuses_signed_maps():
    # a column's mean over the rows that see it is no scale for negative evidence
    rng = np.random.default_rng(7)
    a = causal_attention(rng)
    with pytest.raises(ValueError, match="negative values"):
        grad_weighted(a, attn_grad=-rng.random(a.shape), receptive_field="column")


def test_the_helpers_check_and_take_rows():
    a = np.zeros((2, 1, 1, 3, 3))
    assert check_rows(a, None) is None and check_rows(a, [2, 0]).tolist() == [2, 0]
    maps = np.arange(18.0).reshape(2, 3, 3)
    np.testing.assert_array_equal(take_rows(maps, np.array([1])), maps[:, [1], :])
    assert take_rows(torch.tensor(maps), np.array([1])).shape == (2, 1, 3)
