"""Importance scores from a model: take a callable classifier and a batch, return ``(B, T)`` scores.

``ATTRIBUTIONS`` maps the study's names to the functions; all share the call
``fn(model, input_ids (B, T), attention_mask (B, T), **options) -> Tensor (B, T)``.
``perturbation_curve`` is not an importance score (it evaluates one), so it is not in the registry;
nor is ``random_scores`` (the seeded floor needs each sample's index in the data set, not a model).
"""

from .blank_out import PAD_ID, blank_out
from .input_gradients import REDUCTIONS, TARGETS, input_gradients
from .perturbation import (
    CHEFER_FRACTIONS,
    FERRET_FRACTIONS,
    MODES,
    ROUNDINGS,
    perturbation_curve,
    random_scores,
)

ATTRIBUTIONS = {
    "blank_out": blank_out,
    "input_gradients": input_gradients,
}

__all__ = [
    "ATTRIBUTIONS",
    "CHEFER_FRACTIONS",
    "FERRET_FRACTIONS",
    "MODES",
    "PAD_ID",
    "REDUCTIONS",
    "ROUNDINGS",
    "TARGETS",
    "blank_out",
    "input_gradients",
    "perturbation_curve",
    "random_scores",
]
