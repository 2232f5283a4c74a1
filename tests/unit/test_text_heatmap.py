"""Long inputs a person can read: the wrapped-text heat-map (`attnflow.viz.text_heatmap`), short
titles, and removed sinks drawn as removed."""

from __future__ import annotations

import numpy as np
import pytest

from attnflow.display import REMOVED_MARK, explanation_figure, explanation_item
from attnflow.hf import Explanation
from attnflow.viz.scale import uniform_shade
from attnflow.viz.text_heatmap import LONG_TEXT_TOKENS, _lines, surface_tokens, text_heatmap_figure


def _long(n: int = LONG_TEXT_TOKENS + 20, *, removed=(0,)) -> Explanation:
    rng = np.random.default_rng(0)
    words = [f"w{k}" for k in range(n)]
    maps = {"rollout": rng.random((2, n))}
    meta = {
        "model_tokens": [w if k == 0 else "Ġ" + w for k, w in enumerate(words)],
        "special": [],
        "sinks": {"mode": "diagonal", "positions": list(removed), "tokens": ["w0"], "removed": list(removed)},
    }
    return Explanation(tokens=words, maps=maps, layer=1, row=n - 1, text=" ".join(words), meta=meta)


def test_surface_tokens_reads_byte_level_sentencepiece_and_wordpiece():
    assert "".join(surface_tokens(["Hello", "Ġworld", ".", "Ċ", "ĠÃ©"])) == "Hello world.\n é"
    assert surface_tokens(["▁The", "▁cat", "s"]) == [" The", " cat", "s"]
    assert "".join(surface_tokens(["[CLS]", "un", "##believ", "##able"])) == "[CLS] unbelievable"


def test_lines_wrap_at_the_width_and_at_newlines():
    lines = _lines(["aaaa", " bbbb", " cc", "\n", "dd"], 10)
    # "aaaa bbbb" fits 10 characters; " cc" would reach 12, so it starts line 2 (its space dropped);
    # the newline token ends line 2 (drawn as ⏎), "dd" starts line 3
    assert [[t for _, t, _ in line] for line in lines] == [["aaaa", " bbbb"], ["cc", "⏎"], ["dd"]]
    assert all(x + len(t) <= 10 for line in lines for _, t, x in line)


def test_long_text_is_drawn_as_wrapped_text_with_the_shading_of_every_picture():
    e = _long()
    fig = explanation_figure(e)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert " w50" in texts and "w0" in texts  # the tokens themselves, in reading order
    (ax,) = fig.axes
    boxes = {round(p.get_x()): p for p in ax.patches}
    # the shade of a token's box is uniform_shade's rule on its layer row (red above 1/n)
    shade = uniform_shade(e.maps["rollout"][1][None, :], [0])[0]
    k = int(np.argmax(shade))
    x = len("".join(surface_tokens(e.meta["model_tokens"])[:k])) % 110
    assert boxes[x].get_facecolor()[1] < 0.9  # coloured, not white
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(hatched) == 1 and hatched[0].get_x() == 0  # the removed sink, token 0


def test_short_texts_keep_the_layer_grid():
    e = _long(LONG_TEXT_TOKENS - 10)
    fig = explanation_figure(e)
    assert fig.axes[0].images  # a heatmap grid, not text boxes
    assert fig.axes[0].get_xticklabels()[0].get_text().startswith(REMOVED_MARK)


def test_titles_are_short_and_removed_sinks_are_muted_and_marked():
    e = _long(400)
    item = explanation_item(e)
    assert len(item["title"]) <= 100 and item["title"].endswith("…")
    assert item["muted"] == [0] and item["columns"][0] == REMOVED_MARK + "w0"
    assert "sink 'w0' (token 0) removed (diagonal)" in item["subtitle"]


def test_text_heatmap_checks_its_input():
    with pytest.raises(ValueError, match=r"scores 'raw' have shape \(2,\), expected \(3,\)"):
        text_heatmap_figure({"raw": [1, 2]}, tokens=["a", "b", "c"])
    with pytest.raises(ValueError, match="surface has 1 pieces"):
        text_heatmap_figure({"raw": [1, 2, 3]}, tokens=["a", "b", "c"], surface=["abc"])


def test_page_cells_keep_two_significant_digits_below_one_percent():
    """A long input's cells are ~0.1 % each: one decimal would read "0.1" everywhere."""
    from attnflow.viz import html_page

    page = html_page([{"title": "t", "columns": ["a", "b"], "rows": ["L1"], "maps": {"raw": [[0.5, 0.5]]}}])
    assert "p.toPrecision(2)" in page and "a >= 0.995" in page
