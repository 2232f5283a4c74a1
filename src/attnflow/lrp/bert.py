"""LRP for Hugging Face BERT-family classifiers (``BertForSequenceClassification``, e.g. MiniLM).

A forward written out op by op with the loaded model's own modules (eager attention; dropout is
identity, i.e. eval semantics), recording what the relevance rules need, then the rules of
Chefer et al. (2021) backwards, as their ``BERT_explainability`` applies them: classifier and
pooler Linear αβ (tanh identity), position 0 takes the pooler's relevance, and per layer
LayerNorm identity -> residual Add rule -> Linear αβ (GELU identity) -> Linear αβ, then the same
around self-attention, whose two matmuls share relevance halved. Relevance stops at the
embedding output (their ``BertModel.relprop`` does too): ``input_relevance`` is per token.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ._result import LRPResult, additive_mask, merge_heads, run, self_attention_relevance, split_heads
from .linear import linear_relevance
from .residual import add_relevance

__all__ = ["bert_relevance"]


def bert_relevance(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    *,
    target: Any = None,
    token_type_ids: Tensor | None = None,
    dtype: torch.dtype = torch.float64,
    alpha: float = 1.0,
) -> LRPResult:
    """LRP relevance and attention gradients of a ``BertForSequenceClassification``.

    input_ids, attention_mask (1 = real token), token_type_ids: (B, T). The relevance pass runs
    in ``dtype``; the forward in the model's own dtype (its logits equal the model's).
    """
    bert = model.bert
    emb = bert.embeddings
    n_head = bert.config.num_attention_heads

    def forward(ids: Tensor, keep: Tensor) -> tuple[Tensor, list[Tensor], dict]:
        tokens = ids.shape[1]
        tt = torch.zeros_like(ids) if token_type_ids is None else token_type_ids.to(ids.device)
        x = emb.word_embeddings(ids) + emb.token_type_embeddings(tt)  # (B, T, C), HF's order
        x = x + emb.position_embeddings(emb.position_ids[:, :tokens])
        x = emb.LayerNorm(x).detach().requires_grad_(True)  # the LRP input; gradients start here
        bias = additive_mask(keep, x.dtype)  # (B, 1, 1, T)
        attns, layers = [], []
        for layer in bert.encoder.layer:
            sa = layer.attention.self
            q, k, v = (split_heads(lin(x), n_head) for lin in (sa.query, sa.key, sa.value))  # (B, H, T, D)
            attn = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * sa.scaling + bias, dim=-1)
            ctx = merge_heads(torch.matmul(attn, v))  # (B, T, C)
            ao_dense = layer.attention.output.dense(ctx)
            ao = layer.attention.output.LayerNorm(ao_dense + x)
            act = layer.intermediate.intermediate_act_fn(layer.intermediate.dense(ao))  # (B, T, C_ff)
            out_dense = layer.output.dense(act)
            out = layer.output.LayerNorm(out_dense + ao)
            attns.append(attn)
            layers.append(
                dict(
                    x=x,
                    q=q,
                    k=k,
                    v=v,
                    attn=attn,
                    ctx=ctx,
                    ao_dense=ao_dense,
                    ao=ao,
                    act=act,
                    out_dense=out_dense,
                )
            )
            x = out
        first = x[:, 0]  # (B, C)
        pooled = bert.pooler.activation(bert.pooler.dense(first))
        logits = model.classifier(pooled)  # (B, n_classes); dropout is identity
        return logits, attns, dict(layers=layers, first=first, pooled=pooled, shape=x.shape)

    def relprop(trace: dict, start: Tensor) -> tuple[list[Tensor], Tensor]:
        def c(t: Tensor) -> Tensor:
            return t.detach().to(dtype)

        r = linear_relevance(c(trace["pooled"]), c(model.classifier.weight), start, alpha=alpha)
        r = linear_relevance(c(trace["first"]), c(bert.pooler.dense.weight), r, alpha=alpha)  # tanh: identity
        r_h = torch.zeros(trace["shape"], dtype=dtype, device=start.device)  # (B, T, C)
        r_h[:, 0] = r  # the pooler reads position 0 only
        r_attns = []
        for layer, rec in zip(reversed(bert.encoder.layer), reversed(trace["layers"]), strict=True):
            rec = {key: c(val) for key, val in rec.items()}
            r_ffn, r_res = add_relevance(rec["out_dense"], rec["ao"], r_h)  # LayerNorm: identity
            r_act = linear_relevance(rec["act"], c(layer.output.dense.weight), r_ffn, alpha=alpha)
            r_ao = r_res + linear_relevance(rec["ao"], c(layer.intermediate.dense.weight), r_act, alpha=alpha)
            r_att, r_res = add_relevance(rec["ao_dense"], rec["x"], r_ao)  # LayerNorm: identity
            r_ctx = linear_relevance(rec["ctx"], c(layer.attention.output.dense.weight), r_att, alpha=alpha)
            sa = layer.attention.self
            weights = [c(lin.weight) for lin in (sa.query, sa.key, sa.value)]
            r_attn, r_x = self_attention_relevance(rec, weights, r_ctx, alpha=alpha)
            r_attns.append(r_attn)
            r_h = r_res + r_x
        return r_attns[::-1], r_h

    return run(forward, relprop, input_ids, attention_mask, target, dtype)
