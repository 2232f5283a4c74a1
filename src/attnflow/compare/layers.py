"""The norm- and decomposition-based methods in the analogues of Tables 1-3: does a method that
weighs attention by what flows through it correlate with blank-out and input gradients, layer by
layer, better than raw attention, rollout and flow?

`decomposition_maps` explains the study's samples with each method
(`attnflow.attribution.comparators.decomposition_rows`: one forward per batch of samples of similar
length, the needs read during it) and keeps the task's
row at every layer: a (L, T) map per sample, as the explain stage's maps. `decomposition_table`
correlates them with the attribute stage's importance exactly as the correlate stage does
(`attnflow.metrics.tables.study_frame`: Spearman per sample and layer, the task's CLS rules, the
bootstrap interval of each mean). A method that is not defined for the model (ALTI and GlobEnc on a
decoder, DecompX outside BERT-type encoders: `attnflow.attribution.comparators.unavailable`) is
left out with its reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from attnflow.attribution.comparators import DECOMPOSITION, decomposition_rows, unavailable

__all__ = ["SKIPPED", "TABLE", "decomposition_maps", "decomposition_table"]

TABLE = "decomposition_correlations.parquet"  # below the task's reports folder
SKIPPED = "decomposition.json"  # the methods left out, with why, and the table's last-layer means


def decomposition_maps(
    model: Any, input_ids: Sequence[Sequence[int]], *, rows: str, target: Any = "predicted", pad_id: int = 0,
    methods: Sequence[str] = DECOMPOSITION, residual: float = 0.5, heads: str = "mean", batch_size: int = 32,
) -> tuple[dict[str, list[np.ndarray]], dict[str, str]]:  # fmt: skip
    """({method: [(L, T_i) float64]}, {method: why it was left out}) for the samples ``input_ids``
    (each its real tokens): every layer's explanation row, ``rows`` being the task's rule ("cls",
    "max" or "mean" over the real query rows; the class-specific DecompX reads its record's rows),
    ``target`` the class explained."""
    from attnflow.batches import length_batches, pad_batch

    skipped = {m: why for m in methods if (why := unavailable(model, m)) is not None}
    run = [m for m in methods if m not in skipped]
    out: dict[str, list[Any]] = {m: [None] * len(input_ids) for m in run}
    if not run:
        return {}, skipped
    for idx in length_batches([len(r) for r in input_ids], batch_size):
        ids, mask = pad_batch([np.asarray(input_ids[i]) for i in idx], pad_id)
        batch = decomposition_rows(
            model, ids, mask, run, rows=rows, target=target, residual=residual, heads=heads
        )
        for i, maps in zip(idx, batch, strict=True):
            for m in run:
                out[m][i] = maps[m]
    return out, skipped


def decomposition_table(
    maps: Mapping[str, Sequence[np.ndarray]], importance: Mapping[str, Sequence[np.ndarray]], *, task: str,
    settings: Any, cls_blanked: bool, n_boot: int, ci: float, seed: int,
) -> pd.DataFrame:  # fmt: skip
    """The correlate stage's table (`attnflow.metrics.tables.study_frame`) of ``maps`` against
    ``importance`` (the same samples, in the same order); empty when no method ran."""
    from attnflow.metrics.tables import study_frame

    methods = list(maps)
    if not methods:
        return pd.DataFrame()
    return study_frame(maps, importance, methods=methods, task=task, settings=settings, cls_blanked=cls_blanked,
                       n_boot=n_boot, ci=ci, seed=seed)  # fmt: skip
