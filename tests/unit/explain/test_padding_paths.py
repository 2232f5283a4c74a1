"""The one-pass padding paths of attnflow.explain._common give the bits of the passes they replace.

`zero_padding` (a zeroed array, then the real entries copied in) equals np.where over the
astype copy, for prefix and other masks and for float16 / float32 / float64 / int inputs, with
-0.0, NaN and inf in the padding. `padding_is_zero` (read on prefix masks only) lets `prepare` use
a padded batch as it is: it answers True only when the padding has all bits 0, and False for any
other mask. The companions' finiteness check (one sum, then the scan) refuses what the
elementwise check refused and passes a finite array whose sum overflows. The chefer rules' in-place
zeroing of the weighted heads gives the maps of aggregating a zero-padded copy.
"""

import numpy as np
import pytest

from attnflow.explain import _common as C
from attnflow.explain import relevance as R


def where_padding(x, valid, dtype=np.float64):
    """The two-pass reference: astype, then np.where over the (B, ..., T, T) pair mask."""
    extra = x.ndim - 3
    q = valid.reshape((valid.shape[0],) + (1,) * extra + (valid.shape[1], 1))
    k = valid.reshape((valid.shape[0],) + (1,) * extra + (1, valid.shape[1]))
    return np.where(q & k, x.astype(dtype), np.zeros((), dtype))


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def noisy_batch(rng, dtype, lengths, tokens, padding):
    """(B, 2, 3, T, T) with random values; padded entries filled with `padding`."""
    x = rng.standard_normal((len(lengths), 2, 3, tokens, tokens))
    for b, n in enumerate(lengths):
        x[b, ..., n:, :] = padding
        x[b, ..., :n, n:] = padding
    return x.astype(dtype)


PREFIX = np.arange(5)[None, :] < np.array([5, 3, 1])[:, None]
HOLES = np.array(
    [[True, False, True, True, False], [True, True, True, True, True], [False, True, False, False, False]]
)


@pytest.mark.parametrize("valid", [PREFIX, HOLES], ids=["prefix", "holes"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int64])
@pytest.mark.parametrize("padding", [0.0, -0.0, np.nan, np.inf, 7.0])
def test_zero_padding_gives_the_bits_of_where_over_the_astype_copy(valid, dtype, padding):
    rng = np.random.default_rng(0)
    x = noisy_batch(rng, np.float64, [5, 3, 1], 5, 0.0)
    x[~(valid[:, None, None, :, None] & valid[:, None, None, None, :]).repeat(2, 1).repeat(3, 2)] = padding
    if np.issubdtype(dtype, np.integer):
        x = np.nan_to_num(x * 10, posinf=9.0)
    x = x.astype(dtype)
    got = C.zero_padding(x, valid)
    assert same_bits(got, where_padding(x, valid))
    pair = np.broadcast_to(valid[:, None, None, :, None] & valid[:, None, None, None, :], got.shape)
    assert not np.signbit(got[~pair]).any()  # +0, never -0.0
    if np.issubdtype(dtype, np.floating):  # in the input's own dtype, as prepare uses it
        assert same_bits(C.zero_padding(x, valid, dtype), where_padding(x, valid, np.dtype(dtype)))


def test_prefix_lengths_reads_a_batch_padded_at_the_end_only():
    assert C.prefix_lengths(PREFIX).tolist() == [5, 3, 1]
    assert C.prefix_lengths(HOLES) is None
    assert C.prefix_lengths(np.ones((2, 4), dtype=bool)).tolist() == [4, 4]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_padding_is_zero_only_when_every_padded_entry_has_all_bits_zero(dtype):
    rng = np.random.default_rng(1)
    x = noisy_batch(rng, dtype, [5, 3, 1], 5, 0.0)
    assert C.padding_is_zero(x, PREFIX)
    assert same_bits(x, C.zero_padding(x, PREFIX, x.dtype))
    for b, where in [(1, (..., 4, 0)), (1, (..., 0, 3)), (2, (..., 1, 1)), (2, (..., 0, 4))]:
        for bad in (-0.0, np.nan, np.finfo(dtype).smallest_subnormal):
            y = x.copy()
            y[b][where] = bad
            assert not C.padding_is_zero(y, PREFIX), (b, where, bad)
    assert not C.padding_is_zero(x, HOLES)  # another mask is not looked at


def softmax_batch(rng, lengths, tokens, padding):
    """Attention probabilities (B, 2, 3, T, T) over each sample's real keys; padding filled."""
    x = np.full((len(lengths), 2, 3, tokens, tokens), padding)
    for b, n in enumerate(lengths):
        w = np.exp(rng.standard_normal((2, 3, n, n)))
        x[b, ..., :n, :n] = w / w.sum(-1, keepdims=True)
    return x


@pytest.mark.parametrize("padding", [0.0, -0.0, np.nan, 0.3])
@pytest.mark.parametrize("valid", [PREFIX, HOLES], ids=["prefix", "holes"])
def test_prepare_validates_the_same_with_and_without_a_zero_padded_batch(padding, valid):
    rng = np.random.default_rng(2)
    x = softmax_batch(rng, [5, 3, 1], 5, 0.0)
    if valid is HOLES:  # probabilities over the real keys of a mask with holes
        x = np.where(valid[:, None, None, None, :], rng.random(x.shape) + 0.1, 0.0)
        x = x / x.sum(-1, keepdims=True)
    pair = valid[:, None, None, :, None] & valid[:, None, None, None, :]
    x = np.where(pair, x, padding)
    p = C.prepare(x, mask=valid)
    assert p.attn is x and np.array_equal(p.valid, valid)
    bad = x.copy()
    b, q = (1, 2) if valid is PREFIX else (1, 0)
    bad[b, 0, 0, q, q] += 0.5  # a real row off by 0.5, refused whatever the padding holds
    with pytest.raises(ValueError, match="sum to 1"):
        C.prepare(bad, mask=valid)
    bad[b, 0, 0, q, q] = -0.5
    with pytest.raises(ValueError, match="negative"):
        C.prepare(bad, mask=valid)
    bad[b, 0, 0, q, q] = np.nan
    with pytest.raises(ValueError, match="NaN or inf"):
        C.prepare(bad, mask=valid)


@pytest.mark.parametrize("valid", [PREFIX, np.ones((3, 5), dtype=bool)], ids=["padded", "full"])
def test_companion_refuses_nan_or_inf_on_real_entries_and_passes_an_overflowing_sum(valid):
    rng = np.random.default_rng(3)
    p = C.prepare(softmax_batch(rng, valid.sum(1), 5, 0.0), mask=valid)
    grad = np.where(np.broadcast_to(valid[:, None, None, :, None], p.attn.shape), 1e308, np.nan)
    out = R.companion(grad, "attn_grad", p, "m")  # padding NaN: zeroed; the sum overflows to inf
    with np.errstate(over="ignore"):
        assert np.isinf(out.sum()) and np.isfinite(out).all()
    assert same_bits(out, where_padding(grad, valid))
    for bad in (np.nan, np.inf, -np.inf):
        g = grad.copy()
        g[0, 1, 2, 0, 0] = bad
        with pytest.raises(ValueError, match="attn_grad contains NaN or inf"):
            R.companion(g, "attn_grad", p, "m")


@pytest.mark.parametrize("heads", ["mean", "sum", "max", 2])
def test_chefer_maps_equal_those_of_aggregating_a_zero_padded_copy(heads):
    """chefer_generic's attention padding may hold anything (NaN here): the weighted heads are
    zeroed in place, with the bits aggregate_heads gets from its zero-padded copy."""
    rng = np.random.default_rng(4)
    attn = softmax_batch(rng, [5, 3, 1], 5, np.nan)
    grad = rng.standard_normal(attn.shape)
    p = C.prepare(attn, mask=PREFIX)
    g = R.companion(grad, "attn_grad", p, "m")
    got = R._weighted_heads(p, g, attn.astype(np.float64), heads)
    positive = np.maximum(g * attn, 0.0)
    want = C.aggregate_heads(C.Prepared(positive, p.valid, p.batched, p.like), heads, renormalize=False)
    assert same_bits(got, want)
    maps = R.chefer_generic(attn, grad, heads=heads, mask=PREFIX)
    assert np.isfinite(maps).all()
