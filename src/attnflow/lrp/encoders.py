"""LRP for Hugging Face post-LayerNorm encoder classifiers: the BERT family
(``BertForSequenceClassification``, e.g. MiniLM) and ``DistilBertForSequenceClassification``.

A forward written out op by op with the loaded model's own modules (eager attention; dropout is
identity, i.e. eval semantics), recording what the relevance rules need (`encoder_forward`), then
the rules of Chefer et al. (2021) backwards, as their ``BERT_explainability`` applies them
(`encoder_relevance`): the head's Linear αβ (BERT: classifier and pooler, tanh identity;
DistilBERT: classifier and pre-classifier, ReLU identity), position 0 takes the head's relevance,
and per layer LayerNorm identity -> residual Add rule -> Linear αβ (activation identity) -> Linear
αβ, then the same around self-attention, whose two matmuls share relevance halved. Relevance stops
at the embedding output (their ``BertModel.relprop`` does too): ``input_relevance`` is per token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ._result import (
    LRPResult,
    PassOptions,
    additive_mask,
    merge_heads,
    run,
    self_attention_relevance,
    split_heads,
)
from .linear import linear_relevance

__all__ = ["bert_relevance", "distilbert_relevance", "encoder_forward", "encoder_relevance"]


def encoder_relevance(
    layers: Sequence[Any],
    records: Sequence[dict[str, Tensor]],
    linears: Callable[[Any], Sequence[Any]],
    relevance: Tensor,
    opt: PassOptions,
) -> tuple[list[Tensor], Tensor]:
    """LRP through a stack of post-LayerNorm encoder blocks (BERT, DistilBERT), last block first:

        mid = LN(attn_out + x),  attn_out = W_o ctx,  ctx = A v (self-attention of x)
        out = LN(ffn_out + mid), ffn_out = W_2 act(W_1 mid)

    Residual adds by `add_relevance`, LayerNorm and the activation by identity, linears by the αβ
    rule, self-attention by `self_attention_relevance`. records[l] holds x, q, k, v, attn, ctx,
    attn_out, mid, act, ffn_out of block l; linears(layer) -> its (W_2, W_1, W_o, W_q, W_k, W_v)
    modules. relevance: R(out) of the last block (B, T, C). Returns ([R(A_l)] in layer order, R(x_0)).
    """
    from .residual import add_relevance

    r_attns = []
    for layer, rec in zip(reversed(layers), reversed(records), strict=True):
        rec = {key: opt.cast(val) for key, val in rec.items()}
        w_2, w_1, w_o, *qkv = (opt.cast(lin.weight) for lin in linears(layer))
        r_ffn, r_res = add_relevance(rec["ffn_out"], rec["mid"], relevance)  # LayerNorm: identity
        r_act = linear_relevance(rec["act"], w_2, r_ffn, alpha=opt.alpha)  # activation: identity
        r_mid = r_res + linear_relevance(rec["mid"], w_1, r_act, alpha=opt.alpha)
        r_att, r_res = add_relevance(rec["attn_out"], rec["x"], r_mid)  # LayerNorm: identity
        r_ctx = linear_relevance(rec["ctx"], w_o, r_att, alpha=opt.alpha)
        r_attn, r_x = self_attention_relevance(rec, qkv, r_ctx, alpha=opt.alpha)
        r_attns.append(r_attn)
        relevance = r_res + r_x
    return r_attns[::-1], relevance


def encoder_forward(
    layers: Sequence[Any], x: Tensor, bias: Tensor, n_head: int, parts: Callable[[Any], Sequence[Any]]
) -> tuple[Tensor, list[Tensor], list[dict[str, Tensor]]]:
    """The forward of post-LayerNorm encoder blocks (BERT, DistilBERT) that `encoder_relevance`
    walks back: per block, A = softmax(q kᵀ · scaling + bias), ctx = A v (heads merged),
    mid = LN_1(W_o ctx + x), out = LN_2(W_2 ffn_in(mid) + mid) (ffn_in = activation ∘ W_1).
    parts(layer) -> (W_q, W_k, W_v, scaling, W_o, LN_1, ffn_in, W_2, LN_2). Returns (the last
    block's output (B, T, C), [A_l (B, H, T, T)], the records of each block)."""
    attns, records = [], []
    for layer in layers:
        q_lin, k_lin, v_lin, scaling, o_lin, ln_1, ffn_in, lin_2, ln_2 = parts(layer)
        q, k, v = (split_heads(lin(x), n_head) for lin in (q_lin, k_lin, v_lin))  # (B, H, T, D)
        attn = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * scaling + bias, dim=-1)
        ctx = merge_heads(torch.matmul(attn, v))  # (B, T, C)
        attn_out = o_lin(ctx)
        mid = ln_1(attn_out + x)
        act = ffn_in(mid)  # (B, T, C_ff)
        ffn_out = lin_2(act)
        attns.append(attn)
        records.append(
            dict(x=x, q=q, k=k, v=v, attn=attn, ctx=ctx, attn_out=attn_out, mid=mid, act=act, ffn_out=ffn_out)
        )
        x = ln_2(ffn_out + mid)
    return x, attns, records


def _bert_parts(layer: nn.Module) -> tuple:
    """A BertLayer as `encoder_forward` takes it."""
    sa, out = layer.attention.self, layer.attention.output

    def ffn_in(h: Tensor) -> Tensor:
        return layer.intermediate.intermediate_act_fn(layer.intermediate.dense(h))

    return (
        sa.query,
        sa.key,
        sa.value,
        sa.scaling,
        out.dense,
        out.LayerNorm,
        ffn_in,
        layer.output.dense,
        layer.output.LayerNorm,
    )


def _bert_linears(layer: nn.Module) -> tuple[nn.Module, ...]:
    """(W_2, W_1, W_o, W_q, W_k, W_v) of a BertLayer, as `encoder_relevance` takes them."""
    sa = layer.attention.self
    return (
        layer.output.dense,
        layer.intermediate.dense,
        layer.attention.output.dense,
        sa.query,
        sa.key,
        sa.value,
    )


def bert_relevance(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    opt: PassOptions,
    token_type_ids: Tensor | None = None,
) -> LRPResult:
    """LRP relevance and attention gradients of a ``BertForSequenceClassification``.

    input_ids, attention_mask (1 = real token), token_type_ids: (B, T). The relevance pass runs
    in ``opt.dtype``; the forward in the model's own dtype (its logits equal the model's).
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
        x, attns, layers = encoder_forward(bert.encoder.layer, x, bias, n_head, _bert_parts)
        first = x[:, 0]  # (B, C)
        pooled = bert.pooler.activation(bert.pooler.dense(first))
        logits = model.classifier(pooled)  # (B, n_classes); dropout is identity
        return logits, attns, dict(layers=layers, first=first, pooled=pooled, shape=x.shape)

    def relprop(trace: dict, start: Tensor) -> tuple[list[Tensor], Tensor]:
        r = linear_relevance(
            opt.cast(trace["pooled"]), opt.cast(model.classifier.weight), start, alpha=opt.alpha
        )
        r = linear_relevance(
            opt.cast(trace["first"]), opt.cast(bert.pooler.dense.weight), r, alpha=opt.alpha
        )  # tanh: identity
        r_h = torch.zeros(trace["shape"], dtype=opt.dtype, device=start.device)  # (B, T, C)
        r_h[:, 0] = r  # the pooler reads position 0 only
        return encoder_relevance(bert.encoder.layer, trace["layers"], _bert_linears, r_h, opt)

    return run(forward, relprop, input_ids, attention_mask, opt.target, opt.dtype)


def _distilbert_parts(layer: nn.Module) -> tuple:
    """A DistilBERT TransformerBlock as `encoder_forward` takes it."""
    sa, ffn = layer.attention, layer.ffn

    def ffn_in(h: Tensor) -> Tensor:
        return ffn.activation(ffn.lin1(h))

    return (
        sa.q_lin,
        sa.k_lin,
        sa.v_lin,
        sa.scaling,
        sa.out_lin,
        layer.sa_layer_norm,
        ffn_in,
        ffn.lin2,
        layer.output_layer_norm,
    )


def _distilbert_linears(layer: nn.Module) -> tuple[nn.Module, ...]:
    """(W_2, W_1, W_o, W_q, W_k, W_v) of a TransformerBlock, as `encoder_relevance` takes them."""
    sa = layer.attention
    return layer.ffn.lin2, layer.ffn.lin1, sa.out_lin, sa.q_lin, sa.k_lin, sa.v_lin


def distilbert_relevance(
    model: nn.Module, input_ids: Tensor, attention_mask: Tensor, opt: PassOptions
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
        x, attns, layers = encoder_forward(body.transformer.layer, x, bias, n_head, _distilbert_parts)
        first = x[:, 0]  # (B, C)
        hidden = torch.relu(model.pre_classifier(first))
        logits = model.classifier(hidden)  # (B, n_classes); dropout is identity
        return logits, attns, dict(layers=layers, first=first, hidden=hidden, shape=x.shape)

    def relprop(trace: dict, start: Tensor) -> tuple[list[Tensor], Tensor]:
        r = linear_relevance(
            opt.cast(trace["hidden"]), opt.cast(model.classifier.weight), start, alpha=opt.alpha
        )
        r = linear_relevance(
            opt.cast(trace["first"]), opt.cast(model.pre_classifier.weight), r, alpha=opt.alpha
        )  # ReLU: identity
        r_h = torch.zeros(trace["shape"], dtype=opt.dtype, device=start.device)  # (B, T, C)
        r_h[:, 0] = r
        return encoder_relevance(body.transformer.layer, trace["layers"], _distilbert_linears, r_h, opt)

    return run(forward, relprop, input_ids, attention_mask, opt.target, opt.dtype)
