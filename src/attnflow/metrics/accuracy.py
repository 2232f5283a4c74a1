"""Accuracy on the labelled samples only (unlabelled ones carry label -1, e.g. GLUE test)."""

from __future__ import annotations

import numpy as np

__all__ = ["labelled_accuracy"]


def labelled_accuracy(labels: np.ndarray, predictions: np.ndarray) -> float:
    """Share of ``predictions`` equal to ``labels`` among samples with a label (>= 0); nan if none.

    >>> labelled_accuracy(np.array([1, 0, -1]), np.array([1, 1, 0]))
    0.5
    """
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    known = labels >= 0
    return float((labels[known] == predictions[known]).mean()) if known.any() else float("nan")
