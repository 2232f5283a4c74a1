"""attnflow.viz: the terminal table, the PNG heatmap and the self-contained HTML page (no model needed)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from attnflow.io import write_bytes
from attnflow.viz import (
    heatmap_figure,
    html_page,
    score_bar,
    token_table,
    write_html,
    write_png,
)

TOKENS = ["[CLS]", "good", "</script>", "ünïcødé", "[SEP]"]
MAPS = {"rollout": np.array([[0.5, 0.25, 0.125, 0.125, 0.0], [0.25, 0.5, 0.125, 0.0, 0.125]]),
        "flow": np.array([[0.2, 0.2, 0.2, 0.2, 0.2], [0.4, 0.3, 0.1, 0.1, 0.1]])}  # fmt: skip


def test_bars_are_proportional_to_the_score_in_eighths_of_a_block():
    assert score_bar(1.0, 1.0, 4) == "████"
    assert score_bar(0.5, 1.0, 4) == "██"
    assert score_bar(1 / 32, 1.0, 4) == "▏"  # 1/32 of 4 blocks = one eighth of a block
    assert score_bar(2.0, 1.0, 3) == "███"  # clipped at the width
    for score, vmax in [(0.0, 1.0), (-0.5, 1.0), (float("nan"), 1.0), (0.5, 0.0)]:
        assert score_bar(score, vmax, 4) == ""


def test_the_table_lists_every_token_with_a_score_and_a_bar_per_method():
    text = token_table(TOKENS, {m: v[1] for m, v in MAPS.items()}, bar_width=8, title="a title")
    lines = text.splitlines()
    assert lines[0] == "a title"
    assert lines[1].split() == ["#", "token", "rollout", "flow"]
    assert len(lines) == 2 + len(TOKENS)
    good = lines[3]
    # the colour rule: rollout row [.25, .5, .125, 0, .125], n = 5: good's share 1/2 ->
    # log(2.5) / log(5) = 0.569 of 8 blocks = 36 eighths; flow's .3 of 1: log(1.5) / log(5) = 0.252 -> 16
    assert "good" in good and "0.500 ████▌" in good and "0.300 ██" in good
    # columns line up: the flow scores start at the same offset on every row
    offsets = {line.index(f"{v:.3f}", 20) for line, v in zip(lines[2:], MAPS["flow"][1], strict=True)}
    assert len(offsets) == 1


def test_muted_tokens_leave_the_bar_scale_so_the_others_stay_readable():
    lines = token_table(
        ["[CLS]", "good", "bad"], {"flow": [0.8, 0.15, 0.05]}, bar_width=6, muted=[0]
    ).splitlines()
    assert lines[1].endswith("0.800 ░░░░░░")  # clipped, drawn apart
    # n = 2 without [CLS]: good holds 3/4 -> log(1.5) / log(2) = 0.585 of 6 blocks = 28 eighths
    assert lines[2].endswith("0.150 ███▌")
    assert lines[3].endswith("0.050")  # 1/4 < 1/2, the uniform share: no bar


def test_a_uniform_method_draws_no_bars_and_a_negative_score_is_marked():
    flat = token_table(["a", "b", "c", "d"], {"flow": [0.25] * 4}, bar_width=4).splitlines()
    assert [line.split()[-1] for line in flat[1:]] == ["0.250"] * 4  # uniform: no bar stands out
    rows = token_table(["a", "b", "c", "d"], {"lrp": [0.5, -0.5, 0.0, 0.0]}, bar_width=4).splitlines()
    assert rows[1].endswith("0.500 ██") and rows[2].endswith("-0.500 ▒▒")  # share 1/2 of n = 4: half width


def test_the_table_rejects_scores_that_do_not_match_the_tokens():
    with pytest.raises(ValueError, match=r"scores\['flow'\] has shape \(2,\), expected \(5,\)"):
        token_table(TOKENS, {"flow": [0.5, 0.5]})


def test_control_characters_in_tokens_stay_on_one_line():
    assert len(token_table(["a\nb", "\t"], {"raw": [0.5, 0.5]}).splitlines()) == 3


def test_the_png_is_written_without_pyplot(tmp_path):
    code = (
        "import sys, numpy as np\n"
        "from attnflow.viz import write_png\n"
        f"write_png({str(tmp_path / 'h.png')!r}, {{'flow': np.eye(2, 3)}}, columns=['a', 'b', 'c'], rows=['L1', 'L2'],"
        " muted_columns=[0], title='t')\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    assert (tmp_path / "h.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("scale", ["uniform", "panel", "row"])
def test_the_heatmap_has_one_panel_per_method_with_tokens_and_rows_labelled(scale):
    fig = heatmap_figure(MAPS, columns=TOKENS, rows=["L1", "L2"], scale=scale, muted_columns=[0, 4])
    panels = [ax for ax in fig.axes if ax.get_title(loc="left")]
    assert [ax.get_title(loc="left") for ax in panels] == ["rollout", "flow"]
    assert [t.get_text() for t in panels[0].get_xticklabels()] == TOKENS
    assert [t.get_text() for t in panels[0].get_yticklabels()] == ["L1", "L2"]
    assert "12.5" in {t.get_text() for t in panels[0].texts}  # 0.125 written as 12.5 %


def test_the_heatmap_rejects_a_matrix_of_the_wrong_shape(tmp_path):
    with pytest.raises(ValueError, match=r"matrix 'rollout' has shape \(2, 5\), expected \(3, 5\)"):
        write_png(tmp_path / "x.png", MAPS, columns=TOKENS, rows=["L1", "L2", "L3"])


def _page_data(page: str) -> dict:
    payload = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S).group(1)
    return json.loads(payload)


def test_the_html_page_is_self_contained_and_carries_the_maps():
    items = [{"title": "good </script> movie", "columns": TOKENS, "rows": ["L1", "L2"], "maps": MAPS, "row": -1,
              "muted": [0, 4], "method": "flow"}]  # fmt: skip
    page = html_page(items, title="t <b>", row_name="layer")
    assert not re.search(r"""(src|href)\s*=|https?://|@import|url\(""", page)  # nothing fetched from anywhere
    assert page.count("</script>") == 3  # the error hook, the data, the app: a token cannot close a block
    assert "<title>t &lt;b&gt;</title>" in page
    data = _page_data(page)
    (item,) = data["items"]
    assert (
        item["columns"] == TOKENS
        and item["row"] == 1
        and item["muted"] == [0, 4]
        and item["method"] == "flow"
    )
    np.testing.assert_allclose(item["maps"]["rollout"], MAPS["rollout"])


def test_the_html_page_takes_a_generated_by_prompt_matrix_too():
    """Another verb's use: rows are generated tokens, columns prompt tokens."""
    items = [{"title": "prompt", "columns": ["The", "cat"], "rows": ["sat", "down", "."],
              "maps": {"rollout": np.full((3, 2), 0.5)}}]  # fmt: skip
    page = html_page(items, row_name="generated token")
    assert "generated token <select" in page
    assert _page_data(page)["items"][0]["rows"] == ["sat", "down", "."]


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([], "no items"),
        ([{"columns": ["a"], "rows": ["L1"], "maps": {"raw": [[0.1, 0.2]]}}], "expected \\(1, 1\\)"),
    ],
)
def test_the_html_page_rejects_bad_items(items, message):
    with pytest.raises(ValueError, match=message):
        html_page(items)


def test_writes_are_atomic_and_leave_no_temporary_files(tmp_path):
    path = write_html(
        tmp_path / "sub" / "p.html", [{"columns": ["a"], "rows": ["L1"], "maps": {"raw": [[1.0]]}}]
    )
    write_bytes(tmp_path / "sub" / "b.bin", b"\x00\x01")
    assert sorted(p.name for p in path.parent.iterdir()) == ["b.bin", "p.html"]
    assert (tmp_path / "sub" / "b.bin").read_bytes() == b"\x00\x01"
