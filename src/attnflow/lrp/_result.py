"""What an LRP pass returns, and the driver every architecture shares (internal).

Axis order: attention-shaped outputs are (batch, layer, head, query, key), as everywhere in attnflow.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from .linear import linear_relevance
from .matmul import attention_relevance

__all__ = ["LRPResult"]


@dataclass(frozen=True)
class PassOptions:
    """How one LRP pass runs (`lrp_relevance`'s options, handed to each architecture's function)."""

    target: Any = None  # None (each sample's predicted class), an int, or one int per sample
    dtype: torch.dtype = torch.float64  # of the relevance pass (the forward keeps the model's dtype)
    alpha: float = 1.0  # of the αβ rule (β = α − 1)

    def cast(self, t: Tensor) -> Tensor:
        """A forward tensor as the relevance pass uses it: detached, in `dtype`."""
        return t.detach().to(self.dtype)


@dataclass(frozen=True)
class LRPResult:
    """One relevance-aware forward and backward pass (Chefer et al. 2021).

    Padded positions (attention_mask == 0) are exactly 0 in every attention-shaped array (their
    rows and columns) and in ``input_relevance``. Without a batch axis in the input, the batch
    axis is dropped here too. logits, attn and attn_grad have the model's dtype; attn_relevance
    and input_relevance the relevance pass's (float64 by default). All are detached.
    """

    logits: Tensor  # (B, C) of the relevance-aware forward; equal to the model's own
    target: Tensor  # (B,) int64: the class whose logit is explained
    attn: Tensor  # (B, L, H, T, T) attention probabilities
    attn_grad: Tensor  # (B, L, H, T, T) ∂ logit[target] / ∂ attn
    attn_relevance: Tensor  # (B, L, H, T, T) R(A): LRP relevance of each attention map (halved A·V rule)
    input_relevance: Tensor  # (B, T) relevance at the input embeddings, summed over the hidden axis


# forward(input_ids, key_mask) -> (logits (B, C), [attn (B, H, T, T)] * L, trace)
Forward = Callable[[Tensor, Tensor], tuple[Tensor, list[Tensor], Any]]
# relprop(trace, relevance of the logits (B, C)) -> ([R(A) (B, H, T, T)] * L, relevance at the input (B, T, C))
Relprop = Callable[[Any, Tensor], tuple[list[Tensor], Tensor]]


def resolve_target(target: Any, logits: Tensor) -> Tensor:
    """None -> each sample's predicted class; an int -> that class for all; a sequence -> per sample."""
    batch, n_classes = logits.shape
    if target is None:
        return logits.argmax(dim=-1)
    if isinstance(target, numbers.Integral) and not isinstance(target, bool):
        t = torch.full((batch,), int(target), dtype=torch.long, device=logits.device)
    elif isinstance(target, Tensor | Sequence) and not isinstance(target, str):
        t = torch.as_tensor(target, device=logits.device)
        if t.dtype.is_floating_point or t.dtype == torch.bool or t.ndim > 1:
            raise ValueError(f"target must be an int or a sequence of ints, got {target!r}")
        t = t.long().reshape(-1)
        if t.numel() == 1:
            t = t.expand(batch)
        if t.shape != (batch,):
            raise ValueError(f"target must have one class per sample ({batch}), got {t.numel()}")
    else:
        raise ValueError(f"target must be None, an int or a sequence of ints, got {target!r}")
    if bool(((t < 0) | (t >= n_classes)).any()):
        raise ValueError(f"target class out of range: the model has {n_classes} classes, got {t.tolist()}")
    return t


def split_heads(x: Tensor, n_head: int) -> Tensor:
    """(B, T, C) -> (B, H, T, C // H)."""
    b, t, c = x.shape
    return x.view(b, t, n_head, c // n_head).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, T, D) -> (B, T, H * D)."""
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


def run(
    forward: Forward,
    relprop: Relprop,
    input_ids: Tensor,
    key_mask: Tensor,
    target: Any,
    dtype: torch.dtype,
) -> LRPResult:
    """Forward with gradients to the attention maps, then the LRP pass from the one-hot target."""
    with torch.enable_grad():
        logits, attns, trace = forward(input_ids, key_mask)
        t = resolve_target(target, logits.detach())
        # samples are independent, so the gradient of the summed target logits is per sample
        grads = torch.autograd.grad(logits.gather(1, t[:, None]).sum(), attns)
    with torch.no_grad():
        start = torch.nn.functional.one_hot(t, logits.shape[-1]).to(dtype)  # (B, C)
        r_attn, r_input = relprop(trace, start)
        keep = key_mask.bool()
        pair = (keep[:, :, None] & keep[:, None, :])[:, None, None]  # (B, 1, 1, T, T)

        def stack(xs: Sequence[Tensor]) -> Tensor:  # L x (B, H, T, T) -> (B, L, H, T, T), padding 0
            x = torch.stack([a.detach() for a in xs], dim=1)
            return torch.where(pair, x, torch.zeros((), dtype=x.dtype, device=x.device))

        return LRPResult(
            logits=logits.detach(),
            target=t,
            attn=stack(attns),
            attn_grad=stack(grads),
            attn_relevance=stack(r_attn),
            input_relevance=torch.where(
                keep, r_input.sum(-1), torch.zeros((), dtype=dtype, device=keep.device)
            ),
        )


def unbatch(result: LRPResult) -> LRPResult:
    """Drop the batch axis of a one-sample result."""
    return replace(result, **{f: getattr(result, f)[0] for f in result.__dataclass_fields__})


def self_attention_relevance(
    record: dict[str, Tensor], weights: Sequence[Tensor], relevance: Tensor, alpha: float = 1.0
) -> tuple[Tensor, Tensor]:
    """LRP from the context (B, T, C), heads merged, back to the q/k/v projections' input.

    record holds x (B, T, C), the projections' input, and q, k, v (B, H, T, D), attn (B, H, T, T);
    weights are the (C_out, C) weights of the q, k and v projections (biases get no relevance).
    Returns R(A) (B, H, T, T) and the relevance of x (B, T, C): the three projections of the one
    x sum their relevances (a tensor used three times).
    """
    n_head = record["q"].shape[1]
    r_attn, r_q, r_k, r_v = attention_relevance(
        record["q"], record["k"], record["v"], record["attn"], split_heads(relevance, n_head)
    )
    x = record["x"]
    r_x = sum(
        linear_relevance(x, w, merge_heads(r), alpha=alpha)
        for w, r in zip(weights, (r_q, r_k, r_v), strict=True)
    )
    return r_attn, r_x


def additive_mask(key_mask: Tensor, dtype: torch.dtype) -> Tensor:
    """(B, T) bool -> (B, 1, 1, T): 0 for real keys, the dtype's minimum for padding (as HF eager)."""
    zero = torch.zeros((), dtype=dtype, device=key_mask.device)
    low = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=key_mask.device)
    return torch.where(key_mask.bool(), zero, low)[:, None, None, :]
