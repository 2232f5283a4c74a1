"""How far a table's cells move between machines, beside how far they move between seeds.

Input: a tidy frame of cells, one row per (machine, seed, cell), a cell being
``(task, importance, method, layer)``; ``mean`` is the cell's value in that machine's run of that
seed (e.g. the mean Spearman correlation over the samples). For a cell c, with x[m, s] its value on
machine m at seed s:

    machine spread  M_c = mean over the seeds s run on ≥ 2 machines of  max_m x[m, s] − min_m x[m, s]
                          (two machines: |x[a, s] − x[b, s]|, averaged over the seeds both ran)
    seed spread     S_c = mean over the machines m that ran ≥ 2 seeds of  sd_s x[m, s]
                          (sample standard deviation over seeds, ddof = 1, as the report's seed table)

M_c is what changing the CPU does to a cell at a fixed seed; S_c is what changing the seed does on
one CPU. M_c well below S_c means a reader on another CPU gets numbers as close as another seed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = ["CELL", "COLUMNS", "machine_spread", "seed_spread", "spread_frame", "spread_summary"]

CELL = ["task", "importance", "method", "layer"]
COLUMNS = ["machine", "seed", *CELL, "mean"]


def _checked(cells: pd.DataFrame) -> pd.DataFrame:
    """``cells`` reduced to :data:`COLUMNS`; a missing column or a repeated (machine, seed, cell) raises."""
    if missing := [c for c in COLUMNS if c not in cells.columns]:
        raise ValueError(f"cell frame lacks columns {missing} (has {list(cells.columns)})")
    frame = cells[COLUMNS].astype({"mean": float})
    repeated = frame.duplicated(["machine", "seed", *CELL])
    if repeated.any():
        first = frame[repeated].iloc[0].to_dict()
        raise ValueError(f"{int(repeated.sum())} repeated (machine, seed, cell) rows, e.g. {first}")
    return frame


def machine_spread(cells: pd.DataFrame) -> pd.DataFrame:
    """Per cell: ``machine_spread`` (M_c of the module docstring) and ``n_seeds_compared`` (the seeds
    run on at least two machines; 0 and NaN spread when none is).

    >>> cells = pd.DataFrame({"machine": ["a", "b", "a", "b"], "seed": [0, 0, 1, 1], "task": "t",
    ...     "importance": "i", "method": "m", "layer": 1, "mean": [0.5, 0.75, 0.5, 0.25]})
    >>> machine_spread(cells)[["machine_spread", "n_seeds_compared"]].values.tolist()
    [[0.25, 2.0]]
    """
    frame = _checked(cells)
    per_seed = frame.groupby([*CELL, "seed"], sort=True)["mean"].agg(["max", "min", "count"]).reset_index()
    per_seed["range"] = (per_seed["max"] - per_seed["min"]).where(per_seed["count"] >= 2)
    out = per_seed.groupby(CELL, sort=True).agg(
        machine_spread=("range", "mean"), n_seeds_compared=("range", "count")
    )
    return out.reset_index()


def seed_spread(cells: pd.DataFrame) -> pd.DataFrame:
    """Per cell: ``seed_spread`` (S_c of the module docstring) and ``n_machines_with_seeds`` (the
    machines that ran at least two seeds; 0 and NaN spread when none did).

    >>> cells = pd.DataFrame({"machine": ["a", "a", "b", "b"], "seed": [0, 1, 0, 1], "task": "t",
    ...     "importance": "i", "method": "m", "layer": 1, "mean": [0.0, 1.0, 0.0, 0.5]})
    >>> round(float(seed_spread(cells)["seed_spread"].iloc[0]), 6)  # (1/√2 + 0.5/√2) / 2
    0.53033
    """
    frame = _checked(cells)
    per_machine = frame.groupby([*CELL, "machine"], sort=True)["mean"].agg(["std", "count"]).reset_index()
    per_machine["sd"] = per_machine["std"].where(per_machine["count"] >= 2)  # pandas std: ddof = 1
    out = per_machine.groupby(CELL, sort=True).agg(
        seed_spread=("sd", "mean"), n_machines_with_seeds=("sd", "count")
    )
    return out.reset_index()


def spread_frame(cells: pd.DataFrame) -> pd.DataFrame:
    """Per cell: :func:`machine_spread` and :func:`seed_spread` side by side (one row per cell that
    appears in ``cells``), with ``machine_above_seed``: M_c > S_c (NaN where either is undefined)."""
    out = machine_spread(cells).merge(seed_spread(cells), on=CELL, how="outer")
    defined = out["machine_spread"].notna() & out["seed_spread"].notna()
    above = (out["machine_spread"] > out["seed_spread"]).astype(object)
    out["machine_above_seed"] = above.where(defined, np.nan)
    return out


def spread_summary(frame: pd.DataFrame) -> dict[str, Any]:
    """Over the cells of a :func:`spread_frame`: the mean and max of each spread over the cells
    where it is defined, ``n_machine`` / ``n_seed`` those cells, and ``share_machine_above_seed`` =
    (cells with M_c > S_c) / (cells with both defined), None when no cell has both.

    >>> f = pd.DataFrame({"machine_spread": [0.25, 0.0, np.nan], "seed_spread": [0.125, 0.5, 0.25]})
    >>> s = spread_summary(f)
    >>> s["machine_mean"], s["machine_max"], round(s["seed_mean"], 6), s["share_machine_above_seed"], s["n_both"]
    (0.125, 0.25, 0.291667, 0.5, 2)
    """
    m = frame["machine_spread"].astype(float)
    s = frame["seed_spread"].astype(float)
    both = m.notna() & s.notna()

    def stat(x: pd.Series, how: str) -> float | None:
        x = x.dropna()
        return float(getattr(x, how)()) if len(x) else None

    return {
        "n_cells": len(frame),
        "n_machine": int(m.notna().sum()),
        "n_seed": int(s.notna().sum()),
        "n_both": int(both.sum()),
        "machine_mean": stat(m, "mean"),
        "machine_max": stat(m, "max"),
        "seed_mean": stat(s, "mean"),
        "seed_max": stat(s, "max"),
        "share_machine_above_seed": float((m[both] > s[both]).mean()) if both.any() else None,
    }
