"""The paper's Tables 1-3 as long-format rows: layer x explainer x importance -> mean ± std, CI."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from .correlate_samples import AUTHORS_EXCLUDE, correlate_samples
from .summarize import summarize

__all__ = ["correlation_table"]


def correlation_table(
    maps: Mapping[str, Sequence[np.ndarray]],
    importance: Mapping[str, Sequence[np.ndarray]],
    *,
    exclude: Mapping[str, Sequence[int]] | None = None,
    method: Literal["average", "dense_noties"] = "average",
    undefined: Literal["zero", "nan"] = "zero",
    n_boot: int = 1000,
    ci: float = 0.95,
    seed: int = 0,
    ddof: int = 0,
) -> list[dict[str, Any]]:
    """One row per (explainer, importance, layer): ``correlate_samples`` then ``summarize``.

    ``maps[explainer]`` is the list of per-sample (L, T_i) arrays of that explainer (raw, rollout,
    flow...), ``importance[kind]`` the list of (T_i,) arrays (blank_out, input_gradients...).
    ``exclude[kind]`` gives the positions left out per importance kind; default ``AUTHORS_EXCLUDE``
    (CLS out for blank_out, in for input_gradients; a kind it does not name keeps every position).
    Every (explainer, kind) pair uses the same bootstrap seed, so its resamples are the same samples.

    Row keys: explainer, importance, layer (1-based, as in the paper), mean, std, ci_low, ci_high,
    n (defined correlations used), n_undefined (zeroed or skipped, per ``undefined``), n_samples.

    >>> maps = {"raw": [np.array([[0.5, 0.3, 0.2]]), np.array([[0.6, 0.1, 0.3]])]}
    >>> imp = {"blank_out": [np.array([0.0, 2.0, 1.0]), np.array([0.0, 1.0, 2.0])]}
    >>> [(r["layer"], r["mean"], r["n_undefined"]) for r in correlation_table(maps, imp, n_boot=0)]
    [(1, 1.0, 0)]
    """
    exclude = AUTHORS_EXCLUDE if exclude is None else exclude
    rows: list[dict[str, Any]] = []
    for explainer, sample_maps in maps.items():
        for kind, scores in importance.items():
            corr = correlate_samples(
                sample_maps, scores, exclude=tuple(exclude.get(kind, ())), method=method, undefined=undefined
            )
            summary = summarize(corr["values"], n_boot=n_boot, ci=ci, seed=seed, ddof=ddof)
            for layer in range(corr["values"].shape[1]):
                rows.append(
                    {
                        "explainer": explainer,
                        "importance": kind,
                        "layer": layer + 1,
                        **{key: float(summary[key][layer]) for key in ("mean", "std", "ci_low", "ci_high")},
                        "n": int(summary["n"][layer]),
                        "n_undefined": int(corr["n_undefined"][layer]),
                        "n_samples": len(sample_maps),
                    }
                )
    return rows
