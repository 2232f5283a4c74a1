"""One table structure, two renderings; comparison cells Δ = ours − paper worked by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from attnflow.report.frames import comparison_frame
from attnflow.report.paper import TABLES
from attnflow.report.tables import (
    MARK_FAR,
    MARK_MATCH,
    Grid,
    comparison_cells,
    comparison_grid,
    fmt_delta,
    fmt_mean_std,
    to_html,
    to_markdown,
)


def test_markdown_and_html_render_the_same_cells_escaped():
    grid = Grid(header=["k", "v"], rows=[["a<b", "x|y"]], caption="cap", classes={(0, 1): "far"})
    md, html = to_markdown(grid), to_html(grid)
    assert md.splitlines() == ["*cap*", "", "| k | v |", "|---|---|", "| a<b | x\\|y |"]
    assert "<caption>cap</caption>" in html
    assert "<th>a&lt;b</th>" in html and '<td class="far">x|y</td>' in html


@pytest.mark.parametrize(
    ("delta", "text"),
    [(-0.1, "-0.10"), (0.0049, "+0.00"), (-0.0049, "+0.00"), (1.06, "+1.06"), (None, "n/a")],
)
def test_delta_format(delta, text):
    assert fmt_delta(delta) == text


def test_mean_std_format():
    assert fmt_mean_std(0.594, 0.301) == "0.59 ± 0.30"
    assert fmt_mean_std(None, 0.3) == "n/a"


def _ours(task: str, importance: str, cells: dict) -> pd.DataFrame:
    """A correlation table holding only ``{(method, layer): (mean, std, ci_low, ci_high)}``."""
    rows = [
        dict(task=task, importance=importance, method=m, head=pd.NA, layer=k, variant="configured",
             mean=v[0], std=v[1], ci_low=v[2], ci_high=v[3], n=2000, n_undefined=0)
        for (m, k), v in cells.items()
    ]  # fmt: skip
    return pd.DataFrame(rows).astype({"head": "Int64"})


def test_comparison_cells_by_hand():
    ours = _ours(
        "agreement",
        "blank_out",
        {("raw", 1): (0.59, 0.30, 0.57, 0.61), ("flow", 3): (0.71, 0.25, 0.69, 0.73)},
    )
    cells = {(c.explainer, c.layer): c for c in comparison_cells(comparison_frame({"agreement": ours}), 1)}
    assert len(cells) == 18  # 3 methods x 6 layers, ours or not
    raw1 = cells[("raw", 1)]  # paper 0.69 ± 0.27
    assert raw1.delta == pytest.approx(0.59 - 0.69)
    assert raw1.paper_in_ci is False  # 0.69 not in [0.57, 0.61]
    assert raw1.far is False  # |-0.10| <= 2 * 0.27
    flow3 = cells[("flow", 3)]  # paper 0.70 ± 0.25
    assert flow3.delta == pytest.approx(0.01) and flow3.paper_in_ci is True
    assert cells[("rollout", 2)].delta is None and not cells[("rollout", 2)].ours


def test_comparison_grid_keeps_the_papers_layout():
    table3 = TABLES[2]
    ours = _ours("sst2", "input_gradients", {("raw", 6): (0.6, 0.2, 0.58, 0.62)})
    grid = comparison_grid(table3, comparison_cells(comparison_frame({"sst2": ours}), 3))
    assert grid.header == ["vs input gradients", "L1", "L3", "L5", "L6"]
    assert [r[0] for r in grid.rows] == [
        "Raw (ours)", "Raw (paper)", "Raw Δ",
        "Rollout (ours)", "Rollout (paper)", "Rollout Δ",
        "Flow (ours)", "Flow (paper)", "Flow Δ",
    ]  # fmt: skip
    # raw L6: paper 0.09 ± 0.21; Δ = 0.6 - 0.09 = +0.51 > 2 * 0.21 = 0.42 -> far
    assert grid.rows[0][4] == "0.60 ± 0.20" and grid.rows[1][4] == "0.09 ± 0.21"
    assert grid.rows[2][4] == f"+0.51 {MARK_FAR}" and grid.classes[(2, 4)] == "far"
    assert grid.rows[2][1] == "n/a" and MARK_MATCH not in to_markdown(grid)
