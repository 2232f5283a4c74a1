"""One colour rule, one meaning, in every picture (issue 58): a layer holding almost nothing is drawn
near white in the PNG, the HTML page and the terminal, not rescaled to its own maximum.

The map is Chefer's case from the README's picture: [CLS] holds ~1 in every layer; in L1-L4 the
other tokens hold 1e-4 of it (80 % of that on "thin"), in L5 "thin" holds 0.09. Rule
(`attnflow.viz.scale`): R = max_i sum_k |v_ik| over the shaded tokens = 0.0925 (L5);
s = |v| / R; shade = clip(log(n s) / log(n), 0, 1) with n = 6. L1-L4's "thin": s = 8e-5 / 0.0925
~ 9e-4, n s ~ 0.005 < 1 -> 0 (white); the old per-row rule gave it log(6 * 0.8) / log 6 = 0.88.
L5's "thin": s = 0.09 / 0.0925 = 0.973 -> log(5.84) / log 6 = 0.985 (full red).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from attnflow.viz import html_page, reference_mass, row_percent, token_table, uniform_shade
from attnflow.viz.page import _JS

TOKENS = ["[CLS]", "the", "plot", "is", "thin", ".", "!", "[SEP]"]
MUTED = [0, 7]
THIN = 4
WEAK = np.array([1.0, 4e-6, 4e-6, 4e-6, 8e-5, 4e-6, 4e-6, 1e-4])  # L1-L4: all but 1e-4 on [CLS]
STRONG = np.array([1.0, 5e-4, 5e-4, 5e-4, 0.09, 5e-4, 5e-4, 1e-3])  # L5: "thin" holds the signal
MAP = np.vstack([WEAK, WEAK * 1.5, WEAK * 2, WEAK * 3, STRONG])  # (5 layers, 8 tokens)
# AttnLRP-like signed relevance: rows do not sum to 1 and one value is > 1 (read "104 %" before)
SIGNED = np.array([[0.1, 0.02, -0.6, 0.05, 1.04, 0.02, 0.01, 0.0], [0.1, 0.0, -0.1, 0.0, 0.5, 0.0, 0.0, 0.0]])


def _cell_pixels(tmp_path, matrices):
    """Write the PNG; per panel, the RGB (0..1) read back from the file at a corner of each cell."""
    from PIL import Image

    from attnflow.viz import heatmap_figure, save_png

    rows = [f"L{i + 1}" for i in range(len(next(iter(matrices.values()))))]
    fig = heatmap_figure(matrices, columns=TOKENS, rows=rows, muted_columns=MUTED)
    path = save_png(tmp_path / "map.png", fig, dpi=100)  # figure dpi: data -> pixel transforms hold
    image = np.asarray(Image.open(path).convert("RGB"), dtype=np.float64) / 255  # (H, W, 3)
    panels = [ax for ax in fig.axes if ax.get_title(loc="left")]
    out = []
    for ax in panels:
        grid = np.zeros((len(rows), len(TOKENS), 3))
        for i in range(len(rows)):
            for j in range(len(TOKENS)):
                # a corner of the cell: away from the number written in its middle and the grid lines
                x, y = ax.transData.transform((j - 0.3, i - 0.3))
                grid[i, j] = image[round(image.shape[0] - y), round(x)]
        out.append(grid)
    return fig, out


def test_near_zero_layers_are_near_white_in_the_png_pixels_and_the_strong_one_is_red(tmp_path):
    _, (pixels,) = _cell_pixels(tmp_path, {"chefer": MAP})
    shaded = [j for j in range(len(TOKENS)) if j not in MUTED]
    assert pixels[:4][:, shaded].min() > 0.95  # L1-L4, "thin" included: white, not "as red as 8.7 %"
    red = pixels[4, THIN]
    assert red[0] > 0.7 and red[1] < 0.35 and red[2] < 0.35  # L5's "thin": full red (214, 39, 40)
    assert pixels[:, MUTED].max() < 0.95 and np.ptp(pixels[:, MUTED]) < 0.02  # special tokens grey


def test_signed_relevance_is_diverging_and_its_numbers_are_percent_of_the_total_magnitude(tmp_path):
    fig, (pixels,) = _cell_pixels(tmp_path, {"attnlrp": SIGNED})
    labels = [float(t.get_text()) for t in fig.axes[0].texts]
    assert max(abs(v) for v in labels) <= 100  # 1.04 of a row whose |total| is 1.84: 56.5, not "104"
    assert 56.5 in labels and -32.6 in labels
    blue = pixels[0, 2]  # -0.6 of R = 1.74 (the shaded |mass| of L1): blue, not red
    assert blue[2] > blue[0] + 0.1
    np.testing.assert_allclose(row_percent(SIGNED).round(1)[0, [2, 4]], [-32.6, 56.5])


def test_the_rule_is_one_scale_for_the_whole_map_not_each_row_to_its_own():
    shade = uniform_shade(MAP, MUTED)
    assert reference_mass(MAP, MUTED) == pytest.approx(0.0925)
    assert np.abs(shade[:4]).max() == 0.0 and shade[4, THIN] == pytest.approx(
        np.log(6 * 0.09 / 0.0925) / np.log(6)
    )
    # the old rule (each row against its own mass) drew L1's "thin" at 0.88: the bug the issue shows
    own = uniform_shade(MAP[:1], MUTED)
    assert own[0, THIN] == pytest.approx(np.log(6 * 0.8) / np.log(6))


def _page_js() -> str:
    return re.search(r"function reference\(item, mat\) \{.*?\n  function cell", _JS, re.S).group(0)[
        : -len("  function cell")
    ]


@pytest.mark.skipif(shutil.which("node") is None, reason="node not installed: cannot run the page's script")
def test_the_html_page_shades_and_numbers_the_cells_by_the_same_rule():
    item = {"title": "t", "columns": TOKENS, "rows": [f"L{i + 1}" for i in range(5)], "maps": {"chefer": MAP},
            "muted": MUTED}  # fmt: skip
    data = json.loads(re.search(r'id="data">(.*?)</script>', html_page([item]), re.S).group(1))
    mat = data["items"][0]["maps"]["chefer"]  # what the page holds (rounded to HTML_DECIMALS)
    script = (
        f"var item = {{muted: {json.dumps(MUTED)}, columns: {json.dumps(TOKENS)}}};\n"
        "function isMuted(item, j) { return item.muted.indexOf(j) >= 0; }\n"
        + _page_js()
        + f"var mat = {json.dumps(mat)}; var ref = reference(item, mat);\n"
        "console.log(JSON.stringify([mat.map(function (r) { return shades(item, r, ref); }),"
        " mat.map(rowPercent)]));"
    )
    out = subprocess.run(
        ["node", "-e", script], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    shades, percent = json.loads(out)
    np.testing.assert_allclose(shades, uniform_shade(mat, MUTED), atol=1e-12)
    np.testing.assert_allclose(percent, row_percent(mat), atol=1e-9)
    assert np.abs(np.asarray(shades)[:4]).max() == 0.0 and shades[4][THIN] > 0.9


def test_the_terminal_bars_use_the_whole_maps_scale():
    reference = {"chefer": reference_mass(MAP, MUTED)}
    weak = token_table(TOKENS, {"chefer": MAP[0]}, muted=MUTED, reference=reference, bar_width=8)
    strong = token_table(TOKENS, {"chefer": MAP[4]}, muted=MUTED, reference=reference, bar_width=8)
    thin_weak, thin_strong = weak.splitlines()[1 + THIN], strong.splitlines()[1 + THIN]
    assert "█" not in thin_weak  # L1 holds 1e-4 of the relevance: no bar
    assert "█" * 7 in thin_strong  # L5's "thin": shade 0.985, 63 of the 64 eighths of the width
    alone = token_table(TOKENS, {"chefer": MAP[0]}, muted=MUTED, bar_width=8)  # without the map's R
    assert "█" in alone.splitlines()[1 + THIN]


def test_the_title_gives_the_prediction_and_its_probability():
    from attnflow.display import explanation_figure
    from attnflow.hf import Explanation

    e = Explanation(
        tokens=TOKENS, maps={"chefer": MAP}, layer=4, row=0, logits=np.log([1.0, 3.0]), prediction=1,
        label="positive", text="the plot is thin.", meta={"special": MUTED},
    )  # fmt: skip
    assert e.probability == pytest.approx(0.75)
    assert "prediction: positive (p = 0.75)" in explanation_figure(e).get_suptitle()
