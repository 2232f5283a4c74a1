"""Per-sample, per-layer Spearman between attention-based scores and an importance score."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from attnflow.options import UNDEFINED

from .spearman import _spearman_rows

__all__ = ["AUTHORS_EXCLUDE", "UNDEFINED", "correlate_samples"]

#: Positions the authors left out of the correlation, per importance score: CLS (position 0) was
#: dropped for blank-out (it is never blanked) and kept for input gradients.
AUTHORS_EXCLUDE: dict[str, tuple[int, ...]] = {"blank_out": (0,), "input_gradients": ()}


def correlate_samples(
    maps: Sequence[np.ndarray],
    importance: Sequence[np.ndarray],
    *,
    exclude: Sequence[int] = (0,),
    method: Literal["average", "dense_noties"] = "average",
    undefined: Literal["zero", "nan"] = "zero",
) -> dict[str, np.ndarray]:
    """Spearman, per sample i and layer l, between ``maps[i][l]`` and ``importance[i]``.

        values[i, l] = spearman(maps[i][l, keep_i], importance[i][keep_i])

    where keep_i is every position of sample i except those in ``exclude`` (negative indices count
    from the end of that sample). Samples may have different lengths T_i (crop padding first).

    ``exclude``: the authors used ``(0,)`` (drop CLS) against blank-out and ``()`` against input
    gradients; ``AUTHORS_EXCLUDE`` holds both. ``method``: see ``spearman``. A correlation is
    undefined when either vector is constant (e.g. an all-zero blank-out) or has < 2 positions;
    ``undefined="zero"`` (the authors') stores 0, ``"nan"`` stores nan so that ``summarize`` skips it.
    Either way they are counted.

    Returns ``values`` (N, L) float64, ``undefined`` (N, L) bool and ``n_undefined`` (L,) int64.

    >>> maps = [np.array([[0.5, 0.3, 0.2], [0.2, 0.4, 0.4]])]  # 1 sample, 2 layers, 3 tokens
    >>> out = correlate_samples(maps, [np.array([0.0, 2.0, 1.0])], exclude=(0,))
    >>> out["values"], out["n_undefined"]  # layer 1 is constant on tokens 1-2: undefined -> 0
    (array([[1., 0.]]), array([0, 1]))
    """
    if len(maps) != len(importance):
        raise ValueError(f"{len(maps)} attention maps but {len(importance)} importance vectors")
    if undefined not in UNDEFINED:
        raise ValueError(f"undefined must be one of {UNDEFINED}, got {undefined!r}")
    n_layers = None
    rows = []
    for i, (m, imp) in enumerate(zip(maps, importance, strict=True)):
        m, imp = np.asarray(m, dtype=np.float64), np.asarray(imp, dtype=np.float64)
        if m.ndim != 2 or imp.ndim != 1 or m.shape[1] != imp.shape[0]:
            raise ValueError(
                f"sample {i}: need maps (L, T) and importance (T,), got {m.shape} and {imp.shape}"
            )
        if n_layers is None:
            n_layers = m.shape[0]
        elif m.shape[0] != n_layers:
            raise ValueError(f"sample {i} has {m.shape[0]} layers, sample 0 has {n_layers}")
        t = imp.shape[0]
        drop = {p % t for p in exclude if -t <= p < t}
        keep = np.array([p for p in range(t) if p not in drop], dtype=np.int64)
        rows.append(_spearman_rows(m[:, keep], imp[keep], method=method))  # (L,)
    values = np.stack(rows) if rows else np.zeros((0, 0))  # (N, L)
    is_undefined = np.isnan(values)
    if undefined == "zero":
        values = np.where(is_undefined, 0.0, values)
    return {"values": values, "undefined": is_undefined, "n_undefined": is_undefined.sum(axis=0)}
