"""aggregate_seeds: per cell, the mean, sample std, min and max of the per-seed means."""

from __future__ import annotations

import copy
import math

import pytest

from attnflow.report.aggregate import aggregate_seeds, sweep_payload


def _run(**cells: float) -> dict:
    """``{"blank_out": {explainer: {"L1": {"mean": m, "std": 0.3}}}}`` from ``explainer=m``."""
    return {"blank_out": {e: {"L1": {"mean": m, "std": 0.3, "n": 100}} for e, m in cells.items()}}


def test_three_seeds_by_hand():
    # flow: 0.50, 0.70, 0.60 -> mean 0.60; deviations -0.1, +0.1, 0 -> std sqrt(0.02 / 2) = 0.1
    # raw: 0.20, 0.40, 0.30 -> mean 0.30, std 0.1 (same deviations)
    runs = [_run(flow=0.5, raw=0.2), _run(flow=0.7, raw=0.4), _run(flow=0.6, raw=0.3)]
    out = aggregate_seeds(runs)
    flow = out["blank_out"]["flow"]["L1"]
    assert flow["mean"] == pytest.approx(0.6)
    assert flow["std"] == pytest.approx(0.1)
    assert (flow["min"], flow["max"], flow["n_seeds"]) == (0.5, 0.7, 3)
    assert out["blank_out"]["raw"]["L1"]["mean"] == pytest.approx(0.3)
    assert out["blank_out"]["raw"]["L1"]["std"] == pytest.approx(0.1)


def test_two_seeds_sample_std():
    # 0.2, 0.4: mean 0.3, std sqrt((0.01 + 0.01) / (2 - 1)) = sqrt(0.02) = 0.141421...
    cell = aggregate_seeds([_run(flow=0.2), _run(flow=0.4)])["blank_out"]["flow"]["L1"]
    assert cell["std"] == pytest.approx(math.sqrt(0.02))


def test_missing_or_undefined_cells_are_skipped_per_cell():
    runs = [_run(flow=0.2, raw=0.1), _run(flow=0.4), _run(flow=float("nan"), raw=0.3)]
    out = aggregate_seeds(runs)["blank_out"]
    assert out["flow"]["L1"]["n_seeds"] == 2 and out["flow"]["L1"]["mean"] == pytest.approx(0.3)
    assert out["raw"]["L1"]["n_seeds"] == 2 and out["raw"]["L1"]["mean"] == pytest.approx(0.2)


def test_single_seed_has_no_spread():
    cell = aggregate_seeds([_run(flow=0.25)])["blank_out"]["flow"]["L1"]
    assert (cell["mean"], cell["min"], cell["max"], cell["n_seeds"]) == (0.25, 0.25, 0.25, 1)
    assert math.isnan(cell["std"])


def test_layout_kept_and_inputs_untouched():
    runs = [_run(flow=0.5, raw=0.1), _run(flow=0.7, raw=0.2)]
    before = copy.deepcopy(runs)
    out = aggregate_seeds(runs)
    assert runs == before
    assert set(out) == {"blank_out"} and set(out["blank_out"]) == {"flow", "raw"}
    assert set(out["blank_out"]["flow"]["L1"]) == {"mean", "std", "min", "max", "n_seeds"}
    assert aggregate_seeds([]) == {}


def test_sweep_payload_is_seeds_and_one_aggregate_per_task():
    payload = sweep_payload({"agreement": [_run(flow=0.5), _run(flow=0.7)]}, seeds=[0, 1])
    assert payload["seeds"] == [0, 1]
    assert payload["tasks"]["agreement"]["blank_out"]["flow"]["L1"]["mean"] == pytest.approx(0.6)
