"""Hand-computed cases for raw attention, rollout, flow, per-head analysis and row selection.

Weights are binary-exact so every expected number is exact; the derivation is in each comment.
"""

import numpy as np
import pytest

from attnflow.explain import (
    attention_flow,
    attention_rollout,
    head_flow,
    head_rollout,
    raw_attention,
    select_rows,
)

EXACT = 1e-12  # float64 round-off on a handful of binary-exact operations

# The STYLE.md example: 2 tokens, 2 layers, one head.
A1 = [[1.0, 0.0], [0.5, 0.5]]
A2 = [[0.5, 0.5], [0.0, 1.0]]
TWO_LAYERS = np.array([[A1], [A2]])  # (layer, head, query, key) = (2, 1, 2, 2)


def test_rollout_and_flow_differ_on_the_two_token_example():
    # Rollout from token 0 at layer 2 = (A2 @ A1)[0] = .5*[1, 0] + .5*[.5, .5] = [.75, .25].
    rollout = attention_rollout(TWO_LAYERS, residual=0.0)
    np.testing.assert_allclose(rollout[1, 0], [0.75, 0.25], atol=EXACT)
    # Flow from (2, 0): to input 0 via (1,0): min(.5, 1) = .5, via (1,1): min(.5, .5) = .5 -> 1.0;
    # to input 1 only via (1,1): min(.5, .5) = .5 (the edge (1,0)->(0,1) has capacity 0) -> 0.5.
    flow = attention_flow(TWO_LAYERS, residual=0.0, sources=[0], normalize=False)
    np.testing.assert_allclose(flow[1, 0], [1.0, 0.5], atol=EXACT)
    # normalised per source: [1, .5] / 1.5 = [2/3, 1/3]
    np.testing.assert_allclose(
        attention_flow(TWO_LAYERS, residual=0.0, sources=[0])[1, 0], [2 / 3, 1 / 3], atol=EXACT
    )


def test_flow_from_token_1_of_the_two_token_example():
    # (2,1) has one edge, to (1,1) with capacity 1; (1,1) -> (0,0) and (0,1) carry .5 each.
    flow = attention_flow(TWO_LAYERS, residual=0.0, sources=[1], layers=[1], normalize=False)
    np.testing.assert_allclose(flow[0, 0], [0.5, 0.5], atol=EXACT)


def test_one_layer_rollout_is_the_residual_mixed_attention_and_flow_is_its_row():
    # W = [[.25, .75], [1, 0]]; A = .5 W + .5 I = [[.625, .375], [.5, .5]] (rows already sum to 1).
    attn = np.array([[[[0.25, 0.75], [1.0, 0.0]]]])  # (1, 1, 2, 2)
    mixed = np.array([[0.625, 0.375], [0.5, 0.5]])
    np.testing.assert_allclose(attention_rollout(attn)[0], mixed, atol=EXACT)
    # one layer: a single edge (1, s) -> (0, j) per sink, so the max flow is A[s, j]
    np.testing.assert_allclose(attention_flow(attn, normalize=False)[0], mixed, atol=EXACT)
    np.testing.assert_allclose(attention_flow(attn)[0], mixed, atol=EXACT)


@pytest.mark.parametrize("residual", [0.0, 0.5])
def test_identity_attention_gives_identity_everywhere(residual):
    # W = I => A = I for any residual; products of I are I; flow (l, i) -> (0, j) is the diagonal chain.
    attn = np.tile(np.eye(3), (4, 2, 1, 1))  # (4 layers, 2 heads, 3, 3)
    expected = np.tile(np.eye(3), (4, 1, 1))
    np.testing.assert_allclose(raw_attention(attn), expected, atol=EXACT)
    np.testing.assert_allclose(attention_rollout(attn, residual=residual), expected, atol=EXACT)
    np.testing.assert_allclose(attention_flow(attn, residual=residual), expected, atol=EXACT)


def test_residual_mixing_renormalises_after_summing_heads():
    # Two heads with row [.5, .5]. mean: .5*[.5, .5] + .5*[1, 0] = [.75, .25].
    # sum: W = [1, 1]; .5*[1, 1] + .5*[1, 0] = [1, .5] -> re-normalised [2/3, 1/3].
    head = [[0.5, 0.5], [0.5, 0.5]]
    attn = np.array([[head, head]])  # (1, 2, 2, 2)
    np.testing.assert_allclose(attention_rollout(attn, heads="mean")[0, 0], [0.75, 0.25], atol=EXACT)
    np.testing.assert_allclose(attention_rollout(attn, heads="sum")[0, 0], [2 / 3, 1 / 3], atol=EXACT)


def test_head_aggregations_of_raw_attention():
    # head 0 row 0 = [1, 0], head 1 row 0 = [.25, .75]
    attn = np.array([[[[1.0, 0.0], [0.5, 0.5]], [[0.25, 0.75], [0.5, 0.5]]]])  # (1, 2, 2, 2)
    np.testing.assert_allclose(raw_attention(attn, heads="mean")[0, 0], [0.625, 0.375], atol=EXACT)
    np.testing.assert_allclose(raw_attention(attn, heads="sum")[0, 0], [1.25, 0.75], atol=EXACT)
    np.testing.assert_allclose(raw_attention(attn, heads="max")[0, 0], [1.0, 0.75], atol=EXACT)
    np.testing.assert_allclose(raw_attention(attn, heads=1)[0, 0], [0.25, 0.75], atol=EXACT)


def test_residual_zero_rollout_is_the_plain_product():
    # residual = 0: Ã(2) = A2 @ A1 exactly, both rows.
    np.testing.assert_allclose(
        attention_rollout(TWO_LAYERS, residual=0.0)[1], np.array(A2) @ np.array(A1), atol=EXACT
    )


def test_default_residual_rollout_two_layers():
    # A1' = .5 A1 + .5 I = [[1, 0], [.25, .75]]; A2' = [[.75, .25], [0, 1]].
    # Ã(2)[0] = .75*[1, 0] + .25*[.25, .75] = [.8125, .1875].
    np.testing.assert_allclose(attention_rollout(TWO_LAYERS)[1, 0], [0.8125, 0.1875], atol=EXACT)


def test_flow_bottleneck_in_the_middle_layer():
    # A1 = [[.5, .5], [.5, .5]], A2 = [[1, 0], [1, 0]] (all of layer 2 reads token 0).
    # From (2, 0): the only edge goes to (1, 0) (capacity 1), which passes .5 to each input:
    # flow = [.5, .5] although min(1, column sum of A1) = 1 for both inputs.
    attn = np.array([[[[0.5, 0.5], [0.5, 0.5]]], [[[1.0, 0.0], [1.0, 0.0]]]])
    flow = attention_flow(attn, residual=0.0, sources=[0], layers=[1], normalize=False)
    np.testing.assert_allclose(flow[0, 0], [0.5, 0.5], atol=EXACT)


def test_flow_three_layers_by_hand():
    # Three tokens, residual 0. Layer 1: token 1 and 2 rows only reach input 0 via (1,0):
    # A1 = [[1,0,0], [.5,.5,0], [0,.5,.5]]: sink (0,0) gets at most 1 + .5 = 1.5 in.
    # A2 = [[.5,.5,0], [0,.5,.5], [.5,0,.5]], A3 row 0 = [.5, .5, 0].
    # From (3,0) to (0,0): supply .5 at (2,0) and .5 at (2,1).
    # (2,0) -> (1,0) .5 -> sink; (2,1) -> (1,1) .5 -> sink (cap .5): total 1.0 = the source cut.
    # To (0,2): only (1,2) -> (0,2) with capacity .5; (1,2) is fed by (2,1) and (2,2) (.5 each),
    # (2,1) gets .5 from the source: value .5.
    # To (0,1): (1,1) -> (0,1) .5 and (1,2) -> (0,1) .5 = 1.0 in; (1,1) fed by (2,0), (2,1) (.5 each),
    # (1,2) by (2,1), (2,2); the source only reaches (2,0), (2,1) with .5 each: route (2,0)->(1,1) .5
    # and (2,1)->(1,2) .5 -> value 1.0.
    a1 = [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.0, 0.5, 0.5]]
    a2 = [[0.5, 0.5, 0.0], [0.0, 0.5, 0.5], [0.5, 0.0, 0.5]]
    a3 = [[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    attn = np.array([[a1], [a2], [a3]])
    flow = attention_flow(attn, residual=0.0, sources=[0], layers=[2], normalize=False)
    np.testing.assert_allclose(flow[0, 0], [1.0, 1.0, 0.5], atol=EXACT)


def test_two_layer_flow_is_the_sum_of_min_over_middle_nodes():
    # With 2 layers the paths s -> (1, k) -> j share no edge: value = sum_k min(A2[s, k], A1[k, j]).
    rng = np.random.default_rng(0)
    attn = rng.random((2, 1, 4, 4))
    attn /= attn.sum(-1, keepdims=True)
    flow = attention_flow(attn, residual=0.0, layers=[1], normalize=False)[0]  # (source, sink)
    a1, a2 = attn[0, 0], attn[1, 0]
    expected = np.minimum(a2[:, :, None], a1[None, :, :]).sum(axis=1)  # (s, j)
    np.testing.assert_allclose(flow, expected, atol=1e-12)


def test_head_rollout_is_one_head_on_top_of_the_all_heads_rollout():
    # h0: every row reads token 0; h1: token 1. residual 0, mean below: layer 1 = all .5.
    # head 0 at layer 2, row 0: [1, 0] @ [[.5, .5], [.5, .5]] = [.5, .5]; at layer 1 it is h0 itself.
    h0 = [[1.0, 0.0], [1.0, 0.0]]
    h1 = [[0.0, 1.0], [0.0, 1.0]]
    attn = np.array([[h0, h1], [h0, h1]])
    out = head_rollout(attn, residual=0.0)
    np.testing.assert_allclose(out[0, 0], h0, atol=EXACT)
    np.testing.assert_allclose(out[1, 0, 0], [0.5, 0.5], atol=EXACT)


def test_head_flow_uses_one_head_on_top_only():
    # Layer 2 head 1 (row 0 = [0, 1]) on top of layer 1 = [[1, 0], [.5, .5]] (both heads equal there):
    # from (2, 0) one edge to (1, 1) (cap 1), then .5 to each input: [.5, .5].
    # The all-heads flow at layer 2 (mean of [1,0] and [0,1] = [.5,.5]) is [1, .5] as in the 2-token case.
    layer1 = [A1, A1]
    layer2 = [[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [0.0, 1.0]]]
    attn = np.array([layer1, layer2])  # (2, 2, 2, 2)
    per_head = head_flow(attn, residual=0.0, sources=[0], layers=[1], normalize=False)  # (1, 2, 1, 2)
    np.testing.assert_allclose(per_head[0, 1, 0], [0.5, 0.5], atol=EXACT)
    np.testing.assert_allclose(per_head[0, 0, 0], [1.0, 0.0], atol=EXACT)  # head 0: (1,0) -> (0,0) only
    every = attention_flow(attn, residual=0.0, sources=[0], layers=[1], normalize=False)
    np.testing.assert_allclose(every[0, 0], [1.0, 0.5], atol=EXACT)


def test_select_rows_picks_cls_a_position_max_and_mean():
    maps = np.array([[[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0.25, 0.25, 0.5]]])  # (1, 3, 3)
    np.testing.assert_allclose(select_rows(maps, "cls"), [[0.5, 0.5, 0.0]])
    np.testing.assert_allclose(select_rows(maps, 2), [[0.25, 0.25, 0.5]])
    np.testing.assert_allclose(select_rows(maps, "max"), [[0.5, 1.0, 0.5]])
    np.testing.assert_allclose(select_rows(maps, "mean"), [[0.25, 1.75 / 3, 0.5 / 3]])


def test_select_rows_ignores_padded_query_rows():
    # sample of length 2 in a 3-token batch: row 2 is padding and must not enter max / mean
    maps = np.array([[[[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [9.0, 9.0, 9.0]]]])  # (1, 1, 3, 3)
    np.testing.assert_allclose(select_rows(maps, "max", lengths=[2]), [[[0.5, 1.0, 0.0]]])
    np.testing.assert_allclose(select_rows(maps, "mean", lengths=[2]), [[[0.25, 0.75, 0.0]]])
