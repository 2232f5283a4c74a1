"""Class-specific relevance maps of Chefer, Gur & Wolf (2021): the LRP rule and the generic rule.

Both weigh each head's attention by the gradient of the explained logit, keep the positive part,
average the heads and compose the layers like rollout (later layers multiply on the left):

- generic (ICCV 2021, "Generic Attention-model Explainability", eq. 6), from (A, ∇A):
  R(0) = I;  R(l) = R(l-1) + Ā(l) R(l-1),  Ā(l) = mean_h[(∇A(l) ⊙ A(l))⁺]; no normalisation.
- LRP (CVPR 2021, "Transformer Interpretability Beyond Attention Visualization", eq. 13-14),
  from (R(A), ∇A) where R(A) is the LRP relevance of each attention map (``attnflow.lrp``):
  C(l) = rownorm(I + Ā(l)) C(l-1),  Ā(l) = mean_h[(∇A(l) ⊙ R(A(l)))⁺], C before the first layer = I;
  rows of C sum to 1 (the row normalisation of the authors' code).

∇A = ∂ logit[target] / ∂ A. Every layer's map is returned, [..., layer, query, key], so layer l
can be read like rollout's; layers before ``start_layer`` are the identity (nothing composed yet).
The CLS self-relevance C[0, 0] dominates row 0; ``cls_self`` picks what the authors' code does
with it: "keep" (the matrices as computed; the fixture's numbers), "min" (the CVPR code sets
C[0, 0] = min(C[0])), "zero" (the ICCV code sets it to 0).

numpy in, numpy out, computed in float64. torch tensors are computed with torch on their own
device (`attnflow.explain.torch_ops`): in their dtype promoted to at least float32, ∇A and R(A)
converted to it; pass float64 tensors for float64. Same rules, same messages, same equations.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from attnflow.options import CLS_SELF

from ._common import (
    Prepared,
    as_numpy,
    check_heads,
    is_torch,
    mix_residual,
    pair_mask,
    prepare,
    prepare_shape,
    real_float64,
    reduce_heads,
)

__all__ = ["CLS_SELF", "chefer_generic", "chefer_lrp", "companion"]

# A batch is computed in slices of about this many bytes per attention-shaped array: each step
# makes a batch-sized temporary, so a whole batch is memory-bound, while slices stay in cache
# (measured at 100 x 6 x 8 x 20 x 20: 2.5-3x faster per sample than the whole batch at once).
CHUNK_BYTES = 1_500_000


def _check_options(start_layer: Any, cls_self: Any, n_layers: int) -> int:
    if cls_self not in CLS_SELF:
        raise ValueError(f"cls_self must be one of {CLS_SELF}, got {cls_self!r}")
    if isinstance(start_layer, bool) or not isinstance(start_layer, numbers.Integral):
        raise ValueError(f"start_layer must be an int, got {start_layer!r}")
    if not 0 <= start_layer < n_layers:
        raise ValueError(f"start_layer {start_layer} out of range for {n_layers} layers")
    return int(start_layer)


def _prepare_scores(x: Any, name: str, *, lengths: Any, mask: Any) -> Prepared:
    """Shape rules of ``prepare`` for an attention-shaped array of any real values (R(A), ∇A)."""
    return prepare_shape(x, name, lengths=lengths, mask=mask)


def companion(x: Any, name: str, p: Prepared, method: str) -> np.ndarray:
    """An input shaped like p.attn, as float64 with padded rows and columns 0; finite on real ones."""
    return _finite(_shaped(x, name, p, method), name, p)


def _shaped(x: Any, name: str, p: Prepared, method: str) -> np.ndarray:
    """An input shaped like p.attn, as given (`_finite` converts it, slice by slice)."""
    if x is None:
        raise ValueError(f"{method} needs {name}, shaped like attn (see attnflow.lrp.lrp_relevance)")
    arr = as_numpy(x, name)
    if not p.batched:
        arr = arr[None]
    if arr.shape != p.attn.shape:
        shape = p.attn.shape if p.batched else p.attn.shape[1:]
        raise ValueError(f"{name} must have the shape of attn {shape}, got {as_numpy(x, name).shape}")
    return arr


def _finite(arr: np.ndarray, name: str, p: Prepared) -> np.ndarray:
    """A companion as float64 with padded rows and columns 0; finite on the real ones.

    One reduction checks finiteness: a NaN or inf anywhere makes the sum non-finite; the
    elementwise scan runs only then (a finite sum that overflowed must not be refused).
    """
    out = real_float64(arr, p)
    with np.errstate(over="ignore", invalid="ignore"):  # the sum may overflow, or add inf to -inf
        total = out.sum()
    if not np.isfinite(total) and not np.all(np.isfinite(out)):
        raise ValueError(f"{name} contains NaN or inf")
    return out


def _finite_result(out: Any, method: str, inputs: str) -> Any:
    """`out` (numpy or torch) when every entry is finite; else a one-line ValueError: finite inputs
    whose products overflowed (entries near the dtype's largest value), not a map of inf / NaN."""
    finite = bool(np.isfinite(out).all()) if isinstance(out, np.ndarray) else bool(out.isfinite().all())
    if not finite:
        dtype = str(out.dtype).removeprefix("torch.")
        raise ValueError(
            f"{method}: the relevance overflows {dtype} (products of {inputs} beyond its largest value); "
            "scale them down"
        )
    return out


def _weighted_heads(p: Prepared, grad: np.ndarray, other: np.ndarray, heads: Any) -> np.ndarray:
    """Ā = agg_h[(∇A ⊙ X)⁺] per layer, padding 0: (B, L, H, T, T) -> (B, L, T, T) float64."""
    check_heads(heads, p.attn.shape[2])
    positive = grad * other  # (B, L, H, T, T)
    np.maximum(positive, 0.0, out=positive)  # in place: a second batch-sized temporary costs ~10x
    if not p.full:  # padded rows and columns +0, in place (what aggregate_heads' copy would hold)
        np.copyto(positive, 0.0, where=~pair_mask(p.valid))
    return reduce_heads(positive, heads)


def _identity(valid: np.ndarray) -> np.ndarray:
    """(B, T, T): the identity on each sample's real positions, 0 on padding."""
    return np.eye(valid.shape[1]) * valid[:, None, :]


def _cls_self(maps: np.ndarray, valid: np.ndarray, cls_self: str) -> np.ndarray:
    """Apply the CLS-self choice to entry [0, 0] of every layer's map. maps: (B, L, T, T)."""
    if cls_self == "keep":
        return maps
    out = maps.copy()
    if cls_self == "zero":
        value = np.zeros(maps.shape[:2])
    else:  # min over the real keys of row 0, itself included (as the authors' rollout[:, 0].min())
        value = np.where(valid[:, None, :], maps[:, :, 0, :], np.inf).min(axis=-1)  # (B, L)
    out[:, :, 0, 0] = np.where(valid[:, :1], value, 0.0)  # a padded position 0 stays 0
    return out


def _compose(step: np.ndarray, valid: np.ndarray, start_layer: int, *, accumulate: bool) -> np.ndarray:
    """Per-layer products from start_layer. step: (B, L, T, T) -> (B, L, T, T).

    accumulate: R(l) = R(l-1) + step(l) R(l-1) (generic); else C(l) = step(l) C(l-1) (LRP).
    """
    out = np.empty_like(step)
    r = _identity(valid)  # (B, T, T)
    for layer in range(step.shape[1]):
        if layer >= start_layer:
            r = r + step[:, layer] @ r if accumulate else step[:, layer] @ r  # (B, T, T)
        out[:, layer] = r
    return out


def _torch_maps(p: Any, step: Any, start: int, cls_self: str, *, accumulate: bool) -> Any:
    """`_compose` then `_cls_self` in torch on step's device and dtype. step: (B, L, T, T)."""
    import torch

    out = torch.empty_like(step)
    r = torch.diag_embed(p.valid.to(step.dtype))  # (B, T, T): I on the real positions
    for layer in range(step.shape[1]):
        if layer >= start:
            r = r + step[:, layer] @ r if accumulate else step[:, layer] @ r  # (B, T, T)
        out[:, layer] = r
    if cls_self == "keep":
        return out
    if cls_self == "zero":
        value = torch.zeros(out.shape[:2], dtype=out.dtype, device=out.device)
    else:  # min over the real keys of row 0, itself included
        value = out[:, :, 0, :].masked_fill(~p.valid[:, None, :], torch.inf).amin(dim=-1)  # (B, L)
    out[:, :, 0, 0] = torch.where(p.valid[:, :1], value, 0.0)  # a padded position 0 stays 0
    return out


def _torch_weighted_heads(p: Any, grad: Any, other: Any, heads: Any) -> Any:
    """Ā = agg_h[(∇A ⊙ X)⁺] per layer in torch: (B, L, H, T, T) -> (B, L, T, T)."""
    from . import torch_ops

    positive = (grad * other).clamp_min_(0.0)  # (B, L, H, T, T), padding 0
    return torch_ops.aggregate_heads(torch_ops.TorchPrepared(positive, p.valid, p.batched, p.like), heads)


def _torch_generic(p: Any, grad: Any, heads: Any, start: int, cls_self: str) -> Any:
    """R(l) per layer from A and ∇A in torch: `_generic_maps` on p's device. -> (B, L, T, T)."""
    step = _torch_weighted_heads(p, grad, p.attn, heads)  # (B, L, T, T)
    return _finite_result(
        _torch_maps(p, step, start, cls_self, accumulate=True), "chefer_generic", "attn_grad"
    )


def _torch_lrp(p: Any, relevance: Any, grad: Any, heads: Any, start: int, cls_self: str) -> Any:
    """C(l) per layer from R(A) and ∇A in torch: `_lrp_maps` on p's device. -> (B, L, T, T)."""
    from . import torch_ops

    step = torch_ops.mix_residual(_torch_weighted_heads(p, grad, relevance, heads), p.valid, 0.5)
    out = _torch_maps(p, step, start, cls_self, accumulate=False)
    return _finite_result(out, "chefer_lrp", "attn_grad and attn_relevance")


def chefer_generic(
    attn: Any,
    attn_grad: Any,
    *,
    heads: str | int = "mean",
    start_layer: int = 0,
    cls_self: str = "keep",
    lengths: Any = None,
    mask: Any = None,
) -> Any:
    """Generic attention-model relevance (Chefer, Gur & Wolf, ICCV 2021, eq. 5-6), every layer.

    Ā(l) = mean_h[(∇A(l) ⊙ A(l))⁺] (heads: "mean", "sum", "max" or one head index), and
    R(l) = R(l-1) + Ā(l) R(l-1) from R = I at ``start_layer``. R - I >= 0 elementwise, so rows
    sum to >= 1; there is no normalisation. With ∇A = 1 and one head, R(l) = Π (I + A(k)).

    attn: probabilities [layer, head, query, key] or [batch, ...]; attn_grad: ∂ logit[target] / ∂ attn,
    same shape. lengths / mask mark real tokens of a padded batch. Returns [..., layer, query, key]
    of attn's kind; padded rows and columns are exactly 0.

    >>> import numpy as np
    >>> a1 = [[1.0, 0.0], [0.5, 0.5]]
    >>> a2 = [[0.5, 0.5], [0.0, 1.0]]
    >>> attn = np.array([[a1], [a2]])  # (2 layers, 1 head, 2, 2)
    >>> chefer_generic(attn, np.ones_like(attn))[1].tolist()  # (I + A2)(I + A1)
    [[3.25, 0.75], [1.0, 3.0]]
    >>> import torch  # torch in: computed on its device, float32 in, float32 out
    >>> out = chefer_generic(torch.tensor(attn, dtype=torch.float32), torch.ones(2, 1, 2, 2))
    >>> out.dtype, out[1].tolist()
    (torch.float32, [[3.25, 0.75], [1.0, 3.0]])
    """
    if is_torch(attn):
        from . import torch_ops

        t = torch_ops.prepare(attn, lengths=lengths, mask=mask)
        check_heads(heads, t.attn.shape[2])
        start = _check_options(start_layer, cls_self, t.attn.shape[1])
        grad = torch_ops.companion(attn_grad, "attn_grad", t, "chefer_generic")
        return t.to_output(_torch_generic(t, grad, heads, start, cls_self))
    p = prepare(attn, lengths=lengths, mask=mask)
    check_heads(heads, p.attn.shape[2])
    start = _check_options(start_layer, cls_self, p.attn.shape[1])
    grad = _shaped(attn_grad, "attn_grad", p, "chefer_generic")
    return p.to_output(_in_chunks(p, _generic_maps, grad, heads=heads, start=start, cls_self=cls_self))


def _in_chunks(p: Prepared, maps: Any, *arrays: np.ndarray, **options: Any) -> np.ndarray:
    """maps(p, *arrays, **options) on slices of the batch of ~CHUNK_BYTES, concatenated (the
    samples are independent, so the values are those of one call on the whole batch)."""
    per = max(1, CHUNK_BYTES // (8 * p.attn[0].size))
    if per >= p.attn.shape[0]:
        return maps(p, *arrays, **options)
    parts = []
    for i in range(0, p.attn.shape[0], per):
        s = slice(i, i + per)
        parts.append(
            maps(Prepared(p.attn[s], p.valid[s], p.batched, p.like), *(a[s] for a in arrays), **options)
        )
    return np.concatenate(parts)


def _generic_maps(p: Prepared, grad: np.ndarray, heads: Any, start: int, cls_self: str) -> np.ndarray:
    """R(l) per layer from A and ∇A (batched): (B, L, H, T, T) x 2 -> (B, L, T, T)."""
    grad = _finite(grad, "attn_grad", p)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused below, in one line
        step = _weighted_heads(p, grad, p.attn.astype(np.float64), heads)  # (B, L, T, T)
        out = _cls_self(_compose(step, p.valid, start, accumulate=True), p.valid, cls_self)
    return _finite_result(out, "chefer_generic", "attn_grad")


def _lrp_maps(
    p: Prepared, relevance: np.ndarray, grad: np.ndarray, heads: Any, start: int, cls_self: str
) -> np.ndarray:
    """C(l) per layer from R(A) and ∇A (batched): (B, L, H, T, T) x 2 -> (B, L, T, T); a torch
    batch (the kit's, companions already on its device) is computed in torch."""
    if is_torch(p.attn):
        return _torch_lrp(p, relevance, grad, heads, start, cls_self)
    relevance, grad = _finite(relevance, "attn_relevance", p), _finite(grad, "attn_grad", p)
    # rownorm(.5 Ā + .5 I) = rownorm(I + Ā): the shared residual mix, identity on real positions only
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused below, in one line
        step = mix_residual(_weighted_heads(p, grad, relevance, heads), p.valid, 0.5)  # (B, L, T, T)
        out = _cls_self(_compose(step, p.valid, start, accumulate=False), p.valid, cls_self)
    return _finite_result(out, "chefer_lrp", "attn_grad and attn_relevance")


def chefer_lrp(
    attn_relevance: Any,
    attn_grad: Any,
    *,
    heads: str | int = "mean",
    start_layer: int = 0,
    cls_self: str = "keep",
    lengths: Any = None,
    mask: Any = None,
) -> Any:
    """Transformer attribution (Chefer, Gur & Wolf, CVPR 2021, eq. 13-14), every layer.

    Ā(l) = mean_h[(∇A(l) ⊙ R(A(l)))⁺] (heads: "mean", "sum", "max" or one head index), and
    C(l) = rownorm(I + Ā(l)) C(l-1) from C = I at ``start_layer`` (the authors' rollout with
    row normalisation); rows of C sum to 1 on the real positions.

    attn_relevance: R(A), the LRP relevance of each attention map [layer, head, query, key] or
    [batch, ...] (``attnflow.lrp.lrp_relevance(...).attn_relevance``); attn_grad: ∂ logit / ∂ attn,
    same shape. Returns [..., layer, query, key] of attn_relevance's kind; padding exactly 0.

    >>> import numpy as np
    >>> r = np.array([[[[0.0, 0.0], [1.0, 0.0]]]])  # (1 layer, 1 head): token 1 draws on token 0
    >>> chefer_lrp(r, np.ones_like(r))[0].tolist()  # rownorm([[1, 0], [1, 1]])
    [[1.0, 0.0], [0.5, 0.5]]
    """
    if is_torch(attn_relevance):
        from . import torch_ops

        t = torch_ops.prepare_shape(attn_relevance, "attn_relevance", lengths=lengths, mask=mask)
        t = torch_ops.TorchPrepared(
            t.attn.to(torch_ops.compute_dtype(attn_relevance)), t.valid, t.batched, t.like
        )
        check_heads(heads, t.attn.shape[2])
        start = _check_options(start_layer, cls_self, t.attn.shape[1])
        relevance = torch_ops.companion(attn_relevance, "attn_relevance", t, "chefer_lrp")
        grad = torch_ops.companion(attn_grad, "attn_grad", t, "chefer_lrp")
        return t.to_output(_torch_lrp(t, relevance, grad, heads, start, cls_self))
    p = _prepare_scores(attn_relevance, "attn_relevance", lengths=lengths, mask=mask)
    check_heads(heads, p.attn.shape[2])
    start = _check_options(start_layer, cls_self, p.attn.shape[1])
    relevance = _shaped(attn_relevance, "attn_relevance", p, "chefer_lrp")
    grad = _shaped(attn_grad, "attn_grad", p, "chefer_lrp")
    return p.to_output(_in_chunks(p, _lrp_maps, relevance, grad, heads=heads, start=start, cls_self=cls_self))
