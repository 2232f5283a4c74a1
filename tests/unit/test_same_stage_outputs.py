"""scripts/same_stage_outputs.py: the file-by-file comparison of a base's stage outputs with ours.

The default tier checks the comparison (no worktree, no build, no stage run); the whole command
builds a revision and runs its stages (minutes), as the docs' "Numbers do not move" shows.
"""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from safetensors.numpy import save_file

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))  # as when the script runs: same_numbers beside it
_spec = importlib.util.spec_from_file_location(
    "same_stage_outputs", ROOT / "scripts" / "same_stage_outputs.py"
)
same_stage_outputs = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("same_stage_outputs", same_stage_outputs)
_spec.loader.exec_module(same_stage_outputs)
compare_file = same_stage_outputs.compare_file


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
