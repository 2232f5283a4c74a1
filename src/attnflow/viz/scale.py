"""The colour rule of every picture (HTML, PNG, `show()`, the report): shading against the uniform share.

For one row v of a map (a layer's scores over n shaded tokens; muted tokens left out):

    s_j = v_j / sum_k |v_k|                          (token j's share of the row)
    shade_j = sign(v_j) * clip(log(n |s_j|) / log(n), 0, 1)

So a token holding the uniform share 1/n, or less, is white (shade 0); a token holding the whole row
is full colour (|shade| = 1); in between, the shade grows with log(share / uniform share), so
"3x the uniform share" looks the same whatever n is. Positive scores are red, negative ones blue.
A uniform map is drawn white, however large its numbers are: near-uniform is never "important".
The same rule, in JavaScript, shades the HTML page (`attnflow.viz.page`); both must agree.

>>> uniform_shade([[0.25, 0.25, 0.25, 0.25]]).tolist()
[[0.0, 0.0, 0.0, 0.0]]
>>> uniform_shade([[1.0, 0.0, 0.0, 0.0]]).tolist()
[[1.0, 0.0, 0.0, 0.0]]
>>> round(float(uniform_shade([[0.5, 0.5, 0.0, 0.0]])[0, 0]), 3)  # 2x uniform of n=4: log 2 / log 4
0.5
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["SCALE_LEGEND", "uniform_shade"]

# What the shading means, for legends (PNG colour bar, HTML legend, notes).
SCALE_LEGEND = (
    "colour: share of the row against the uniform share 1/n (white: 1/n or less; full: all on one "
    "token; log scale; red > 0, blue < 0)"
)


def uniform_shade(matrix: Any, muted: Sequence[int] = ()) -> np.ndarray:
    """Signed shade in [-1, 1] of each cell of `matrix` [row, column] (module docstring's rule).

    `muted` columns (e.g. [CLS] / [SEP]) are left out of each row's total and of n, and get 0.
    A row that is all zero, or has one shaded column, is shaded by sign(v) * min(|s|, 1).
    """
    v = np.nan_to_num(np.asarray(matrix, dtype=np.float64))
    if v.ndim != 2:
        raise ValueError(f"uniform_shade takes a [row, column] matrix, got shape {v.shape}")
    keep = np.ones(v.shape[1], dtype=bool)
    keep[[c for c in muted if 0 <= c < v.shape[1]]] = False
    shown = np.where(keep[None, :], v, 0.0)
    n = int(keep.sum())
    total = np.abs(shown).sum(axis=1, keepdims=True)
    share = np.divide(np.abs(shown), total, out=np.zeros_like(shown), where=total > 0)
    if n <= 1:
        strength = np.minimum(share, 1.0)
    else:
        with np.errstate(divide="ignore"):
            strength = np.clip(np.log(n * share) / np.log(n), 0.0, 1.0)
    return np.sign(shown) * np.nan_to_num(strength)
