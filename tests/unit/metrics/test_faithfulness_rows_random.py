"""A method against the random floor: the bootstrap over seeds (× samples) and the verdict rule."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnflow.metrics.versus_random import (
    ABOVE,
    BELOW,
    INDISTINGUISHABLE,
    nested_bootstrap_mean,
    seed_intervals,
    versus_random,
)

N_BOOT = 4000  # enough replicates that a 1/27 (3.7%) or 1/4 atom sits beyond the 2.5% quantile


def test_over_three_seed_means_the_95_interval_is_their_min_and_max():
    # m* = mean of 3 seed means drawn with replacement; P(all three = 0.1) = 1/27 > 2.5%, so the
    # 2.5% quantile is 0.1 exactly; likewise the 97.5% quantile is 0.4.
    mean, low, high = nested_bootstrap_mean(
        [np.array([0.1]), np.array([0.25]), np.array([0.4])], n_boot=N_BOOT
    )
    assert mean == pytest.approx(0.25) and low == pytest.approx(0.1) and high == pytest.approx(0.4)


def test_samples_within_a_seed_are_resampled_too():
    # One seed with samples [0, 1]: its resampled mean is 0, .5 or 1 with probabilities 1/4, 1/2, 1/4,
    # so the 95% interval is [0, 1]; the seed's mean alone (no samples) gives the point [.5, .5].
    _, low, high = nested_bootstrap_mean([np.array([0.0, 1.0])], n_boot=N_BOOT)
    assert (low, high) == (0.0, 1.0)
    assert nested_bootstrap_mean([np.array([0.5])], n_boot=N_BOOT) == (0.5, 0.5, 0.5)


def test_the_mean_weighs_seeds_not_samples_and_drops_nan():
    # seed means .5 (two samples) and .2 (one sample, one nan): (.5 + .2) / 2, not (0 + 1 + .2) / 3
    mean, _, _ = nested_bootstrap_mean([np.array([0.0, 1.0]), np.array([0.2, np.nan])], n_boot=0)
    assert mean == pytest.approx(0.35)
    assert np.isnan(nested_bootstrap_mean([np.array([np.nan])], n_boot=10)).all()


def test_the_interval_depends_only_on_the_seed():
    groups = [np.array([0.1, 0.3, 0.2]), np.array([0.5, 0.1])]
    assert nested_bootstrap_mean(groups, seed=3) == nested_bootstrap_mean(groups, seed=3)
    with pytest.raises(ValueError, match="ci must lie"):
        nested_bootstrap_mean(groups, ci=1.0)


@pytest.mark.parametrize(
    ("low", "high", "random", "verdict"),
    [
        (0.05, 0.15, 0.2, BELOW),  # the whole interval under random
        (0.25, 0.30, 0.2, ABOVE),
        (0.19, 0.28, 0.2, INDISTINGUISHABLE),  # the reviewer's case: flow 0.23 [0.19, 0.28] vs 0.20
        (0.10, 0.20, 0.2, INDISTINGUISHABLE),  # touching random is not excluding it
        (0.20, 0.30, 0.2, INDISTINGUISHABLE),
        (np.nan, np.nan, 0.2, INDISTINGUISHABLE),  # no interval, no claim
    ],
)
def test_below_or_above_only_when_the_interval_excludes_random(low, high, random, verdict):
    assert versus_random(low, high, random) == verdict


def test_seed_intervals_from_each_seeds_mean():
    # flow's seed means .19, .22, .28 -> [.19, .28] around random's mean .2: indistinguishable;
    # chefer's .5, .52, .55 -> above; raw's .05, .08, .1 -> below.
    means = {"flow": [0.19, 0.22, 0.28], "chefer": [0.5, 0.52, 0.55], "raw": [0.05, 0.08, 0.1],
             "random": [0.15, 0.2, 0.25]}  # fmt: skip
    rows = pd.DataFrame([{"method": m, "seed": s, "mean": v, "rows": "max"} for m, vs in means.items()
                         for s, v in enumerate(vs)])  # fmt: skip
    got = seed_intervals(rows, n_boot=N_BOOT).set_index("method")
    assert got.loc["flow", "verdict"] == INDISTINGUISHABLE
    assert got.loc["chefer", "verdict"] == ABOVE and got.loc["raw", "verdict"] == BELOW
    assert got.loc["random", "verdict"] == "" and got["random"].tolist() == pytest.approx([0.2] * 4)
    assert got.loc["flow", ["ci_low", "ci_high"]].tolist() == pytest.approx([0.19, 0.28])
    assert (got["n_seeds"] == 3).all() and (got["rows"] == "max").all()


def test_seed_intervals_over_seeds_and_samples_when_per_sample_values_are_kept():
    # two seeds of two samples each: flow [.1, .5], [.1, .5] -> mean .3; random [.3, .3] twice.
    # Per-seed means alone would give the point .3 (touching random); the samples widen it.
    rows = pd.DataFrame([{"method": m, "seed": s, "sample_id": i, "value": v}
                         for m, vals in {"flow": [0.1, 0.5], "random": [0.3, 0.3]}.items()
                         for s in (0, 1) for i, v in enumerate(vals)])  # fmt: skip
    got = seed_intervals(rows, n_boot=N_BOOT).set_index("method")
    assert got.loc["flow", "mean"] == pytest.approx(0.3)
    assert got.loc["flow", "ci_low"] < 0.2 and got.loc["flow", "ci_high"] > 0.4
    assert got.loc["flow", "verdict"] == INDISTINGUISHABLE
