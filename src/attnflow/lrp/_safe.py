"""Stabilised division shared by the LRP rules (internal)."""

from __future__ import annotations

import torch
from torch import Tensor

# The authors' stabiliser (Transformer-Explainability, layers_ours.safe_divide): a / (b + 1e-9),
# and exactly 0 where b == 0. Far below float32 resolution for activations of order 1e-3 or more,
# so it changes no conserved sum by more than ~1e-6.
STABILIZER = 1e-9


def safe_divide(a: Tensor, b: Tensor) -> Tensor:
    """a / (b + STABILIZER), 0 where b == 0 (as the authors' ``safe_divide``)."""
    den = b + STABILIZER
    den = torch.where(den == 0, torch.full_like(den, STABILIZER), den)
    return torch.where(b == 0, torch.zeros_like(den), a / den)
