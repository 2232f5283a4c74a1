"""Grad-SAM (Barkan et al., CIKM 2021): attention weighted by the positive part of its gradient.

Per layer l, with A(l, h) the attention probabilities of head h and ∇A(l, h) = ∂ y / ∂ A(l, h)
the gradient of the explained logit y (the predicted class, by default):

    G(l) = mean_h [ ReLU(∇A(l, h)) ⊙ A(l, h) ]

one map per layer, no composition across layers (unlike Chefer's rule, no identity term); the
paper's token scores are the classification row of G averaged over layers — here each layer's
row is kept, so tables and figures read it per layer like the other methods (mean over layers:
``maps.mean(axis=layer)``). `heads` may be "mean" (the paper), "sum", "max" or one head.
Cost: one forward and one backward, as Chefer's generic rule.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import MethodRecord

__all__ = ["RECORDS", "grad_sam_map"]

RECORDS = (
    MethodRecord(
        "grad_sam", "Grad-SAM", f"{__name__}:grad_sam_map", needs=("attn_grad",), rows="classification", order=45,
        summary="attention weighted by ReLU of its gradient, per layer (Barkan et al., CIKM 2021)",
    ),
)  # fmt: skip


def grad_sam_map(
    attn: Any,
    *,
    attn_grad: Any = None,  # ∂y/∂A, shaped like attn (its one need; a missing one is named)
    heads: str | int = "mean",  # how the weighted heads are combined
    rows: int | list[int] | None = None,
    mask: Any = None,
    lengths: Any = None,
    residual: float = 0.5,  # checked, not applied
) -> Any:
    """G(l) = agg_h ReLU(∇A(l, h)) ⊙ A(l, h) per layer, [..., layer, query, key], in attn's kind;
    padding 0. `residual` is checked but not applied (Grad-SAM weighs the attention itself).

    >>> a = np.array([[[[0.5, 0.5], [0.2, 0.8]]]])  # one layer, one head, two tokens
    >>> g = np.array([[[[1.0, -1.0], [0.5, 2.0]]]])
    >>> grad_sam_map(a, attn_grad=g).tolist()
    [[[0.5, 0.0], [0.1, 1.6]]]
    """
    from attnflow.explain._common import (
        Prepared,
        aggregate_heads,
        check_heads,
        check_residual,
        head_stack,
        prepare,
    )
    from attnflow.explain.registry import _rows_index, _take_rows
    from attnflow.explain.relevance import _companion

    check_residual(residual)
    idx = _rows_index(attn, rows, lengths, mask)
    p = prepare(attn, lengths=lengths, mask=mask)
    check_heads(heads, p.attn.shape[2])
    grad = _companion(attn_grad, "attn_grad", p, "grad_sam")  # (B, L, H, T, T) float64, padding 0
    weighted = np.maximum(grad, 0.0) * head_stack(p, renormalize=False)
    maps = aggregate_heads(
        Prepared(weighted, p.valid, p.batched, attn), heads, renormalize=False
    )  # (B, L, T, T)
    return _take_rows(p.to_output(maps), idx)
