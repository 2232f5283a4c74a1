"""The paper's published numbers, spot-checked by hand and (when present) against REPLICATION.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attnflow.report.paper import PAPER_ACCURACY, TABLES, paper_cell, paper_table

REPLICATION = Path(__file__).resolve().parents[3].parent / "shared" / "REPLICATION.md"


@pytest.mark.parametrize(
    ("task", "importance", "explainer", "layer", "expected"),
    [
        ("agreement", "blank_out", "raw", 1, (0.69, 0.27)),  # Table 1, "Raw | 0.69±0.27"
        ("agreement", "blank_out", "raw", 3, (-0.11, 0.49)),
        ("agreement", "blank_out", "flow", 6, (0.70, 0.22)),
        ("agreement", "input_gradients", "raw", 4, (0.00, 0.47)),  # Table 2
        ("agreement", "input_gradients", "flow", 4, (0.61, 0.28)),
        ("agreement", "input_gradients", "rollout", 6, (0.54, 0.31)),
        ("sst2", "input_gradients", "raw", 1, (0.12, 0.21)),  # Table 3 (stds from the paper's text)
        ("sst2", "input_gradients", "flow", 6, (0.14, 0.21)),
    ],
)
def test_spot_cells_are_the_published_ones(task, importance, explainer, layer, expected):
    assert paper_cell(task, importance, explainer, layer) == expected


def test_three_tables_complete_in_the_papers_layout():
    assert [(t.number, t.task, t.importance) for t in TABLES] == [
        (1, "agreement", "blank_out"),
        (2, "agreement", "input_gradients"),
        (3, "sst2", "input_gradients"),
    ]
    assert TABLES[2].layers == (1, 3, 5, 6)  # Table 3 prints four layers
    for table in TABLES:
        assert list(table.cells) == ["raw", "rollout", "flow"]
        for by_layer in table.cells.values():
            assert tuple(by_layer) == table.layers
            assert all(-1 <= m <= 1 and 0 < s < 1 for m, s in by_layer.values())


def test_rollout_and_flow_agree_at_layer_one():
    # The paper: "the first layer of attention rollout and attention flow are the same".
    for table in TABLES:
        assert table.cells["rollout"][1] == table.cells["flow"][1]


def test_no_published_cell_where_the_paper_printed_none():
    assert paper_table("sst2", "blank_out") is None
    assert paper_cell("sst2", "input_gradients", "flow", 2) is None
    assert PAPER_ACCURACY == {"agreement": 0.96}


@pytest.mark.skipif(not REPLICATION.is_file(), reason="shared/REPLICATION.md not next to the repository")
def test_tables_1_and_2_equal_replication_md_cell_by_cell():
    text = REPLICATION.read_text(encoding="utf-8")
    for table, marker in ((TABLES[0], "| vs blank-out |"), (TABLES[1], "| vs input gradients |")):
        block = text[text.index(marker) :].split("\n\n")[0]
        for line in block.splitlines()[2:5]:
            name, *cells = (c.strip() for c in line.strip("|").split("|"))
            parsed = [tuple(float(x) for x in re.split(r"±", c)) for c in cells]
            assert parsed == [table.cells[name.lower()][k] for k in table.layers], name
