"""Machine spread and seed spread of a table's cells (attnflow.metrics.spread), on hand-derived cases."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from attnflow.metrics.spread import machine_spread, seed_spread, spread_frame, spread_summary

ROOT2 = math.sqrt(2.0)


def _cells(rows):
    """rows: (machine, seed, method, mean); one task, importance and layer."""
    return pd.DataFrame(
        [dict(machine=m, seed=s, task="agreement", importance="blank_out", method=k, layer=1, mean=v)
         for m, s, k, v in rows]
    )  # fmt: skip


# Cell "rollout": a = (0.5, 0.75), b = (0.5, 0.25) at seeds (0, 1).
#   machine spread = mean(|0.5 − 0.5|, |0.75 − 0.25|) = mean(0, 0.5) = 0.25
#   seed spread: sd(0.5, 0.75) = 0.25 / √2, sd(0.5, 0.25) = 0.25 / √2; mean = 0.25 / √2 ≈ 0.177 < 0.25
# Cell "flow": a = (0.0, 0.5), b = (0.0) at seed 0 only.
#   machine spread = |0 − 0| at seed 0 (the one seed both ran) = 0
#   seed spread = sd(0, 0.5) = 0.5 / √2 (b ran one seed: no sd) ≈ 0.354 > 0
TWO = _cells([
    ("a", 0, "rollout", 0.5), ("a", 1, "rollout", 0.75), ("b", 0, "rollout", 0.5), ("b", 1, "rollout", 0.25),
    ("a", 0, "flow", 0.0), ("a", 1, "flow", 0.5), ("b", 0, "flow", 0.0),
])  # fmt: skip


def _by_method(frame, column):
    return dict(zip(frame["method"], frame[column], strict=True))


def test_machine_spread_is_the_difference_at_each_seed_averaged_over_the_seeds_both_ran():
    out = machine_spread(TWO)
    assert _by_method(out, "machine_spread") == {"flow": 0.0, "rollout": 0.25}
    assert _by_method(out, "n_seeds_compared") == {"flow": 1, "rollout": 2}


def test_machine_spread_of_three_machines_is_the_range():
    # seed 0: 0.1, 0.4, 0.2 -> 0.4 - 0.1 = 0.3; seed 1: 0.5 and 0.5 -> 0 (c did not run it); mean 0.15
    cells = _cells([("a", 0, "raw", 0.1), ("b", 0, "raw", 0.4), ("c", 0, "raw", 0.2),
                    ("a", 1, "raw", 0.5), ("b", 1, "raw", 0.5)])  # fmt: skip
    assert machine_spread(cells)["machine_spread"].iloc[0] == pytest.approx(0.15)


def test_seed_spread_is_the_sample_sd_within_each_machine_averaged_over_machines():
    out = seed_spread(TWO)
    spread = _by_method(out, "seed_spread")
    assert spread["rollout"] == pytest.approx(0.25 / ROOT2)
    assert spread["flow"] == pytest.approx(0.5 / ROOT2)  # b's single seed has no sd: not a zero
    assert _by_method(out, "n_machines_with_seeds") == {"flow": 1, "rollout": 2}


def test_one_machine_leaves_the_machine_spread_undefined_and_one_seed_the_seed_spread():
    only_a = machine_spread(TWO[TWO["machine"] == "a"])
    assert only_a["machine_spread"].isna().all() and (only_a["n_seeds_compared"] == 0).all()
    only_seed0 = seed_spread(TWO[TWO["seed"] == 0])
    assert only_seed0["seed_spread"].isna().all()


def test_spread_frame_puts_both_side_by_side_and_says_which_is_larger():
    out = spread_frame(TWO).set_index("method")
    assert out.loc["rollout", "machine_above_seed"] is True  # 0.25 > 0.177
    assert out.loc["flow", "machine_above_seed"] is False  # 0 < 0.354
    lonely = spread_frame(TWO[TWO["machine"] == "a"])
    assert lonely["machine_above_seed"].isna().all()


def test_summary_means_maxima_and_the_share_of_cells_where_machines_move_more():
    s = spread_summary(spread_frame(TWO))
    assert s["n_cells"] == 2 and s["n_both"] == 2
    assert s["machine_mean"] == pytest.approx(0.125) and s["machine_max"] == pytest.approx(0.25)
    assert s["seed_mean"] == pytest.approx((0.25 / ROOT2 + 0.5 / ROOT2) / 2)
    assert s["seed_max"] == pytest.approx(0.5 / ROOT2)
    assert s["share_machine_above_seed"] == pytest.approx(0.5)  # rollout yes, flow no


def test_summary_without_a_second_machine_has_no_machine_figures():
    s = spread_summary(spread_frame(TWO[TWO["machine"] == "a"]))
    assert s["n_machine"] == 0 and s["machine_mean"] is None and s["share_machine_above_seed"] is None
    assert s["seed_mean"] == pytest.approx((0.25 / ROOT2 + 0.5 / ROOT2) / 2)


def test_a_repeated_row_or_a_missing_column_is_refused():
    with pytest.raises(ValueError, match="repeated"):
        machine_spread(pd.concat([TWO, TWO.iloc[:1]]))
    with pytest.raises(ValueError, match="lacks columns \\['machine'\\]"):
        seed_spread(TWO.drop(columns="machine"))


def test_inputs_are_not_changed():
    before = TWO.copy()
    spread_frame(TWO)
    pd.testing.assert_frame_equal(TWO, before)
    assert not np.isnan(TWO["mean"]).any()
