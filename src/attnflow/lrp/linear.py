"""LRP through a linear layer: the αβ rule (Bach et al. 2015; Chefer et al. 2021 use α = 1, β = 0)."""

from __future__ import annotations

from torch import Tensor

from ._safe import safe_divide

__all__ = ["linear_relevance"]


def linear_relevance(x: Tensor, weight: Tensor, relevance: Tensor, *, alpha: float = 1.0) -> Tensor:
    """Relevance of the input of y = x Wᵀ + b from the relevance of y (the bias gets none).

    αβ rule with β = α - 1: split every contribution z_ji = x_j w_ij into the "activating" part
    x⁺w⁺ + x⁻w⁻ (>= 0) and the "inhibiting" part x⁺w⁻ + x⁻w⁺ (<= 0); then
        R_j = Σ_i [ α (x⁺_j w⁺_ij + x⁻_j w⁻_ij) / Z⁺_i  -  β (x⁺_j w⁻_ij + x⁻_j w⁺_ij) / Z⁻_i ] R_i
    with Z⁺_i, Z⁻_i the sums of each part over j. α = 1 (the authors' setting) keeps only the
    activating part, and conserves: Σ_j R_j = Σ_i R_i (for every i with Z⁺_i != 0).

    x: (..., in); weight: (out, in) as nn.Linear; relevance: (..., out). Returns (..., in).

    >>> import torch
    >>> x = torch.tensor([[1.0, -2.0]])
    >>> w = torch.tensor([[3.0, 1.0]])  # y = 3 x0 + x1: activating part 3 (x0), x1 w1 = -2 inhibits
    >>> linear_relevance(x, w, torch.tensor([[1.0]])).tolist()
    [[1.0, 0.0]]
    """
    beta = alpha - 1.0
    wp, wn = weight.clamp(min=0), weight.clamp(max=0)  # (out, in)
    xp, xn = x.clamp(min=0), x.clamp(max=0)  # (..., in)

    def share(w_pos_x: Tensor, w_neg_x: Tensor) -> Tensor:
        z = xp @ w_pos_x.T + xn @ w_neg_x.T  # (..., out)
        s = safe_divide(relevance, z)  # (..., out)
        return xp * (s @ w_pos_x) + xn * (s @ w_neg_x)  # (..., in)

    out = share(wp, wn)
    if beta == 0:
        return out if alpha == 1 else alpha * out
    return alpha * out - beta * share(wn, wp)
