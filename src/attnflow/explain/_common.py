"""Input checks, padding, head aggregation and residual mixing shared by every explainer (internal).

Axis order everywhere: [batch, layer, head, query, key] (one sample: [layer, head, query, key]).
Everything is computed in float64 numpy and handed back in the caller's kind (numpy or torch),
dtype and device. Inputs are never written to.
"""

from __future__ import annotations

import numbers
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnflow.options import HEAD_AGGREGATIONS

# A valid attention row (over the valid keys) must sum to 1 within the tolerance of the dtype the
# weights come in, unless renormalize=True. float32 softmax rows are off by ~1e-6 (1e-3 leaves room
# for weights saved or averaged elsewhere). Rounding each weight of an exact softmax to a p-bit
# significand moves the row sum by up to 2^-p: 2^-11 ~ 5e-4 for float16, 2^-9 ~ 2e-3 for bfloat16
# (observed: 2e-3 from a real bfloat16 softmax); the low-precision tolerances are 8x that bound.
ROW_SUM_TOL = 1e-3
ROW_SUM_TOLS = {
    "float64": ROW_SUM_TOL,
    "float32": ROW_SUM_TOL,
    "float16": 4e-3,
    "bfloat16": 1.6e-2,
}


def is_torch(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def dtype_name(x: Any) -> str:
    """The element type of an array-like as a plain name: "float32", "bfloat16", "int64", ..."""
    if is_torch(x):
        return str(x.dtype).removeprefix("torch.")
    dtype = getattr(x, "dtype", None)
    return np.dtype(dtype).name if dtype is not None else np.asarray(x).dtype.name


def row_sum_tolerance(x: Any) -> float:
    """How far a row of `x` (attention probabilities) may sum from 1: ROW_SUM_TOLS by its dtype.

    >>> row_sum_tolerance(np.zeros(2, dtype=np.float16)), row_sum_tolerance([0.5, 0.5])
    (0.004, 0.001)
    """
    return ROW_SUM_TOLS.get(dtype_name(x), ROW_SUM_TOL)


def as_numpy(x: Any, name: str) -> np.ndarray:
    """A read-only numpy view (or copy) of an array-like; torch tensors are detached to the CPU.

    A tensor on the "meta" device (a shape without values) is refused with a ValueError.
    """
    if is_torch(x):
        if x.device.type == "meta":
            raise ValueError(
                f"{name} is on the 'meta' device: a tensor with a shape but no values (e.g. from a model "
                "built under init_empty_weights or loaded with device_map='meta'); load the real weights "
                "and pass tensors on the CPU or a GPU"
            )
        x = x.detach().cpu()
        if x.dtype.is_floating_point and x.dtype not in (
            sys.modules["torch"].float32,
            sys.modules["torch"].float64,
        ):
            x = x.double()  # numpy has no bfloat16
        x = x.numpy()
    if isinstance(x, np.ma.MaskedArray):  # np.asarray would drop the mask and use the hidden values
        raise ValueError(
            f"{name} is a masked array: its mask would be ignored; pass padding as mask= or lengths=, "
            "or fill the masked entries (np.ma.filled) first"
        )
    arr = np.asarray(x)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_
    ):
        raise ValueError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating) and arr.dtype.itemsize > 8:  # long double: no exact float64 path
        raise ValueError(
            f"{name} has dtype {arr.dtype}: pass float64 or narrower (values are computed in float64)"
        )
    return arr


@dataclass(frozen=True)
class Prepared:
    """A validated batch: attention as given (never written to) plus which positions are real."""

    attn: np.ndarray  # (B, L, H, T, T) in the caller's dtype; a view of the input where possible
    valid: np.ndarray  # (B, T) bool: True for real tokens, False for padding
    batched: bool  # the input had a batch axis
    like: Any  # the original input, to hand results back in the same kind

    @property
    def full(self) -> bool:
        """No padding anywhere."""
        return bool(self.valid.all())

    @property
    def lengths(self) -> np.ndarray:
        return self.valid.sum(axis=1)

    def to_output(self, x: np.ndarray) -> Any:
        """float64 result -> the caller's kind (numpy / torch), float dtype and device."""
        if not self.batched:
            x = x[0]
        if is_torch(self.like):
            torch = sys.modules["torch"]
            dtype = self.like.dtype if self.like.dtype.is_floating_point else torch.float64
            return torch.from_numpy(np.ascontiguousarray(x)).to(device=self.like.device, dtype=dtype)
        like = np.asarray(self.like)
        dtype = like.dtype if np.issubdtype(like.dtype, np.floating) else np.float64
        return np.asarray(x, dtype=dtype)


def valid_positions(lengths: Any, mask: Any, batch: int, tokens: int) -> np.ndarray:
    """(B, T) bool of real positions from `lengths` (B,) or a boolean `mask` (B, T)."""
    if lengths is not None and mask is not None:
        raise ValueError("give either lengths or mask, not both")
    if lengths is not None:
        lens = as_numpy(lengths, "lengths")
        if lens.shape != (batch,):
            raise ValueError(f"lengths must have shape ({batch},), got {lens.shape}")
        if not np.issubdtype(lens.dtype, np.integer):
            if not np.all(np.isfinite(lens)) or np.any(lens != np.round(lens)):
                raise ValueError("lengths must be integers")
            lens = lens.astype(np.int64)
        if np.any(lens < 1) or np.any(lens > tokens):
            raise ValueError(f"lengths must lie in [1, {tokens}], got min {lens.min()} max {lens.max()}")
        return np.arange(tokens)[None, :] < lens[:, None]
    if mask is not None:
        m = as_numpy(mask, "mask")
        if m.shape != (batch, tokens):
            raise ValueError(f"mask must have shape ({batch}, {tokens}), got {m.shape}")
        if m.dtype != np.bool_:
            if not np.all(np.isin(m, (0, 1))):
                raise ValueError("mask must be boolean (True = real token)")
            m = m.astype(bool)
        if not np.all(m.any(axis=1)):
            raise ValueError("mask: every sample needs at least one real token")
        return m.copy()
    return np.ones((batch, tokens), dtype=bool)


def with_batch_axis(
    arr: np.ndarray, name: str, axes: tuple[str, ...], batched_what: str, lengths: Any, mask: Any
) -> tuple[np.ndarray, bool]:
    """`arr` with a batch axis in front (added when it has len(axes) dims) and whether it had one;
    lengths / mask are refused without one."""
    dims, every = len(axes), ", ".join(("batch", *axes))
    if arr.ndim not in (dims, dims + 1):
        raise ValueError(
            f"{name} must have {dims} dims [{', '.join(axes)}] or {dims + 1} dims [{every}], got shape {arr.shape}"
        )
    if arr.ndim == dims + 1:
        return arr, True
    if lengths is not None or mask is not None:
        raise ValueError(f"lengths / mask need {batched_what} [{every}]")
    return arr[None], False


def prepare_shape(x: Any, name: str, *, lengths: Any = None, mask: Any = None) -> Prepared:
    """The shape rules of `prepare` for an attention-shaped array of any real values (attn, R(A),
    ∇A): 4 dims [layer, head, query, key] or 5 dims [batch, ...]; lengths / mask only with a batch
    axis; query == key; no empty axis. Values are not looked at."""
    arr, batched = with_batch_axis(
        as_numpy(x, name), name, ("layer", "head", "query", "key"), "a batched input", lengths, mask
    )
    if arr.shape[-1] != arr.shape[-2]:
        raise ValueError(f"{name} must be square over [query, key], got {arr.shape[-2]} x {arr.shape[-1]}")
    if min(arr.shape) == 0:
        raise ValueError(f"{name} has an empty axis: shape {arr.shape}")
    valid = valid_positions(lengths, mask, arr.shape[0], arr.shape[-1])
    return Prepared(attn=arr, valid=valid, batched=batched, like=x)


def prepare(attn: Any, *, lengths: Any = None, mask: Any = None, renormalize: bool = False) -> Prepared:
    """Validate attention probabilities; raise ValueError naming the first rule broken.

    Rules: 4 dims [layer, head, query, key] or 5 dims [batch, ...]; query == key; no empty axis;
    real numbers; on real positions (padding is ignored): finite, >= 0, and every row of every
    head summing to 1 over the real keys within the tolerance of attn's dtype (ROW_SUM_TOLS; skipped
    when renormalize=True). A tensor on the "meta" device is refused.
    """
    tol = row_sum_tolerance(attn)
    shaped = prepare_shape(attn, "attn", lengths=lengths, mask=mask)
    arr, valid, batched = shaped.attn, shaped.valid, shaped.batched
    full = bool(valid.all())
    # padding 0 in the dtype np.where(pair, arr, 0) would give: arr itself when its padding is 0
    # already (a padded batch), else a copy in one pass (`zero_padding`)
    dtype = np.result_type(arr.dtype, 0)
    zeroed = full or (dtype == arr.dtype and padding_is_zero(arr, valid))
    block = arr if zeroed else zero_padding(arr, valid, dtype)
    # one pass for the row sums (a NaN or inf anywhere in a row makes its sum non-finite), one for
    # the minimum; the full finiteness scan runs only to word the error
    sums = row_sums(block, np.float64)
    sums = sums.reshape(-1) if full else sums[np.broadcast_to(valid[:, None, None, :], block.shape[:-1])]
    if not np.all(np.isfinite(sums)) and not np.all(np.isfinite(block)):
        raise ValueError("attn contains NaN or inf")
    low = block.min()
    if low < 0:
        raise ValueError(f"attn has negative weights (min {low:.3g}); expected probabilities")
    if not renormalize:
        worst = sums[np.argmax(np.abs(sums - 1.0))]
        if not abs(worst - 1.0) <= tol:
            raise ValueError(
                f"attention rows must sum to 1 over the real keys (tolerance {tol} for {dtype_name(attn)}); "
                f"a row sums to {worst:.6g}; pass renormalize=True to rescale rows"
            )
    return Prepared(attn=arr, valid=valid, batched=batched, like=attn)


def check_heads(heads: Any, n_heads: int) -> None:
    if isinstance(heads, str):
        if heads not in HEAD_AGGREGATIONS:
            raise ValueError(f"heads must be one of {HEAD_AGGREGATIONS} or a head index, got {heads!r}")
        return
    if isinstance(heads, bool) or not isinstance(heads, numbers.Integral):
        raise ValueError(f"heads must be one of {HEAD_AGGREGATIONS} or a head index, got {heads!r}")
    if not 0 <= heads < n_heads:
        raise ValueError(f"head index {heads} out of range for {n_heads} heads")


def check_residual(residual: Any) -> float:
    if isinstance(residual, bool) or not isinstance(residual, numbers.Real) or not 0.0 <= residual <= 1.0:
        raise ValueError(f"residual must be a number in [0, 1], got {residual!r}")
    return float(residual)


def pair_mask(valid: Any, ndim: int = 5) -> Any:
    """Which [query, key] pairs are both real tokens, shaped to broadcast against an array of `ndim`
    axes (B, ..., T, T): pair[b, ..., q, k] = valid[b, q] & valid[b, k]. valid: (B, T) bool, numpy
    or torch (the result is of the same kind).

    >>> pair_mask(np.array([[True, False]]), ndim=3).tolist()
    [[[True, False], [False, False]]]
    """
    b, t = valid.shape
    extra = (1,) * (ndim - 3)
    return valid.reshape((b, *extra, t, 1)) & valid.reshape((b, *extra, 1, t))


def zero_padding(x: np.ndarray, valid: np.ndarray, dtype: Any = np.float64) -> np.ndarray:
    """x as a new `dtype` array with the rows and columns of padded positions exactly 0 (+0.0).
    x: (B, ..., T, T); valid: (B, T).

    out[b, ..., q, k] = x[b, ..., q, k] (cast as by astype) if valid[b, q] and valid[b, k], else 0:
    the values of np.where(pair, x.astype(dtype), 0), in one pass without the batch-sized
    temporaries (a zeroed array, then np.copyto of the real entries).
    """
    out = np.zeros(x.shape, dtype=dtype)
    np.copyto(out, x, casting="unsafe", where=pair_mask(valid, x.ndim))
    return out


def prefix_lengths(valid: np.ndarray) -> np.ndarray | None:
    """Each sample's count of real tokens when they are its first ones (valid[b] is n_b True then
    False: a batch padded at the end), else None. valid: (B, T) -> (B,) or None.

    >>> prefix_lengths(np.array([[True, True, False], [True, True, True]])).tolist()
    [2, 3]
    >>> prefix_lengths(np.array([[True, False, True]])) is None
    True
    """
    n = valid.sum(axis=1)
    return n if np.array_equal(valid, np.arange(valid.shape[1])[None, :] < n[:, None]) else None


def padding_is_zero(x: np.ndarray, valid: np.ndarray) -> bool:
    """Whether every entry of x in a padded row or column has all bits 0 (+0, never -0.0 or NaN),
    so that x equals `zero_padding(x, valid, x.dtype)` bit for bit. x: (B, ..., T, T).

    Read for a prefix mask only (`prefix_lengths`: per sample, the rows n_b: and the columns n_b:
    of the real rows, no batch-sized temporary); any other mask answers False (not looked at).
    """
    lengths = prefix_lengths(valid)
    if lengths is None or x.dtype.itemsize not in (1, 2, 4, 8):
        return False
    bits = x.view(f"u{x.dtype.itemsize}")
    return not any(
        bits[b, ..., n:, :].any() or bits[b, ..., :n, n:].any() for b, n in enumerate(lengths.tolist())
    )


def row_sums(x: np.ndarray, dtype: Any = None) -> np.ndarray:
    """Sums over the last axis (einsum: ~2x faster than sum on short rows). (..., T) -> (...)."""
    return np.einsum("...k->...", x, dtype=dtype)


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """Divide each row by its sum; rows summing to 0 stay 0 (guarded).

    A row of finite entries whose sum overflows (entries near 1e308) is first divided by its
    largest entry, then by the sum of what is left: the renormalised row, not x / inf = 0. Other
    rows are divided by their sum as it is (the same bits as a plain division).

    >>> normalize_rows(np.array([[1e308, 1e308], [1.0, 3.0]])).tolist()
    [[0.5, 0.5], [0.25, 0.75]]
    """
    s = row_sums(x)[..., None]
    out = np.divide(x, s, out=np.zeros_like(x), where=s > 0)
    over = np.isinf(s[..., 0])  # (...,): rows whose sum overflowed (or that hold an inf)
    if over.any():
        rows = x[over]  # (n, T)
        top = rows.max(axis=-1, keepdims=True)
        finite = np.isfinite(top[:, 0])
        scaled = np.divide(rows, top, out=np.full_like(rows, np.nan), where=finite[:, None])
        out[over] = scaled / row_sums(scaled)[:, None]  # each entry <= 1: the sum is at most T
    return out


def real_float64(x: np.ndarray, p: Prepared) -> np.ndarray:
    """x (an array shaped like p.attn) as a float64 copy with the padding of `p` zeroed."""
    return x.astype(np.float64) if p.full else zero_padding(x, p.valid)


def head_stack(p: Prepared, *, renormalize: bool) -> np.ndarray:
    """Every head as float64, padding zeroed, rows rescaled if asked. (B, L, H, T, T)."""
    x = real_float64(p.attn, p)
    if renormalize:
        x = normalize_rows(x)
    return x


def aggregate_heads(p: Prepared, heads: Any, *, renormalize: bool) -> np.ndarray:
    """Head aggregation per layer: mean (default), sum, max, or one head. Returns (B, L, T, T) float64."""
    check_heads(heads, p.attn.shape[2])
    if renormalize or not p.full:
        x = head_stack(p, renormalize=renormalize)  # (B, L, H, T, T)
    else:
        x = p.attn  # aggregate straight from the input's dtype, into float64
    return reduce_heads(x, heads)


def reduce_heads(x: np.ndarray, heads: Any) -> np.ndarray:
    """The head aggregation of `aggregate_heads` on heads as they are (padding already as wanted;
    `heads` already checked): (B, L, H, T, T) -> (B, L, T, T) float64."""
    if isinstance(heads, str):
        if heads == "mean":
            w = x.mean(axis=2, dtype=np.float64)
        elif heads == "sum":
            w = x.sum(axis=2, dtype=np.float64)
        else:
            w = x.max(axis=2).astype(np.float64)
    else:
        w = x[:, :, int(heads)].astype(np.float64)
    return w  # (B, L, T, T)


def mix_residual(w: np.ndarray, valid: np.ndarray, residual: float) -> np.ndarray:
    """A = (1 - residual) * W + residual * I on the real positions, then rows re-normalised.

    w: (B, ..., T, T) with padding already zero; the identity covers real positions only, so padded
    rows and columns stay 0. Rows summing to 0 stay 0.
    """
    out = (1.0 - residual) * w  # a new array: w is not written to
    diagonal = np.einsum("...ii->...i", out)  # (B, ..., T), a writable view of the diagonals
    diagonal += residual * valid.reshape((w.shape[0],) + (1,) * (w.ndim - 3) + w.shape[-1:])
    return normalize_rows(out)


def check_positions(values: Any, name: str, upper: int, what: str) -> np.ndarray:
    """None -> all of range(upper); an int or a sequence of ints, each in [0, upper)."""
    if values is None:
        return np.arange(upper)
    if isinstance(values, numbers.Integral) and not isinstance(values, bool):
        values = [values]
    if type(values) is list and values and all(type(v) is int and 0 <= v < upper for v in values):
        return np.array(values, dtype=np.int64)  # the common case, without the array checks below
    if not isinstance(values, Sequence | np.ndarray) or isinstance(values, str):
        raise ValueError(f"{name} must be an int or a sequence of ints, got {values!r}")
    out = np.asarray(values)
    if out.ndim != 1 or out.size == 0:
        raise ValueError(f"{name} must be a non-empty sequence of ints, got {values!r}")
    if not np.issubdtype(out.dtype, np.integer):
        raise ValueError(f"{name} must be ints, got {values!r}")
    bad = out[(out < 0) | (out >= upper)]
    if bad.size:
        raise ValueError(f"{name} index {int(bad[0])} out of range: {what}")
    return out.astype(np.int64)
