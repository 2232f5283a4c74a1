"""The colour rule of every picture (attnflow.viz.scale): a uniform map is not drawn as important.

Rule: R = max over rows of sum|v| over the shaded tokens (one scale for the whole matrix),
s = |v| / R, shade = sign(v) clip(log(n s) / log(n), 0, 1).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from attnflow.viz import heatmap_figure, html_page
from attnflow.viz.page import _JS
from attnflow.viz.scale import uniform_shade

TOKENS = ["[CLS]", "a", "b", "c", "d", "[SEP]"]


def test_a_uniform_row_is_white_and_one_token_holding_everything_is_full():
    assert np.all(uniform_shade(np.full((2, 5), 0.2)) == 0.0)
    # n = 4, v = (1, 0, 0, 0): log(4 * 1) / log 4 = 1 for the first token, 0 for the others
    np.testing.assert_allclose(uniform_shade([[1.0, 0, 0, 0]]), [[1.0, 0, 0, 0]])
    # 2x the uniform share of n = 4: log 2 / log 4 = 1/2; below uniform: 0
    np.testing.assert_allclose(uniform_shade([[0.5, 0.25, 0.125, 0.125]]), [[0.5, 0, 0, 0]])


def test_the_scale_ignores_the_size_of_the_numbers_and_keeps_the_sign():
    row = np.array([[0.4, 0.3, 0.2, 0.1]])
    np.testing.assert_allclose(uniform_shade(row), uniform_shade(10 * row))  # Chefer rows sum to >= 1
    signed = uniform_shade([[0.5, -0.5, 0.0, 0.0]])  # share 1/2 each of |v|: log 2 / log 4
    np.testing.assert_allclose(signed, [[0.5, -0.5, 0.0, 0.0]])


def test_muted_tokens_leave_the_total_and_n():
    # [CLS] holds 0.9; the other three share 0.1 evenly: uniform among the shaded tokens -> white
    shade = uniform_shade([[0.9, 0.1 / 3, 0.1 / 3, 0.1 / 3]], muted=[0])
    np.testing.assert_allclose(shade, 0.0, atol=1e-12)


def test_a_near_uniform_map_is_drawn_near_white_in_the_png_not_as_maximal():
    # the case: 15 tokens at 6.4 .. 6.8 % (near the uniform 6.67 %), drawn solid red before
    rng = np.random.default_rng(0)
    flat = rng.uniform(0.064, 0.068, size=(6, 15))
    flat /= flat.sum(axis=1, keepdims=True)
    fig = heatmap_figure(
        {"flow": flat}, columns=[f"t{j}" for j in range(15)], rows=[f"L{i}" for i in range(6)]
    )
    rgba = fig.axes[0].images[0].get_array()  # (rows, columns, 4) colours actually drawn
    assert rgba[..., :3].min() > 0.97  # white or nearly: nothing looks important
    peaked = flat.copy()
    peaked[:, 3] += 1.0
    fig = heatmap_figure(
        {"flow": peaked}, columns=[f"t{j}" for j in range(15)], rows=[f"L{i}" for i in range(6)]
    )
    rgba = fig.axes[0].images[0].get_array()
    assert rgba[0, 3, 1] < 0.6 < rgba[0, 0, 1]  # the token holding half the row is dark, the rest pale
    labels = {t.get_text() for t in fig.axes[0].texts}
    assert any(re.fullmatch(r"\d\.\d", t) for t in labels)  # one decimal of percent, e.g. "6.4"


def _shades_js() -> str:
    return re.search(r"function reference\(item, mat\) \{.*?\n  function rowPercent", _JS, re.S).group(0)[
        : -len("  function rowPercent")
    ]


@pytest.mark.skipif(shutil.which("node") is None, reason="node not installed: cannot run the page's script")
def test_the_html_page_shades_by_the_same_rule_as_the_png():
    rows = [[0.2] * 6, [0.5, 0.3, 0.1, 0.05, 0.05, 0.0], [0.4, -0.2, 0.1, 0.1, 0.1, 0.1], [0.0] * 6]
    muted = [0, 5]
    script = (
        f"var item = {{muted: {json.dumps(muted)}, columns: {json.dumps(TOKENS)}}};\n"
        + "function isMuted(item, j) { return item.muted.indexOf(j) >= 0; }\n"
        + _shades_js()
        + f"var mat = {json.dumps(rows)}; var ref = reference(item, mat);\n"
        + "console.log(JSON.stringify(mat.map(function (r) { return shades(item, r, ref); })));"
    )
    out = subprocess.run(
        ["node", "-e", script], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    np.testing.assert_allclose(json.loads(out), uniform_shade(rows, muted), atol=1e-12)


def test_the_html_legend_states_the_rule():
    page = html_page([{"title": "t", "columns": TOKENS, "rows": ["L1"], "maps": {"flow": [[1 / 6] * 6]}}])
    assert "uniform share 1/n" in page and "≤ 1/n" in page
