"""Attention rollout (Abnar & Zuidema 2020, eq. 1)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._common import aggregate_heads, check_residual, is_torch, mix_residual, prepare

__all__ = ["attention_rollout"]


def _rollout(a: np.ndarray) -> np.ndarray:
    """Cumulative products R(l) = A(l) @ R(l-1), R(1) = A(1). a: (B, L, T, T) -> (B, L, T, T)."""
    out = np.empty_like(a)
    out[:, 0] = a[:, 0]
    for layer in range(1, a.shape[1]):
        out[:, layer] = a[:, layer] @ out[:, layer - 1]  # (B, T, T)
    return out


def attention_rollout(
    attn: Any,
    *,
    residual: float = 0.5,
    heads: str | int = "mean",
    lengths: Any = None,
    mask: Any = None,
    renormalize: bool = False,
) -> Any:
    """Attention rollout up to every layer.

    W(l) = heads aggregated (mean by default), A(l) = (1 - residual) W(l) + residual I with rows
    re-normalised, and rollout Ã(l) = A(l) Ã(l-1), Ã(1) = A(1) (Abnar & Zuidema 2020, eq. 1, with
    the residual of Section 3; residual = 0 gives the plain product of attention maps).
    Row i of Ã(l) says how much of token j's identity reaches position i at layer l; rows sum to 1.

    attn: [layer, head, query, key] or [batch, layer, head, query, key] (numpy or torch);
    lengths / mask mark real tokens of a padded batch; renormalize rescales input rows.
    Returns [..., layer, query, key] of the input's kind; padded rows and columns are exactly 0.
    A torch tensor is computed with torch on its own device, in its dtype promoted to at least
    float32 (pass ``attn.double()`` for float64); numpy in float64.

    >>> import numpy as np
    >>> a1 = [[1.0, 0.0], [0.5, 0.5]]
    >>> a2 = [[0.5, 0.5], [0.0, 1.0]]
    >>> attn = np.array([[a1], [a2]])  # (2 layers, 1 head, 2, 2)
    >>> attention_rollout(attn, residual=0.0)[1, 0].tolist()  # (A2 @ A1)[0]
    [0.75, 0.25]
    >>> attention_rollout(attn)[0].tolist()  # layer 1 = 0.5 A1 + 0.5 I
    [[1.0, 0.0], [0.25, 0.75]]
    """
    residual = check_residual(residual)
    if is_torch(attn):
        from . import torch_ops

        t = torch_ops.prepare(attn, lengths=lengths, mask=mask, renormalize=renormalize)
        return t.to_output(
            torch_ops.rollout(torch_ops.mix_residual(torch_ops.aggregate_heads(t, heads), t.valid, residual))
        )
    p = prepare(attn, lengths=lengths, mask=mask, renormalize=renormalize)
    w = aggregate_heads(p, heads, renormalize=renormalize)  # (B, L, T, T)
    return p.to_output(_rollout(mix_residual(w, p.valid, residual)))
