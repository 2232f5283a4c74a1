"""Invariants every method in EXPLAINERS must keep (scikit-learn test_common style)."""

import numpy as np
import pytest
import torch

from attnflow.explain import AXES, EXPLAINERS, select_rows

NAMES = sorted(EXPLAINERS)
CLOSE = 1e-10  # float64 agreement between two routes to the same numbers


def random_attention(rng, *shape, sharpness=2.0):
    """Softmax of random logits: attention probabilities [..., query, key]."""
    logits = rng.standard_normal(shape) * sharpness
    w = np.exp(logits - logits.max(-1, keepdims=True))
    return w / w.sum(-1, keepdims=True)


def padded_batch(rng, lengths, layers=3, heads=2):
    """A batch [B, L, H, T, T] where sample b only attends within its first lengths[b] tokens."""
    tokens = max(lengths)
    attn = np.zeros((len(lengths), layers, heads, tokens, tokens))
    for b, n in enumerate(lengths):
        attn[b, :, :, :n, :n] = random_attention(rng, layers, heads, n, n)
        attn[b, :, :, n:, :] = 1.0 / tokens  # padded query rows: whatever the model wrote
    return attn


def test_axes_name_the_canonical_order():
    assert AXES == ("batch", "layer", "head", "query", "key")


def test_the_registry_holds_the_three_methods():
    assert NAMES == ["flow", "raw", "rollout"]


@pytest.mark.parametrize("name", NAMES)
def test_shape_finite_and_nonnegative(name):
    attn = random_attention(np.random.default_rng(0), 3, 2, 4, 4)  # (L, H, T, T)
    out = EXPLAINERS[name](attn, residual=0.5, heads="mean")
    assert out.shape == (3, 4, 4)
    assert np.all(np.isfinite(out)) and np.all(out >= 0)
    batched = EXPLAINERS[name](attn[None].repeat(2, 0), residual=0.5, heads="mean")
    assert batched.shape == (2, 3, 4, 4)


@pytest.mark.parametrize("name", NAMES)
def test_rows_sum_to_one(name):
    # raw (mean of stochastic heads), rollout (products of stochastic matrices), flow (normalised)
    attn = random_attention(np.random.default_rng(1), 3, 2, 4, 4)
    out = EXPLAINERS[name](attn, residual=0.5, heads="mean")
    np.testing.assert_allclose(out.sum(-1), 1.0, atol=CLOSE)


@pytest.mark.parametrize("name", NAMES)
def test_inputs_are_never_mutated(name):
    lengths = np.array([3, 4])
    attn = padded_batch(np.random.default_rng(2), lengths)
    before, lengths_before = attn.copy(), lengths.copy()
    EXPLAINERS[name](attn, residual=0.5, heads="mean", lengths=lengths)
    np.testing.assert_array_equal(attn, before)
    np.testing.assert_array_equal(lengths, lengths_before)
    tensor = torch.tensor(attn)
    EXPLAINERS[name](tensor, residual=0.5, heads="mean")
    np.testing.assert_array_equal(tensor.numpy(), before)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("residual", [0.0, 0.5])
def test_identity_attention_gives_identity(name, residual):
    attn = np.tile(np.eye(4), (3, 2, 1, 1))
    np.testing.assert_allclose(
        EXPLAINERS[name](attn, residual=residual, heads="mean"), np.tile(np.eye(4), (3, 1, 1))
    )


@pytest.mark.parametrize("name", NAMES)
def test_batch_order_equivariance(name):
    attn = random_attention(np.random.default_rng(3), 4, 2, 2, 5, 5)
    perm = np.array([2, 0, 3, 1])
    out = EXPLAINERS[name](attn, residual=0.5, heads="mean")
    np.testing.assert_allclose(
        EXPLAINERS[name](attn[perm], residual=0.5, heads="mean"), out[perm], atol=CLOSE
    )


@pytest.mark.parametrize("name", NAMES)
def test_token_permutation_equivariance(name):
    # relabelling the tokens (same permutation on query and key) permutes every map the same way
    attn = random_attention(np.random.default_rng(4), 3, 2, 5, 5)
    perm = np.array([3, 0, 4, 1, 2])
    out = EXPLAINERS[name](attn, residual=0.5, heads="mean")
    moved = EXPLAINERS[name](attn[..., perm, :][..., perm], residual=0.5, heads="mean")
    np.testing.assert_allclose(moved, out[..., perm, :][..., perm], atol=CLOSE)


@pytest.mark.parametrize("name", NAMES)
def test_layer_one_is_the_head_average_plus_residual(name):
    # raw: W(1); rollout and flow: A(1) = .5 W(1) + .5 I (the paper: layer 1 of rollout = flow)
    attn = random_attention(np.random.default_rng(5), 2, 3, 4, 4)
    w1 = attn[0].mean(0)
    expected = w1 if name == "raw" else 0.5 * w1 + 0.5 * np.eye(4)
    np.testing.assert_allclose(EXPLAINERS[name](attn, residual=0.5, heads="mean")[0], expected, atol=CLOSE)


@pytest.mark.parametrize("name", NAMES)
def test_padded_positions_get_exactly_zero_and_real_ones_match_the_unpadded_sample(name):
    rng = np.random.default_rng(6)
    lengths = [3, 5, 1]
    attn = padded_batch(rng, lengths)
    out = EXPLAINERS[name](attn, residual=0.5, heads="mean", lengths=lengths)
    for b, n in enumerate(lengths):
        assert np.all(out[b, :, n:, :] == 0) and np.all(out[b, :, :, n:] == 0)
        alone = EXPLAINERS[name](attn[b, :, :, :n, :n], residual=0.5, heads="mean")
        np.testing.assert_allclose(out[b, :, :n, :n], alone, atol=CLOSE)


@pytest.mark.parametrize("name", NAMES)
def test_mask_with_holes_equals_dropping_the_masked_tokens(name):
    rng = np.random.default_rng(7)
    real = np.array([0, 2, 3])  # token 1 and 4 are padding (a left/middle-padded layout)
    inner = random_attention(rng, 3, 2, 3, 3)
    attn = np.full((1, 3, 2, 5, 5), 0.2)
    attn[0][np.ix_(range(3), range(2), real, real)] = inner
    attn[0][np.ix_(range(3), range(2), real, [1, 4])] = 0.0
    mask = np.isin(np.arange(5), real)[None]
    out = EXPLAINERS[name](attn, residual=0.5, heads="mean", mask=mask)[0]
    alone = EXPLAINERS[name](inner, residual=0.5, heads="mean")
    np.testing.assert_allclose(out[np.ix_(range(3), real, real)], alone, atol=CLOSE)
    assert np.all(out[:, [1, 4], :] == 0) and np.all(out[:, :, [1, 4]] == 0)


@pytest.mark.parametrize("name", NAMES)
def test_rows_option_equals_taking_rows_of_the_full_map(name):
    attn = random_attention(np.random.default_rng(8), 3, 2, 5, 5)
    full = EXPLAINERS[name](attn, residual=0.5, heads="mean")
    np.testing.assert_allclose(
        EXPLAINERS[name](attn, residual=0.5, heads="mean", rows=[0]), full[:, [0]], atol=CLOSE
    )
    np.testing.assert_allclose(
        EXPLAINERS[name](attn, residual=0.5, heads="mean", rows=[4, 1]), full[:, [4, 1]], atol=CLOSE
    )
    np.testing.assert_allclose(select_rows(full, "cls"), full[:, 0], atol=CLOSE)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_in_torch_out_same_dtype_and_values(name, dtype):
    attn = random_attention(np.random.default_rng(9), 2, 2, 3, 3)
    out = EXPLAINERS[name](torch.tensor(attn, dtype=dtype), residual=0.5, heads="mean")
    assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.device.type == "cpu"
    tol = 1e-6 if dtype == torch.float32 else CLOSE
    np.testing.assert_allclose(
        out.double().numpy(), EXPLAINERS[name](attn, residual=0.5, heads="mean"), atol=tol
    )


@pytest.mark.parametrize("name", NAMES)
def test_numpy_float32_in_float32_out(name):
    attn = random_attention(np.random.default_rng(10), 2, 2, 3, 3).astype(np.float32)
    out = EXPLAINERS[name](attn, residual=0.5, heads="mean")
    assert isinstance(out, np.ndarray) and out.dtype == np.float32


@pytest.mark.parametrize("name", NAMES)
def test_single_head_choice_equals_a_one_head_input(name):
    attn = random_attention(np.random.default_rng(11), 2, 3, 4, 4)
    np.testing.assert_allclose(
        EXPLAINERS[name](attn, residual=0.5, heads=2),
        EXPLAINERS[name](attn[:, 2:3], residual=0.5, heads="mean"),
    )
