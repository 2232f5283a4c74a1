"""AOPC, area over the perturbation curve (Samek et al. 2017): a faithfulness score for a ranking."""

from __future__ import annotations

import numpy as np

__all__ = ["aopc"]


def aopc(curves: np.ndarray, *, max_steps: int | None = None) -> np.ndarray:
    """Per-sample AOPC of deletion curves ``(N, K + 1)`` (column k = output with k tokens deleted).

        AOPC_i = 1 / (K_i + 1) * sum_{k=0..K_i} ( f_i(0) - f_i(k) )

    where K_i is the last defined (non-nan) step of sample i, capped at ``max_steps``. A larger
    AOPC means the ranking deletes the tokens the output depends on first (for most-important-first
    curves). Samples whose clean value f_i(0) is nan give nan. Average over samples with
    ``summarize`` (pass ``aopc(...)[:, None]``).

    Curves come from ``attnflow.attribution.deletion_curve``; with varying lengths, compare
    rankings on the same samples and the same ``max_steps``.

    >>> aopc(np.array([[0.9, 0.5, 0.3], [0.8, 0.8, np.nan]]))  # (0 + .4 + .6) / 3, (0 + 0) / 2
    array([0.33333333, 0.        ])
    """
    c = np.asarray(curves, dtype=np.float64)
    if c.ndim != 2 or c.shape[1] < 1:
        raise ValueError(f"curves must be (N, K + 1), got shape {c.shape}")
    if max_steps is not None:
        if max_steps < 0:
            raise ValueError(f"max_steps must be >= 0, got {max_steps}")
        c = c[:, : max_steps + 1]
    drops = c[:, :1] - c  # (N, K + 1); nan past each sample's end
    defined = ~np.isnan(drops)
    n = defined.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(defined, drops, 0.0).sum(axis=1) / n
    return np.where(n > 0, out, np.nan)
