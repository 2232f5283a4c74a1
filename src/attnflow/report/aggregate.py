"""Aggregate ``correlations.json`` over seeds: per cell, the spread of the per-seed means.

Input: one ``{importance: {explainer: {"L<k>": {"mean": m, ...}}}}`` dict per seed (the layout
``pipelines/correlate.py`` writes). Output: the same layout with, per cell, over the seeds s that
have a finite mean m_s for it (n = their number):

    mean   = (1/n) Σ_s m_s
    std    = sqrt( Σ_s (m_s − mean)² / (n − 1) )     sample std over seeds (nan when n < 2)
    min, max = min_s m_s, max_s m_s
    n_seeds = n

This is the spread due to the seed (training, sampling) only; the within-seed std over samples
stays in each seed's own file.

The file ``reports/sweep/aggregate.json`` that the report reads is
``{"seeds": [s1, s2, ...], "tasks": {task: aggregate_seeds([...])}}`` (see :func:`sweep_payload`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["aggregate_seeds", "finite", "sweep_payload"]


def finite(x: Any) -> bool:
    """A real number that is neither NaN nor infinite (bools and None are not)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def aggregate_seeds(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per cell mean, std (ddof 1), min, max and n_seeds of the per-seed means; inputs untouched.

    Seeds 0.50, 0.70, 0.60: mean 0.60, std sqrt((0.01 + 0.01 + 0) / 2) = 0.1.

    >>> runs = [{"blank_out": {"flow": {"L1": {"mean": m}}}} for m in (0.5, 0.7, 0.6)]
    >>> cell = aggregate_seeds(runs)["blank_out"]["flow"]["L1"]
    >>> [round(cell[k], 6) for k in ("mean", "std", "min", "max")], cell["n_seeds"]
    ([0.6, 0.1, 0.5, 0.7], 3)
    """
    values: dict[tuple[str, str, str], list[float]] = {}
    for run in runs:
        for importance, explainers in run.items():
            for explainer, layers in explainers.items():
                for layer, cell in layers.items():
                    values.setdefault((importance, explainer, layer), [])
                    mean = cell.get("mean") if isinstance(cell, Mapping) else cell
                    if finite(mean):
                        values[(importance, explainer, layer)].append(float(mean))
    out: dict[str, Any] = {}
    for (importance, explainer, layer), vs in values.items():
        n = len(vs)
        mean = math.fsum(vs) / n if n else math.nan
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in vs) / (n - 1)) if n > 1 else math.nan
        out.setdefault(importance, {}).setdefault(explainer, {})[layer] = {
            "mean": mean,
            "std": std,
            "min": min(vs) if vs else math.nan,
            "max": max(vs) if vs else math.nan,
            "n_seeds": n,
        }
    return out


def sweep_payload(
    runs_by_task: Mapping[str, Sequence[Mapping[str, Any]]], seeds: Sequence[int]
) -> dict[str, Any]:
    """The content of ``reports/sweep/aggregate.json``: seeds and one aggregate per task."""
    return {
        "seeds": list(seeds),
        "tasks": {task: aggregate_seeds(runs) for task, runs in runs_by_task.items()},
    }
