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

from .apply import RowSpec, apply

__all__ = ["explain_samples", "pad_attentions"]


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


def _head_rows(maps: np.ndarray, position: int | str, lengths: np.ndarray) -> np.ndarray:
    """(B, L, H, R, T) per-head maps -> (B, L, H, T): the row computed, or max / mean over the real
    query rows (heads folded into layers for `RowSpec.reduce`)."""
    if not isinstance(position, str):
        return RowSpec.reduce(maps, position)
    b, n_layers, n_heads, r, t = maps.shape
    return RowSpec.reduce(maps.reshape(b, n_layers * n_heads, r, t), position, lengths=lengths).reshape(
        b, n_layers, n_heads, t
    )


def explain_batch(
    attn: np.ndarray,
    lengths: np.ndarray,
    *,
    methods: Sequence[Any],
    residual: float,
    heads: Any,
    rows: str,
    per_head: bool,
    extra: Mapping[str, np.ndarray] | None = None,
    cls_self: str = "authors",
    heads_only: bool = False,
) -> dict[str, np.ndarray]:
    """Per method the (B, L, T) explanation row at each layer, and ``<method>_heads`` (B, L, H, T).

    ``methods``: the method records (`attnflow.methods.resolve`), each read for its function, its
    rows, its needs, its options and its per-head variant (Appendix A.1: head k at layer i on top of
    the all-heads maps, the record's ``per_head``).

    ``rows``: the task's choice, "cls" (row 0; the cheap path: flow is computed from CLS only),
    "max" or "mean" over the real query rows, for the methods that read the task's rows; the
    class-specific ones read the classification row (the records' ``rows``, decoded by
    :class:`attnflow.explain.apply.RowSpec`; the methods applied by :func:`attnflow.explain.apply.apply`).
    ``extra``: further padded inputs a method needs (e.g. ``attn_grad``).
    ``cls_self``: the class-specific maps' CLS-to-CLS entry ("authors": each record's
    ``authors_cls_self``, Chefer et al.'s own code: min of the CLS row in the CVPR (LRP) code, 0 in
    the generic (ICCV) code).
    ``heads_only``: only the ``<method>_heads`` maps (with ``per_head``), not the all-heads ones.
    """
    spec = RowSpec(rows, task=True)  # the task's rows; class-specific records read CLS
    records = _records(methods)
    options = {  # Chefer's rules: their CLS-to-CLS convention
        r.name: {"cls_self": r.authors_cls_self if cls_self == "authors" else cls_self}
        for r in records
        if "cls_self" in r.options
    }
    valid = np.arange(attn.shape[-1])[None, :] < np.asarray(lengths)[:, None]  # (B, T)
    per_sample = (
        None
        if heads_only
        else apply(records, attn, extra, spec, residual=residual, heads=heads, valid=valid, options=options)
    )
    out = {}
    for r in records:
        if per_sample is not None:
            maps = np.zeros((attn.shape[0], attn.shape[1], attn.shape[-1]))  # (B, L, T), padding 0
            for b, sample in enumerate(per_sample):
                maps[b, :, : sample[r.name].shape[-1]] = sample[r.name]
            out[r.name] = maps
        if per_head and r.per_head is not None:  # (B, L, H, R, T) -> (B, L, H, T)
            position = spec.for_record(r).position(attn.shape[-1])  # CLS only: flow's cost grows with rows
            sources = None if isinstance(position, str) else [position]
            head_maps = r.per_head(attn, sources=sources, heads=heads, residual=residual, lengths=lengths)
            out[f"{r.name}_heads"] = _head_rows(head_maps, position, lengths)
    return out


def _records(methods: Sequence[Any]) -> list[Any]:
    """The method records given (names are resolved above this package: `attnflow.methods.resolve`)."""
    if names := [m for m in methods if isinstance(m, str)]:
        raise ValueError(
            f"explain_samples takes method records, got the names {names}: pass attnflow.methods.resolve({names})"
        )
    return list(methods)


def explain_samples(
    attn: Sequence[np.ndarray],
    *,
    methods: Sequence[Any],
    residual: float = 0.5,
    heads: Any = "mean",
    rows: str = "cls",
    per_head: bool = False,
    extra: Mapping[str, Sequence[np.ndarray]] | None = None,
    cls_self: str = "authors",
    batch_size: int = BATCH,
    progress: bool = False,
    heads_only: bool = False,
) -> dict[str, list[np.ndarray]]:
    """Explain every sample: ``{method: [(L, T_i)]}`` and, with ``per_head``, ``{<method>_heads: [(L, H, T_i)]}``.

    ``methods``: method records (`attnflow.methods.resolve(names)`: a name is resolved there, once).
    ``attn``: one ``(L, H, T_i, T_i)`` array per sample; ``extra``: per-sample arrays of the same
    shape that a method needs (padded and passed as keyword arguments). Results are in input order.
    ``heads_only``: only the per-head maps of the methods that have them (``per_head`` implied).

    >>> from attnflow.methods import resolve
    >>> a = np.full((2, 1, 3, 3), 1 / 3)
    >>> out = explain_samples([a, a[:, :, :2, :2] * 1.5], methods=resolve(["rollout"]))
    >>> [m.shape for m in out["rollout"]]
    [(2, 3), (2, 2)]
    """
    from tqdm.auto import tqdm

    if not attn:
        raise ValueError("no samples to explain")
    records = _records(methods)
    if heads_only:
        given = [r.name for r in records]
        records, per_head = [r for r in records if r.per_head is not None], True
        if not records:
            raise ValueError(f"heads_only: none of the methods {given} has a per-head variant")
    names = [
        *([] if heads_only else [r.name for r in records]),
        *(f"{r.name}_heads" for r in records if per_head and r.per_head is not None),
    ]
    maps: dict[str, list[Any]] = {name: [None] * len(attn) for name in names}
    batches = length_batches([a.shape[-1] for a in attn], batch_size)
    for idx in tqdm(batches, desc="explain", leave=False, disable=not progress):
        batch, lengths = pad_attentions([attn[i] for i in idx])
        padded_extra = {
            k: _pad_like(k, [v[i] for i in idx], batch.shape[-1]) for k, v in (extra or {}).items()
        }
        values = explain_batch(
            batch,
            lengths,
            methods=records,
            residual=residual,
            heads=heads,
            rows=rows,
            per_head=per_head,
            extra=padded_extra,
            cls_self=cls_self,
            heads_only=heads_only,
        )
        for name, value in values.items():
            for row, i in enumerate(idx):
                maps[name][i] = value[row, ..., : lengths[row]]
    return maps


def _pad_like(name: str, arrays: Sequence[np.ndarray], tokens: int) -> np.ndarray:
    """One need's per-sample arrays, zero-padded to ``tokens`` along its token axes (its record,
    `attnflow.needs`; a need no record declares is shaped like the attention, (L, H, T_i, T_i)):
    float64 (B, ...).

    >>> _pad_like("attn_grad", [np.ones((1, 1, 2, 2))], 3)[0, 0, 0]
    array([[1., 1., 0.],
           [1., 1., 0.],
           [0., 0., 0.]])
    """
    from attnflow.needs import NEEDS

    record = NEEDS.get(name)
    token_axes = record.token_axes if record is not None else (2, 3)
    shape = [tokens if axis in token_axes else n for axis, n in enumerate(arrays[0].shape)]
    out = np.zeros((len(arrays), *shape))
    for i, a in enumerate(arrays):
        out[(i, *(slice(0, n) for n in a.shape))] = a
    return out
