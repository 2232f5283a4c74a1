"""The attention methods on torch tensors, on the tensors' own device.

`raw_attention`, `attention_rollout`, both Chefer rules (`chefer_generic`, `chefer_lrp`), Grad-SAM
and every method of the kit given a torch tensor compute with torch where the tensor lives (a GPU
included), instead of converting to CPU float64 numpy. The compute type is the input's promoted to
at least float32: float16 / bfloat16 / float32 attentions are computed in float32 (head means and
the products across layers accumulate in float32: rows of a softmax are off by ~1e-7 anyway),
float64 attentions in float64 (the study's numbers). Pass ``attn.double()`` (and float64
companions) for float64. A companion (∇A, R(A)) is converted to attn's device and compute type.
Results come back in the input's dtype and device; the same input rules as the numpy path, with the
same messages. The streaming capture (`attnflow.stream`) mixes and normalises with the same functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from attnflow.bridge.captured import zero_padding

from ._common import HEAD_AGGREGATIONS, as_numpy, check_heads, check_residual, dtype_name, row_sum_tolerance

__all__ = [
    "TorchPrepared",
    "aggregate_heads",
    "companion",
    "compute_dtype",
    "mix_residual",
    "normalize_rows",
    "prepare",
    "prepare_shape",
    "rollout",
    "valid_positions",
]


@dataclass(frozen=True)
class TorchPrepared:
    attn: torch.Tensor  # (B, L, H, T, T) in the compute dtype, padding rows / columns 0
    valid: torch.Tensor  # (B, T) bool on attn's device
    batched: bool
    like: torch.Tensor

    def to_output(self, x: torch.Tensor) -> torch.Tensor:
        x = x if self.batched else x[0]
        return x.to(self.like.dtype if self.like.dtype.is_floating_point else x.dtype)


def valid_positions(lengths: Any, mask: Any, batch: int, tokens: int, device: torch.device) -> torch.Tensor:
    """(B, T) bool of real positions on `device` from `lengths` (B,) or a boolean `mask` (B, T)."""
    if lengths is not None and mask is not None:
        raise ValueError("give either lengths or mask, not both")
    for name, given in (("lengths", lengths), ("mask", mask)):
        if isinstance(given, torch.Tensor) and given.device.type == "meta":
            raise ValueError(
                f"{name} is on the 'meta' device: a tensor with a shape but no values; load the real weights"
            )
    if lengths is not None:
        lens = torch.as_tensor(lengths, device=device)
        if lens.shape != (batch,):
            raise ValueError(f"lengths must have shape ({batch},), got {tuple(lens.shape)}")
        if lens.is_floating_point():
            if not torch.isfinite(lens).all() or (lens != lens.round()).any():
                raise ValueError("lengths must be integers")
            lens = lens.long()
        if (lens < 1).any() or (lens > tokens).any():
            raise ValueError(
                f"lengths must lie in [1, {tokens}], got min {int(lens.min())} max {int(lens.max())}"
            )
        return torch.arange(tokens, device=device)[None, :] < lens[:, None]
    if mask is not None:
        m = torch.as_tensor(mask, device=device)
        if tuple(m.shape) != (batch, tokens):
            raise ValueError(f"mask must have shape ({batch}, {tokens}), got {tuple(m.shape)}")
        if m.dtype != torch.bool:
            if not ((m == 0) | (m == 1)).all():
                raise ValueError("mask must be boolean (True = real token)")
            m = m.bool()
        if not m.any(dim=1).all():
            raise ValueError("mask: every sample needs at least one real token")
        return m
    return torch.ones(batch, tokens, dtype=torch.bool, device=device)


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The type a tensor is computed in: its own promoted to at least float32 (integers: float64)."""
    return torch.promote_types(x.dtype, torch.float32) if x.is_floating_point() else torch.float64


def prepare_shape(x: torch.Tensor, name: str, *, lengths: Any = None, mask: Any = None) -> TorchPrepared:
    """The shape rules of the numpy `prepare_shape` for an attention-shaped tensor of any real values
    (attn, R(A), ∇A), with the same messages: 4 dims [layer, head, query, key] or 5 dims [batch, ...];
    lengths / mask only with a batch axis; query == key; no empty axis. Values are not looked at:
    the result holds x with a batch axis, detached, as given (not yet in the compute type)."""
    if x.device.type == "meta":
        raise ValueError(
            f"{name} is on the 'meta' device: a tensor with a shape but no values; load the real weights"
        )
    if x.is_complex():
        raise ValueError(f"{name} must hold real numbers, got dtype {x.dtype}")
    if x.ndim not in (4, 5):
        raise ValueError(
            f"{name} must have 4 dims [layer, head, query, key] or 5 dims [batch, layer, head, query, key], "
            f"got shape {tuple(x.shape)}"
        )
    batched = x.ndim == 5
    if not batched and (lengths is not None or mask is not None):
        raise ValueError("lengths / mask need a batched input [batch, layer, head, query, key]")
    b = x if batched else x[None]
    if b.shape[-1] != b.shape[-2]:
        raise ValueError(f"{name} must be square over [query, key], got {b.shape[-2]} x {b.shape[-1]}")
    if min(b.shape) == 0:
        raise ValueError(f"{name} has an empty axis: shape {tuple(b.shape)}")
    valid = valid_positions(lengths, mask, b.shape[0], b.shape[-1], b.device)
    return TorchPrepared(attn=b.detach(), valid=valid, batched=batched, like=x)


def prepare(
    attn: torch.Tensor, *, lengths: Any = None, mask: Any = None, renormalize: bool = False
) -> TorchPrepared:
    """The rules of `attnflow.explain`'s numpy `prepare`, checked in torch on attn's device."""
    shaped = prepare_shape(attn, "attn", lengths=lengths, mask=mask)
    valid = shaped.valid
    dtype = compute_dtype(attn)
    x = zero_padding(shaped.attn.to(dtype), valid)
    sums = x.sum(dim=-1)  # (B, L, H, T): NaN / inf anywhere in a row makes its sum non-finite
    if not torch.isfinite(sums).all() and not torch.isfinite(x).all():
        raise ValueError("attn contains NaN or inf")
    low = x.min()
    if low < 0:
        raise ValueError(f"attn has negative weights (min {float(low):.3g}); expected probabilities")
    if not renormalize:
        real = valid[:, None, None, :].expand_as(sums)
        off = torch.where(real, (sums - 1.0).abs(), 0.0)
        tol = row_sum_tolerance(attn)
        if not off.max() <= tol:
            worst = sums.reshape(-1)[off.reshape(-1).argmax()]
            raise ValueError(
                f"attention rows must sum to 1 over the real keys (tolerance {tol} for {dtype_name(attn)}); "
                f"a row sums to {float(worst):.6g}; pass renormalize=True to rescale rows"
            )
    else:
        x = normalize_rows(x)
    return TorchPrepared(attn=x, valid=valid, batched=shaped.batched, like=attn)


def companion(x: Any, name: str, p: TorchPrepared, method: str) -> torch.Tensor:
    """An input shaped like p.attn (∇A, R(A)) on p's device in p's compute type, padded rows and
    columns 0, finite on the real ones; the numpy `companion`'s rules and messages."""
    if x is None:
        raise ValueError(f"{method} needs {name}, shaped like attn (see attnflow.lrp.lrp_relevance)")
    # an array-like goes through the numpy checks (real numbers, no masked array), then to the device
    t = x if isinstance(x, torch.Tensor) else torch.tensor(as_numpy(x, name))
    if t.is_complex():
        raise ValueError(f"{name} must hold real numbers, got dtype {t.dtype}")
    arr = t if p.batched else t[None]
    if arr.shape != p.attn.shape:
        shape = tuple(p.attn.shape if p.batched else p.attn.shape[1:])
        raise ValueError(f"{name} must have the shape of attn {shape}, got {tuple(t.shape)}")
    out = zero_padding(arr.detach().to(device=p.attn.device, dtype=p.attn.dtype), p.valid)
    if not torch.isfinite(out).all():
        raise ValueError(f"{name} contains NaN or inf")
    return out


def normalize_rows(x: torch.Tensor, *, inplace: bool = False) -> torch.Tensor:
    """Each row divided by its sum; rows summing to 0 (all zero: entries are >= 0) stay 0.

    A row of finite entries whose sum overflows the dtype (entries near its largest value) is
    divided by its largest entry first, then by the sum of what is left (as the numpy
    `normalize_rows`): the renormalised row, not x / inf = 0."""
    s = x.sum(dim=-1, keepdim=True)
    s = s.masked_fill_(s <= 0, 1.0)
    over = torch.isinf(s)  # (..., 1): rows whose sum overflowed
    if bool(over.any()):
        top = x.amax(dim=-1, keepdim=True)
        top = torch.where(over & torch.isfinite(top) & (top > 0), top, 1.0)
        x = x.div_(top) if inplace else x / top  # the other rows: divided by 1, unchanged
        s = torch.where(over, x.sum(dim=-1, keepdim=True), s)
        inplace = True
    return x.div_(s) if inplace else x / s


def aggregate_heads(p: TorchPrepared, heads: Any) -> torch.Tensor:
    """W(l) = mean / sum / max over heads, or one head: (B, L, T, T)."""
    check_heads(heads, p.attn.shape[2])
    if isinstance(heads, str):
        assert heads in HEAD_AGGREGATIONS
        if heads == "mean":
            return p.attn.mean(dim=2)
        if heads == "sum":
            return p.attn.sum(dim=2)
        return p.attn.amax(dim=2)
    return p.attn[:, :, int(heads)]


def mix_residual(w: torch.Tensor, valid: torch.Tensor, residual: float) -> torch.Tensor:
    """A = (1 - r) W + r I on the real positions, rows re-normalised. w: (B, ..., T, T)."""
    out = (1.0 - check_residual(residual)) * w
    eye = valid.reshape((w.shape[0],) + (1,) * (w.ndim - 3) + w.shape[-1:]).to(out.dtype)
    out.diagonal(dim1=-2, dim2=-1).add_(residual * eye)
    return normalize_rows(out, inplace=True)  # out is ours: divide in place (one pass fewer)


def rollout(a: torch.Tensor) -> torch.Tensor:
    """Ã(l) = A(l) Ã(l-1), Ã(1) = A(1). a: (B, L, T, T) -> (B, L, T, T)."""
    out = torch.empty_like(a)
    out[:, 0] = a[:, 0]
    for layer in range(1, a.shape[1]):
        torch.matmul(a[:, layer], out[:, layer - 1], out=out[:, layer])
    return out
