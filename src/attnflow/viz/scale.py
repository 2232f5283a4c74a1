"""The colour rule of every picture (PNG, HTML, `show()`, the terminal's bars, the report), and the unit
of every number written in a cell.

One picture panel is a matrix v [row, column] of one method (rows: layers, or generated tokens).
Muted columns (special tokens such as [CLS] / [SEP]) are left out; n is the number of the others.

    m_i     = sum_k |v_ik|                     (row i's mass on the shaded tokens)
    R       = max_i m_i                        (the panel's reference: its strongest row's mass)
    s_ij    = |v_ij| / R                       (token j's share of that reference)
    shade_ij = sign(v_ij) * clip(log(n s_ij) / log(n), 0, 1)

So one scale holds for the whole panel: a token holding the uniform share R/n of the strongest row,
or less, is white; a token holding all of it is full colour (|shade| = 1); in between the shade
grows with log(share / uniform share), so "3x the uniform share" looks the same whatever n, the
method or its units (probabilities, relevance) are. A row whose shaded tokens hold a small part of
R (Chefer's first layers: 0.02 % of the relevance, the rest on [CLS]) is drawn near white, not
rescaled to its own maximum. A uniform map is white, however large its numbers. Positive scores
are red, negative ones blue (a diverging scale: signed relevance such as AttnLRP's).

The number written in a cell is `row_percent`: 100 v_ij / sum_k |v_ik| over every token, the signed
percentage of the row's total |score|. For attention, rollout and flow (rows of non-negative shares
summing to 1) it is the share in %; for signed relevance it stays within [-100, 100].

The same rule, in JavaScript, shades the HTML page (`attnflow.viz.page`); both must agree.

>>> uniform_shade([[0.25, 0.25, 0.25, 0.25]]).tolist()
[[0.0, 0.0, 0.0, 0.0]]
>>> uniform_shade([[1.0, 0.0, 0.0, 0.0]]).tolist()
[[1.0, 0.0, 0.0, 0.0]]
>>> round(float(uniform_shade([[0.5, 0.5, 0.0, 0.0]])[0, 0]), 3)  # 2x uniform of n=4: log 2 / log 4
0.5
>>> uniform_shade([[1.0, 0.0, 0.0, 0.0], [0.01, 0.0, 0.0, 0.0]])[1].tolist()  # 1 % of the strong row
[0.0, 0.0, 0.0, 0.0]
>>> row_percent([[0.6, -0.3, 0.1]]).round(1).tolist()  # signed % of the row's total |score|
[[60.0, -30.0, 10.0]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["SCALE_LEGEND", "reference_mass", "row_percent", "scale_legend", "uniform_shade"]


def scale_legend(row_name: str = "row") -> str:
    """What the shading means, in one sentence, for legends (PNG notes, report figures)."""
    return (
        f"colour: share of the panel's strongest {row_name} (special tokens left out) against the "
        f"uniform share 1/n, one scale for every {row_name} (white: 1/n or less; full: all on one "
        "token; log scale; red > 0, blue < 0)"
    )


SCALE_LEGEND = scale_legend()


def _shown(matrix: Any, muted: Sequence[int]) -> tuple[np.ndarray, np.ndarray, int]:
    """(values with muted columns zeroed, the kept-column mask, n shaded columns)."""
    v = np.nan_to_num(np.asarray(matrix, dtype=np.float64))
    if v.ndim != 2:
        raise ValueError(f"the colour rule takes a [row, column] matrix, got shape {v.shape}")
    keep = np.ones(v.shape[1], dtype=bool)
    keep[[c for c in muted if 0 <= c < v.shape[1]]] = False
    return np.where(keep[None, :], v, 0.0), keep, int(keep.sum())


def reference_mass(matrix: Any, muted: Sequence[int] = ()) -> float:
    """R = max_i sum_k |v_ik| over the shaded columns: the mass of the panel's strongest row.

    >>> reference_mass([[0.9, 0.05, 0.05], [0.5, 0.3, 0.2]], muted=[0])
    0.5
    """
    shown, _, _ = _shown(matrix, muted)
    return float(np.abs(shown).sum(axis=1).max()) if shown.size else 0.0


def uniform_shade(matrix: Any, muted: Sequence[int] = (), *, reference: Any = None) -> np.ndarray:
    """Signed shade in [-1, 1] of each cell of `matrix` [row, column] (the module docstring's rule).

    `muted` columns (e.g. [CLS] / [SEP]) are left out of the masses and of n, and get 0.
    `reference`: R, by default `reference_mass(matrix, muted)` (one scale for the whole matrix);
    a number (the terminal's one row of a layered map passes the map's R), or an array (rows, 1)
    for a matrix whose rows are different methods. With one shaded column: sign(v) * min(s, 1).
    """
    shown, _, n = _shown(matrix, muted)
    ref = np.abs(shown).sum(axis=1).max(initial=0.0) if reference is None else reference
    ref = np.broadcast_to(np.asarray(ref, dtype=np.float64), (shown.shape[0], 1))
    share = np.divide(np.abs(shown), ref, out=np.zeros_like(shown), where=ref > 0)
    if n <= 1:
        strength = np.minimum(share, 1.0)
    else:
        with np.errstate(divide="ignore"):
            strength = np.clip(np.log(n * share) / np.log(n), 0.0, 1.0)
    return np.sign(shown) * np.nan_to_num(strength)


def row_percent(matrix: Any) -> np.ndarray:
    """100 v_ij / sum_k |v_ik| (every column): the number written in a cell, signed, in [-100, 100].

    A row that is all zero gives zeros.
    """
    v = np.nan_to_num(np.asarray(matrix, dtype=np.float64))
    if v.ndim != 2:
        raise ValueError(f"row_percent takes a [row, column] matrix, got shape {v.shape}")
    total = np.abs(v).sum(axis=1, keepdims=True)
    return 100.0 * np.divide(v, total, out=np.zeros_like(v), where=total > 0)
