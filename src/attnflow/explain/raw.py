"""Raw attention: the head-aggregated attention of each layer (Abnar & Zuidema 2020, "raw")."""

from __future__ import annotations

from typing import Any

from ._common import aggregate_heads, is_torch, prepare

__all__ = ["raw_attention"]


def raw_attention(
    attn: Any,
    *,
    heads: str | int = "mean",
    lengths: Any = None,
    mask: Any = None,
    renormalize: bool = False,
) -> Any:
    """Head-aggregated attention per layer, without the residual (the paper's raw attention).

    W(l) = agg_h attn[l, h], agg = mean over heads (default), sum, max, or one head (an int).
    Abnar & Zuidema (2020), Section 2 and Tables 1-3 ("Raw"): read the CLS row of W(l).

    attn: [layer, head, query, key] or [batch, layer, head, query, key] probabilities (numpy or
    torch); lengths (batch,) or mask (batch, key) mark real tokens of a padded batch.
    renormalize: rescale each head's rows to sum to 1 instead of rejecting rows that do not.
    Returns [..., layer, query, key] of the input's kind; padded rows and columns are exactly 0.
    A torch tensor is computed with torch on its own device, in its dtype promoted to at least
    float32 (pass ``attn.double()`` for float64); numpy in float64.

    >>> import numpy as np
    >>> attn = np.array([[[[1.0, 0.0], [0.5, 0.5]], [[0.0, 1.0], [0.5, 0.5]]]])  # (1 layer, 2 heads, 2, 2)
    >>> raw_attention(attn).tolist()
    [[[0.5, 0.5], [0.5, 0.5]]]
    >>> raw_attention(attn, heads=1)[0, 0].tolist()
    [0.0, 1.0]
    """
    if is_torch(attn):
        from . import torch_ops

        t = torch_ops.prepare(attn, lengths=lengths, mask=mask, renormalize=renormalize)
        return t.to_output(torch_ops.aggregate_heads(t, heads))
    p = prepare(attn, lengths=lengths, mask=mask, renormalize=renormalize)
    w = aggregate_heads(p, heads, renormalize=renormalize)  # (B, L, T, T)
    return p.to_output(w)
