"""The attention graph's edge weights: head-aggregated attention with the residual mixed in."""

from __future__ import annotations

from typing import Any

from ._common import aggregate_heads, check_residual, mix_residual, prepare

__all__ = ["attention_graph"]


def attention_graph(
    attn: Any,
    *,
    residual: float = 0.5,
    heads: str | int = "mean",
    renormalize: bool = False,
    lengths: Any = None,
    mask: Any = None,
) -> Any:
    """Edge weights of the layered attention graph that rollout multiplies and flow cuts.

    A(l) = (1 - residual) W(l) + residual I with rows re-normalised, W(l) the head aggregate
    (mean by default): the edge (l, i) -> (l - 1, j) has weight A(l)[i, j] (Abnar & Zuidema 2020,
    Section 3). Returns [..., layer, query, key] of the input's kind; padding exactly 0.

    >>> import numpy as np
    >>> attention_graph(np.array([[[[0.0, 1.0], [1.0, 0.0]]]]))[0].tolist()  # (1, 1, 2, 2)
    [[0.5, 0.5], [0.5, 0.5]]
    """
    residual = check_residual(residual)
    p = prepare(attn, lengths=lengths, mask=mask, renormalize=renormalize)
    return p.to_output(mix_residual(aggregate_heads(p, heads, renormalize=renormalize), p.valid, residual))
