"""LRP for Hugging Face ``DistilBertForSequenceClassification``.

Like ``bert.py``: an op-by-op forward with the model's own modules (eager attention, dropout
identity), then Chefer et al.'s rules backwards: classifier and pre-classifier Linear αβ (ReLU
identity), position 0 takes the head's relevance, and per layer (post-LN, as BERT) LayerNorm
identity -> residual Add rule -> FFN (Linear αβ, activation identity, Linear αβ), then the same
around self-attention. Relevance stops at the embedding output.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ._result import LRPResult, additive_mask, merge_heads, run, self_attention_relevance, split_heads
from .linear import linear_relevance
from .residual import add_relevance

__all__ = ["distilbert_relevance"]


def distilbert_relevance(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    *,
    target: Any = None,
    dtype: torch.dtype = torch.float64,
    alpha: float = 1.0,
) -> LRPResult:
    """LRP relevance and attention gradients of a ``DistilBertForSequenceClassification``."""
    body = model.distilbert
    emb = body.embeddings
    n_head = body.config.n_heads

    def forward(ids: Tensor, keep: Tensor) -> tuple[Tensor, list[Tensor], dict]:
        tokens = ids.shape[1]
        x = emb.word_embeddings(ids) + emb.position_embeddings(emb.position_ids[:, :tokens])  # (B, T, C)
        x = emb.LayerNorm(x).detach().requires_grad_(True)  # the LRP input; gradients start here
        bias = additive_mask(keep, x.dtype)  # (B, 1, 1, T)
        attns, layers = [], []
        for layer in body.transformer.layer:
            sa = layer.attention
            q, k, v = (split_heads(lin(x), n_head) for lin in (sa.q_lin, sa.k_lin, sa.v_lin))  # (B, H, T, D)
            attn = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * sa.scaling + bias, dim=-1)
            ctx = merge_heads(torch.matmul(attn, v))  # (B, T, C)
            att_out = sa.out_lin(ctx)
            h = layer.sa_layer_norm(att_out + x)
            act = layer.ffn.activation(layer.ffn.lin1(h))  # (B, T, C_ff)
            ffn = layer.ffn.lin2(act)
            out = layer.output_layer_norm(ffn + h)
            attns.append(attn)
            layers.append(
                dict(x=x, q=q, k=k, v=v, attn=attn, ctx=ctx, att_out=att_out, h=h, act=act, ffn=ffn)
            )
            x = out
        first = x[:, 0]  # (B, C)
        hidden = torch.relu(model.pre_classifier(first))
        logits = model.classifier(hidden)  # (B, n_classes); dropout is identity
        return logits, attns, dict(layers=layers, first=first, hidden=hidden, shape=x.shape)

    def relprop(trace: dict, start: Tensor) -> tuple[list[Tensor], Tensor]:
        def c(t: Tensor) -> Tensor:
            return t.detach().to(dtype)

        r = linear_relevance(c(trace["hidden"]), c(model.classifier.weight), start, alpha=alpha)
        r = linear_relevance(
            c(trace["first"]), c(model.pre_classifier.weight), r, alpha=alpha
        )  # ReLU: identity
        r_h = torch.zeros(trace["shape"], dtype=dtype, device=start.device)  # (B, T, C)
        r_h[:, 0] = r
        r_attns = []
        for layer, rec in zip(reversed(body.transformer.layer), reversed(trace["layers"]), strict=True):
            rec = {key: c(val) for key, val in rec.items()}
            r_ffn, r_res = add_relevance(rec["ffn"], rec["h"], r_h)  # LayerNorm: identity
            r_act = linear_relevance(rec["act"], c(layer.ffn.lin2.weight), r_ffn, alpha=alpha)
            r_hid = r_res + linear_relevance(rec["h"], c(layer.ffn.lin1.weight), r_act, alpha=alpha)
            r_att, r_res = add_relevance(rec["att_out"], rec["x"], r_hid)  # LayerNorm: identity
            sa = layer.attention
            r_ctx = linear_relevance(rec["ctx"], c(sa.out_lin.weight), r_att, alpha=alpha)
            weights = [c(lin.weight) for lin in (sa.q_lin, sa.k_lin, sa.v_lin)]
            r_attn, r_x = self_attention_relevance(rec, weights, r_ctx, alpha=alpha)
            r_attns.append(r_attn)
            r_h = r_res + r_x
        return r_attns[::-1], r_h

    return run(forward, relprop, input_ids, attention_mask, target, dtype)
