"""summarize: nan-aware mean ± std by hand, and a deterministic percentile bootstrap of the mean."""

from __future__ import annotations

import numpy as np
import pytest

from attnflow.metrics import summarize


def test_hand_example_mean_std_n_skip_nan():
    # Column 0: defined [0.5, 1.0, 0.0]: mean 0.5, squared deviations 0, .25, .25 (sum 0.5):
    #   ddof=0: sqrt(0.5 / 3) = sqrt(1/6); ddof=1: sqrt(0.5 / 2) = 0.5.
    # Column 1: [1, 2, 3, 4]: mean 2.5, sum sq dev = 5: ddof=0 sqrt(1.25), ddof=1 sqrt(5/3).
    v = np.array([[0.5, 1.0], [1.0, 2.0], [np.nan, 3.0], [0.0, 4.0]])
    out = summarize(v, n_boot=0)
    np.testing.assert_allclose(out["mean"], [0.5, 2.5])
    np.testing.assert_allclose(out["std"], [np.sqrt(1 / 6), np.sqrt(1.25)])
    np.testing.assert_array_equal(out["n"], [3, 4])
    assert np.isnan(out["ci_low"]).all() and np.isnan(out["ci_high"]).all()  # no bootstrap asked
    np.testing.assert_allclose(summarize(v, n_boot=0, ddof=1)["std"], [0.5, np.sqrt(5 / 3)])
    # numpy agrees on the defined values
    assert out["std"][0] == pytest.approx(np.nanstd(v[:, 0]))


def test_all_undefined_column_and_too_few_values_give_nan():
    v = np.array([[np.nan, 0.3], [np.nan, np.nan]])
    out = summarize(v, n_boot=50, ddof=1)
    assert np.isnan(out["mean"][0]) and np.isnan(out["std"][0]) and np.isnan(out["ci_low"][0])
    assert out["mean"][1] == pytest.approx(0.3) and np.isnan(out["std"][1])  # n - ddof = 0
    assert out["ci_low"][1] == pytest.approx(0.3) and out["ci_high"][1] == pytest.approx(0.3)
    np.testing.assert_array_equal(out["n"], [0, 1])


def test_bootstrap_is_deterministic_per_seed_and_contains_the_mean():
    rng = np.random.default_rng(1)
    v = rng.normal(0.4, 0.3, size=(200, 3))
    v[::7, 1] = np.nan
    a, b = summarize(v, seed=3), summarize(v, seed=3)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    c = summarize(v, seed=4)
    assert not np.array_equal(a["ci_low"], c["ci_low"])
    assert (a["ci_low"] < a["mean"]).all() and (a["mean"] < a["ci_high"]).all()
    # Width close to the normal approximation 2 * 1.96 * std / sqrt(n).
    width = a["ci_high"] - a["ci_low"]
    np.testing.assert_allclose(width, 2 * 1.96 * a["std"] / np.sqrt(a["n"]), rtol=0.2)
    # A wider level gives a wider interval.
    wide = summarize(v, seed=3, ci=0.99)
    assert (wide["ci_low"] <= a["ci_low"]).all() and (wide["ci_high"] >= a["ci_high"]).all()


def test_bootstrap_matches_a_plain_loop_over_resamples():
    # Oracle: the same index draws, then nanmean of each resample and percentiles, one by one.
    rng = np.random.default_rng(2)
    v = rng.random((30, 2))
    v[[1, 5, 9], 0] = np.nan
    out = summarize(v, n_boot=200, ci=0.9, seed=7)
    idx = np.random.default_rng(7).integers(0, 30, size=(200, 30))
    means = np.array([np.nanmean(v[i], axis=0) for i in idx])  # (200, 2)
    np.testing.assert_allclose(out["ci_low"], np.quantile(means, 0.05, axis=0), rtol=1e-12)
    np.testing.assert_allclose(out["ci_high"], np.quantile(means, 0.95, axis=0), rtol=1e-12)


def test_constant_column_has_a_point_interval_and_input_is_untouched():
    v = np.full((10, 1), 0.25)
    v0 = v.copy()
    out = summarize(v)
    assert out["std"][0] == 0
    assert out["ci_low"][0] == pytest.approx(0.25) and out["ci_high"][0] == pytest.approx(0.25)
    np.testing.assert_array_equal(v, v0)
