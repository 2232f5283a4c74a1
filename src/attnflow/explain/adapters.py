"""The built-in attention methods, written on the method kit (`attnflow.explain.kit`): each holds its
algorithm's call only; the kit checks residual, heads and rows, fetches the needs and pads.

    raw          W(l) = agg_h A(l, h)                                      (no residual)
    rollout      Ã(l) = A(l) Ã(l-1), A = (1 - residual) W + residual I      rows sum to 1
    flow         max flow from (l + 1, i) to input j, rows normalised       rows sum to 1
    chefer       R(l) = R(l-1) + mean_h[(∇A ⊙ A)⁺] R(l-1), R = I             rows sum to >= 1
    chefer_lrp   C(l) = rownorm(I + mean_h[(∇A ⊙ R(A))⁺]) C(l-1)            rows sum to 1

raw, rollout and flow also take the causal options of decoders: sinks= / sink_positions= /
receptive_field= (`attnflow.explain.causal`, `attnflow.explain.receptive_field`); the defaults are
the plain methods. The chefer rules take start_layer= and cls_self= (`attnflow.explain.relevance`).
The per-head variants (Appendix A.1) are here too. Their records are in `attnflow.methods.builtin`.

The flow solver (compiled kernels) is imported on first use, so that importing the records stays light.

>>> import numpy as np
>>> attn = np.array([[[[1.0, 0.0], [0.5, 0.5]]], [[[0.5, 0.5], [0.0, 1.0]]]])  # (2, 1, 2, 2)
>>> [m(attn, residual=0.0, rows=[0])[1, 0].round(4).tolist() for m in (raw_map, rollout_map, flow_map)]
[[0.5, 0.5], [0.75, 0.25], [0.6667, 0.3333]]
>>> chefer_map(attn, attn_grad=np.ones_like(attn), rows=[0])[1, 0].tolist()  # ((I + A2)(I + A1))[0]
[3.25, 0.75]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .kit import Batch, attention_method
from .raw import raw_attention
from .relevance import _check_options, _lrp_maps, chefer_generic
from .rollout import attention_rollout

__all__ = [
    "chefer_lrp_map",
    "chefer_map",
    "flow_heads",
    "flow_map",
    "raw_heads",
    "raw_map",
    "rollout_heads",
    "rollout_map",
]


def _plain(sinks: str, receptive_field: str) -> bool:
    return sinks == "none" and receptive_field == "none"


@attention_method
def raw_map(
    batch: Batch,
    *,
    heads: str | int,
    sinks: str = "none",
    sink_positions: Any = "auto",
    receptive_field: str = "none",
) -> Any:
    """Raw attention per layer, [..., layer, query, key]; `residual` is checked but not applied
    (the paper's raw attention has no residual)."""
    if _plain(sinks, receptive_field):
        return raw_attention(batch.attn, heads=heads, mask=batch.valid)
    from .receptive_field import causal_raw

    return causal_raw(batch.attn, heads=heads, sinks=sinks, sink_positions=sink_positions,
                      receptive_field=receptive_field, mask=batch.valid)  # fmt: skip


@attention_method(uses_residual=True)
def rollout_map(
    batch: Batch, *, heads: str | int, residual: float, sinks: str = "none", sink_positions: Any = "auto",
    receptive_field: str = "none",
) -> Any:  # fmt: skip
    """Attention rollout up to every layer, [..., layer, query, key]; rows sum to 1
    (`attnflow.explain.attention_rollout`, or `causal_rollout` with causal options)."""
    if _plain(sinks, receptive_field):
        return attention_rollout(batch.attn, residual=residual, heads=heads, mask=batch.valid)
    from .receptive_field import causal_rollout

    return causal_rollout(batch.attn, residual=residual, heads=heads, sinks=sinks, sink_positions=sink_positions,
                          receptive_field=receptive_field, mask=batch.valid)  # fmt: skip


@attention_method(uses_residual=True, selects_rows=True)
def flow_map(
    batch: Batch, *, heads: str | int, residual: float, rows: list[int] | None, sinks: str = "none",
    sink_positions: Any = "auto", receptive_field: str = "none",
) -> Any:  # fmt: skip
    """Attention flow from (layer l, query i) to input j, each row normalised to sum 1; only the rows
    asked for are computed (the cost grows with them). `attnflow.explain.attention_flow`, or
    `causal_flow` with causal options."""
    if _plain(sinks, receptive_field):
        from .flow import attention_flow

        return attention_flow(batch.attn, residual=residual, heads=heads, sources=rows, mask=batch.valid)
    from .receptive_field import causal_flow

    return causal_flow(batch.attn, residual=residual, heads=heads, sources=rows, sinks=sinks,
                       sink_positions=sink_positions, receptive_field=receptive_field, mask=batch.valid)  # fmt: skip


@attention_method(needs=("attn_grad",))
def chefer_map(
    batch: Batch, *, heads: str | int, attn_grad: np.ndarray, start_layer: int = 0, cls_self: str = "keep"
) -> Any:
    """Chefer et al.'s generic relevance (ICCV 2021) up to every layer, [..., layer, query, key];
    `residual` is checked but not applied (the rule's identity term plays its part)."""
    return chefer_generic(batch.attn, attn_grad, heads=heads, start_layer=start_layer, cls_self=cls_self,
                          mask=batch.valid)  # fmt: skip


@attention_method(needs=("attn_grad", "attn_relevance"))
def chefer_lrp_map(
    batch: Batch, *, heads: str | int, attn_grad: np.ndarray, attn_relevance: np.ndarray, start_layer: int = 0,
    cls_self: str = "keep",
) -> np.ndarray:  # fmt: skip
    """Chefer et al.'s LRP-based relevance (CVPR 2021) up to every layer, [..., layer, query, key];
    rows sum to 1. `residual` is checked but not applied (rownorm(I + Ā) is fixed)."""
    start = _check_options(start_layer, cls_self, batch.attn.shape[1])
    return _lrp_maps(batch.prepared, attn_relevance, attn_grad, heads, start, cls_self)


# Per-head variants (Appendix A.1): head k at layer i on top of the all-heads maps below,
# fn(attn, *, sources, heads, residual, lengths) -> (B, L, H, R, T).


def raw_heads(attn: np.ndarray, *, sources: list[int] | None, **_: Any) -> np.ndarray:
    """Head k's own attention at each layer: (B, L, H, R, T)."""
    return attn[:, :, :, sources] if sources else attn


def rollout_heads(attn: np.ndarray, *, sources: list[int] | None, heads: Any, **common: Any) -> np.ndarray:
    """Rollout of head k at layer i on the all-heads rollout below: (B, L, H, R, T)."""
    from .heads import head_rollout

    return head_rollout(attn, heads_below=heads, **common)[..., sources or slice(None), :]


def flow_heads(attn: np.ndarray, *, sources: list[int] | None, heads: Any, **common: Any) -> np.ndarray:
    """Flow of head k at layer i on the all-heads flow below: (B, L, H, R, T)."""
    from .heads import head_flow

    return head_flow(attn, heads_below=heads, sources=sources, **common)
