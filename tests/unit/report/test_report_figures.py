"""Figures: the attention graph's edge weights by hand; shapes checked; absent data gives no figure."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import LineCollection

from attnflow.report.figures import (
    plot_attention_graph,
    plot_curves,
    plot_head_correlations,
    plot_maps,
    save_figure,
)
from attnflow.report.inputs import find_examples

# 1 layer, 1 head, 2 tokens: W = [[1, 0], [.5, .5]]
W = np.array([[[[1.0, 0.0], [0.5, 0.5]]]])


def test_attention_graph_draws_one_edge_per_weight_with_alpha_by_weight():
    fig = plot_attention_graph(W, ["<cls>", "a"])
    (lines,) = [c for c in fig.axes[0].collections if isinstance(c, LineCollection)]
    # edges (layer 1, k) -> (input, j) for A[k, j] >= min_weight: (0,0)=1, (1,0)=.25, (1,1)=.75; (0,1)=0 left out
    segments = [tuple(map(tuple, s)) for s in lines.get_segments()]
    assert segments == [((0, 0), (0, 1)), ((0, 0), (1, 1)), ((1, 0), (1, 1))]
    np.testing.assert_allclose(lines.get_colors()[:, 3], [1.0, 0.25, 0.75])  # alpha = weight / max weight


def test_maps_need_one_value_per_token(tmp_path):
    maps = {"raw": np.full((2, 3), 1 / 3), "flow": np.full((2, 3), 1 / 3)}
    path = save_figure(plot_maps(maps, ["<cls>", "a", "b"]), tmp_path / "m.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="does not fit 2 tokens"):
        plot_maps(maps, ["<cls>", "a"])


def test_head_figure_only_with_head_data_and_curves_without_paper():
    assert plot_head_correlations(None) is None
    assert (
        plot_head_correlations(pd.DataFrame(columns=["importance", "method", "head", "layer", "mean"]))
        is None
    )
    heads = pd.DataFrame(
        {"importance": ["blank_out"], "method": ["flow"], "head": [1], "layer": [2], "mean": [0.5]}
    )
    fig = plot_head_correlations(heads)
    assert fig is not None and len(fig.axes) == 2  # one panel + colorbar
    ours = pd.DataFrame(
        {
            "method": ["flow", "flow"],
            "layer": [1, 2],
            "mean": [0.2, 0.4],
            "ci_low": [0.1, None],
            "ci_high": [0.3, None],
        }
    )
    assert len(plot_curves(ours).axes[0].lines) == 2  # the curve and the zero line


def test_examples_match_after_whitespace_normalisation_only():
    samples = pd.DataFrame({"text": ["the article  on NNP large systems ", "The dogs"]})
    found = find_examples(samples, ["the article on NNP large systems", "the dogs"])
    assert found == {"the article on NNP large systems": 0, "the dogs": None}  # case is not folded
