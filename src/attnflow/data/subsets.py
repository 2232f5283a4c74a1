"""Seeded subsets of rows (the one implementation): which rows a sample, a held-out set or a
training subset takes."""

from __future__ import annotations

import numpy as np

__all__ = ["seeded_split"]


def seeded_split(n_rows: int, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A random permutation of ``range(n_rows)`` cut after ``k``: (the first k, the rest), each sorted.

    >>> chosen, rest = seeded_split(5, 2, np.random.default_rng(0))
    >>> sorted([*chosen, *rest]) == list(range(5)), len(chosen)
    (True, 2)
    """
    if not 0 <= k <= n_rows:
        raise ValueError(f"cannot take {k} of {n_rows} rows")
    perm = rng.permutation(n_rows)
    return np.sort(perm[:k]), np.sort(perm[k:])
