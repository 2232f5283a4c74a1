"""A method's faithfulness against the random floor, read with an interval over seeds (and samples).

A seed sweep runs the whole study once per seed (training, the seeded faithfulness subset, the
random ranking): a method's score is a mean over seeds of per-seed means over samples. Whether it
lies above or below random's is said only when a bootstrap interval of that mean excludes random's
mean over the same seeds (:func:`versus_random`); with a few seeds the interval is wide, and one
seed's difference is read as noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .faithfulness import RANDOM

__all__ = ["ABOVE", "BELOW", "INDISTINGUISHABLE", "nested_bootstrap_mean", "seed_intervals", "versus_random"]

BELOW = "below random"
ABOVE = "above random"
INDISTINGUISHABLE = "indistinguishable from random"


def nested_bootstrap_mean(
    groups: Sequence[np.ndarray], *, n_boot: int = 1000, ci: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """(mean, ci_low, ci_high): the mean over groups (seeds) of each group's mean (over its samples),
    with a two-level percentile-bootstrap interval.

        m    = 1/S · Σ_s mean(x_s)
        m*_b = 1/S · Σ_{j=1..S} mean(x*_{s_j}),   s_j drawn from 1..S with replacement (seeds),
               x*_s: |x_s| values drawn from x_s with replacement (samples within the seed)
        [ci_low, ci_high] = the (1-ci)/2 and (1+ci)/2 quantiles of m*_1 .. m*_B   (B = n_boot)

    A group of one value (a seed's mean, when its per-sample values are not kept) resamples to
    itself: the bootstrap over seeds alone. With S = 3 such groups each m*_b is a mean of 3 draws,
    and the all-lowest draw has probability 1/27 > 2.5%: the 95% interval is [min, max] of the
    seeds' means. nan values are dropped, then empty groups; no group: all nan. The result depends
    only on ``seed`` (numpy ``default_rng``).

    >>> nested_bootstrap_mean([np.array([0.2]), np.array([0.4])], n_boot=0)
    (0.30000000000000004, nan, nan)
    """
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci must lie in (0, 1), got {ci}")
    if n_boot < 0:
        raise ValueError(f"n_boot must be >= 0, got {n_boot}")
    kept = [g[~np.isnan(g)] for g in (np.asarray(x, dtype=np.float64).ravel() for x in groups)]
    kept = [g for g in kept if g.size]
    if not kept:
        return float("nan"), float("nan"), float("nan")
    mean = float(np.mean([g.mean() for g in kept]))
    if n_boot == 0:
        return mean, float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    # (S, B): each group's mean over its own resample, one per replicate
    inner = np.stack([g[rng.integers(0, g.size, size=(n_boot, g.size))].mean(axis=1) for g in kept])
    pick = rng.integers(0, len(kept), size=(n_boot, len(kept)))  # (B, S): the seeds each replicate draws
    boot = inner[pick, np.arange(n_boot)[:, None]].mean(axis=1)  # (B,)
    low, high = np.quantile(boot, [(1.0 - ci) / 2.0, (1.0 + ci) / 2.0])
    return mean, float(low), float(high)


def versus_random(ci_low: float, ci_high: float, random: float) -> str:
    """``BELOW`` when the whole interval lies under random's value, ``ABOVE`` when over it, else
    ``INDISTINGUISHABLE`` (also when a bound is nan: no interval, no claim).

    >>> versus_random(0.19, 0.28, 0.20), versus_random(0.05, 0.15, 0.20), versus_random(0.25, 0.3, 0.2)
    ('indistinguishable from random', 'below random', 'above random')
    """
    if np.isnan(ci_low) or np.isnan(ci_high) or np.isnan(random):
        return INDISTINGUISHABLE
    if ci_high < random:
        return BELOW
    if ci_low > random:
        return ABOVE
    return INDISTINGUISHABLE


def seed_intervals(rows: Any, *, n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> Any:
    """Per method: its mean over seeds with :func:`nested_bootstrap_mean`'s interval, random's mean
    over seeds, and :func:`versus_random`'s verdict (random's own row: "").

    ``rows``: one task, one metric, one layer per method (the last, or none for a reference), a
    pandas frame with columns method, seed and either value + sample_id (per-sample scores: the
    interval over seeds × samples) or mean (each seed's mean: the interval over seeds). A ``rows``
    column (the row rule) is carried along. Returns columns method, [rows,] mean, ci_low, ci_high,
    n_seeds, random, verdict, in the order the methods first appear.
    """
    import pandas as pd

    per_sample = "value" in rows.columns
    column = "value" if per_sample else "mean"
    out = []
    for method, got in rows.groupby("method", sort=False):
        groups = [g[column].to_numpy(dtype=np.float64) for _, g in got.groupby("seed", sort=True)]
        mean, low, high = nested_bootstrap_mean(groups, n_boot=n_boot, ci=ci, seed=seed)
        extra = {"rows": got["rows"].iloc[0]} if "rows" in got.columns else {}
        out.append({"method": method, **extra, "mean": mean, "ci_low": low, "ci_high": high,
                    "n_seeds": int(got.loc[got[column].notna(), "seed"].nunique())})  # fmt: skip
    table = pd.DataFrame(out)
    if table.empty:
        return table.assign(random=pd.Series(dtype=float), verdict=pd.Series(dtype=str))
    floor = table.loc[table["method"] == RANDOM, "mean"]
    random = float(floor.iloc[0]) if len(floor) else float("nan")
    verdicts = [
        "" if r.method == RANDOM else versus_random(r.ci_low, r.ci_high, random) for r in table.itertuples()
    ]
    return table.assign(random=random, verdict=verdicts)
