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

__all__ = [
    "explanation_figure",
    "explanation_frame",
    "explanation_html",
    "explanation_item",
    "layer_labels",
    "open_page",
    "row_text",
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


def _subtitle(e: Any, name: str | None) -> str:
    parts = ([name] if name else []) + [row_text(e)]
    if e.label is not None:
        parts.append(f"prediction: {e.label}")
    return " · ".join(parts)


def explanation_item(
    e: Any, *, methods: Sequence[str] | None = None, name: str | None = None
) -> dict[str, Any]:
    """`e` as one item of `attnflow.viz.html_page` ([layer x token] per method, its layer chosen)."""
    chosen = _methods(e, methods)
    return {
        "title": e.text if e.text is not None else "input",
        "subtitle": _subtitle(e, name),
        "columns": list(e.tokens),
        "rows": layer_labels(e.num_layers),
        "maps": {m: e.maps[m] for m in chosen},
        "row": e.layer,
        "method": chosen[-1],
        "muted": list(e.meta.get("special", [])),
    }


def explanation_figure(
    e: Any, *, methods: Sequence[str] | None = None, name: str | None = None, scale: str = "uniform"
) -> Any:
    """A matplotlib Figure of `e`: one [layer x token] heatmap per method (`attnflow.viz.heatmap_figure`)."""
    from attnflow.viz import heatmap_figure, shorten

    chosen = _methods(e, methods)
    title = (f"“{shorten(e.text)}”\n" if e.text else "") + _subtitle(e, name)
    return heatmap_figure(
        {m: e.maps[m] for m in chosen},
        columns=e.tokens,
        rows=layer_labels(e.num_layers),
        scale=scale,
        muted_columns=e.meta.get("special", ()),
        title=title,
    )


def explanation_html(e: Any, *, methods: Sequence[str] | None = None, name: str | None = None) -> str:
    """The CLI's interactive page for `e`, in an iframe (notebooks run its script sandboxed there)."""
    from attnflow.viz import html_page

    page = html_page([explanation_item(e, methods=methods, name=name)], title=name or "attnflow")
    return (
        f'<iframe srcdoc="{html.escape(page, quote=True)}" style="width:100%;height:{frame_height(e)}px;'
        f'border:0" sandbox="allow-scripts" title="attnflow explanation" onload="{html.escape(_FIT_FRAME)}">'
        "</iframe>"
    )


# The frame's onload: ask the page for its height (attnflow.viz.page answers, and again after each
# change of method or layer) and take it, so no layer's row is clipped.
_FIT_FRAME = (
    "var f=this;window.addEventListener('message',function(m){if(m.source===f.contentWindow&&m.data"
    "&&m.data.attnflowHeight){f.style.height=(m.data.attnflowHeight+16)+'px';}});"
    "f.contentWindow.postMessage('attnflow-height','*');"
)


def frame_height(e: Any) -> int:
    """A first height (CSS px) for the page of `e` in a notebook frame: every layer's row visible."""
    lines = -(-len(e.tokens) // _FRAME_TOKENS_PER_LINE)
    return _FRAME_BASE_PX + _FRAME_LINE_PX * lines + _FRAME_HEADER_PX + _FRAME_ROW_PX * e.num_layers


def open_page(e: Any, *, methods: Sequence[str] | None = None, browser: bool | None = None) -> Any:
    """Write the interactive page of `e` to a temporary file, open it in the web browser, say so.

    browser=None: open it when there is a display (always on macOS / Windows; on Linux when
    DISPLAY or WAYLAND_DISPLAY is set: a console browser would take over the terminal). One line
    on stderr names the file and what was done. Returns the file's path.
    """
    import os
    import sys
    import tempfile
    import webbrowser
    from pathlib import Path

    from attnflow.viz import write_html

    fd, name = tempfile.mkstemp(prefix="attnflow-", suffix=".html")
    os.close(fd)
    path = write_html(Path(name), [explanation_item(e, methods=methods)], title="attnflow")
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
    (1-based), position (0-based, into `e.tokens`), token, score."""
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
    return pd.concat(parts, ignore_index=True)
