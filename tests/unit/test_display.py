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


def test_save_writes_the_format_its_suffix_names(tmp_path):
    from attnflow.hf import load_explanations

    e = _explanation()
    assert e.save(tmp_path / "x.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert e.save(tmp_path / "x.png").read_bytes().startswith(b"\x89PNG")
    for suffix in (".json", ".safetensors"):
        (back,) = load_explanations(e.save(tmp_path / f"x{suffix}"))
        np.testing.assert_allclose(back.maps["flow"], e.maps["flow"], rtol=1e-6)
    with pytest.raises(ValueError, match=r"'x\.txt': use \.html, \.png, \.json or \.safetensors"):
        e.save(tmp_path / "x.txt")


def test_repr_is_one_short_line_without_the_maps():
    e = _explanation()
    e.maps = {m: np.tile(v, (1, 100)) for m, v in e.maps.items()}  # 400 "tokens" of floats
    e.tokens = e.tokens * 100
    text = repr(e)
    assert "\n" not in text and len(text) < 200
    assert text == (
        "Explanation(text='good movie', tokens=400, layers=3, methods=['rollout', 'flow'], layer=2, "
        "prediction='POSITIVE')"
    )


def test_show_outside_a_notebook_writes_the_page_and_says_so(tmp_path, monkeypatch, capsys):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr("sys.platform", "linux")
    assert _explanation().show() is not None  # the figure comes back
    err = capsys.readouterr().err
    (page,) = tmp_path.glob("attnflow-*/*.html")
    assert f"attnflow: wrote {page}" in err and "no browser" in err
    assert "POSITIVE" in page.read_text(encoding="utf-8")


def test_show_writes_a_page_only_its_owner_can_read(tmp_path, monkeypatch):
    """Round 5 (issue 57): show() in a script left a world-readable page (the user's text) in the
    shared temp folder. Now a private folder (0700) holds a page of mode 0600, whatever the umask."""
    import os
    import stat
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr("sys.platform", "linux")
    old = os.umask(0o022)  # the usual umask, which makes new files world-readable
    try:
        _explanation().show()
    finally:
        os.umask(old)
    (page,) = tmp_path.glob("attnflow-*/*.html")
    assert stat.S_IMODE(page.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(page.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [page.parent.name]  # nothing else in the temp folder


def test_show_opens_the_page_in_the_browser_when_there_is_a_display(tmp_path, monkeypatch, capsys):
    import tempfile
    import webbrowser

    opened = []
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setattr(webbrowser, "open", lambda uri: opened.append(uri) or True)
    _explanation().show()
    (page,) = tmp_path.glob("attnflow-*/*.html")
    assert opened == [page.resolve().as_uri()] and "opened in the web browser" in capsys.readouterr().err


def test_the_notebook_frame_grows_with_layers_and_tokens_and_asks_the_page_for_its_height():
    from attnflow.display import frame_height

    e = _explanation()
    small = frame_height(e)
    e.maps = {m: np.vstack([v] * 4) for m, v in e.maps.items()}  # 12 layers
    assert frame_height(e) >= small + 9 * 28
    out = e._repr_html_()
    assert f"height:{frame_height(e)}px" in out and "attnflowHeight" in out
    page = html.unescape(re.search(r'srcdoc="([^"]*)"', out).group(1))
    assert "attnflowHeight" in page  # the page reports its height to the frame


# -- batches as one table; save / load at the top level (issue 58) ---------------------------------


def test_a_list_of_explanations_is_one_tidy_frame_with_the_input_and_its_prediction():
    from attnflow.hf import Explanations, explanations_frame

    first, second = _explanation(), _explanation()
    second.text, second.logits = "bad movie", np.log([3.0, 1.0])  # p(prediction 1) = 1/4
    batch = Explanations([first, second])
    df = batch.to_pandas()
    assert list(df.columns) == ["input", "text", "label", "probability", "method", "layer", "position",
                                "token", "score"]  # fmt: skip
    assert len(df) == 2 * (2 * 3 * 4) and sorted(df["input"].unique()) == [0, 1]
    assert set(df[df.input == 1]["text"]) == {"bad movie"} and df[df.input == 1]["probability"].eq(0.25).all()
    assert df[df.input == 0]["probability"].isna().all()  # no logits: no probability
    one = df[df.input == 1].drop(columns=["input", "text", "label", "probability"]).reset_index(drop=True)
    assert one.equals(second.to_pandas())  # each input's rows are its own to_pandas()
    assert explanations_frame([first, second]).equals(df)  # a plain list too
    with pytest.raises(TypeError, match=r"explanations\[1\] is a str"):
        explanations_frame([first, "x"])


def test_save_and_load_are_at_the_top_level_and_load_gives_a_table(tmp_path):
    import attnflow

    batch = [_explanation(), _explanation()]
    path = attnflow.save(batch, tmp_path / "batch.json")
    back = attnflow.load(path)
    assert len(back) == 2 and back[0].tokens == batch[0].tokens
    assert len(back.to_pandas()) == 2 * 2 * 3 * 4
    assert attnflow.save(batch[0], tmp_path / "one.safetensors").exists()  # one explanation too
    assert {"save", "load"} <= set(attnflow.__all__)
