"""LRP through the two attention products QKᵀ and AV: LRP-0 on both operands, each halved."""

from __future__ import annotations

from torch import Tensor

from ._safe import safe_divide

__all__ = ["attention_relevance", "matmul_relevance"]


def matmul_relevance(a: Tensor, b: Tensor, relevance: Tensor) -> tuple[Tensor, Tensor]:
    """Relevance of both operands of z = a @ b (batched over leading axes), each half of LRP-0.

    With S = R / z (stabilised): Ra = a ⊙ (S bᵀ) / 2, Rb = b ⊙ (aᵀ S) / 2. LRP-0 gives each
    operand the full ΣR (z is linear in either one), so halving both (as the authors do)
    conserves: ΣRa + ΣRb = ΣR.

    a: (..., n, k); b: (..., k, m); relevance: (..., n, m). Returns (Ra, Rb) shaped like a, b.

    >>> import torch
    >>> a = torch.tensor([[0.5, 0.5]])  # one attention row over two keys
    >>> b = torch.tensor([[1.0], [3.0]])  # their values: z = 2
    >>> ra, rb = matmul_relevance(a, b, torch.tensor([[1.0]]))
    >>> ra.tolist(), rb.tolist()  # a: 1/2 * [.25, .75]; b: 1/2 * [.25, .75]
    ([[0.125, 0.375]], [[0.125], [0.375]])
    """
    s = safe_divide(relevance, a @ b)  # (..., n, m)
    ra = a * (s @ b.transpose(-1, -2)) * 0.5
    rb = b * (a.transpose(-1, -2) @ s) * 0.5
    return ra, rb


def attention_relevance(
    q: Tensor, k: Tensor, v: Tensor, attn: Tensor, relevance: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """LRP through context = softmax(q kᵀ · scale + mask) v, per head.

    R(A), R(v) = matmul rule on A v; softmax, the scale and the additive mask pass R(A) on
    unchanged (identity, as the authors' code); R(q), R(k) = matmul rule on q kᵀ.
    q, k, v: (B, H, T, D); attn: (B, H, T, T); relevance: (B, H, T, D) of the context.
    Returns R(A) (B, H, T, T) -- Chefer et al.'s attention relevance -- and R(q), R(k), R(v).
    Total: ΣR(q) + ΣR(k) + ΣR(v) = ΣR (R(A) is the intermediate, not an extra share).
    """
    r_attn, r_v = matmul_relevance(attn, v, relevance)  # (B, H, T, T), (B, H, T, D)
    r_q, r_kt = matmul_relevance(q, k.transpose(-1, -2), r_attn)  # (B, H, T, D), (B, H, D, T)
    return r_attn, r_q, r_kt.transpose(-1, -2), r_v
