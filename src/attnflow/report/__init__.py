"""The study report: tables and figures beside the paper's published numbers.

- :mod:`.paper`: the published Tables 1-3 (the paper's numbers, labelled as such)
- :mod:`.inputs`: reading each task's stage outputs; :mod:`.frames`: merges, group-bys, pivots
- :mod:`.tables` / :mod:`.document`: one table structure rendered to markdown and HTML
- :mod:`.figures`: correlation curves, Figure 2/3-style maps, per-head heatmap, attention graph
- :mod:`.sections`: one small module per report section; :mod:`.build`: :func:`build_report`
"""

from .build import Report, build_report
from .figures import plot_attention_graph, plot_curves, plot_head_correlations, plot_maps, save_figure
from .frames import comparison_frame, head_grid, metric_cells, metrics_payload, seed_frame
from .paper import PAPER_ACCURACY, TABLES, PaperTable, paper_cell, paper_frame, paper_table
from .tables import Grid, comparison_cells, comparison_grid, to_html, to_markdown

__all__ = [
    "PAPER_ACCURACY",
    "TABLES",
    "Grid",
    "PaperTable",
    "Report",
    "build_report",
    "comparison_cells",
    "comparison_frame",
    "comparison_grid",
    "head_grid",
    "metric_cells",
    "metrics_payload",
    "paper_cell",
    "paper_frame",
    "paper_table",
    "plot_attention_graph",
    "plot_curves",
    "plot_head_correlations",
    "plot_maps",
    "save_figure",
    "seed_frame",
    "to_html",
    "to_markdown",
]
