"""The one-step call (`flow._fast_direct`, `_kernels.mean_flow_direct`): mix, row normalisation, rows
and values in one kernel call -- a small call, or a batch with no row to sweep -- bit for bit the
values of the two-step path it replaces."""

import numpy as np
import pytest

from attnflow.explain import _maxflow, attention_flow, flow
from attnflow.explain._common import row_sums
from attnflow.explain._maxflow import _kernels


def stochastic(rng, shape, sharpness=3.0):
    w = np.exp(rng.standard_normal(shape) * sharpness)
    return w / w.sum(-1, keepdims=True)


def bits(x):
    return x.view(np.uint64)


@pytest.mark.parametrize(
    "shape, options",
    [
        ((6, 8, 20, 20), {"sources": [0], "normalize": False}),  # Table 1, one sample
        ((6, 8, 20, 20), {"sources": [0]}),
        ((3, 6, 8, 20, 20), {"sources": 0}),  # a small batch
        ((6, 2, 40, 40), {"sources": 0, "residual": 0.2}),
        ((5, 3, 9, 9), {"sources": [1, 2], "layers": [0, 1, 2, 3]}),
        ((4, 2, 7, 7), {"sources": [0, 1, 2]}),  # 12 rows, 3 per layer: none swept
        ((2, 1, 1, 1), {}),
        ((1, 3, 2, 5, 5), {"layers": [0, 0, 0], "sources": 4}),
        ((6, 3, 17, 17), {"sources": [0, 3], "layers": 2, "residual": 1.0}),
        # batches of more than SMALL_ROWS rows, none swept: mixed and solved a few samples per job
        ((100, 6, 8, 20, 20), {"sources": [0], "normalize": False}),  # Table 1, batched
        ((40, 4, 2, 9, 9), {"sources": [0, 1, 2]}),  # 3 rows per layer
        ((33, 5, 3, 6, 6), {"layers": [1, 3, 3, 3], "sources": 4, "residual": 0.3}),
        ((70, 2, 12, 5, 5), {}),  # every row of layers 1-2: closed forms only
    ],
)
def test_the_one_step_call_gives_the_two_step_values_bit_for_bit(monkeypatch, shape, options):
    rng = np.random.default_rng(21)
    for _ in range(3):
        attn = stochastic(rng, shape)
        if shape[-1] > 1:
            attn[..., 0, 1] = 0.0  # an exact zero
            attn[..., 0, :] /= attn[..., 0, :].sum(-1, keepdims=True)
        assert flow._fast_direct(attn, options.get("residual", 0.5), "mean", None, None, False,
                                options.get("sources"), options.get("layers"),
                                options.get("normalize", True), None) is not None  # fmt: skip
        one = attention_flow(attn, **options)
        with monkeypatch.context() as m:
            m.setattr(flow, "_fast_direct", lambda *args: None)
            two = attention_flow(attn, **options)
        assert one.shape == two.shape and one.dtype == two.dtype
        assert np.array_equal(bits(one), bits(two))


@pytest.mark.parametrize(
    "options",
    [
        {"layers": [3, 1]},  # out of layer order: the planned path
        {"sources": np.array([0])},  # not None / int / list of ints: the general checks
        {"sources": [True]},
        {"sources": [0, 20]},  # out of range: the general path words the error
        {"progress": True},
    ],
)
def test_other_calls_are_left_to_the_paths_before(options):
    attn = stochastic(np.random.default_rng(2), (6, 2, 20, 20))
    out = flow._fast_direct(attn, 0.5, "mean", None, None, False, options.get("sources"),
                           options.get("layers"), True, options.get("progress"))  # fmt: skip
    assert out is None


def test_a_call_with_rows_to_sweep_is_left_to_the_plan():
    every_row = stochastic(np.random.default_rng(2), (4, 2, 7, 7))  # 7 rows per layer: swept
    assert flow._fast_direct(every_row, 0.5, "mean", None, None, False, None, None, True, None) is None
    batch = stochastic(np.random.default_rng(2), (20, 6, 2, 8, 8))
    assert flow._fast_direct(batch, 0.5, "mean", None, None, False, [0, 1, 2, 3], None, True, None) is None


def test_a_batch_that_would_show_a_bar_is_left_to_the_plan(monkeypatch):
    # the planned path shows a progress bar above PROGRESS_WORK (progress=None); asked for no bar,
    # the one-step call takes the batch whatever its work
    attn = stochastic(np.random.default_rng(2), (100, 6, 2, 8, 8))  # 600 rows > SMALL_ROWS
    assert flow._fast_direct(attn, 0.5, "mean", None, None, False, [0], None, True, None) is not None
    monkeypatch.setattr(_maxflow, "PROGRESS_WORK", 1.0)
    assert flow._fast_direct(attn, 0.5, "mean", None, None, False, [0], None, True, None) is None
    quiet = flow._fast_direct(attn, 0.5, "mean", None, None, False, [0], None, True, False)
    assert quiet is not None
    monkeypatch.setattr(flow, "_fast_direct", lambda *args: None)
    assert np.array_equal(bits(quiet), bits(attention_flow(attn, sources=[0], progress=False)))


@pytest.mark.parametrize("shape", [(2, 2, 3, 3), (70, 2, 2, 3, 3)])  # small; a batch of 70 x 6 rows
def test_a_borderline_row_is_left_to_the_general_check(shape):
    attn = np.full(shape, 1 / 3)
    last = attn.reshape((-1, *shape[-4:]))[-1]  # the last sample (a view)
    last[1, -1, 2, 2] += 1e-3
    assert flow._fast_direct(attn, 0.5, "mean", None, None, False, None, [1], True, None) is None
    assert np.isfinite(attention_flow(attn, layers=[1])).all()
    last[1, -1, 2, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        attention_flow(attn, layers=[1])


def test_the_kernels_row_sums_are_numpys():
    rng = np.random.default_rng(8)
    for tokens in (1, 2, 3, 7, 8, 9, 16, 20, 33, 64, 129):
        x = rng.random((5, 4, tokens)) * rng.random((5, 4, 1)) ** 6
        assert np.array_equal(bits(_kernels.row_sums_np(x)), bits(row_sums(x).reshape(-1)))
    assert flow._np_sums_agree()


@pytest.mark.parametrize("tokens", [2, 9, 20, 35, 36])
@pytest.mark.parametrize("heads", [1, 2, 3, 8, 12, 16])
def test_the_head_mean_is_numpys_for_any_head_count(heads, tokens):
    # a power-of-two head count is scaled by 1 / H (exact), any other divided by H: numpy's mean
    rng = np.random.default_rng(heads)
    attn = stochastic(rng, (3, 2, heads, tokens, tokens), sharpness=6.0)
    attn[0, 0, :, 0, :] = np.array([5e-324] * (tokens - 1) + [1 - (tokens - 1) * 5e-324])  # subnormals
    numpy_mix = 0.5 * attn.mean(axis=2) + 0.5 * np.eye(tokens)
    assert np.array_equal(bits(_kernels.mix_heads(attn, 0.5, 1e-6, 1, False)), bits(numpy_mix))
    divided = numpy_mix / row_sums(numpy_mix)[..., None]
    assert np.array_equal(bits(_kernels.mix_heads(attn, 0.5, 1e-6, 2, True)), bits(divided))


@pytest.mark.parametrize("tokens", [4, 9, 20, 35, 40])  # whole vectors of four and tails of 0-3
@pytest.mark.parametrize("column", [0, 3, -1])
@pytest.mark.parametrize("fault", ["negative", "sum", "nan"])
@pytest.mark.parametrize("head", [0, 3, 4])  # of five
def test_the_head_mean_refuses_a_bad_row_in_any_lane(tokens, column, fault, head):
    # the check runs in the pass that adds the heads (four entries per instruction where the CPU
    # has AVX2): a bad entry in any lane of a vector or in the tail, of any head, fails it
    attn = stochastic(np.random.default_rng(tokens), (2, 2, 5, tokens, tokens))
    assert _kernels.mix_heads(attn, 0.5, 1e-6, 1, True) is not None
    row = attn[1, 0, head, tokens - 1]
    if fault == "negative":
        row[column] = -1e-3
        row[0 if column else 1] += 1e-3  # the row still sums to 1
    elif fault == "sum":
        row[column] += 1e-3
    else:
        row[column] = np.nan
    assert _kernels.mix_heads(attn, 0.5, 1e-6, 1, True) is None
    assert _kernels.mix_heads(attn, 0.5, 1e-6, 2, False) is None
