"""Properties of rollout, flow and raw attention on random inputs (hypothesis)."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from attnflow.explain import (
    attention_flow,
    attention_rollout,
    head_flow,
    head_rollout,
)
from attnflow.methods import EXPLAINER_INPUTS, EXPLAINERS, METHODS, ROW_SUM_LAWS
from attnflow.needs import NEEDS

CLOSE = 1e-9  # float64 agreement between two routes to the same numbers

WEIGHTS = st.one_of(
    st.just(0.0),
    st.sampled_from([1e-9, 0.5, 1.0]),
    st.floats(min_value=0.0, max_value=1.0, allow_nan=False, allow_subnormal=False),
)


def stochastic(w):
    sums = w.sum(-1, keepdims=True)
    return np.where(sums > 0, w / np.where(sums > 0, sums, 1.0), 1.0 / w.shape[-1])


@st.composite
def padded_batches(draw, max_batch=3, max_layers=3, max_tokens=5, heads=2):
    """A batch [B, L, H, T, T] and lengths; sample b only attends within its first lengths[b] tokens."""
    lengths = draw(st.lists(st.integers(1, max_tokens), min_size=1, max_size=max_batch))
    layers = draw(st.integers(1, max_layers))
    tokens = max(lengths)
    w = draw(arrays(np.float64, (len(lengths), layers, heads, tokens, tokens), elements=WEIGHTS))
    for b, n in enumerate(lengths):
        w[b, ..., :n, :n] = stochastic(w[b, ..., :n, :n])
        w[b, ..., :n, n:] = 0.0
        w[b, ..., n:, :] = 1.0 / tokens  # padded query rows hold something; it must not matter
    return w, np.array(lengths)


RESIDUALS = st.sampled_from([0.0, 0.5, 0.9])
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(padded_batches(), RESIDUALS)
def test_rollout_rows_stay_stochastic(batch, residual):
    w, lengths = batch
    out = attention_rollout(w, residual=residual, lengths=lengths)
    for b, n in enumerate(lengths):
        assert np.all(out[b] >= 0)
        np.testing.assert_allclose(out[b, :, :n].sum(-1), 1.0, atol=CLOSE)


@FAST
@given(padded_batches(), RESIDUALS, st.sampled_from(sorted(EXPLAINERS)))
def test_batch_results_equal_per_sample_results_and_padding_gets_nothing(batch, residual, name):
    w, lengths = batch
    rng = np.random.default_rng(
        0
    )  # extra inputs (attention gradients, relevance) for the methods that need them
    extras = {k: NEEDS[k].sample(rng, w) for k in EXPLAINER_INPUTS[name]}  # each need's record draws it
    out = EXPLAINERS[name](w, residual=residual, heads="mean", lengths=lengths, **extras)
    for b, n in enumerate(lengths):
        alone = EXPLAINERS[name](
            w[b, :, :, :n, :n],
            residual=residual,
            heads="mean",
            **{k: NEEDS[k].select(v, batch=b, tokens=np.arange(n)) for k, v in extras.items()},
        )
        np.testing.assert_allclose(out[b, :, :n, :n], alone, atol=CLOSE)
        assert np.all(out[b, :, n:, :] == 0) and np.all(out[b, :, :, n:] == 0)


@FAST
@given(padded_batches(max_batch=1, max_layers=4), RESIDUALS)
def test_flow_is_below_both_trivial_cuts(batch, residual):
    # value <= out-capacity of the source (a row of A: 1) and <= in-capacity of the sink (column of A_1)
    w, _ = batch
    w = w[0]
    flow = attention_flow(w, residual=residual, normalize=False)  # (L, T, T)
    a1 = attention_rollout(w[:1], residual=residual)[0]  # A_1, the residual-mixed first layer
    assert np.all(flow >= 0)
    assert np.all(flow <= np.minimum(1.0, a1.sum(0))[None, None, :] + CLOSE)


@FAST
@given(padded_batches(max_batch=1), RESIDUALS)
def test_identical_heads_make_per_head_results_equal_the_all_heads_ones(batch, residual):
    w, _ = batch
    same = np.repeat(w[0, :, :1], 3, axis=1)  # (L, 3 equal heads, T, T)
    roll = attention_rollout(same, residual=residual)
    np.testing.assert_allclose(
        head_rollout(same, residual=residual), np.repeat(roll[:, None], 3, 1), atol=CLOSE
    )
    flow = attention_flow(same, residual=residual, sources=[0])
    np.testing.assert_allclose(
        head_flow(same, residual=residual, sources=[0]), np.repeat(flow[:, None], 3, 1), atol=CLOSE
    )


ATTENTION_RECORDS = sorted(r.name for r in METHODS.values() if r.kind == "attention")


@FAST
@given(padded_batches(), RESIDUALS, st.sampled_from(ATTENTION_RECORDS))
def test_every_record_keeps_its_row_sum_law_on_padded_batches(batch, residual, name):
    # the law is the record's (attnflow.methods: row_sums); a record without one fails here
    w, lengths = batch
    rng = np.random.default_rng(0)
    extras = {k: NEEDS[k].sample(rng, w) for k in EXPLAINER_INPUTS[name]}  # each need's record draws it
    law = METHODS[name].row_sums
    assert law in ROW_SUM_LAWS, f"{name} states no row-sum law"
    out = EXPLAINERS[name](w, residual=residual, lengths=lengths, **extras)
    for b, n in enumerate(lengths):
        sums = out[b, :, :n, :n].sum(-1)  # (L, n) over real rows and keys
        if law == "one":
            np.testing.assert_allclose(sums, 1.0, atol=CLOSE)
        elif law == "identity_plus_nonnegative":
            assert np.all(out[b, :, :n, :n] - np.eye(n) >= -CLOSE) and np.all(sums >= 1.0 - CLOSE)
        else:
            assert np.all(out[b] >= 0)
