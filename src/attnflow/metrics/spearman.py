"""Spearman rank correlation: proper (average ranks) and the authors' dense-rank shortcut."""

from __future__ import annotations

from typing import Literal

import numpy as np
from scipy.stats import rankdata

from attnflow.options import SPEARMAN_METHODS

__all__ = ["SPEARMAN_METHODS", "spearman"]


def spearman(
    a: np.ndarray, b: np.ndarray, *, method: Literal["average", "dense_noties"] = "average"
) -> float:
    """Spearman correlation of two 1-D vectors; ``nan`` where it is undefined.

    method="average" (default): Pearson correlation of the average ranks (ties share the mean of
    their ranks), i.e. ``scipy.stats.spearmanr``. Correct with and without ties.

    method="dense_noties": the authors' code (Abnar & Zuidema 2020): dense ranks (ties share the
    lowest rank, no gaps) in the no-ties formula

        rho = 1 - 6 * sum_i d_i^2 / (n (n^2 - 1)),   d_i = rank(a_i) - rank(b_i)

    which equals the proper value when there are no ties and is biased when there are.

    Undefined (``nan``): fewer than 2 values, or either vector constant (no rank variance). The
    dense-rank formula would still return a number for a constant vector; it is treated as
    undefined here too, so both methods skip or zero the same samples.

    >>> spearman([1, 2, 2, 3], [1, 2, 3, 4])  # sqrt(0.9)
    0.9486832980505138
    >>> spearman([1, 2, 2, 3], [1, 2, 3, 4], method="dense_noties")
    0.8
    >>> spearman([1, 1, 1], [1, 2, 3])
    nan
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"need two 1-D vectors of the same length, got shapes {a.shape} and {b.shape}")
    return float(_spearman_rows(a[None, :], b, method=method)[0])


def _spearman_rows(x: np.ndarray, y: np.ndarray, *, method: str) -> np.ndarray:
    """Spearman of every row of ``x`` (R, n) with ``y`` (n,), vectorised; ``(R,)`` with nan if undefined."""
    if method not in SPEARMAN_METHODS:
        raise ValueError(f"method must be one of {SPEARMAN_METHODS}, got {method!r}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("Spearman inputs must be finite (no nan / inf)")
    r, n = x.shape
    out = np.full(r, np.nan)
    if n < 2:
        return out
    rank_method = "average" if method == "average" else "dense"
    rx = rankdata(x, method=rank_method, axis=1)  # (R, n)
    ry = rankdata(y, method=rank_method)  # (n,)
    # Constant vector <=> all ranks equal; exact comparison, ranks are small exact numbers.
    defined = (rx != rx[:, :1]).any(axis=1) & bool((ry != ry[0]).any())  # (R,)
    if method == "average":
        dx = rx - rx.mean(axis=1, keepdims=True)
        dy = ry - ry.mean()
        num = dx @ dy  # (R,)
        den = np.sqrt((dx * dx).sum(axis=1) * (dy @ dy))
        with np.errstate(invalid="ignore", divide="ignore"):
            rho = np.clip(num / den, -1.0, 1.0)
    else:
        d2 = ((rx - ry) ** 2).sum(axis=1)  # (R,)
        rho = 1.0 - 6.0 * d2 / (n * (n * n - 1.0))
    out[defined] = rho[defined]
    return out
