"""Pictures people can read: a terminal token table, a PNG heatmap and a self-contained HTML page.

Every renderer takes plain data -- token labels along the columns, one matrix [row, column] per
method -- so one verb draws [layer x token] maps (`attnflow explain`) and another can draw a
[generated token x prompt token] matrix with the same functions (`row_name` names the rows).
No torch here; matplotlib is imported only by the PNG writer (Agg canvas, no pyplot state).

An HTML item (one input) is a mapping:

    {"title": str, "subtitle": str (optional), "columns": [token, ...], "rows": [row label, ...],
     "maps": {method: [[float] * len(columns)] * len(rows)}, "row": default row index (optional),
     "method": default method (optional), "muted": [column index, ...] (optional: special tokens,
     left out of the shading scale unless the reader unticks the box)}

>>> print(token_table(["[CLS]", "good", "movie"], {"flow": [0.2, 0.6, 0.2]}, bar_width=6))
  #  token  flow
  0  [CLS]  0.200
  1  good   0.600 ███▎
  2  movie  0.200

(bars and colours: each token's share of the strongest row's mass against the uniform share 1/n, one
scale for the whole map, `attnflow.viz.scale`; here one row: good's 0.6 of n = 3 is
log(1.8) / log(3) = 0.53 of the width, and 0.2 < 1/3 draws nothing.)
"""

from attnflow.viz.page import html_page, script_json, write_html
from attnflow.viz.png import heatmap_figure, page_slices, save_png, uniform_rgba, write_png
from attnflow.viz.scale import SCALE_LEGEND, reference_mass, row_percent, scale_legend, uniform_shade
from attnflow.viz.terminal import score_bar, shorten, token_table

# Constants other modules and tests read from attnflow.viz.
from attnflow.viz.page import HTML_DECIMALS as HTML_DECIMALS  # isort: skip
from attnflow.viz.png import ANNOTATE_MAX_COLUMNS as ANNOTATE_MAX_COLUMNS  # isort: skip
from attnflow.viz.png import MAX_PNG_PIXELS as MAX_PNG_PIXELS  # isort: skip
from attnflow.viz.png import MUTED_RGBA as MUTED_RGBA  # isort: skip
from attnflow.viz.png import PNG_CMAP as PNG_CMAP  # isort: skip

__all__ = [
    "SCALE_LEGEND",
    "heatmap_figure",
    "html_page",
    "page_slices",
    "reference_mass",
    "row_percent",
    "save_png",
    "scale_legend",
    "score_bar",
    "script_json",
    "shorten",
    "token_table",
    "uniform_rgba",
    "uniform_shade",
    "write_html",
    "write_png",
]
