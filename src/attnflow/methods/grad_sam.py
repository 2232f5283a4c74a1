"""Grad-SAM (Barkan et al., CIKM 2021): attention weighted by the positive part of its gradient.

Per layer l, with A(l, h) the attention probabilities of head h and ∇A(l, h) = ∂ y / ∂ A(l, h)
the gradient of the explained logit y (the predicted class, by default):

    G(l) = mean_h [ ReLU(∇A(l, h)) ⊙ A(l, h) ]

one map per layer, no composition across layers (unlike Chefer's rule, no identity term); the
paper's token scores are the classification row of G averaged over layers — here each layer's
row is kept, so tables and figures read it per layer like the other methods (mean over layers:
``maps.mean(axis=layer)``). `heads` may be "mean" (the paper), "sum", "max" or one head.
Cost: one forward and one backward, as Chefer's generic rule.

Written on the method kit (`attnflow.explain.kit`): the kit checks `residual` (Grad-SAM has none),
`heads` and `rows`, fetches ∇A by its name, pads and hands the maps back in attn's kind; this
module holds the algorithm and its record only. numpy in: float64 numpy; torch in: torch on the
tensors' device, in attn's dtype promoted to at least float32 (float64 tensors for float64).
"""

from __future__ import annotations

import numpy as np

from attnflow.explain.kit import Batch, attention_method

from . import MethodRecord

__all__ = ["RECORDS", "grad_sam_map"]


@attention_method(needs=("attn_grad",))
def grad_sam_map(batch: Batch, *, heads: str | int, attn_grad: np.ndarray) -> np.ndarray:
    """G(l) = agg_h ReLU(∇A(l, h)) ⊙ A(l, h) per layer, [..., layer, query, key], in attn's kind;
    padding 0. `residual` is checked but not applied (Grad-SAM weighs the attention itself).

    >>> a = np.array([[[[0.5, 0.5], [0.2, 0.8]]]])  # one layer, one head, two tokens
    >>> g = np.array([[[[1.0, -1.0], [0.5, 2.0]]]])
    >>> grad_sam_map(a, attn_grad=g).tolist()
    [[[0.5, 0.0], [0.1, 1.6]]]
    """
    # .clip(min=0.0): ReLU in numpy and in torch alike, so torch tensors stay on their device
    weighted = attn_grad.clip(min=0.0) * batch.heads()  # (B, L, H, T, T), padding 0
    return batch.aggregate(weighted, heads)  # (B, L, T, T)


RECORDS = (
    MethodRecord(
        "grad_sam", "Grad-SAM", grad_sam_map, rows="classification", row_sums="nonnegative", order=45,
        summary="attention weighted by ReLU of its gradient, per layer (Barkan et al., CIKM 2021)",
    ),
)  # fmt: skip
