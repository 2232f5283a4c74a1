"""Faithfulness of a ranking from its perturbation curves: AOPC comprehensiveness / sufficiency, AUC.

Curves come from ``attnflow.attribution.perturbation_curve`` (arrays ``clean_prob`` (N,),
``prob`` (N, J), ``k`` (N, J), ``fractions`` (J,)). Every function returns one value per sample,
nan where undefined; average with ``summarize`` (pass ``values[:, None]``).

The tables' ``rows`` column says which query row of an attention map each ranking read
(:func:`row_rule`): the task's rule (``task.<name>.rows``: "cls", "max", "mean") for the methods
that read it, "cls" for the class-specific ones, and "cls" for ``<method>_at_cls``, a task-row method
read at the CLS row (scored beside it when the task's rule is not "cls"); "output" for scores of
the model's prediction (blank-out, gradients: no attention row), "none" for the random floor.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = [
    "AT_CLS",
    "HIGHER_IS_BETTER",
    "NO_ROW",
    "OUTPUT",
    "RANDOM",
    "aopc_comprehensiveness",
    "aopc_sufficiency",
    "at_cls",
    "base_method",
    "perturbation_auc",
    "row_rule",
]

# The study's per-sample faithfulness scores, and whether a higher value means a more faithful ranking
HIGHER_IS_BETTER = {
    "comprehensiveness": True,
    "sufficiency": False,
    "auc_positive": False,
    "auc_positive_accuracy": False,
    "auc_negative": True,
    "auc_negative_accuracy": True,
}
RANDOM = "random"  # the name of the seeded random ranking (the floor)
AT_CLS = (
    "_at_cls"  # suffix of a task-row method read at the CLS row: "flow_at_cls" (no "@": MLflow refuses it)
)
OUTPUT = "output"  # the rows of a score of the prediction (blank-out, gradients): no attention row
NO_ROW = "none"  # the rows of the random floor


def at_cls(method: str) -> str:
    """The label of ``method`` read at the CLS row.

    >>> at_cls("flow")
    'flow_at_cls'
    """
    return f"{method}{AT_CLS}"


def base_method(label: str) -> str:
    """The method of a label: ``flow_at_cls`` -> ``flow``; any other label is its own method."""
    return label.removesuffix(AT_CLS)


def row_rule(label: str, *, task_rows: str, map_rows: Mapping[str, str]) -> str:
    """The query row the ranking ``label`` read, for a task whose rule is ``task_rows``.

    ``map_rows``: each attention method's own setting, its record's ``rows`` ("task": the task's
    rule; "classification": the CLS row, where the classifier reads). ``<method>_at_cls`` of an
    attention method: "cls"; a label that is no attention method: ``OUTPUT`` (a score of the
    prediction), or ``NO_ROW`` for the random floor.

    >>> rules = {"flow": "task", "chefer": "classification"}
    >>> [row_rule(m, task_rows="max", map_rows=rules) for m in ("flow", "flow_at_cls", "chefer", "blank_out", "random")]
    ['max', 'cls', 'cls', 'output', 'none']
    """
    if label in map_rows:
        return task_rows if map_rows[label] == "task" else "cls"
    if label.endswith(AT_CLS) and base_method(label) in map_rows:
        return "cls"
    return NO_ROW if label == RANDOM else OUTPUT


def aopc_comprehensiveness(
    clean_prob: np.ndarray, prob: np.ndarray, k: np.ndarray, *, skip_repeats: bool = True
) -> np.ndarray:
    """Per-sample AOPC comprehensiveness (DeYoung et al. 2020, ERASER; ferret's definition); higher is better.

        comp_i = 1 / |J_i| * sum_{j in J_i} ( p(y | x_i) - p(y | x_i without its k_ij top-ranked tokens) )

    ``prob`` is the ``mode="positive"`` curve, y the class predicted on the clean x_i. With
    ``skip_repeats`` (ferret, ``evaluators/faithfulness_measures.py``) J_i holds the fractions
    whose rationale is non-empty and differs from the last one kept: k_ij > 0 and k_ij > k_ij'
    for all j' < j (ferret's ``_get_id_tokens_percentage`` returns None for k = 0, and a rationale
    equal to the previous one is set to None; neither enters the mean). Without it, J_i is every
    fraction (ERASER's scorer, ``_instances_aopc``, averages over all thresholds). nan when J_i is
    empty (ferret scores that 0) or a value in it is nan.

    >>> k = np.array([[0, 1, 1, 2]])  # 2 removable tokens, fractions .2, .5, .6, 1.0 (floor)
    >>> aopc_comprehensiveness(np.array([0.9]), np.array([[0.9, 0.6, 0.6, 0.5]]), k)  # (.3 + .4) / 2
    array([0.35])
    """
    return _aopc(clean_prob, prob, k, skip_repeats=skip_repeats)


def aopc_sufficiency(
    clean_prob: np.ndarray, prob: np.ndarray, k: np.ndarray, *, skip_repeats: bool = True
) -> np.ndarray:
    """Per-sample AOPC sufficiency (DeYoung et al. 2020, ERASER; ferret's definition); lower is better.

        suff_i = 1 / |J_i| * sum_{j in J_i} ( p(y | x_i) - p(y | only the k_ij top-ranked tokens of x_i) )

    ``prob`` is the ``mode="sufficiency"`` curve (the k top-ranked tokens kept in their order, plus
    the always-kept CLS / SEP; the rest removed), ``k`` the numbers *kept*. J_i as for
    ``aopc_comprehensiveness``: with ferret's default fractions 0.1..1.0 it includes q = 1 (all
    kept, a term near 0) and never the empty rationale. Negative when the rationale alone is
    predicted more confidently than the whole input.

    >>> aopc_sufficiency(np.array([0.9]), np.array([[0.7, 0.8, 0.9]]), np.array([[1, 2, 3]]))
    array([0.1])
    """
    return _aopc(clean_prob, prob, k, skip_repeats=skip_repeats)


def perturbation_auc(values: np.ndarray, fractions: np.ndarray) -> np.ndarray:
    """Per-sample area under a perturbation curve over the fractions removed (Chefer et al. 2021).

        AUC_i = sum_{j=1..J-1} (q_j - q_{j-1}) * (v_ij + v_i,j-1) / 2        (trapezoid rule)

    with q the fractions (in [0, 1], increasing; uneven spacing counts, so Chefer's steps
    0, .25, .5, .75, .8, ..., 1 weigh the last quarter as much as the first three) and v the
    probability of the clean prediction (``prob``) or the still-correct indicator (``correct``,
    then the area under the accuracy curve, Chefer's measure; x100 for their percent scale).
    On the ``mode="positive"`` curve (most relevant removed first) lower is better; on the
    ``mode="negative"`` curve higher is better. nan if a value of the row is nan.

    >>> perturbation_auc(np.array([[1.0, 0.5, 0.0]]), np.array([0.0, 0.5, 1.0]))  # .375 + .125
    array([0.5])
    """
    v = np.asarray(values, dtype=np.float64)
    q = np.asarray(fractions, dtype=np.float64)
    if v.ndim != 2 or q.ndim != 1 or v.shape[1] != q.shape[0]:
        raise ValueError(f"need values (N, J) and fractions (J,), got {v.shape} and {q.shape}")
    if q.shape[0] < 2:
        raise ValueError(f"an area needs at least 2 fractions, got {q.shape[0]}")
    if (np.diff(q) <= 0).any():
        raise ValueError(f"fractions must increase strictly, got {q.tolist()}")
    widths = np.diff(q)  # (J - 1,)
    return ((v[:, 1:] + v[:, :-1]) / 2.0 * widths).sum(axis=1)  # (N,)


def _aopc(clean_prob: np.ndarray, prob: np.ndarray, k: np.ndarray, *, skip_repeats: bool) -> np.ndarray:
    """Mean of clean - perturbed over the included fractions; (N,) float64."""
    clean = np.asarray(clean_prob, dtype=np.float64)
    p = np.asarray(prob, dtype=np.float64)
    counts = np.asarray(k)
    if clean.ndim != 1 or p.ndim != 2 or p.shape[0] != clean.shape[0] or counts.shape != p.shape:
        raise ValueError(
            f"need clean_prob (N,), prob (N, J) and k (N, J), got {clean.shape}, {p.shape} and {counts.shape}"
        )
    if not np.issubdtype(counts.dtype, np.integer) or (counts < 0).any():
        raise ValueError("k must hold token counts (ints >= 0)")
    if skip_repeats:
        if (np.diff(counts, axis=1) < 0).any():
            raise ValueError("k must not decrease along the fractions (pass fractions in increasing order)")
        # k_ij enters iff it exceeds every earlier k_ij' (and 0): non-empty and new.
        before = np.maximum.accumulate(
            np.concatenate([np.zeros_like(counts[:, :1]), counts[:, :-1]], axis=1), axis=1
        )
        include = counts > before  # (N, J)
    else:
        include = np.ones(p.shape, dtype=bool)
    drops = clean[:, None] - p  # (N, J)
    n = include.sum(axis=1)  # (N,)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(include, drops, 0.0).sum(axis=1) / n
    return np.where(n > 0, out, np.nan)
