"""How faithful each method is on a Hugging Face classifier, and what it costs: the study's
perturbation tests (`attnflow.attribution.faithfulness`) on any model and texts, in one table.

Each method ranks the tokens of each text by its score at the explained row of the last layer
(`attnflow.compare.scores.token_attributions`: attention methods, model-level methods such as
DecompX or value zeroing, AttnLRP); the gradient comparators (integrated gradients, input × gradient:
`attnflow.attribution.comparators`) rank them by their token attributions; a seeded random ranking
is the floor. Each ranking is scored per text (AOPC comprehensiveness: higher = more faithful;
sufficiency: lower), summarised with a bootstrap interval over texts, beside the seconds per text
its scores took (one process, one after the other).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["faithfulness_table"]


def faithfulness_table(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    methods: Sequence[str],
    *,
    comparators: Sequence[str] = ("integrated_gradients",),
    metrics: Sequence[str] = ("comprehensiveness", "sufficiency"),
    keep_positions: Sequence[int] = (0, -1),
    batch_size: int = 16,
    n_boot: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per (method, metric): ``mean``, ``ci_low``, ``ci_high`` (bootstrap over texts), ``n``
    and ``seconds_per_text`` (NaN for the random floor). ``keep_positions``: tokens never removed
    ([CLS] and the final [SEP] by default)."""
    from attnflow.attribution.comparators import comparator_scores
    from attnflow.attribution.faithfulness import faithfulness_samples
    from attnflow.batches import length_batches, pad_batch
    from attnflow.metrics.tables import summary_frame
    from attnflow.modes import eval_mode

    from .scores import token_attributions

    if not texts:
        raise ValueError("no texts to score")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = [np.asarray(tokenizer(t, truncation=True)["input_ids"]) for t in texts]
    rankings: dict[tuple[str, None], list[np.ndarray]] = {}
    seconds: dict[str, float] = {}
    for method in methods:
        got: list[Any] = [None] * len(ids)
        start = time.perf_counter()
        for idx in length_batches([len(r) for r in ids], batch_size):
            batch, mask = pad_batch([ids[i] for i in idx], pad_id)
            with eval_mode(model):
                scores = token_attributions(model, batch, mask, method=method)
            for row, i in enumerate(idx):
                got[i] = scores[row, : len(ids[i])].numpy()
        seconds[method] = (time.perf_counter() - start) / len(ids)
        rankings[(method, None)] = got
    extra, extra_seconds, skipped = comparator_scores(model, ids, pad_id=pad_id, keep_positions=keep_positions,
                                                      names=comparators, batch_size=batch_size)  # fmt: skip
    if skipped:
        raise ValueError(f"comparators not available: {skipped}")
    rankings.update({(name, None): values for name, values in extra.items()})
    seconds.update(extra_seconds)
    per_sample, _ = faithfulness_samples(model, ids, rankings, sample_ids=range(len(ids)), random_seed=seed,
                                         pad_id=pad_id, keep_positions=keep_positions)  # fmt: skip
    chosen = per_sample[per_sample["metric"].isin(list(metrics))]
    table = summary_frame(chosen, ["method", "metric"], n_boot=n_boot, seed=seed)
    table["seconds_per_text"] = table["method"].map(seconds).astype(float)
    return table
