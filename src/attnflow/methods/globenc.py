"""GlobEnc (Modarressi et al., NAACL 2022): the norm of each token's vector through the attention,
the residual and both LayerNorms of an encoder layer, composed through the layers by rollout.

Per layer l of a post-LayerNorm encoder (BERT-type), query i and key j, with the needs
f^h(x_j) (value_outputs), x_j (layer_inputs), s1_i = γ1 / σ1_i (ln1_scale) and s2_i = γ2 / σ2_i
(ln2_scale, LN2 after the FFN):

    N(l)_ij = || s2_i ⊙ centre( s1_i ⊙ centre(Σ_h α^h_ij f^h(x_j) + δ_ij x_j) ) ||₂
    G(1) = N(1),  G(l) = N(l) G(l-1)

as the authors' code computes it (mohsenfayyaz/GlobEnc, ``BertNormOutput`` with the LN2 step of
``BertLayer``, then ``AttentionRollout.compute_joint_attention``): the FFN's own transformation is
left out but LN2's scale, computed on the real LN2 input, is applied; neither the layers' maps nor
the product are normalised (their demo scales the CLS row by its maximum only to draw it), so rows
have no law beyond >= 0 (``row_sums="nonnegative"``). The biases b_O, β1, β2 are nobody's token and
left out. Defined for BERT-type encoders (both LayerNorms are a post-LayerNorm encoder's).
"""

from __future__ import annotations

from typing import Any

from attnflow.explain.kit import Batch, attention_method

from . import MethodRecord
from .decompose import mixed_vectors, per_layer_maps, rollout, to_kind

__all__ = ["RECORDS", "globenc_map", "layer_norms"]

NEEDS = ("value_outputs", "layer_inputs", "ln1_scale", "ln2_scale")


def layer_norms(a: Any, f: Any, x: Any, scale1: Any, scale2: Any) -> Any:
    """N(l) (b, T, T) of one layer; padding (zero vectors) gets 0."""
    v = mixed_vectors(a, f, x)  # (b, T_i, T_j, D), a new tensor: worked on in place
    v -= v.mean(-1, keepdim=True)
    v *= scale1[:, :, None, :]  # after LN1's linear part
    v -= v.mean(-1, keepdim=True)
    v *= scale2[:, :, None, :]  # after LN2's
    return v.norm(dim=-1)


@attention_method(needs=NEEDS)
def globenc_map(
    batch: Batch, *, heads: str | int, value_outputs: Any, layer_inputs: Any, ln1_scale: Any, ln2_scale: Any
) -> Any:
    """G(l) = N(l) G(l-1), [..., layer, query, key]; padding 0.

    >>> import numpy as np
    >>> a = np.eye(2)[None, None]  # one layer, one head attending to itself
    >>> f, x = np.zeros((1, 1, 2, 2)), np.array([[[1.0, -1.0], [2.0, 0.0]]])
    >>> globenc_map(a, value_outputs=f, layer_inputs=x, ln1_scale=np.ones((1, 2, 2)),
    ...             ln2_scale=np.ones((1, 2, 2))).round(4).tolist()  # ||centre(x_i)||
    [[[1.4142, 0.0], [0.0, 1.4142]]]
    """
    needs = [value_outputs, layer_inputs, ln1_scale, ln2_scale]
    maps, numpy_in = per_layer_maps(batch.heads(), needs, layer_norms, heads=heads, method="globenc")
    return to_kind(rollout(maps), numpy_in)


RECORDS = (
    MethodRecord(
        "globenc", "GlobEnc", globenc_map, row_sums="nonnegative", order=71, study=False, generation=False,
        summary="norms through attention, residual and both LayerNorms, rolled out (Modarressi et al., NAACL 2022)",
    ),
)  # fmt: skip
