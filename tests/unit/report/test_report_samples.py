"""Tables 1-2 on both samples (attnflow.report.sections.samples): the default sample's seeds beside the
notebook sample's sweep, one block of rows per sample, each cell its seed mean with Δ to the paper."""

from __future__ import annotations

import pandas as pd

from attnflow.report.document import render_markdown
from attnflow.report.paper import TABLES
from attnflow.report.sections.recipes import recipe_cells, switch_tables
from attnflow.report.sections.samples import DEFAULT_SAMPLE, both_samples


def _cells(value: float, seeds: list[int], **extra) -> pd.DataFrame:
    table = next(t for t in TABLES if t.number == 1)
    rows = [
        {"task": "agreement", "importance": table.importance, "method": m, "head": pd.NA, "layer": k,
         "variant": "configured", "mean": value + s / 10, "seed": s, **extra}
        for m in table.cells for k in table.layers for s in seeds
    ]  # fmt: skip
    return pd.DataFrame(rows)


def test_each_sample_is_its_own_block_of_seed_means():
    default = pd.concat([_cells(0.5, [0, 1, 2]), _cells(0.9, [0]).assign(task="sst2")])
    notebook = _cells(0.2, [0, 1], overrides="+switch=notebook_sample")
    cells = recipe_cells(both_samples(default, notebook)).set_index(
        ["overrides", "task", "importance", "method", "layer"]
    )
    got = cells["mean"].xs(("agreement", "blank_out", "flow", 3), level=[1, 2, 3, 4])
    assert (
        got[DEFAULT_SAMPLE] == 0.6 and round(got["+switch=notebook_sample"], 10) == 0.25
    )  # (0.5+0.6+0.7)/3, (0.2+0.3)/2
    text = render_markdown(switch_tables(cells, {}, "per sample"))
    flow_paper = next(t for t in TABLES if t.number == 1).cells["flow"][3][0]
    assert f"0.60 ({0.6 - flow_paper:+.2f})" in text and "Table 1 (agreement" in text
    table2 = text.split("Table 2 (agreement")[0].rsplit("\n\n", 1)[0]  # the rows above Table 2's caption
    assert "n/a" not in table2.split("Table 1 (agreement")[0]  # Table 1's cells were all given
    assert text.split("Table 1 (agreement")[1].count("n/a") > 0  # Table 2's were not: n/a, not zeros
