"""scripts/same_numbers.py: the bit-for-bit comparison of two revisions' numbers.

The default tier checks the comparison itself (no worktree, no build); the `slow` test runs the
whole command, HEAD against the working tree, in temporary folders.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("same_numbers", ROOT / "scripts" / "same_numbers.py")
same_numbers = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("same_numbers", same_numbers)  # its dataclasses look their module up
_spec.loader.exec_module(same_numbers)


def test_identical_arrays_pass():
    a = {"rollout/bert/all_rows": np.array([0.75, 0.25]), "capture/bert/attentions": np.eye(2)}
    rows = same_numbers.compare(a, {k: v.copy() for k, v in a.items()})
    assert [(r.method, r.arrays, r.max_abs_diff, r.identical) for r in rows] == [
        ("capture", 1, 0.0, True),
        ("rollout", 1, 0.0, True),
    ]


def test_one_ulp_is_a_difference():
    x = np.array([0.75, 0.25])
    y = x.copy()
    y[0] = np.nextafter(0.75, 1.0)  # 0.75 + 2^-53
    (row,) = same_numbers.compare({"flow/m/x": x}, {"flow/m/x": y})
    assert not row.identical and row.differ == 1 and row.max_abs_diff == pytest.approx(2.0**-53)


def test_dtype_shape_and_the_sign_of_zero_count():
    assert not same_numbers.bit_identical(np.zeros(2), np.zeros(2, dtype=np.float32))  # same values
    assert not same_numbers.bit_identical(np.zeros(2), np.zeros((1, 2)))
    assert not same_numbers.bit_identical(np.array([0.0]), np.array([-0.0]))  # == but not the same bits
    assert same_numbers.bit_identical(np.array([np.nan]), np.array([np.nan]))
    assert same_numbers.max_abs_diff(np.zeros(2), np.zeros(3)) == float("inf")


def test_a_lost_array_fails_and_a_new_one_does_not():
    base = {"raw/m/a": np.ones(2), "raw/m/b": np.ones(2)}
    (lost,) = same_numbers.compare(base, {"raw/m/a": np.ones(2)})
    assert (lost.arrays, lost.lost, lost.identical) == (1, 1, False)
    (new,) = same_numbers.compare(base, {**base, "raw/m/c": np.ones(2)})  # e.g. an option the base refused
    assert (new.arrays, new.new, new.identical) == (2, 1, True)


def test_the_table_says_which_method_moved():
    base = {"chefer/m/x": np.ones(2), "raw/m/x": np.ones(2)}
    new = {"chefer/m/x": np.array([1.0, 1.5]), "raw/m/x": np.ones(2)}
    text = same_numbers.table(same_numbers.compare(base, new))
    lines = text.splitlines()
    assert lines[0].split() == ["method", "arrays", "max", "abs", "diff", "identical?"]
    assert lines[2].split()[:4] == ["chefer", "1", "0.5", "NO"] and lines[3].split()[-1] == "yes"
    assert same_numbers.differences(base, new) == ["chefer/m/x: float64(2,) vs float64(2,), max abs diff 0.5"]


@pytest.mark.slow
def test_head_against_the_working_tree_end_to_end():
    """Both sides built (worktree, pip --target) and run; the table lists every method; the
    worktree is gone afterwards. Exit 0 or 1 (the working tree may move numbers on purpose), not 2."""
    got = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "same_numbers.py")], cwd=ROOT, capture_output=True, text=True
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
