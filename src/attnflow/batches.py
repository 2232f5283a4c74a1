"""Batching ragged samples: groups of similar length, and right padding (the one implementation).

>>> [b.tolist() for b in length_batches([5, 1, 3, 2], 2)]
[[1, 3], [2, 0]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["length_batches", "pad_batch"]


def length_batches(lengths: Sequence[int], batch_size: int) -> list[np.ndarray]:
    """Indices grouped into batches of similar length (stable), covering every index once."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = np.argsort(np.asarray(lengths), kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def pad_batch(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[Any, Any]:
    """Right-pad id sequences into ``input_ids`` and ``attention_mask`` tensors ``(B, T_max)``.

    >>> ids, mask = pad_batch([np.array([2, 5, 6]), [2, 7]], pad_id=0)
    >>> ids.tolist(), mask.tolist()
    ([[2, 5, 6], [2, 7, 0]], [[1, 1, 1], [1, 1, 0]])
    """
    import torch

    width = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(rows), width), dtype=torch.long)  # (B, T)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.as_tensor(np.asarray(r), dtype=torch.long)
        mask[i, : len(r)] = 1
    return ids, mask
