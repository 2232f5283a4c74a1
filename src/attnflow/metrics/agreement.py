"""Agreement between two importance rankings of the same tokens: Kendall tau-b and top-k overlap.

The per-sample core (``kendall_tau``, ``top_k_overlap``, ``agreement_samples``) is numpy only;
``agreement_table`` summarises every pair of methods into a long pandas table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import TYPE_CHECKING, Literal

import numpy as np

from .summarize import summarize

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "AGREEMENTS",
    "TABLE_COLUMNS",
    "agreement_samples",
    "agreement_table",
    "kendall_tau",
    "top_k_overlap",
]

#: The columns of ``agreement_table``, in order.
TABLE_COLUMNS = (
    "method_a", "method_b", "layer", "metric", "k",
    "mean", "std", "ci_low", "ci_high", "n", "n_undefined",
)  # fmt: skip


def kendall_tau(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Kendall tau-b between ``a`` and ``b`` along the last axis (broadcast over the others).

        tau_b = sum_{s<t} sgn(a_s - a_t) sgn(b_s - b_t) / sqrt( n_a * n_b )

    n_a (n_b): pairs s < t with a_s != a_t (b_s != b_t), so ties in either ranking count as in
    ``scipy.stats.kendalltau(variant="b")``. nan when n_a or n_b is 0 (a constant vector, < 2
    positions). +1: same order; -1: reversed.

    >>> kendall_tau(np.array([0.1, 0.5, 0.3]), np.array([[1, 3, 2], [3, 1, 2]]))
    array([ 1., -1.])
    """
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    if a.ndim == 0:
        raise ValueError("kendall_tau needs vectors (..., T)")
    s, t = np.triu_indices(a.shape[-1], k=1)  # (P,), (P,): every pair s < t
    da = np.sign(a[..., s] - a[..., t])  # (..., P)
    db = np.sign(b[..., s] - b[..., t])  # (..., P)
    n_a, n_b = (da != 0).sum(axis=-1), (db != 0).sum(axis=-1)  # (...,)
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = (da * db).sum(axis=-1) / np.sqrt(n_a.astype(np.float64) * n_b)
    return np.where((n_a > 0) & (n_b > 0), tau, np.nan)


def top_k_overlap(a: np.ndarray, b: np.ndarray, *, k: int) -> np.ndarray:
    """Share of the k top-scored positions that ``a`` and ``b`` have in common (last axis).

        overlap = | top_k(a) ∩ top_k(b) | / k'        k' = min(k, T)

    top_k takes the k highest scores, ties to the earlier position (stable). nan when T = 0.

    >>> top_k_overlap(np.array([0.9, 0.8, 0.1, 0.0]), np.array([0.9, 0.0, 0.8, 0.1]), k=2)  # {0,1} vs {0,2}
    array(0.5)
    """
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    if a.ndim == 0:
        raise ValueError("top_k_overlap needs vectors (..., T)")
    t = a.shape[-1]
    kk = min(int(k), t)
    if kk == 0:
        return np.full(a.shape[:-1], np.nan)
    top_a = _top_mask(a, kk)  # (..., T)
    top_b = _top_mask(b, kk)  # (..., T)
    return np.asarray((top_a & top_b).sum(axis=-1) / kk)


#: The agreement measures by name; all take ``(a, b, **options)`` on (..., T) arrays.
AGREEMENTS = {"kendall_tau": kendall_tau, "top_k_overlap": top_k_overlap}


def agreement_samples(
    a: Sequence[np.ndarray],
    b: Sequence[np.ndarray],
    *,
    metric: Literal["kendall_tau", "top_k_overlap"] = "kendall_tau",
    k: int = 5,
    exclude: Sequence[int] = (0,),
) -> np.ndarray:
    """Agreement per sample i (and layer l) between ``a[i]`` and ``b[i]``; ``(N, L)`` float64.

        values[i, l] = metric( a[i][l, keep_i], b[i][l, keep_i] )

    keep_i: every position of sample i except ``exclude`` (default: CLS; negative indices count
    from the end of that sample). Each ``a[i]`` / ``b[i]`` is ``(T_i,)`` (one score per token) or
    ``(L, T_i)`` (one per layer); a ``(T_i,)`` is compared with every layer of the other, two
    ``(L, T_i)`` layer by layer; L = 1 when neither has layers. ``k`` is for ``top_k_overlap``.
    Undefined values (constant scores for tau; no position left) are nan.

    >>> a = [np.array([[0.0, 0.1, 0.5, 0.3], [0.0, 0.5, 0.1, 0.3]])]  # 1 sample, 2 layers
    >>> agreement_samples(a, [np.array([9.0, 1.0, 3.0, 2.0])])  # CLS left out: same order, reversed
    array([[ 1., -1.]])
    """
    if metric not in AGREEMENTS:
        raise ValueError(f"metric must be one of {sorted(AGREEMENTS)}, got {metric!r}")
    if len(a) != len(b):
        raise ValueError(f"{len(a)} samples in a but {len(b)} in b")
    options = {"k": k} if metric == "top_k_overlap" else {}
    rows, n_layers = [], None
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        if x.ndim not in (1, 2) or y.ndim not in (1, 2) or x.shape[-1] != y.shape[-1]:
            raise ValueError(
                f"sample {i}: need (T,) or (L, T) scores of one length, got {x.shape} and {y.shape}"
            )
        if x.ndim == 2 and y.ndim == 2 and x.shape[0] != y.shape[0]:
            raise ValueError(f"sample {i}: {x.shape[0]} layers in a but {y.shape[0]} in b")
        t = x.shape[-1]
        drop = {p % t for p in exclude if -t <= p < t}
        keep = np.array([p for p in range(t) if p not in drop], dtype=np.int64)
        value = np.atleast_1d(AGREEMENTS[metric](x[..., keep], y[..., keep], **options))  # (L,)
        if n_layers is None:
            n_layers = value.shape[0]
        elif value.shape[0] != n_layers:
            raise ValueError(f"sample {i} has {value.shape[0]} layers, sample 0 has {n_layers}")
        rows.append(value)
    return np.stack(rows) if rows else np.zeros((0, 1))


def agreement_table(
    scores: Mapping[str, Sequence[np.ndarray]],
    *,
    metrics: Sequence[str] = ("kendall_tau", "top_k_overlap"),
    k: int = 5,
    exclude: Sequence[int] = (0,),
    n_boot: int = 1000,
    ci: float = 0.95,
    seed: int = 0,
    ddof: int = 0,
) -> pd.DataFrame:
    """Agreement of every pair of methods, per layer: ``agreement_samples`` then ``summarize``.

    ``scores[method]`` is the list of per-sample ``(T_i,)`` or ``(L, T_i)`` arrays of a method
    (blank_out, input_gradients, random; raw, rollout, flow...), same samples in the same order.
    Pairs are unordered, in the order of ``scores`` (both measures are symmetric).

    One row per (method_a, method_b, layer, metric). Columns: method_a, method_b, layer
    (1-based; <NA> when neither method has layers), metric, k (the top-k size; <NA> for tau),
    mean, std, ci_low, ci_high, n (defined values), n_undefined (nan ones, left out of the mean).

    >>> s = {"a": [np.array([0.0, 1.0, 2.0, 3.0])], "b": [np.array([0.0, 3.0, 2.0, 1.0])]}
    >>> agreement_table(s, k=1, n_boot=0)[["method_a", "method_b", "layer", "metric", "mean"]]
      method_a method_b  layer         metric  mean
    0        a        b   <NA>    kendall_tau  -1.0
    1        a        b   <NA>  top_k_overlap   0.0
    """
    import pandas as pd

    for metric in metrics:
        if metric not in AGREEMENTS:
            raise ValueError(f"metric must be one of {sorted(AGREEMENTS)}, got {metric!r}")
    rows = []
    for name_a, name_b in combinations(scores, 2):
        a, b = scores[name_a], scores[name_b]
        layered = any(np.ndim(x) == 2 for x in (*a[:1], *b[:1]))
        for metric in metrics:
            values = agreement_samples(a, b, metric=metric, k=k, exclude=exclude)  # (N, L)
            summary = summarize(values, n_boot=n_boot, ci=ci, seed=seed, ddof=ddof)
            n_undefined = np.isnan(values).sum(axis=0)
            for layer in range(values.shape[1]):
                rows.append(
                    {
                        "method_a": name_a,
                        "method_b": name_b,
                        "layer": layer + 1 if layered else pd.NA,
                        "metric": metric,
                        "k": k if metric == "top_k_overlap" else pd.NA,
                        **{key: float(summary[key][layer]) for key in ("mean", "std", "ci_low", "ci_high")},
                        "n": int(summary["n"][layer]),
                        "n_undefined": int(n_undefined[layer]),
                    }
                )
    frame = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    return frame.astype({"layer": "Int64", "k": "Int64"})


def _top_mask(x: np.ndarray, k: int) -> np.ndarray:
    """True at the k largest entries of the last axis, ties to the earlier position; (..., T) bool."""
    order = np.argsort(-x, axis=-1, kind="stable")[..., :k]  # (..., k)
    mask = np.zeros(x.shape, dtype=bool)
    np.put_along_axis(mask, order, True, axis=-1)
    return mask
