"""DecompX (Modarressi et al., ACL 2023): each input token's share of every vector in the model,
propagated through all layers (attention, residuals, both LayerNorms and the FFN) and through the
classification head, read at the explained class's logit.

Every hidden state is kept as a sum over the input tokens k, h_i = Σ_k x_i^k (+ nothing: biases are
shared out). Layer 0 starts from the embeddings, x_i^k = δ_ik e_i. Through a post-LayerNorm
encoder layer (BERT-type), with α^h its attention, W_V^h, W_O^h the value and output projections:

    attention + residual   z_i^k = Σ_h Σ_j α^h_ij W_O^h W_V^h x_j^k + x_i^k,   then  B(z_i, W_O b_V + b_O)
                           (layer 0: z_i^k = Σ_h α^h_ik W_O^h (W_V^h e_k + b_V^h) + δ_ik e_i, then B(z_i, b_O))
    LayerNorm (γ, β, ε)    n_i^k = γ ⊙ (z_i^k - mean(z_i^k)) / sqrt(var(z_i) + ε),  then  B(n_i, β)
                           (var of the whole vector z_i = Σ_k z_i^k, as the model computes it)
    FFN                    u_i^k = B(W_1 n_i^k, b_1) ⊙ θ_i,   θ_i = act(p_i) / (p_i + 1e-12),  p_i = W_1 n_i + b_1
                           f_i^k = B(W_2 u_i^k, b_2);  then LayerNorm 2 of n_i^k + f_i^k as above
    head (BERT)            q^k = B(W_P x_CLS^k, b_P) ⊙ tanh(r) / (r + 1e-12),  r = W_P x_CLS + b_P
                           c^k = B(W_C q^k, b_C)                                  (k's share of the logits)

where B(v, b) shares a bias b out over the components by the absolute dot product ("absdot"):

    B(v, b)^k = v^k + w_k b,    w_k = |v^k · b| / (Σ_m |v^m · b| + 1e-12)

The zero-origin slopes θ (act(p)/p per unit, the authors' "GeLU_ZO" and "ZO" tanh) make every step
exact: Σ_k of each decomposed vector equals the model's own vector (up to the 1e-12 terms), so
Σ_k c^k equals the logits. This is the authors' configuration of their paper's DecompX
(mohsenfayyaz/DecompX, ``DecompXConfig(include_biases=True, bias_decomp_type="absdot",
include_LN1=True, include_FFN=True, FFN_approx_type="GeLU_ZO", include_LN2=True,
aggregation="vector", include_classifier_w_pooler=True, tanh_approx_type="ZO")``); the reference
fixture (``tests/fixtures/decompx/``) holds their code's output on a tiny BERT.

Map: layer l's row is c^k[t] for the explained class t with the head applied to layer l's
decomposed [CLS] vector (pooler slope θ from layer l's own [CLS] state): at the last layer exactly
the authors' output, below it the same head read off an earlier layer (a "logit lens" of the
decomposition). Signed: a token can lower the logit. BERT-type encoders with a pooler and a
classification head (``BertForSequenceClassification``); the method has no definition for
decoders. Cost per layer and sample: the component vectors (T, T, D) through the attention, the
LayerNorms and the FFN (T, T, 4D): about T forward passes of the layer's linear maps (the last
layer at the [CLS] row only), in the model's float type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import MethodRecord

__all__ = ["RECORDS", "check_model", "decompx_contributions", "decompx_maps", "share_bias"]

EPS = 1e-12  # the authors' guard in the bias shares and the zero-origin slopes


def share_bias(v: Any, bias: Any) -> Any:
    """B(v, b): ``v`` (..., K, D) components plus each one's absdot share of ``bias`` (D,).

    >>> import torch
    >>> share_bias(torch.tensor([[1.0, 0.0], [0.0, 3.0]]), torch.tensor([2.0, 2.0])).tolist()
    [[1.5, 0.5], [1.5, 4.5]]
    """
    return _share_(v.clone(), bias)


def _share_(v: Any, bias: Any) -> Any:
    """`share_bias` in place (``v`` is overwritten and returned)."""
    w = (v @ bias).abs_()  # |v^k · b|: (..., K)
    w /= w.sum(-1, keepdim=True) + EPS
    return v.add_(w[..., None] * bias)


def _layer_norm_(z: Any, pre: Any, ln: Any) -> Any:
    """LayerNorm of decomposed vectors z (T, K, D) whose sum is ``pre`` (T, D), in place."""
    var = (pre - pre.mean(-1, keepdim=True)).pow(2).mean(-1)  # (T,)
    z -= z.mean(-1, keepdim=True)
    z *= ln.weight.to(z.dtype) / (var + ln.eps).sqrt()[:, None, None]  # γ / sqrt(var(z_i) + ε)
    return _share_(z, ln.bias.to(z.dtype))


def _head(x_cls: Any, h_cls: Any, pooler: Any, classifier: Any) -> Any:
    """c^k (K, C): the pooler and classifier applied to [CLS]'s components x_cls (K, D) of its state
    h_cls (D,), the model's own (the slopes θ are taken there)."""
    w_p, b_p = pooler.weight.to(x_cls.dtype), pooler.bias.to(x_cls.dtype)
    r = h_cls @ w_p.T + b_p
    q = _share_(x_cls @ w_p.T, b_p) * (r.tanh() / (r + EPS))
    return _share_(q @ classifier.weight.to(x_cls.dtype).T, classifier.bias.to(x_cls.dtype))


def _layer(block: Any, e: Any, a: Any, x: Any, rows: slice) -> tuple[Any, Any]:
    """The components (R, K, D) of one encoder layer's output at the query ``rows`` and that output
    (R, D) itself, from the layer's input e (T, D), attention a (H, T, T) and the input's components
    x (T, K, D; None at layer 0). The layer's own vectors are recomputed from e and a with its own
    weights (eval mode: no dropout)."""
    import torch

    dt = e.dtype
    att, ffn_in, ffn_out = block.attention, block.intermediate, block.output
    w_v, b_v = att.self.value.weight.to(dt), att.self.value.bias.to(dt)
    w_o, b_o = att.output.dense.weight.to(dt), att.output.dense.bias.to(dt)
    heads, tokens = a.shape[0], e.shape[0]
    dh = w_v.shape[0] // heads
    a = a[:, rows]  # (H, R, T)
    v = (e @ w_v.T + b_v).view(tokens, heads, dh)  # the layer's own value vectors (T, H, dh)
    if x is None:  # the authors' first layer: the value bias goes with α to each key
        f = torch.einsum(
            "khe,hed->khd", v, w_o.T.reshape(heads, dh, -1)
        )  # f^h(e_k) = W_O^h (W_V^h e_k + b_V^h)
        z = torch.einsum("hik,khd->ikd", a, f)  # Σ_h α^h_ik f^h(e_k)
        z += torch.diag_embed(e.T).permute(1, 2, 0)[rows]  # δ_ik e_i
        z = _share_(z, b_o)
    else:  # Σ_h Σ_j α^h_ij W_O^h W_V^h x_j^k: the values of the components, mixed per head, then W_O
        vx = (x @ w_v.T).view(tokens, tokens, heads, dh)  # (T_j, K, H, dh)
        z = torch.einsum("hij,jkhd->ikhd", a, vx).reshape(a.shape[1], tokens, -1) @ w_o.T
        z = _share_(z.add_(x[rows]), w_o @ b_v + b_o)
    ctx = torch.einsum("hij,jhd->ihd", a, v).reshape(a.shape[1], -1)  # the model's own context vectors
    pre1 = ctx @ w_o.T + b_o + e[rows]
    ln1 = att.output.LayerNorm
    n = _layer_norm_(z, pre1, ln1)
    y1 = torch.nn.functional.layer_norm(pre1, pre1.shape[-1:], ln1.weight.to(dt), ln1.bias.to(dt), ln1.eps)
    w_1, b_1 = ffn_in.dense.weight.to(dt), ffn_in.dense.bias.to(dt)
    p = y1 @ w_1.T + b_1
    act = ffn_in.intermediate_act_fn(p)
    u = _share_(n @ w_1.T, b_1).mul_((act / (p + EPS))[:, None, :])  # the zero-origin slopes θ
    w_2, b_2 = ffn_out.dense.weight.to(dt), ffn_out.dense.bias.to(dt)
    f = _share_(u @ w_2.T, b_2)
    pre2, ln2 = act @ w_2.T + b_2 + y1, ffn_out.LayerNorm
    y2 = torch.nn.functional.layer_norm(pre2, pre2.shape[-1:], ln2.weight.to(dt), ln2.bias.to(dt), ln2.eps)
    return _layer_norm_(f.add_(n), pre2, ln2), y2


def decompx_contributions(model: Any, embedded: Any, attentions: Any) -> np.ndarray:
    """(L, T, C) of one sample: token k's share of each class logit, the head read at each layer l.

    ``embedded``: the embeddings' output (T, D) (the first layer's input), ``attentions``
    (L, H, T, T), both on the sample's real tokens; every later state is the layers' own,
    recomputed. Computed in the model's float type (float32 at least); the last layer at the [CLS]
    row only (the head reads nothing else).
    """
    import torch

    base = model.base_model
    blocks, pooler, classifier = list(base.encoder.layer), base.pooler.dense, model.classifier
    dt = torch.promote_types(embedded.dtype, torch.float32)
    e = embedded.to(dt)
    out = []
    with torch.no_grad():
        x = None  # the components of the layer's input (T, K, D); None: the embeddings, δ_ik e_i
        for layer, block in enumerate(blocks):
            rows = slice(0, 1) if layer == len(blocks) - 1 else slice(None)
            x, e = _layer(block, e, attentions[layer].to(dt), x, rows)
            out.append(_head(x[0], e[0], pooler, classifier).double().cpu().numpy())
    return np.stack(out)


def check_model(model: Any) -> None:
    """Refuse, in one line, a model DecompX is not defined for (a BERT-type encoder with a pooler and a
    classification head)."""
    from attnflow.needs.value_path import family

    base = getattr(model, "base_model", None)
    if (
        family(model) != "encoder"
        or getattr(base, "pooler", None) is None
        or not hasattr(getattr(model, "classifier", None), "weight")
    ):
        raise ValueError(
            f"decompx decomposes a BERT-type encoder with a pooler and a classification head "
            f"(BertForSequenceClassification); {type(model).__name__} has no such head"
        )


def decompx_maps(ctx: Any, valid: np.ndarray, positions: Sequence[int] | None) -> list[np.ndarray]:
    """DecompX maps (L, T_b) per sample of one batch of `attnflow.hf` (``ctx``: its InputContext):
    each real token's share of the explained class's logit (``ctx.out.target``), the head read at
    each layer."""
    import torch

    from attnflow.bridge.hf import TOKENIZER_ONLY_KEYS
    from attnflow.devices import model_device
    from attnflow.modes import eval_mode

    model = ctx.model
    check_model(model)
    device = model_device(model)
    batch: Mapping[str, Any] = {k: v.to(device) if isinstance(v, torch.Tensor) else v
                                for k, v in ctx.inputs.items() if k not in TOKENIZER_ONLY_KEYS}  # fmt: skip
    with eval_mode(model), torch.no_grad():
        keys = ("input_ids", "token_type_ids", "position_ids")
        embedded = model.base_model.embeddings(**{k: batch[k] for k in keys if k in batch})  # (B, T, D)
    attentions = ctx.out.attentions  # (B, L, H, T, T), the bridge's eager forward
    target = ctx.out.target
    maps = []
    for b, keep in enumerate(valid):
        idx = torch.as_tensor(np.flatnonzero(keep), device=device)
        h = embedded[b, idx]
        a = attentions[b][:, :, idx][:, :, :, idx].to(device)
        c = decompx_contributions(model, h, a)  # (L, T_b, C)
        maps.append(c[:, :, int(target[b])])
    return maps


RECORDS = (
    MethodRecord(
        "decompx", "DecompX", decompx_maps, kind="model", rows="classification", signed=True, study=False,
        generation=False, order=74,
        summary="each token's share of the class logit, decomposed through every layer and the head "
        "(Modarressi et al., ACL 2023)",
    ),
)  # fmt: skip
