"""LRP for attnflow's agreement classifier (``attnflow.models.agreement``: pre-LN GPT-2 blocks).

An op-by-op forward with the model's own modules (``wte``, ``wpe``, ``h[i].ln_1``,
``attn.c_attn``, ``attn.c_proj``, ``ln_2``, ``mlp.c_fc``, ``mlp.gelu``, ``mlp.c_proj``, ``ln_f``,
``classifier``; dropout identity), then Chefer et al.'s rules backwards: classifier Linear αβ on
position 0, ln_f identity, and per block x2 = x1 + MLP(ln_2(x1)), x1 = x0 + Attn(ln_1(x0)):
residual Add rule, Linear αβ (GELU and LayerNorm identity), self-attention with its two matmuls
halved. Relevance stops at the input embeddings wte(ids) + wpe(pos).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ._result import LRPResult, PassOptions, merge_heads, run, self_attention_relevance, split_heads
from .linear import linear_relevance
from .residual import add_relevance

__all__ = ["agreement_relevance"]


def agreement_relevance(
    model: nn.Module, input_ids: Tensor, attention_mask: Tensor, opt: PassOptions
) -> LRPResult:
    """LRP relevance and attention gradients of an ``AgreementTransformer``."""
    n_head = model.config.n_head

    def forward(ids: Tensor, keep: Tensor) -> tuple[Tensor, list[Tensor], dict]:
        tokens = ids.shape[1]
        pos = torch.arange(tokens, device=ids.device)
        x = (model.wte(ids) + model.wpe(pos)).detach().requires_grad_(True)  # (B, T, C); gradients start here
        width = x.shape[-1]
        key = keep.bool()[:, None, None, :]  # (B, 1, 1, T)
        attns, layers = [], []
        for block in model.h:
            h = block.ln_1(x)
            q, k, v = (
                split_heads(t, n_head) for t in block.attn.c_attn(h).split(width, dim=2)
            )  # (B, H, T, D)
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
            scores = scores.masked_fill(~key, torch.finfo(scores.dtype).min)
            attn = torch.softmax(scores, dim=-1).masked_fill(~key, 0.0)  # as the model: padded keys exactly 0
            y = merge_heads(attn @ v)  # (B, T, C)
            a = block.attn.c_proj(y)
            x1 = x + a
            h2 = block.ln_2(x1)
            g = block.mlp.gelu(block.mlp.c_fc(h2))  # (B, T, 4C)
            m = block.mlp.c_proj(g)
            attns.append(attn)
            layers.append(dict(x0=x, x=h, q=q, k=k, v=v, attn=attn, y=y, a=a, x1=x1, h2=h2, g=g, m=m))
            x = x1 + m
        first = model.ln_f(x)[:, 0]  # (B, C): the classifier reads <cls> only
        logits = model.classifier(first)
        return logits, attns, dict(layers=layers, first=first, shape=x.shape)

    def relprop(trace: dict, start: Tensor) -> tuple[list[Tensor], Tensor]:
        r_x = torch.zeros(trace["shape"], dtype=opt.dtype, device=start.device)  # (B, T, C)
        r_x[:, 0] = linear_relevance(
            opt.cast(trace["first"]), opt.cast(model.classifier.weight), start, alpha=opt.alpha
        )
        r_attns = []
        for block, rec in zip(reversed(model.h), reversed(trace["layers"]), strict=True):
            rec = {key: opt.cast(val) for key, val in rec.items()}
            r_m, r_x1 = add_relevance(rec["m"], rec["x1"], r_x)
            r_g = linear_relevance(
                rec["g"], opt.cast(block.mlp.c_proj.weight), r_m, alpha=opt.alpha
            )  # GELU: identity
            r_x1 = r_x1 + linear_relevance(
                rec["h2"], opt.cast(block.mlp.c_fc.weight), r_g, alpha=opt.alpha
            )  # ln_2: identity
            r_a, r_x0 = add_relevance(rec["a"], rec["x0"], r_x1)
            r_y = linear_relevance(rec["y"], opt.cast(block.attn.c_proj.weight), r_a, alpha=opt.alpha)
            weights = opt.cast(block.attn.c_attn.weight).split(rec["x"].shape[-1], dim=0)  # q, k, v rows
            r_attn, r_h = self_attention_relevance(rec, weights, r_y, alpha=opt.alpha)  # ln_1: identity
            r_attns.append(r_attn)
            r_x = r_x0 + r_h
        return r_attns[::-1], r_x

    return run(forward, relprop, input_ids, attention_mask, opt.target, opt.dtype)
