"""scripts/same.py: the bit-for-bit comparison of two revisions' numbers, stage outputs and tables."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from safetensors.numpy import save_file

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("same", ROOT / "scripts" / "same.py")
same = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("same", same)  # its dataclasses look their module up
_spec.loader.exec_module(same)
compare_file = same.compare_file


def test_identical_arrays_pass():
    a = {"rollout/bert/all_rows": np.array([0.75, 0.25]), "capture/bert/attentions": np.eye(2)}
    rows = same.compare(a, {k: v.copy() for k, v in a.items()})
    assert [(r.method, r.arrays, r.max_abs_diff, r.identical) for r in rows] == [
        ("capture", 1, 0.0, True),
        ("rollout", 1, 0.0, True),
    ]


def test_one_ulp_is_a_difference():
    x = np.array([0.75, 0.25])
    y = x.copy()
    y[0] = np.nextafter(0.75, 1.0)  # 0.75 + 2^-53
    (row,) = same.compare({"flow/m/x": x}, {"flow/m/x": y})
    assert not row.identical and row.differ == 1 and row.max_abs_diff == pytest.approx(2.0**-53)


def test_dtype_shape_and_the_sign_of_zero_count():
    assert not same.bit_identical(np.zeros(2), np.zeros(2, dtype=np.float32))  # same values
    assert not same.bit_identical(np.zeros(2), np.zeros((1, 2)))
    assert not same.bit_identical(np.array([0.0]), np.array([-0.0]))  # == but not the same bits
    assert same.bit_identical(np.array([np.nan]), np.array([np.nan]))
    assert same.max_abs_diff(np.zeros(2), np.zeros(3)) == float("inf")


def test_a_lost_array_fails_and_a_new_one_does_not():
    base = {"raw/m/a": np.ones(2), "raw/m/b": np.ones(2)}
    (lost,) = same.compare(base, {"raw/m/a": np.ones(2)})
    assert (lost.arrays, lost.lost, lost.identical) == (1, 1, False)
    (new,) = same.compare(base, {**base, "raw/m/c": np.ones(2)})  # e.g. an option the base refused
    assert (new.arrays, new.new, new.identical) == (2, 1, True)


def test_the_table_says_which_method_moved():
    base = {"chefer/m/x": np.ones(2), "raw/m/x": np.ones(2)}
    new = {"chefer/m/x": np.array([1.0, 1.5]), "raw/m/x": np.ones(2)}
    text = same.table(same.compare(base, new))
    lines = text.splitlines()
    assert lines[0].split() == ["method", "arrays", "max", "abs", "diff", "identical?"]
    assert lines[2].split()[:4] == ["chefer", "1", "0.5", "NO"] and lines[3].split()[-1] == "yes"
    assert same.differences(base, new) == ["chefer/m/x: float64(2,) vs float64(2,), max abs diff 0.5"]


@pytest.mark.slow
def test_head_against_the_working_tree_end_to_end():
    """Both sides built (worktree, pip --target) and run; the table lists every method; the
    worktree is gone afterwards. Exit 0 or 1 (the working tree may move numbers on purpose), not 2."""
    got = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "same.py"), "numbers"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert got.returncode in (0, 1), got.stderr[-3000:]
    for method in (
        "capture",
        "relevance",
        "raw",
        "rollout",
        "flow",
        "chefer",
        "chefer_lrp",
        "grad_sam",
        "attnlrp",
    ):
        assert any(line.split()[:1] == [method] for line in got.stdout.splitlines()), (method, got.stdout)
    worktrees = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True
    ).stdout
    assert "same_numbers_" not in worktrees


def _table(means, heads):
    return pd.DataFrame({"head": pd.array(heads, dtype="Int64"), "layer": [1, 2, 3], "mean": means})


def test_equal_tables_are_bit_identical_and_a_moved_mean_is_measured():
    a = _table([0.1, 0.2, 0.3], [None, None, 0])
    assert same.compare_tables(a, a.copy()) == (3, True, 0.0)
    b = a.assign(mean=[0.1, 0.2 + 1e-9, 0.3])
    rows, equal, diff = same.compare_tables(a, b)
    assert (rows, equal) == (3, False) and np.isclose(diff, 1e-9, rtol=1e-3)
    assert np.isnan(same.compare_tables(a, b.iloc[:2])[2])  # rows that do not line up: no difference
    assert same.compare_tables(a, a.assign(mean=[0.1, np.nan, 0.3]))[2] == np.inf  # NaN on one side only


def test_a_correlation_table_is_split_into_configured_switched_and_per_head_rows():
    table = pd.DataFrame({
        "head": pd.array([None, None, None, None, 0], dtype="Int64"), "layer": 1, "mean": 0.5,
        "variant": ["configured", "correlate.undefined=nan", "attribution.mask_blank=true",
                    "configured@switch_samples", "configured"],
    })  # fmt: skip
    split = same.parts("reports/t/correlations.parquet", table)
    assert {k: len(v) for k, v in split.items()} == {
        "reports/t/correlations.parquet (all heads, configured)": 1,
        "reports/t/correlations.parquet (correlate.* switches)": 1,
        "reports/t/correlations.parquet (attribution.* switches)": 2,
        "reports/t/correlations.parquet (per head)": 1,
    }
    assert list(same.parts("reports/t/faithfulness.parquet", _table([1, 2, 3], [None] * 3))) == [
        "reports/t/faithfulness.parquet"
    ]


def _pair(tmp_path, old: dict, new: dict) -> tuple[Path, Path]:
    save_file(old, str(tmp_path / "old.safetensors"))
    save_file(new, str(tmp_path / "new.safetensors"))
    return tmp_path / "old.safetensors", tmp_path / "new.safetensors"


def test_the_same_arrays_are_identical(tmp_path):
    arrays = {"flow.data": np.array([0.75, 0.25]), "flow.shapes": np.array([[1, 2]])}
    assert compare_file(*_pair(tmp_path, arrays, {k: v.copy() for k, v in arrays.items()})) == (2, [])


def test_one_ulp_a_dtype_or_a_missing_array_is_named_with_its_largest_difference(tmp_path):
    x = np.array([0.75, 0.25])
    y = x.copy()
    y[0] = np.nextafter(0.75, 1.0)
    old = {"a": x, "b": x, "c": x}
    new = {"a": y, "b": x.astype(np.float32)}  # "c" is missing here
    n, bad = compare_file(*_pair(tmp_path, old, new))
    assert n == 3
    assert bad == ["a (max |d| 1.1e-16)", "b (max |d| 0.0e+00)", "c (max |d| missing)"]


def test_a_missing_file_and_a_changed_table_count(tmp_path):
    old = tmp_path / "old.parquet"
    pd.DataFrame({"x": [1.0, 2.0]}).to_parquet(old)
    assert compare_file(old, tmp_path / "absent.parquet") == (
        1,
        [f"{tmp_path / 'absent.parquet'} is missing here"],
    )
    same, other = tmp_path / "same.parquet", tmp_path / "other.parquet"
    pd.DataFrame({"x": [1.0, 2.0]}).to_parquet(same)
    pd.DataFrame({"x": [1.0, 2.5]}).to_parquet(other)
    assert compare_file(old, same) == (1, [])
    assert compare_file(old, other) == (1, ["the table"])
