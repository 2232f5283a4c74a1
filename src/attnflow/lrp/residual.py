"""LRP through a residual sum u + v, with the normalisation of Chefer et al. (CVPR 2021, eq. 7-8)."""

from __future__ import annotations

from torch import Tensor

from ._safe import safe_divide

__all__ = ["add_relevance"]


def add_relevance(u: Tensor, v: Tensor, relevance: Tensor) -> tuple[Tensor, Tensor]:
    """Split the relevance of z = u + v between the operands, each sample's total conserved.

    LRP-0 per operand, R̃u = u ⊙ R / z and R̃v = v ⊙ R / z; then each is rescaled so that its
    sum is its share of the sample's total (Chefer et al. 2021, eq. 8):
        Ru = R̃u · (|ΣR̃u| / (|ΣR̃u| + |ΣR̃v|)) · ΣR / ΣR̃u,   likewise Rv,
    so ΣRu + ΣRv = ΣR and each operand's sum lies between 0 and ΣR (for ΣR >= 0).
    Sums run over every axis but the first (the batch): samples never mix. (The authors sum
    over the whole tensor, batch included; their batches hold one sample.)

    u, v, relevance: (B, ...) of one shape. Returns (Ru, Rv) of that shape.

    >>> import torch
    >>> u, v = torch.tensor([[-2.0, 1.0]]), torch.tensor([[4.0, 1.0]])  # z = [2, 2]
    >>> ru, rv = add_relevance(u, v, torch.tensor([[0.5, 0.5]]))
    >>> # LRP-0: R̃u = [-.5, .25] (sum -.25), R̃v = [1, .25] (sum 1.25); shares .25/1.5 and 1.25/1.5 of 1
    >>> [round(x, 4) for x in ru[0].tolist()], [round(x, 4) for x in rv[0].tolist()]
    ([0.3333, -0.1667], [0.6667, 0.1667])
    """
    if not (u.shape == v.shape == relevance.shape):
        raise ValueError(
            f"u, v and relevance must share one shape, got {u.shape}, {v.shape}, {relevance.shape}"
        )
    s = safe_divide(relevance, u + v)
    ru, rv = u * s, v * s  # LRP-0 per operand
    dims = tuple(range(1, u.ndim))
    su, sv = ru.sum(dims, keepdim=True), rv.sum(dims, keepdim=True)  # (B, 1, ...)
    total = relevance.sum(dims, keepdim=True)
    both = su.abs() + sv.abs()
    ru = ru * safe_divide(safe_divide(su.abs(), both) * total, su)
    rv = rv * safe_divide(safe_divide(sv.abs(), both) * total, sv)
    return ru, rv
