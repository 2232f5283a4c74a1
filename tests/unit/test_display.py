"""Explanation in a notebook: show() / plot() / _repr_html_() / to_pandas(), one look with the CLI."""

from __future__ import annotations

import html
import re

import numpy as np
import pytest

from attnflow.display import explanation_frame, explanation_item, layer_labels
from attnflow.hf import Explanation
from attnflow.viz import MAX_PNG_PIXELS, page_slices, save_png


def _explanation() -> Explanation:
    rng = np.random.default_rng(0)
    maps = {m: rng.dirichlet(np.ones(4), size=3) for m in ("rollout", "flow")}  # (L=3, T=4)
    return Explanation(
        tokens=["[CLS]", "good", "movie", "[SEP]"], maps=maps, layer=2, row=0, prediction=1, label="POSITIVE",
        text="good movie", meta={"row_label": "[CLS]", "special": [0, 3]},
    )  # fmt: skip


def test_to_pandas_is_one_row_per_method_layer_and_token_with_1_based_layers():
    e = _explanation()
    df = e.to_pandas()
    assert list(df.columns) == ["method", "layer", "position", "token", "score"]
    assert len(df) == 2 * 3 * 4 and sorted(df["layer"].unique()) == [1, 2, 3]
    for row in df.itertuples():
        assert row.score == e.maps[row.method][row.layer - 1, row.position]
        assert row.token == e.tokens[row.position]
    assert explanation_frame(e).equals(df)


def test_repr_html_is_the_cli_page_in_a_sandboxed_frame():
    e = _explanation()
    out = e._repr_html_()
    assert out.startswith("<iframe srcdoc=") and 'sandbox="allow-scripts"' in out
    page = html.unescape(re.search(r'srcdoc="([^"]*)"', out).group(1))
    assert page.startswith("<!DOCTYPE html>") and "POSITIVE" in page and '"L3"' in page
    assert explanation_item(e)["rows"] == layer_labels(3) == ["L1", "L2", "L3"]


def test_plot_draws_one_panel_per_method_with_layers_labelled_from_1():
    e = _explanation()
    fig = e.plot()
    panels = [ax for ax in fig.axes if ax.get_title(loc="left")]
    assert [ax.get_title(loc="left") for ax in panels] == ["rollout", "flow"]
    assert [t.get_text() for t in panels[0].get_yticklabels()] == ["L1", "L2", "L3"]
    assert e.show(["flow"]) is not None  # outside IPython: the figure comes back
    with pytest.raises(ValueError, match="no method \\['lrp'\\]"):
        e.plot(["lrp"])


def test_no_png_is_over_the_size_limit_and_long_inputs_page(tmp_path):
    from matplotlib.figure import Figure
    from PIL import Image

    fig = Figure(figsize=(5, 60))  # 9000 px tall at 150 dpi
    path = save_png(tmp_path / "tall.png", fig)
    assert max(Image.open(path).size) <= MAX_PNG_PIXELS
    assert [(s.start, s.stop) for s in page_slices(85, 40)] == [(0, 40), (40, 80), (80, 85)]
