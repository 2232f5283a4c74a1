"""attention_graph: the edge weights rollout multiplies and flow cuts, worked by hand."""

import numpy as np
import torch

from attnflow.explain.graph import attention_graph

# 1 layer, 1 head, 2 tokens: W = [[1, 0], [.5, .5]]
W = np.array([[[[1.0, 0.0], [0.5, 0.5]]]])


def test_half_attention_half_identity():
    # A = 0.5 W + 0.5 I = [[1, 0], [.25, .75]] (rows already sum to 1)
    np.testing.assert_allclose(attention_graph(W)[0], [[1.0, 0.0], [0.25, 0.75]])


def test_heads_are_aggregated_first_as_configured():
    two = np.concatenate([W, np.array([[[[0.0, 1.0], [1.0, 0.0]]]])], axis=1)  # (1, 2, 2, 2)
    # mean_h = [[.5, .5], [.75, .25]]; A = 0.5 mean_h + 0.5 I = [[.75, .25], [.375, .625]]
    np.testing.assert_allclose(attention_graph(two)[0], [[0.75, 0.25], [0.375, 0.625]])
    # max_h = [[1, 1], [1, .5]]; A = rownorm(0.5 max_h + 0.5 I) = [[1, .5] / 1.5, [.5, .75] / 1.25]
    np.testing.assert_allclose(attention_graph(two, heads="max")[0], [[2 / 3, 1 / 3], [0.4, 0.6]])


def test_input_untouched_and_torch_in_torch_out():
    before = W.copy()
    attention_graph(W, residual=0.0)
    np.testing.assert_array_equal(W, before)
    out = attention_graph(torch.tensor(W, dtype=torch.float32))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
