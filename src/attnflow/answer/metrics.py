"""Faithfulness of an answer's attribution, as FlashTrace (Pan et al., ICML 2026) scores it: RISE
and MAS from one guided deletion, and recovery@k of known source tokens.

Guided deletion. With w (P,) the attribution of each prompt token (summed over the answer's rows),
the prompt tokens are deleted (replaced by the pad token) in the order of w, largest first (ties
in prompt order), and s_i = Σ_t log p(answer_t | prompt with the first i of them deleted), i = 0..P.
From the scores (:func:`deletion_areas`):

    n_i  = min_{k<=i} clip((s_k − s_P) / |s_0 − s_P|, 0, 1)          the normalised, monotone curve
    d_0 = 1,  d_{i+1} = d_i − w_{o_i} / Σ w                           the attribution's own density
           (a straight line from 1 to 0 when Σ w <= 0)
    RISE    = auc(n)                                                   (lower is better)
    MAS     = auc(minmax(clip(n + |n − d|, 0, 1)))                     (lower is better)
    RISE+AP = auc(n + |n − d|)
    auc(a)  = (Σ a − a_0 / 2 − a_P / 2) / P                            the trapezoid's mean height

(a curve that is NaN after min-max becomes a straight line, as FlashTrace does). Recovery@f
(:func:`recovery_at`): of the gold prompt tokens, the share among the ceil(f·P) tokens of largest
w (w clamped at 0, NaN as 0). Read from FlashTrace's evaluation code (``llm_attr_eval``,
``faithfulness_test`` and ``evaluate_attr_recovery``); written here.

>>> s = np.array([-1.0, -3.0, -5.0])  # each deletion costs half the answer's log-prob
>>> [round(x, 3) for x in deletion_areas(s, np.array([0.5, 0.5]))]  # density follows the curve
[0.5, 0.5, 0.5]
>>> [round(x, 3) for x in deletion_areas(s, np.array([1.0, 0.0]))]  # all mass on one: penalised
[0.5, 0.75, 0.75]
>>> recovery_at(np.array([0.1, 0.9, 0.0, 0.4]), gold=[1, 2], fraction=0.5)
0.5
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["auc", "deletion_areas", "deletion_order", "recovery_at"]


def auc(values: np.ndarray) -> float:
    """The trapezoid rule over unit steps, divided by the steps: (Σ a − a_0/2 − a_end/2) / max(1, n − 1).

    >>> auc(np.array([1.0, 0.0])), auc(np.array([1.0, 1.0, 1.0]))
    (0.5, 1.0)
    """
    a = np.asarray(values, dtype=np.float64)
    return float((a.sum() - a[0] / 2 - a[-1] / 2) / max(1, a.shape[0] - 1))


def deletion_order(weights: np.ndarray) -> np.ndarray:
    """The prompt positions by attribution, largest first; ties keep prompt order.

    >>> deletion_order(np.array([0.2, 0.5, 0.2, -1.0])).tolist()
    [1, 0, 2, 3]
    """
    w = np.asarray(weights, dtype=np.float64)
    return np.argsort(-w, kind="stable")


def deletion_areas(scores: np.ndarray, weights: np.ndarray) -> tuple[float, float, float]:
    """(RISE, MAS, RISE+AP) of one guided deletion (module docstring): ``scores`` (P + 1,) the
    answer's log-probability after deleting the first i tokens of ``deletion_order(weights)``,
    ``weights`` (P,) the attribution. Lower is better for all three."""
    s = np.asarray(scores, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    n_prompt = w.shape[0]
    if s.shape != (n_prompt + 1,):
        raise ValueError(
            f"scores must hold P + 1 = {n_prompt + 1} values (none deleted .. all), got {s.shape}"
        )
    if n_prompt == 0:
        return auc(s), auc(s), auc(s)
    total = float(w.sum())
    density = np.ones(n_prompt + 1)
    if total <= 0:
        density = np.linspace(1.0, 0.0, n_prompt + 1)
    else:
        for i, j in enumerate(deletion_order(w)):
            density[i + 1] = density[i] - w[j] / total
    normalised = np.empty_like(s)
    lowest = 1.0
    span = abs(s[0] - s[-1])
    with np.errstate(divide="ignore", invalid="ignore"):
        for i, value in enumerate(s):
            x = float(np.clip((value - s[-1]) / span, 0.0, 1.0))
            lowest = min(lowest, x)  # a NaN (no change at all) keeps the curve where it was
            normalised[i] = lowest
    penalty = np.abs(normalised - density)
    corrected = np.clip(normalised + penalty, 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        corrected = (corrected - corrected.min()) / (corrected.max() - corrected.min())
    if np.isnan(corrected).any():
        corrected = np.linspace(1.0, 0.0, n_prompt + 1)
    return auc(normalised), auc(corrected), auc(normalised + penalty)


def recovery_at(weights: np.ndarray, gold: Sequence[int], fraction: float = 0.1) -> float:
    """Share of ``gold`` prompt positions among the ceil(fraction · P) largest ``weights`` (clamped
    at 0, NaN as 0; ties in prompt order); NaN when no gold position lies in the prompt."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must lie in (0, 1], got {fraction}")
    w = np.clip(np.nan_to_num(np.asarray(weights, dtype=np.float64), nan=0.0), 0.0, None)
    n_prompt = w.shape[0]
    wanted = {int(i) for i in gold if 0 <= int(i) < n_prompt}
    if not wanted or n_prompt == 0:
        return float("nan")
    k = min(max(1, math.ceil(n_prompt * fraction)), n_prompt)
    top = set(deletion_order(w)[:k].tolist())
    return len(top & wanted) / len(wanted)
