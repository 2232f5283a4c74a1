"""Single-head analysis (Abnar & Zuidema 2020, Appendix A.1): one head on top of all heads below."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._common import (
    aggregate_heads,
    check_heads,
    check_positions,
    check_residual,
    head_stack,
    mix_residual,
    normalize_rows,
    prepare,
)
from .flow import flow_rows
from .rollout import _rollout

__all__ = ["head_flow", "head_rollout"]


def head_rollout(
    attn: Any,
    *,
    residual: float = 0.5,
    heads_below: str | int = "mean",
    lengths: Any = None,
    mask: Any = None,
    renormalize: bool = False,
) -> Any:
    """Rollout of each head k at each layer i on top of the all-heads rollout of the layers below.

    Ã(i, k) = A(i, k) Ā(i-1), Ā(0) = I, where A(i, k) = (1 - residual) W(i, k) + residual I (rows
    re-normalised) for head k alone and Ā is `attention_rollout` with heads=heads_below. Treating
    the layers below as one head keeps the mixing of heads by the feed-forward layers (Appendix A.1).

    Returns [..., layer, head, query, key] of the input's kind; at layer 1 it is A(1, k).

    >>> import numpy as np
    >>> h0 = [[1.0, 0.0], [1.0, 0.0]]
    >>> h1 = [[0.0, 1.0], [0.0, 1.0]]
    >>> attn = np.array([[h0, h1], [h0, h1]])  # (2 layers, 2 heads, 2, 2)
    >>> out = head_rollout(attn, residual=0.0)
    >>> out.shape
    (2, 2, 2, 2)
    >>> out[1, 0, 0].tolist()  # head 0 at layer 2 reads token 0, which below is half each token
    [0.5, 0.5]
    """
    residual = check_residual(residual)
    p = prepare(attn, lengths=lengths, mask=mask, renormalize=renormalize)
    below = _rollout(
        mix_residual(aggregate_heads(p, heads_below, renormalize=renormalize), p.valid, residual)
    )
    per_head = mix_residual(head_stack(p, renormalize=renormalize), p.valid, residual)  # (B, L, H, T, T)
    out = np.empty_like(per_head)
    out[:, 0] = per_head[:, 0]
    out[:, 1:] = per_head[:, 1:] @ below[:, :-1, None]  # (B, L-1, H, T, T) @ (B, L-1, 1, T, T)
    return p.to_output(out)


def head_flow(
    attn: Any,
    *,
    residual: float = 0.5,
    heads_below: str | int = "mean",
    normalize: bool = True,
    sources: int | list[int] | None = None,
    layers: int | list[int] | None = None,
    lengths: Any = None,
    mask: Any = None,
    renormalize: bool = False,
) -> Any:
    """Attention flow from (layer i, position s) through head k alone, all heads below.

    The flow network of `attention_flow` where the edges out of layer i carry head k's
    residual-mixed attention A(i, k) and every layer below carries the head aggregate
    (heads_below, mean by default) (Appendix A.1). sources / layers / normalize as in
    `attention_flow`. Returns [..., len(layers), head, len(sources), key] of the input's kind.

    >>> import numpy as np
    >>> h0 = [[1.0, 0.0], [1.0, 0.0]]
    >>> h1 = [[0.0, 1.0], [0.0, 1.0]]
    >>> attn = np.array([[h0, h1], [h0, h1]])  # (2 layers, 2 heads, 2, 2)
    >>> head_flow(attn, residual=0.0, sources=0, layers=1)[0, :, 0].tolist()
    [[0.5, 0.5], [0.5, 0.5]]
    """
    residual = check_residual(residual)
    if not isinstance(normalize, bool | np.bool_):
        raise ValueError(f"normalize must be True or False, got {normalize!r}")
    p = prepare(attn, lengths=lengths, mask=mask, renormalize=renormalize)
    _, n_layers, n_heads, tokens, _ = p.attn.shape
    check_heads(heads_below, n_heads)
    layer_idx = check_positions(layers, "layers", n_layers, f"the input has {n_layers} layers")
    src = check_positions(sources, "sources", tokens, f"the input has {tokens} positions")
    if sources is not None and not p.valid[:, src].all():
        b, s = np.argwhere(~p.valid[:, src])[0]
        raise ValueError(f"sources index {int(src[s])} out of range: it is padding in sample {int(b)}")
    caps = mix_residual(aggregate_heads(p, heads_below, renormalize=renormalize), p.valid, residual)
    per_head = mix_residual(head_stack(p, renormalize=renormalize), p.valid, residual)  # (B, L, H, T, T)
    # rows ordered (layer, head, source)
    row_layer = np.repeat(layer_idx, n_heads * src.size)
    row_head = np.tile(np.repeat(np.arange(n_heads), src.size), layer_idx.size)
    row_src = np.tile(src, layer_idx.size * n_heads)
    supply = per_head[:, row_layer, row_head, row_src, :]  # (B, R, T): head k's edges out of (i, s)
    values = flow_rows(caps, p.valid, row_layer, supply, p.valid[:, row_src])  # (B, R, T)
    values = values.reshape(values.shape[0], layer_idx.size, n_heads, src.size, tokens)
    if normalize:
        values = normalize_rows(values)
    return p.to_output(values)
