"""EXPLAINERS: the explanation methods by name, all callable the same way (for the pipeline).

Every entry is fn(attn, *, residual=0.5, heads="mean", rows=None, lengths=None, mask=None, **extra)
and returns, per layer, a token-attribution map [..., layer, query, key] (numpy in -> numpy out,
torch in -> torch out): entry [l, i, j] is how much input token j is attributed to position i at
layer l (0-based; l = 0 is the paper's L1). rows=[0] returns only the CLS row(s),
[..., layer, len(rows), key] -- the cheap path for flow, whose cost grows with the rows asked for.
Padded positions (lengths / mask) are 0. Then reduce rows with `select_rows`.
`EXPLAINER_INPUTS[name]` lists the extra inputs a method needs, passed as keyword arguments shaped
like attn (what a pipeline must capture besides attn; `attnflow.lrp.lrp_relevance` returns both).

- "raw": head-aggregated attention W(l) (no residual: `residual` is validated and ignored).
- "rollout": Ã(l) = A(l) Ã(l-1), A = (1 - residual) W + residual I; rows sum to 1.
- "flow": max-flow value from node (l+1, i) to input node (0, j), each row normalised to sum 1.
  Both also take sinks= / sink_positions= / receptive_field= for causal attention (attention
  sinks and the receptive-field bias of decoders, `attnflow.explain.causal`); defaults: plain.
- "chefer": the generic rule of Chefer et al. (ICCV 2021), needs attn_grad (∂ logit / ∂ attn):
  R(l) = R(l-1) + mean_h[(∇A ⊙ A)⁺] R(l-1) from R = I; rows sum to >= 1 (`residual` ignored).
- "chefer_lrp": Chefer et al. (CVPR 2021), needs attn_grad and attn_relevance (LRP's R(A)):
  C(l) = rownorm(I + mean_h[(∇A ⊙ R(A))⁺]) C(l-1); rows sum to 1 (`residual` ignored).
  Both also take start_layer= and cls_self= (see `attnflow.explain.relevance`).

>>> import numpy as np
>>> attn = np.array([[[[1.0, 0.0], [0.5, 0.5]]], [[[0.5, 0.5], [0.0, 1.0]]]])  # (2, 1, 2, 2)
>>> {name: fn(attn, residual=0.0, rows=[0])[1, 0].round(4).tolist()
...  for name, fn in EXPLAINERS.items() if not EXPLAINER_INPUTS[name]}
{'raw': [0.5, 0.5], 'rollout': [0.75, 0.25], 'flow': [0.6667, 0.3333]}
>>> EXPLAINERS["chefer"](attn, attn_grad=np.ones_like(attn), rows=[0])[1, 0].tolist()  # ((I + A2)(I + A1))[0]
[3.25, 0.75]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from attnflow.method_inputs import EXPLAINER_INPUTS as _INPUTS
from attnflow.methods import METHODS

from ._common import check_heads, check_positions, check_residual, prepare, valid_positions
from .flow import attention_flow
from .raw import raw_attention
from .receptive_field import causal_flow, causal_rollout
from .relevance import _check_options, _companion, _lrp_maps, chefer_generic
from .rollout import attention_rollout

__all__ = ["EXPLAINERS", "EXPLAINER_INPUTS", "Explainer"]

# fn(attn, *, residual, heads, rows, lengths, mask, **extra) -> [..., layer, query (or len(rows)), key]
Explainer = Callable[..., Any]


def _rows_index(attn: Any, rows: int | list[int] | None, lengths: Any, mask: Any) -> np.ndarray | None:
    """Check the rows asked for: in range, and a real token of every sample."""
    if rows is None:
        return None
    shape = attn.shape if hasattr(attn, "shape") else np.shape(attn)
    tokens = shape[-1]
    idx = check_positions(rows, "rows", tokens, f"the input has {tokens} query rows")
    if (lengths is not None or mask is not None) and len(shape) == 5:
        valid = valid_positions(lengths, mask, shape[0], tokens)  # (B, T)
        if not valid[:, idx].all():
            b, r = np.argwhere(~valid[:, idx])[0]
            raise ValueError(f"rows index {int(idx[r])} out of range: it is padding in sample {int(b)}")
    return idx


def _take_rows(maps: Any, idx: np.ndarray | None) -> Any:
    """maps [..., layer, query, key] -> [..., layer, len(idx), key]; None keeps every row."""
    if idx is None:
        return maps
    if hasattr(maps, "index_select"):  # torch
        import torch

        return maps.index_select(-2, torch.as_tensor(idx, device=maps.device))
    return maps[..., idx, :]


def raw_map(
    attn: Any,
    *,
    residual: float = 0.5,
    heads: str | int = "mean",
    rows: int | list[int] | None = None,
    lengths: Any = None,
    mask: Any = None,
) -> Any:
    """Raw attention per layer, [..., layer, query, key]; `residual` is checked but not applied
    (the paper's raw attention has no residual)."""
    check_residual(residual)
    idx = _rows_index(attn, rows, lengths, mask)
    return _take_rows(raw_attention(attn, heads=heads, lengths=lengths, mask=mask), idx)


def rollout_map(
    attn: Any,
    *,
    residual: float = 0.5,
    heads: str | int = "mean",
    rows: int | list[int] | None = None,
    lengths: Any = None,
    mask: Any = None,
    sinks: str = "none",
    sink_positions: Any = "auto",
    receptive_field: str = "none",
) -> Any:
    """Attention rollout up to every layer, [..., layer, query, key]; rows sum to 1.

    For causal (decoder) attention: sinks ("none", "drop", "diagonal", "auto") at sink_positions
    ("auto" or explicit) and receptive_field ("none", "column", "uniform"); see
    `attnflow.explain.causal_rollout`. The defaults are plain rollout."""
    idx = _rows_index(attn, rows, lengths, mask)
    if sinks == "none" and receptive_field == "none":
        maps = attention_rollout(attn, residual=residual, heads=heads, lengths=lengths, mask=mask)
    else:
        maps = causal_rollout(attn, residual=residual, heads=heads, sinks=sinks, sink_positions=sink_positions,
                              receptive_field=receptive_field, lengths=lengths, mask=mask)  # fmt: skip
    return _take_rows(maps, idx)


def flow_map(
    attn: Any,
    *,
    residual: float = 0.5,
    heads: str | int = "mean",
    rows: int | list[int] | None = None,
    lengths: Any = None,
    mask: Any = None,
    sinks: str = "none",
    sink_positions: Any = "auto",
    receptive_field: str = "none",
) -> Any:
    """Attention flow from (layer l, query i) to input j, each row normalised to sum 1.

    rows=[0] computes the CLS rows only (cost grows with the number of rows). sinks,
    sink_positions and receptive_field as in `rollout_map` (see `attnflow.explain.causal_flow`)."""
    idx = _rows_index(attn, rows, lengths, mask)
    sources = None if idx is None else idx.tolist()
    if sinks == "none" and receptive_field == "none":
        return attention_flow(
            attn, residual=residual, heads=heads, sources=sources, lengths=lengths, mask=mask
        )
    return causal_flow(attn, residual=residual, heads=heads, sources=sources, sinks=sinks,
                       sink_positions=sink_positions, receptive_field=receptive_field, lengths=lengths,
                       mask=mask)  # fmt: skip


def chefer_map(
    attn: Any,
    *,
    residual: float = 0.5,
    heads: str | int = "mean",
    rows: int | list[int] | None = None,
    lengths: Any = None,
    mask: Any = None,
    attn_grad: Any = None,
    start_layer: int = 0,
    cls_self: str = "keep",
) -> Any:
    """Chefer et al.'s generic relevance (ICCV 2021) up to every layer, [..., layer, query, key];
    `residual` is checked but not applied (the rule's identity term plays its part)."""
    check_residual(residual)
    idx = _rows_index(attn, rows, lengths, mask)
    maps = chefer_generic(
        attn, attn_grad, heads=heads, start_layer=start_layer, cls_self=cls_self, lengths=lengths, mask=mask
    )
    return _take_rows(maps, idx)


def chefer_lrp_map(
    attn: Any,
    *,
    residual: float = 0.5,
    heads: str | int = "mean",
    rows: int | list[int] | None = None,
    lengths: Any = None,
    mask: Any = None,
    attn_grad: Any = None,
    attn_relevance: Any = None,
    start_layer: int = 0,
    cls_self: str = "keep",
) -> Any:
    """Chefer et al.'s LRP-based relevance (CVPR 2021) up to every layer, [..., layer, query, key],
    in attn's kind; rows sum to 1. `residual` is checked but not applied (rownorm(I + Ā) is fixed)."""
    check_residual(residual)
    idx = _rows_index(attn, rows, lengths, mask)
    p = prepare(attn, lengths=lengths, mask=mask)  # attn itself only fixes shape, kind and padding
    check_heads(heads, p.attn.shape[2])
    start = _check_options(start_layer, cls_self, p.attn.shape[1])
    relevance = _companion(attn_relevance, "attn_relevance", p, "chefer_lrp")
    grad = _companion(attn_grad, "attn_grad", p, "chefer_lrp")
    return _take_rows(p.to_output(_lrp_maps(p, relevance, grad, heads, start, cls_self)), idx)


def _implementation(record: Any) -> Explainer:
    """A record's function: this module's own by name (it is still being imported), else imported."""
    module, _, name = record.implementation.partition(":")
    return globals()[name] if module == __name__ else record.load()


# Every attention method of the records (attnflow.methods), in their order.
EXPLAINERS: dict[str, Explainer] = {
    r.name: _implementation(r) for r in METHODS.values() if r.kind == "attention"
}

# The inputs each method needs besides attn, as keyword arguments shaped like attn:
# attn_grad = ∂ logit[target] / ∂ attn; attn_relevance = LRP relevance R(A) of each attention map.
# What each method needs beside attn: attnflow.method_inputs (light, so configs validate without
# importing the solvers); EXPLAINERS must hold exactly its names.
EXPLAINER_INPUTS = _INPUTS
