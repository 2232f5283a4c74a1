"""scripts/same_tables.py: the committed tables against an older commit's, row for row."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))  # as when the script runs: same_numbers beside it
_spec = importlib.util.spec_from_file_location("same_tables", ROOT / "scripts" / "same_tables.py")
same_tables = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("same_tables", same_tables)
_spec.loader.exec_module(same_tables)


def _table(means, heads):
    return pd.DataFrame({"head": pd.array(heads, dtype="Int64"), "layer": [1, 2, 3], "mean": means})


def test_equal_tables_are_bit_identical_and_a_moved_mean_is_measured():
    a = _table([0.1, 0.2, 0.3], [None, None, 0])
    assert same_tables.compare(a, a.copy()) == (3, True, 0.0)
    b = a.assign(mean=[0.1, 0.2 + 1e-9, 0.3])
    rows, same, diff = same_tables.compare(a, b)
    assert (rows, same) == (3, False) and np.isclose(diff, 1e-9, rtol=1e-3)
    assert np.isnan(same_tables.compare(a, b.iloc[:2])[2])  # rows that do not line up: no difference
    assert same_tables.compare(a, a.assign(mean=[0.1, np.nan, 0.3]))[2] == np.inf  # NaN on one side only


def test_a_correlation_table_is_split_into_configured_switched_and_per_head_rows():
    table = pd.DataFrame({
        "head": pd.array([None, None, None, None, 0], dtype="Int64"), "layer": 1, "mean": 0.5,
        "variant": ["configured", "correlate.undefined=nan", "attribution.mask_blank=true",
                    "configured@switch_samples", "configured"],
    })  # fmt: skip
    split = same_tables.parts("reports/t/correlations.parquet", table)
    assert {k: len(v) for k, v in split.items()} == {
        "reports/t/correlations.parquet (all heads, configured)": 1,
        "reports/t/correlations.parquet (correlate.* switches)": 1,
        "reports/t/correlations.parquet (attribution.* switches)": 2,
        "reports/t/correlations.parquet (per head)": 1,
    }
    assert list(same_tables.parts("reports/t/faithfulness.parquet", _table([1, 2, 3], [None] * 3))) == [
        "reports/t/faithfulness.parquet"
    ]
