"""ALTI (Ferrando et al., EMNLP 2022): each token's share of a layer's output by the Manhattan
distance, composed through the layers by rollout.

Per layer l of a post-LayerNorm encoder (BERT-type), query i and key j, with the needs
f^h(x_j) = W_O^h (W_V^h x_j + b_V^h) (value_outputs), x_j (layer_inputs), s_i = γ1 / σ1_i (ln1_scale)
and c_i = γ1 ⊙ centre(b_O) / σ1_i + β1 (attn_output_bias):

    T_i(x_j) = s_i ⊙ centre(Σ_h α^h_ij f^h(x_j) + δ_ij x_j)       (what token j gives to y_i)
    y_i      = Σ_j T_i(x_j) + c_i                                  (the attention block's output,
                                                                    LN1(attention + residual))
    C(l)_ij  = max(0, ||y_i||₁ - ||y_i - T_i(x_j)||₁) / Σ_k max(0, ||y_i||₁ - ||y_i - T_i(x_k)||₁)
    R(1) = C(1),  R(l) = C(l) R(l-1)

as the authors' code computes it (mt-upc/transformer-contributions, ``get_contributions`` and
``normalize_contributions(scaling="min_sum", resultant_norm=||y||₁)``, then
``compute_joint_attention``): the LayerNorm's scale is 1 / sqrt(var + ε) (their code adds ε to the
states, which std ignores: a difference below ε / var), the FFN and LN2 are left out (the
contributions of the attention block, rolled out). Where every token's vector is farther from y_i
than 0 is (all C_ij = 0: the authors' normalisation divides 0 by 0, a NaN row), the row goes to
token i itself (C_ii = 1), so rows of R always sum to 1. Cost per layer: B·T²·H·D multiply-adds for the
vectors and B·T²·D for the distances, in chunks of the batch (`attnflow.methods.decompose`).

Defined here for BERT-type encoders (the need ln1_scale is a post-LayerNorm encoder's); the
authors' pre-LayerNorm variant (decoders: T_i(x_j) without LN1, y_i the residual stream after
attention) is not implemented yet.
"""

from __future__ import annotations

from typing import Any

from attnflow.explain.kit import Batch, attention_method

from . import MethodRecord
from .decompose import mixed_vectors, per_layer_maps, rollout, to_kind

__all__ = ["RECORDS", "alti_map", "contributions"]

NEEDS = ("value_outputs", "layer_inputs", "ln1_scale", "attn_output_bias")


def contributions(a: Any, f: Any, x: Any, scale: Any, bias: Any) -> Any:
    """C(l) (b, T, T) of one layer from its attention a (b, H, T, T), value outputs f (b, H, T, D),
    inputs x, LN1 scales and the bias term (b, T, D); padding (zero vectors) gets 0."""
    import torch

    t = mixed_vectors(a, f, x)  # (b, T_i, T_j, D), a new tensor: worked on in place (memory B·T²·D once)
    t -= t.mean(-1, keepdim=True)
    t *= scale[:, :, None, :]  # T_i(x_j)
    y = t.sum(dim=2) + bias  # (b, T, D)
    y_norm = y.abs().sum(-1)  # ||y_i||₁
    distance = t.neg_().add_(y[:, :, None, :]).abs_().sum(-1)  # ||y_i - T_i(x_j)||₁: (b, T_i, T_j)
    c = (y_norm[..., None] - distance).clamp(min=0.0)
    total = c.sum(-1, keepdim=True)
    eye = torch.eye(c.shape[-1], dtype=c.dtype, device=c.device)
    real = bias.abs().sum(-1) + x.abs().sum(-1) > 0  # (b, T): padding's vectors are 0
    fallback = eye * real[..., None]  # a row without contributions goes to its own token (see above)
    return torch.where(total > 0, c / torch.where(total > 0, total, 1.0), fallback)


@attention_method(needs=NEEDS)
def alti_map(
    batch: Batch,
    *,
    heads: str | int,
    value_outputs: Any,
    layer_inputs: Any,
    ln1_scale: Any,
    attn_output_bias: Any,
) -> Any:
    """R(l) = C(l) R(l-1) of the Manhattan-distance contributions, [..., layer, query, key];
    padding 0; rows of real tokens sum to 1.

    >>> import numpy as np
    >>> a = np.eye(2)[None, None]  # one layer, one head attending to itself: nothing mixes
    >>> f, x = np.ones((1, 1, 2, 2)), np.array([[[1.0, -1.0], [2.0, 0.0]]])
    >>> alti_map(a, value_outputs=f, layer_inputs=x, ln1_scale=np.ones((1, 2, 2)),
    ...          attn_output_bias=np.zeros((1, 2, 2))).tolist()
    [[[1.0, 0.0], [0.0, 1.0]]]
    """
    needs = [value_outputs, layer_inputs, ln1_scale, attn_output_bias]
    maps, numpy_in = per_layer_maps(batch.heads(), needs, contributions, heads=heads, method="alti")
    return to_kind(rollout(maps), numpy_in)


RECORDS = (
    MethodRecord(
        "alti", "ALTI", alti_map, row_sums="one", order=72, study=False, generation=False,
        summary="Manhattan-distance contributions of each token to the attention block's output, rolled out "
        "(Ferrando et al., EMNLP 2022)",
    ),
)  # fmt: skip
