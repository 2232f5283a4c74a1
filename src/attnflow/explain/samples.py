"""Explain many ragged samples: every method's per-layer row, and per head (Appendix A.1).

What the study's ``explain`` stage computes. Samples of similar length are explained together
(the flow solver is batched); each sample's attentions come as ``(L, H, T_i, T_i)`` (stored in
float16, so rows are re-normalised in float64 first) and each result is cut back to ``T_i``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from attnflow.batches import length_batches
from attnflow.method_inputs import method_rows
from attnflow.methods import METHODS

from .heads import head_flow, head_rollout
from .registry import EXPLAINER_INPUTS, EXPLAINERS
from .rows import select_rows

__all__ = ["AUTHORS_CLS_SELF", "PER_HEAD", "explain_samples", "pad_attentions"]

# Chefer et al.'s own code for the CLS-to-CLS entry of the maps: min of the CLS row in the CVPR
# (LRP) code, 0 in the generic (ICCV) code. explain_samples(cls_self="authors") applies these.
AUTHORS_CLS_SELF = {"chefer": "zero", "chefer_lrp": "min"}


BATCH = 128  # samples of similar length explained together


def pad_attentions(attn: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(L, H, T_i, T_i) arrays -> (B, L, H, T, T) float64, every sample's rows re-normalised over its
    own keys, padding 0; and the lengths (B,).

    >>> a = np.full((1, 1, 2, 2), 0.5, dtype=np.float16)
    >>> batch, lengths = pad_attentions([a, a[..., :1, :1]])
    >>> batch.shape, lengths.tolist(), batch[1, 0, 0].tolist()
    ((2, 1, 1, 2, 2), [2, 1], [[1.0, 0.0], [0.0, 0.0]])
    """
    lengths = np.array([a.shape[-1] for a in attn])
    out = np.zeros((len(attn), *attn[0].shape[:2], lengths.max(), lengths.max()))
    for i, a in enumerate(attn):
        a = a.astype(np.float64)  # stored as float16: rows sum to 1 within ~1e-3 only
        out[i, :, :, : a.shape[-1], : a.shape[-1]] = a / a.sum(-1, keepdims=True)
    return out, lengths


def _rows(maps: np.ndarray, pick: str, lengths: np.ndarray) -> np.ndarray:
    """select_rows over (B, L, R, T) maps, or (B, L, H, R, T) per-head maps (heads folded into layers)."""
    lengths = None if pick == "cls" else lengths  # only max / mean need to skip padded query rows
    if maps.ndim == 4:
        return select_rows(maps, pick, lengths=lengths)
    b, n_layers, n_heads, r, t = maps.shape
    return select_rows(maps.reshape(b, n_layers * n_heads, r, t), pick, lengths=lengths).reshape(
        b, n_layers, n_heads, t
    )


def _raw_heads(attn: np.ndarray, *, sources: list[int] | None, **_: Any) -> np.ndarray:
    """Head k's own attention at each layer: (B, L, H, R, T)."""
    return attn[:, :, :, sources] if sources else attn


def _rollout_heads(attn: np.ndarray, *, sources: list[int] | None, heads: Any, **common: Any) -> np.ndarray:
    return head_rollout(attn, heads_below=heads, **common)[..., sources or slice(None), :]


def _flow_heads(attn: np.ndarray, *, sources: list[int] | None, heads: Any, **common: Any) -> np.ndarray:
    return head_flow(attn, heads_below=heads, sources=sources, **common)


# Per-head variants (Appendix A.1): head k at layer i on top of the all-heads maps below.
PER_HEAD = {"raw": _raw_heads, "rollout": _rollout_heads, "flow": _flow_heads}


def explain_batch(
    attn: np.ndarray,
    lengths: np.ndarray,
    *,
    methods: Sequence[str],
    residual: float,
    heads: Any,
    rows: str,
    per_head: bool,
    extra: Mapping[str, np.ndarray] | None = None,
    cls_self: str = "authors",
) -> dict[str, np.ndarray]:
    """Per method the (B, L, T) explanation row at each layer, and ``<method>_heads`` (B, L, H, T).

    ``rows``: the task's choice, "cls" (row 0; the cheap path: flow is computed from CLS only),
    "max" or "mean" over the real query rows, for the methods that read the task's rows; the
    class-specific ones read the classification row (:data:`attnflow.method_inputs.METHOD_ROWS`). ``extra``: further padded inputs a method needs (e.g. ``attn_grad``).
    ``cls_self``: the class-specific maps' CLS-to-CLS entry ("authors": :data:`AUTHORS_CLS_SELF`).
    """
    common = dict(residual=residual, lengths=lengths)
    extra = extra or {}
    out = {}
    for m in methods:
        pick = method_rows(m, rows)  # the task's rows, or the classification row (class-specific)
        sources = [0] if pick == "cls" else None  # CLS only: flow costs grow with the rows asked for
        needs = {k: extra[k] for k in EXPLAINER_INPUTS[m]}  # e.g. attention gradients for chefer
        if "cls_self" in METHODS[m].options:  # Chefer's rules: their CLS-to-CLS convention
            needs["cls_self"] = AUTHORS_CLS_SELF.get(m, "keep") if cls_self == "authors" else cls_self
        out[m] = _rows(EXPLAINERS[m](attn, heads=heads, rows=sources, **common, **needs), pick, lengths)
        if per_head and m in PER_HEAD:  # (B, L, H, R, T) -> (B, L, H, T)
            out[f"{m}_heads"] = _rows(
                PER_HEAD[m](attn, sources=sources, heads=heads, **common), pick, lengths
            )
    return out


def explain_samples(
    attn: Sequence[np.ndarray],
    *,
    methods: Sequence[str],
    residual: float = 0.5,
    heads: Any = "mean",
    rows: str = "cls",
    per_head: bool = False,
    extra: Mapping[str, Sequence[np.ndarray]] | None = None,
    cls_self: str = "authors",
    batch_size: int = BATCH,
    progress: bool = False,
) -> dict[str, list[np.ndarray]]:
    """Explain every sample: ``{method: [(L, T_i)]}`` and, with ``per_head``, ``{<method>_heads: [(L, H, T_i)]}``.

    ``attn``: one ``(L, H, T_i, T_i)`` array per sample; ``extra``: per-sample arrays of the same
    shape that a method needs (padded and passed as keyword arguments). Results are in input order.

    >>> a = np.full((2, 1, 3, 3), 1 / 3)
    >>> out = explain_samples([a, a[:, :, :2, :2] * 1.5], methods=["rollout"])
    >>> [m.shape for m in out["rollout"]]
    [(2, 3), (2, 2)]
    """
    from tqdm.auto import tqdm

    if not attn:
        raise ValueError("no samples to explain")
    names = [*methods, *(f"{m}_heads" for m in methods if per_head and m in PER_HEAD)]
    maps: dict[str, list[Any]] = {name: [None] * len(attn) for name in names}
    batches = length_batches([a.shape[-1] for a in attn], batch_size)
    for idx in tqdm(batches, desc="explain", leave=False, disable=not progress):
        batch, lengths = pad_attentions([attn[i] for i in idx])
        padded_extra = {k: _pad_like([v[i] for i in idx], batch.shape) for k, v in (extra or {}).items()}
        values = explain_batch(
            batch,
            lengths,
            methods=methods,
            residual=residual,
            heads=heads,
            rows=rows,
            per_head=per_head,
            extra=padded_extra,
            cls_self=cls_self,
        )
        for name, value in values.items():
            for row, i in enumerate(idx):
                maps[name][i] = value[row, ..., : lengths[row]]
    return maps


def _pad_like(arrays: Sequence[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """(L, H, T_i, T_i) arrays -> zero-padded float64 (B, L, H, T, T)."""
    out = np.zeros(shape)
    for i, a in enumerate(arrays):
        t = a.shape[-1]
        out[i, ..., :t, :t] = a
    return out
