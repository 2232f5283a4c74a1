"""What the norm- and decomposition-based methods share: the vectors each token sends through a
layer's attention block, layer by layer and in chunks of the batch (memory B·T²·D per chunk).

For layer l, query i and key j (Kobayashi et al. 2020, 2021; Ferrando et al. 2022):

    Z_ij = Σ_h α^h_ij f^h(x_j) + δ_ij x_j                (the attention and the residual)

with f^h(x_j) = W_O^h (W_V^h x_j + b_V^h) (`attnflow.needs.value_path`). A post-LayerNorm encoder
block's output is y_i = Σ_j s_i ⊙ centre(Z_ij) + c_i (s = ln1_scale, c = attn_output_bias). Everything
is computed in torch: float64 for numpy inputs (then handed back as numpy), the kit's compute type for
torch tensors, on their device. Not a method module: it declares no RECORDS.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

__all__ = ["CHUNK", "as_tensors", "centre", "chunks", "head_subset", "mixed_vectors", "rollout", "to_kind"]

CHUNK = 1 << 20  # elements of one (b, T, T, D) block: 4 MiB in float32, so that its passes stay in cache


def as_tensors(*arrays: Any) -> tuple[list[Any], bool]:
    """torch tensors of the arrays (numpy: float64, shared memory) and whether they came as numpy."""
    import torch

    numpy_in = not isinstance(arrays[0], torch.Tensor)
    out = [torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64)) if numpy_in else a for a in arrays]
    return out, numpy_in


def to_kind(x: Any, numpy_in: bool) -> Any:
    """A result back in the caller's kind."""
    return x.numpy() if numpy_in else x


def centre(v: Any) -> Any:
    """v minus its mean over the last (feature) axis: LayerNorm's centring, a linear map."""
    return v - v.mean(-1, keepdim=True)


def head_subset(attn: Any, f: Any, heads: str | int, method: str) -> tuple[Any, Any]:
    """The heads the layer's output sums ("mean" and "sum": all of them, as the layer sums them;
    an int: that head alone, as if the layer had only it); "max" has no meaning for a sum."""
    if isinstance(heads, str):
        if heads not in ("mean", "sum"):
            raise ValueError(
                f"{method} decomposes the layer's output, the sum of its heads: heads must be 'mean' or 'sum' "
                f"(both: every head, as the layer sums them) or one head's index, got {heads!r}"
            )
        return attn, f
    return attn[:, :, heads : heads + 1], f[:, :, heads : heads + 1]


def chunks(batch: int, tokens: int, width: int) -> Iterator[slice]:
    """Slices of the batch whose (b, T, T, D) blocks stay under `CHUNK` elements."""
    step = max(1, CHUNK // max(1, tokens * tokens * width))
    for start in range(0, batch, step):
        yield slice(start, min(batch, start + step))


def mixed_vectors(a: Any, f: Any, x: Any) -> Any:
    """Z (b, T_i, T_j, D) of one layer: a (b, H, T, T) attention, f (b, H, T, D) value outputs, x
    (b, T, D) the residual; Z_ij = Σ_h a[h, i, j] f[h, j] + δ_ij x_j. For each key j one product
    (T_i × H) @ (H × D), batched over (b, j)."""
    import torch

    z = (a.permute(0, 3, 2, 1) @ f.permute(0, 2, 1, 3)).transpose(1, 2)  # (b, T_i, T_j, D)
    idx = torch.arange(z.shape[1], device=z.device)
    z[:, idx, idx] += x
    return z


def rollout(per_layer: Any) -> Any:
    """R(1) = M(1), R(l) = M(l) R(l-1) for maps (B, L, T, T): each layer's rows composed with the
    layers below, as the authors compose them (no residual added: it is in M already)."""
    out = per_layer.clone()
    for layer in range(1, per_layer.shape[1]):
        out[:, layer] = per_layer[:, layer] @ out[:, layer - 1]
    return out


def per_layer_maps(
    attn: Any, needs: list[Any], fn: Callable[..., Any], *, heads: str | int, method: str
) -> tuple[Any, bool]:
    """(B, L, T, T) maps of `fn(a, f, *rest)` per layer and chunk of the batch, where needs[0] is
    value_outputs (B, L, H, T, D) and the others (B, L, ...) follow it; and whether the inputs
    were numpy (float64)."""
    import torch

    (a, f, *rest), numpy_in = as_tensors(attn, *needs)
    a, f = head_subset(a, f, heads, method)
    bsz, n_layers, _, tokens, _ = a.shape
    out = torch.zeros((bsz, n_layers, tokens, tokens), dtype=a.dtype, device=a.device)
    for layer in range(n_layers):
        for part in chunks(bsz, tokens, f.shape[-1]):
            out[part, layer] = fn(a[part, layer], f[part, layer], *(r[part, layer] for r in rest))
    return out, numpy_in
