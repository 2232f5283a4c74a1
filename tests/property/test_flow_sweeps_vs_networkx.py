"""Warm-started sweeps and greedy-started solves equal networkx on random deep stacks (hypothesis).

The solver sweeps a layer's rows when there are several of them and the layer is 4 or deeper
(attnflow.explain._maxflow); these stacks are deep enough to take every path: closed forms (layers
1-2), solves from a greedy start (layer 3, or few rows), sweeps (layers 4+ with every row asked).
"""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from attnflow.explain import attention_flow, head_flow
from attnflow.explain._reference import reference_flow

FLOW_TOL = 1e-6  # the exactness requirement vs networkx on float capacities
TIGHT = 1e-9  # what the solver reaches here (sweeps included)

# weights with exact zeros, ties and near-degenerate values next to ordinary floats
WEIGHTS = st.one_of(
    st.just(0.0),
    st.sampled_from([1e-9, 0.25, 0.5, 1.0]),
    st.floats(min_value=0.0, max_value=1.0, allow_nan=False, allow_subnormal=False),
)


@st.composite
def deep_stacks(draw, min_layers=4, max_layers=5, max_tokens=5, max_heads=3):
    layers = draw(st.integers(min_layers, max_layers))
    heads = draw(st.integers(1, max_heads))
    tokens = draw(st.integers(2, max_tokens))
    w = draw(arrays(np.float64, (layers, heads, tokens, tokens), elements=WEIGHTS))
    sums = w.sum(-1, keepdims=True)
    w = np.where(sums > 0, w / np.where(sums > 0, sums, 1.0), 1.0 / tokens)  # zero rows -> uniform
    residual = draw(st.sampled_from([0.0, 0.5, 1e-6]))
    return w, residual


def mixed(w, residual):
    a = (1 - residual) * w.mean(axis=1) + residual * np.eye(w.shape[-1])
    return a / a.sum(-1, keepdims=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deep_stacks())
def test_swept_rows_equal_networkx(stack):
    w, residual = stack
    ours = attention_flow(w, residual=residual, normalize=False)  # every row: sweeps at layers 4+
    theirs = reference_flow(mixed(w, residual), normalize=False)
    np.testing.assert_allclose(ours, theirs, atol=FLOW_TOL, rtol=0)
    assert np.abs(ours - theirs).max() <= TIGHT


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deep_stacks(max_layers=4, max_tokens=4))
def test_swept_head_rows_equal_networkx(stack):
    w, residual = stack
    ours = head_flow(w, residual=residual, normalize=False)  # (layer, head, source, sink)
    below = mixed(w, residual)
    for layer in range(w.shape[0]):
        for head in range(w.shape[1]):
            caps = below[: layer + 1].copy()
            caps[layer] = mixed(w[layer : layer + 1, head : head + 1], residual)[0]
            theirs = reference_flow(caps, layers=[layer], normalize=False)[0]
            np.testing.assert_allclose(ours[layer, head], theirs, atol=FLOW_TOL, rtol=0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deep_stacks(), st.data())
def test_padded_batches_of_deep_stacks_equal_each_sample(stack, data):
    w, residual = stack
    tokens = w.shape[-1]
    short = data.draw(st.integers(1, tokens))
    batch = np.zeros((2, *w.shape))
    batch[0] = w
    sub = w[..., :short, :short]
    sums = sub.sum(-1, keepdims=True)
    batch[1, ..., :short, :short] = np.where(sums > 0, sub / np.where(sums > 0, sums, 1.0), 1.0 / short)
    lengths = np.array([tokens, short])
    out = attention_flow(batch, residual=residual, lengths=lengths)
    for b, n in enumerate(lengths):
        alone = attention_flow(batch[b, ..., :n, :n], residual=residual)
        np.testing.assert_allclose(out[b, :, :n, :n], alone, atol=TIGHT, rtol=0)
        assert np.all(out[b, :, n:] == 0) and np.all(out[b, ..., n:] == 0)
