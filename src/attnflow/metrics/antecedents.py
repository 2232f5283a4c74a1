"""Which of two antecedents a token attribution points to (the pronoun test of Figure 4).

An antecedent spans one or more tokens (``the waitress`` -> " wait" + "ress"); its score under a
map s (token,) is one number:

    max:      score(S) = max_{j in S} s_j      (the antecedent's strongest token; the default)
    sum:      score(S) = sum_{j in S} s_j      (all the mass on the antecedent)
    max_abs:  score(S) = max_{j in S} |s_j|    (the strongest influence, either sign)

Signed maps (AttnLRP, integrated gradients) are compared signed under max and sum (the antecedent
that supports the explained logit more wins) and by magnitude under max_abs (the antecedent that
moves it more, up or down); for maps >= 0 (attention) max_abs is max. The comparison of the referent R against the distractor D is

    outranks(s) = 1 if score(R) > score(D), 1/2 if equal, 0 if smaller

so a method that cannot tell them apart scores 1/2, like a coin. numpy only (and the choices of
`attnflow.options`).

>>> import numpy as np
>>> s = np.array([0.5, 0.1, 0.3, 0.05, 0.05])   # tokens 1-2 are the referent, 3-4 the distractor
>>> antecedent_score(s, [1, 2], reduce="max"), antecedent_score(s, [3, 4], reduce="sum")
(0.3, 0.1)
>>> outranks(s, [1, 2], [3, 4])
1.0
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from attnflow.options import ANTECEDENT_REDUCTIONS

__all__ = ["ANTECEDENT_REDUCTIONS", "antecedent_score", "outranks", "outranks_by_layer"]

# (layer, span tokens) -> (layer,): one function per choice of ANTECEDENT_REDUCTIONS
_REDUCE = {
    "max": lambda x: x.max(axis=1),
    "sum": lambda x: x.sum(axis=1),
    "max_abs": lambda x: np.abs(x).max(axis=1),
}


def _check(span: Sequence[int], n: int, reduce: str) -> np.ndarray:
    if reduce not in ANTECEDENT_REDUCTIONS:
        raise ValueError(f"reduce must be one of {', '.join(ANTECEDENT_REDUCTIONS)}, got {reduce!r}")
    idx = np.asarray(list(span), dtype=np.int64)
    if idx.size == 0:
        raise ValueError("an antecedent must span at least one token")
    if idx.min() < -n or idx.max() >= n:
        raise ValueError(f"antecedent tokens {idx.tolist()} lie outside a map of {n} tokens")
    return idx


def antecedent_score(scores: np.ndarray, span: Sequence[int], *, reduce: str = "max") -> float:
    """score(S) of the antecedent whose tokens are `span` under the map `scores` (token,)."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1:
        raise ValueError(f"scores must be one map (token,), got shape {s.shape}")
    idx = _check(span, s.shape[0], reduce)
    return float(_REDUCE[reduce](s[idx][None])[0])


def outranks(scores: np.ndarray, right: Sequence[int], wrong: Sequence[int], *, reduce: str = "max") -> float:
    """1 if the antecedent at `right` scores above the one at `wrong`, 0.5 on a tie, else 0."""
    return float(outranks_by_layer(np.asarray(scores)[None], right, wrong, reduce=reduce)[0])


def outranks_by_layer(
    maps: np.ndarray, right: Sequence[int], wrong: Sequence[int], *, reduce: str = "max"
) -> np.ndarray:
    """`outranks` for every row of `maps` (layer, token): (layer,) float64 of 1 / 0.5 / 0.

    >>> outranks_by_layer(np.array([[0.2, 0.8], [0.5, 0.5], [0.9, 0.1]]), [0], [1]).tolist()
    [0.0, 0.5, 1.0]
    """
    m = np.asarray(maps, dtype=np.float64)
    if m.ndim != 2:
        raise ValueError(f"maps must be (layer, token), got shape {m.shape}")
    r, w = _check(right, m.shape[1], reduce), _check(wrong, m.shape[1], reduce)
    if set(r.tolist()) & set(w.tolist()):
        raise ValueError(f"the two antecedents share tokens: {sorted(set(r.tolist()) & set(w.tolist()))}")
    a, b = _REDUCE[reduce](m[:, r]), _REDUCE[reduce](m[:, w])  # (layer,)
    return np.where(a > b, 1.0, np.where(a == b, 0.5, 0.0))
