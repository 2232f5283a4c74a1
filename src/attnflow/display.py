"""One look for an `Explanation` wherever it is shown: notebook, PNG, HTML page, table.

The CLI, `Explanation.show()` / `_repr_html_()` / `to_pandas()` and the report draw through these
functions, so a map looks the same everywhere: layers top to bottom as L1..Ln (1-based, as in the
paper's tables), tokens along the columns, `attnflow.viz`'s colour map and muted special tokens.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np

from attnflow.viz.text_heatmap import LONG_TEXT_TOKENS  # from here a text's PNG is the wrapped text

__all__ = [
    "explanation_figure",
    "explanation_frame",
    "explanation_html",
    "explanation_item",
    "layer_labels",
    "open_page",
    "removed_columns",
    "row_text",
    "shown_layers",
    "sink_text",
]

# First height of the notebook frame around the interactive page, in CSS pixels (the page then
# reports its real height and the frame follows it): title, controls and notes, the token line(s)
# (_FRAME_TOKENS_PER_LINE tokens a line), the grid's header of vertical token labels, one grid row
# per layer.
_FRAME_BASE_PX, _FRAME_LINE_PX, _FRAME_TOKENS_PER_LINE = 330, 42, 12
_FRAME_HEADER_PX, _FRAME_ROW_PX = 140, 28


def layer_labels(n: int) -> list[str]:
    """["L1", ..., "Ln"]: layers are 1-based wherever a reader sees them."""
    return [f"L{i + 1}" for i in range(n)]


def row_text(e: Any) -> str:
    """Which query row `e` explains, for titles: "row 0 ([CLS])" or "max over rows"."""
    if isinstance(e.row, str):
        return f"{e.row} over rows"
    label = e.meta.get("row_label")
    return f"row {e.row} ({label})" if label else f"row {e.row}"


def _methods(e: Any, methods: Sequence[str] | None) -> list[str]:
    chosen = list(e.maps) if methods is None else list(methods)
    unknown = [m for m in chosen if m not in e.maps]
    if unknown:
        raise ValueError(f"no method {unknown} in this explanation; it has {sorted(e.maps)}")
    return chosen


# Titles show at most this many characters of the input (a long prompt is not a title).
TITLE_CHARS = 100
REMOVED_MARK = "⊘ "  # before the label of a removed attention sink


def shown_layers(e: Any) -> list[str]:
    """The layer labels of `e`'s map rows: L1..Ln, or the layers computed (meta["layers"], 0-based)."""
    layers = e.meta.get("layers") if isinstance(getattr(e, "meta", None), dict) else None
    return [f"L{int(k) + 1}" for k in layers] if layers else layer_labels(e.num_layers)


def removed_columns(e: Any) -> list[int]:
    """The columns of `e` whose attention sink was removed (meta["sinks"]["removed"])."""
    sinks = e.meta.get("sinks") if isinstance(getattr(e, "meta", None), dict) else None
    return [int(c) for c in (sinks or {}).get("removed", [])]


def sink_text(e: Any) -> str | None:
    """What was done about attention sinks, for subtitles and repr ("" for encoders left alone)."""
    sinks = e.meta.get("sinks") if isinstance(getattr(e, "meta", None), dict) else None
    if not sinks:
        return None
    pairs = zip(sinks.get("positions", []), sinks.get("tokens", []), strict=False)
    found = ", ".join(f"{t!r} (token {j})" for j, t in pairs)
    if sinks.get("mode", "none") == "none":
        return f"sinks kept: {found}" if found else "sinks: none found"
    return f"sink {found} removed ({sinks['mode']})" if found else f"sinks {sinks['mode']}: none found"


def _columns(e: Any) -> list[str]:
    removed = set(removed_columns(e))
    return [REMOVED_MARK + t if k in removed else t for k, t in enumerate(e.tokens)]


def _subtitle(e: Any, name: str | None) -> str:
    parts = ([name] if name else []) + [row_text(e)]
    if (sinks := sink_text(e)) is not None:
        parts.append(sinks)
    if e.label is not None:
        p = getattr(e, "probability", None)  # the model's probability of its prediction
        parts.append(f"prediction: {e.label}" + (f" (p = {p:.2f})" if p is not None else ""))
    return " · ".join(parts)


def explanation_item(
    e: Any, *, methods: Sequence[str] | None = None, name: str | None = None
) -> dict[str, Any]:
    """`e` as one item of `attnflow.viz.html_page` ([layer x token] per method, its layer chosen)."""
    from attnflow.viz import shorten

    chosen = _methods(e, methods)
    return {
        "title": shorten(e.text, TITLE_CHARS) if e.text is not None else "input",
        "subtitle": _subtitle(e, name),
        "columns": _columns(e),
        "rows": shown_layers(e),
        "maps": {m: e.maps[m] for m in chosen},
        "row": e.layer,
        "method": chosen[-1],
        "muted": sorted({*e.meta.get("special", []), *removed_columns(e)}),
    }


def explanation_figure(
    e: Any, *, methods: Sequence[str] | None = None, name: str | None = None, scale: str = "uniform"
) -> Any:
    """A matplotlib Figure of `e`: one [layer x token] heatmap per method (`attnflow.viz.heatmap_figure`)."""
    from attnflow.viz import heatmap_figure, shorten

    chosen = _methods(e, methods)
    title = (f"“{shorten(e.text)}”\n" if e.text else "") + _subtitle(e, name)
    if getattr(e, "kind", "text") == "text" and len(e.tokens) > LONG_TEXT_TOKENS and scale == "uniform":
        return _text_figure(e, chosen, title)
    return heatmap_figure(
        {m: e.maps[m] for m in chosen},
        columns=_columns(e),
        rows=shown_layers(e),
        scale=scale,
        muted_columns=sorted({*e.meta.get("special", ()), *removed_columns(e)}),
        title=title,
    )


def _text_figure(e: Any, methods: Sequence[str], title: str) -> Any:
    """A long text's picture: the text wrapped, each token shaded at the layer shown
    (`attnflow.viz.text_heatmap`), one panel per method."""
    from attnflow.viz.text_heatmap import surface_tokens, text_heatmap_figure

    model_tokens = e.meta.get("model_tokens")
    groups = e.groups or [[k] for k in range(len(e.tokens))]
    surface = None
    if model_tokens and all(0 <= j < len(model_tokens) for g in groups for j in g):
        pieces = surface_tokens(model_tokens)
        surface = ["".join(pieces[j] for j in g) for g in groups]
    layer = shown_layers(e)[e.layer]
    return text_heatmap_figure(
        {m: e.maps[m][e.layer] for m in methods}, tokens=e.tokens, surface=surface, title=title,
        muted_columns=e.meta.get("special", ()), removed_columns=removed_columns(e),
        caption=f"layer {layer} of {e.num_layers if not e.meta.get('layers') else 'the model'}",
    )  # fmt: skip


def explanation_html(e: Any, *, methods: Sequence[str] | None = None, name: str | None = None) -> str:
    """The CLI's interactive page for `e`, in an iframe (notebooks run its script sandboxed there)."""
    item = explanation_item(e, methods=methods, name=name)
    return items_frame([item], lines=len(e.tokens), rows=e.num_layers, title=name or "attnflow")


def items_frame(
    items: Sequence[Any], *, lines: int, rows: int, title: str = "attnflow", **page_options: Any
) -> str:
    """Items of `attnflow.viz.html_page` as one page in a sandboxed iframe, for a notebook cell:
    first sized for `lines` tokens and `rows` grid rows, then as tall as the page says it is."""
    from attnflow.viz import html_page

    page = html_page(list(items), title=title, **page_options)
    height = _frame_px(lines, rows)
    return (
        f'<iframe srcdoc="{html.escape(page, quote=True)}" style="width:100%;height:{height}px;'
        f'border:0" sandbox="allow-scripts" title="attnflow explanation" onload="{html.escape(_FIT_FRAME)}">'
        "</iframe>"
    )


def in_notebook() -> bool:
    """Whether this runs in an IPython kernel (a notebook), where display() draws inline."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def show_inline(fig: Any) -> None:
    """Draw a matplotlib Figure in the notebook cell, as a PNG (whatever backend is active)."""
    import io

    from IPython.display import Image, display

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    display(Image(data=buf.getvalue()))


# The frame's onload: ask the page for its height (attnflow.viz.page answers, and again after each
# change of method or layer) and take it, so no layer's row is clipped.
_FIT_FRAME = (
    "var f=this;window.addEventListener('message',function(m){if(m.source===f.contentWindow&&m.data"
    "&&m.data.attnflowHeight){f.style.height=(m.data.attnflowHeight+16)+'px';}});"
    "f.contentWindow.postMessage('attnflow-height','*');"
)


def frame_height(e: Any) -> int:
    """A first height (CSS px) for the page of `e` in a notebook frame: every layer's row visible."""
    return _frame_px(len(e.tokens), e.num_layers)


def _frame_px(tokens: int, rows: int) -> int:
    """The frame's first height for `tokens` tokens (in lines of _FRAME_TOKENS_PER_LINE) and `rows` grid rows."""
    lines = -(-tokens // _FRAME_TOKENS_PER_LINE)
    return _FRAME_BASE_PX + _FRAME_LINE_PX * lines + _FRAME_HEADER_PX + _FRAME_ROW_PX * rows


PAGE_MODE = 0o600  # the page `open_page` writes: its owner alone reads it


def open_page(e: Any, *, methods: Sequence[str] | None = None, browser: bool | None = None) -> Any:
    """Write the interactive page of `e` to a private temporary folder (modes 0700 / 0600), open it in
    the web browser, say so.

    browser=None: open it when there is a display (always on macOS / Windows; on Linux when
    DISPLAY or WAYLAND_DISPLAY is set: a console browser would take over the terminal). One line
    on stderr names the file and what was done. Returns the file's path.
    """
    return open_items([explanation_item(e, methods=methods)], title="attnflow", browser=browser)


def open_items(
    items: Sequence[Any], *, title: str = "attnflow", browser: bool | None = None, **page_options: Any
) -> Any:
    """`open_page` for any items of `attnflow.viz.html_page` (a generation's too): the page written
    to a private temporary folder, opened in the web browser when there is a display, one line on
    stderr. Returns the file's path."""
    import os
    import sys
    import tempfile
    import webbrowser
    from pathlib import Path

    from attnflow.viz import write_html

    # A private folder (mode 0700, mkdtemp) and a page only its owner reads (0600): the page holds the
    # user's text, and the shared temp folder is readable by every user of the machine.
    folder = Path(tempfile.mkdtemp(prefix="attnflow-"))
    path = write_html(folder / "explanation.html", list(items), title=title, **page_options)
    os.chmod(path, PAGE_MODE)
    if browser is None:
        browser = sys.platform in ("darwin", "win32") or bool(
            os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
        )
    opened = False
    if browser:
        try:
            opened = webbrowser.open(path.resolve().as_uri())
        except webbrowser.Error:
            opened = False
    how = (
        "opened in the web browser"
        if opened
        else "no browser to open it: open the file, or use e.save('x.png')"
    )
    print(f"attnflow: wrote {path} ({how})", file=sys.stderr)
    return path


def explanation_frame(e: Any) -> Any:
    """A tidy pandas DataFrame: one row per (method, layer, token) with columns method, layer
    (1-based; the model's layer when only some were computed, meta["layers"]), position (0-based,
    into `e.tokens`), token, score, and "removed" (True on a removed attention sink) when a sink
    was removed."""
    try:
        import pandas as pd
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "Explanation.to_pandas() needs pandas: pip install 'attnflow[hf]'", name="pandas"
        ) from None

    parts = []
    for method, m in e.maps.items():
        m = np.asarray(m, dtype=np.float64)  # (L, T)
        layers, tokens = np.meshgrid(np.arange(m.shape[0]), np.arange(m.shape[1]), indexing="ij")
        parts.append(
            pd.DataFrame(
                {
                    "method": method,
                    "layer": layers.ravel() + 1,
                    "position": tokens.ravel(),
                    "token": np.asarray(e.tokens, dtype=object)[tokens.ravel()],
                    "score": m.ravel(),
                }
            )
        )
    frame = pd.concat(parts, ignore_index=True)
    if removed := removed_columns(e):  # a removed attention sink: its score is not a low score
        frame["removed"] = frame["position"].isin(removed)
    if e.meta.get("layers"):  # only some layers computed: their model numbers, 1-based
        frame["layer"] = np.asarray(e.meta["layers"])[frame["layer"].to_numpy() - 1] + 1
    return frame
