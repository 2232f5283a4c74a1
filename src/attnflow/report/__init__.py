"""Tables and figures: the study report beside the paper's published numbers.

- :mod:`.paper`: the published Tables 1-3 (the paper's numbers, labelled as such)
- :mod:`.tables`: one table structure rendered to markdown and HTML; the comparison tables
- :mod:`.figures`: correlation curves, Figure 2/3-style maps, per-head heatmap, attention graph
- :mod:`.aggregate`: mean and spread over seeds
- :mod:`.build`: :func:`build_report` writes ``report.md``, ``report.html``, ``metrics.json``, figures
"""

from .aggregate import aggregate_seeds, sweep_payload
from .build import Report, build_report, metric_cells, metrics_payload
from .figures import plot_attention_graph, plot_curves, plot_head_correlations, plot_maps, save_figure
from .paper import PAPER_ACCURACY, TABLES, PaperTable, paper_cell, paper_table
from .tables import Grid, comparison_cells, comparison_grid, to_html, to_markdown

__all__ = [
    "PAPER_ACCURACY",
    "TABLES",
    "Grid",
    "PaperTable",
    "Report",
    "aggregate_seeds",
    "build_report",
    "comparison_cells",
    "comparison_grid",
    "metric_cells",
    "metrics_payload",
    "paper_cell",
    "paper_table",
    "plot_attention_graph",
    "plot_curves",
    "plot_head_correlations",
    "plot_maps",
    "save_figure",
    "sweep_payload",
    "to_html",
    "to_markdown",
]
