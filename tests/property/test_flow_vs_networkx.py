"""Our attention flow equals the authors' networkx formulation (Edmonds-Karp per pair) on random stacks."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from attnflow.explain import attention_flow, head_flow
from attnflow.explain._reference import reference_flow

FLOW_TOL = 1e-6  # the exactness requirement vs networkx on float capacities

# weights with exact zeros, ties and near-degenerate values next to ordinary floats
WEIGHTS = st.one_of(
    st.just(0.0),
    st.sampled_from([1e-9, 0.25, 0.5, 1.0]),
    st.floats(min_value=0.0, max_value=1.0, allow_nan=False, allow_subnormal=False),
)


@st.composite
def attention_stacks(draw, max_layers=4, max_tokens=5, max_heads=2):
    layers = draw(st.integers(1, max_layers))
    heads = draw(st.integers(1, max_heads))
    tokens = draw(st.integers(1, max_tokens))
    w = draw(arrays(np.float64, (layers, heads, tokens, tokens), elements=WEIGHTS))
    sums = w.sum(-1, keepdims=True)
    w = np.where(sums > 0, w / np.where(sums > 0, sums, 1.0), 1.0 / tokens)  # zero rows -> uniform
    residual = draw(st.sampled_from([0.0, 0.5, 0.9, 1e-6]))
    return w, residual


def mixed(w, residual):
    """The authors' capacities, computed independently: mean heads, add residual, re-normalise."""
    a = (1 - residual) * w.mean(axis=1) + residual * np.eye(w.shape[-1])
    return a / a.sum(-1, keepdims=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(attention_stacks())
def test_flow_equals_networkx_max_flow_value(stack):
    w, residual = stack
    ours = attention_flow(w, residual=residual, normalize=False)  # (layer, source, sink)
    theirs = reference_flow(mixed(w, residual), normalize=False)
    np.testing.assert_allclose(ours, theirs, atol=FLOW_TOL, rtol=0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(attention_stacks(), st.data())
def test_normalised_flow_from_chosen_sources_equals_networkx(stack, data):
    w, residual = stack
    tokens, layers = w.shape[-1], w.shape[0]
    sources = data.draw(st.lists(st.integers(0, tokens - 1), min_size=1, max_size=3))
    layer_idx = data.draw(st.lists(st.integers(0, layers - 1), min_size=1, max_size=3))
    ours = attention_flow(w, residual=residual, sources=sources, layers=layer_idx)
    theirs = reference_flow(mixed(w, residual), sources=sources, layers=layer_idx)
    np.testing.assert_allclose(ours, theirs, atol=FLOW_TOL, rtol=0)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(attention_stacks(max_layers=3, max_tokens=4, max_heads=3))
def test_head_flow_equals_networkx_with_the_head_on_top(stack):
    w, residual = stack
    ours = head_flow(w, residual=residual, sources=[0], normalize=False)  # (layer, head, 1, T)
    below = mixed(w, residual)
    for layer in range(w.shape[0]):
        for head in range(w.shape[1]):
            caps = below[: layer + 1].copy()
            caps[layer] = mixed(w[layer : layer + 1, head : head + 1], residual)[0]
            theirs = reference_flow(caps, sources=[0], layers=[layer], normalize=False)[0]
            np.testing.assert_allclose(ours[layer, head], theirs, atol=FLOW_TOL, rtol=0)
