"""Seeded subsets of rows (the one implementation): which rows a sample, a held-out set or a
training subset takes."""

from __future__ import annotations

import numpy as np

__all__ = ["seeded_split", "seeded_subset"]


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


def seeded_subset(n_rows: int, k: int | None, seed: int, *, what: str = "the subset size") -> np.ndarray:
    """Indices (sorted) of a seeded subset of ``k`` of ``n_rows`` rows: :func:`seeded_split`'s first
    part under ``numpy.random.default_rng(seed)``; every row when ``k`` is None or at least ``n_rows``.
    ``what`` names the setting in the error (e.g. ``"explain.per_head_samples"``).

    >>> seeded_subset(5, None, 0).tolist(), len(seeded_subset(872, 200, 0)), seeded_subset(3, 10, 0).tolist()
    ([0, 1, 2, 3, 4], 200, [0, 1, 2])
    """
    if k is None or k >= n_rows:
        return np.arange(n_rows)
    if k < 1:
        raise ValueError(f"{what} must be >= 1 or null, got {k}")
    chosen, _ = seeded_split(n_rows, k, np.random.default_rng(seed))
    return chosen
