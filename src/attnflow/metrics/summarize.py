"""Mean ± std over samples per layer, with a percentile-bootstrap confidence interval of the mean."""

from __future__ import annotations

import numpy as np

__all__ = ["summarize"]

# Bootstrap replicates are drawn in blocks of at most this many (replicate, sample) cells, to
# bound memory for large N; the draw order, hence the result, depends only on seed, N and n_boot.
_BLOCK_CELLS = 1 << 22


def summarize(
    values: np.ndarray,
    *,
    n_boot: int = 1000,
    ci: float = 0.95,
    seed: int = 0,
    ddof: int = 0,
) -> dict[str, np.ndarray]:
    """Per column (layer) of ``values`` (N, L): mean, std, bootstrap CI of the mean and n; nan-aware.

    nan entries (undefined correlations kept as nan) are left out: with D_l the defined entries of
    column l and n_l = |D_l|,

        mean_l = sum(D_l) / n_l
        std_l  = sqrt( sum((v - mean_l)^2 for v in D_l) / (n_l - ddof) )

    ``ddof=0`` (numpy's default, the population std; the paper does not say which the ± is, the
    authors' code printed ``np.std``) or ``ddof=1`` (sample std).

    CI: percentile bootstrap. Each of ``n_boot`` replicates resamples the N rows with replacement
    (the same rows for every layer, so layers stay paired) and takes the nan-skipping mean of each
    column; ``ci_low, ci_high`` are the (1-ci)/2 and (1+ci)/2 quantiles of those means. The result
    depends only on ``seed`` (numpy ``default_rng``). Columns with no defined value give nan.

    Returns ``mean, std, ci_low, ci_high`` (L,) float64 and ``n`` (L,) int64.

    >>> out = summarize(np.array([[0.5], [1.0], [np.nan], [0.0]]), n_boot=0)
    >>> float(out["mean"][0]), round(float(out["std"][0]), 4), int(out["n"][0])  # std = sqrt(1/6)
    (0.5, 0.4082, 3)
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2:
        raise ValueError(f"values must be (N, L), got shape {v.shape}")
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci must lie in (0, 1), got {ci}")
    if n_boot < 0 or ddof < 0:
        raise ValueError(f"n_boot and ddof must be >= 0, got {n_boot} and {ddof}")
    n_rows, n_cols = v.shape
    defined = ~np.isnan(v)  # (N, L)
    v0 = np.where(defined, v, 0.0)  # (N, L)
    n = defined.sum(axis=0)  # (L,)

    with np.errstate(invalid="ignore", divide="ignore"):
        mean = v0.sum(axis=0) / n  # nan where n == 0
        sq = np.where(defined, (v - mean) ** 2, 0.0).sum(axis=0)
        std = np.where(n - ddof > 0, np.sqrt(sq / np.maximum(n - ddof, 1)), np.nan)
    mean = np.where(n > 0, mean, np.nan)

    ci_low = np.full(n_cols, np.nan)
    ci_high = np.full(n_cols, np.nan)
    if n_boot > 0 and n_rows > 0:
        boot = _bootstrap_means(v0, defined.astype(np.float64), n_boot=n_boot, seed=seed)  # (n_boot, L)
        has = ~np.isnan(boot).all(axis=0)
        if has.any():
            q = np.nanquantile(boot[:, has], [(1.0 - ci) / 2.0, (1.0 + ci) / 2.0], axis=0)  # (2, L')
            ci_low[has], ci_high[has] = q[0], q[1]
    return {"mean": mean, "std": std, "ci_low": ci_low, "ci_high": ci_high, "n": n.astype(np.int64)}


def _bootstrap_means(v0: np.ndarray, d: np.ndarray, *, n_boot: int, seed: int) -> np.ndarray:
    """nan-skipping column means of ``n_boot`` row resamples; ``(n_boot, L)``.

    A resample is a count vector w (N,) (how often each row was drawn); its column means are
    (w @ v0) / (w @ d), with v0 the values with nan set to 0 and d the defined-indicator.
    """
    rng = np.random.default_rng(seed)
    n_rows = v0.shape[0]
    block = max(1, _BLOCK_CELLS // n_rows)
    out = []
    for start in range(0, n_boot, block):
        k = min(block, n_boot - start)
        idx = rng.integers(0, n_rows, size=(k, n_rows))  # (k, N): row drawn at each slot
        flat = (idx + n_rows * np.arange(k)[:, None]).ravel()
        w = np.bincount(flat, minlength=k * n_rows).reshape(k, n_rows).astype(np.float64)  # (k, N)
        with np.errstate(invalid="ignore", divide="ignore"):
            out.append((w @ v0) / (w @ d))  # (k, L); nan where a resample has no defined value
    return np.concatenate(out)
