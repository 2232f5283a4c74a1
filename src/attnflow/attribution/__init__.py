"""Importance scores from a model: take a callable classifier and a batch, return ``(B, T)`` scores.

``ATTRIBUTIONS`` maps the study's names to the functions; all share the call
``fn(model, input_ids (B, T), attention_mask (B, T), **options) -> Tensor (B, T)``.
``deletion_curve`` is not an importance score (it evaluates one), so it is not in the registry.
"""

from .blank_out import PAD_ID, blank_out
from .deletion_curve import deletion_curve
from .input_gradients import REDUCTIONS, TARGETS, input_gradients

ATTRIBUTIONS = {
    "blank_out": blank_out,
    "input_gradients": input_gradients,
}

__all__ = [
    "ATTRIBUTIONS",
    "PAD_ID",
    "REDUCTIONS",
    "TARGETS",
    "blank_out",
    "deletion_curve",
    "input_gradients",
]
