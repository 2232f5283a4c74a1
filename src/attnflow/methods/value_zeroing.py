"""Value zeroing (Mohebbi et al., EACL 2023): how much a layer's output of token i changes when the
value vector of token j is zeroed, composed through the layers by rollout.

Per layer l, with h(l) the layer's input and out_i(h) its output at token i, and out_i^{¬j} the
output when token j's value vector v^h_j = W_V^h x_j + b_V^h is zeroed in every head (the attention
weights are left as they are):

    D(l)_ij = 1 - cos(out_i^{¬j}, out_i)               (cosine distance)
    C(l)_ij = D(l)_ij / Σ_k D(l)_ik
    R(1) = C(1),  R(l) = C(l) R(l-1)                     (rollout without residual)

as the authors' code computes it (hmohebbi/ValueZeroing, ``scoring/value_zeroing.py``: each layer
run on the previous layer's original output, ``cosine_distances(...).diagonal()``, rows divided by
their sums, ``compute_joint_attention(res=False)``). The maps are R(l) at the explained row.

Zeroing v_j changes only the attention output: its context vectors lose α^h_ij v^h_j, so the layer
is recomputed from there (the output projection, the residual, the LayerNorms and the FFN, the
model's own modules) for every j at once: per layer T_b copies of the tokens through the FFN,
never the query / key projections again. Cost: about T_b forward passes of the FFN per sample (the
authors': T_b forward passes of every layer). BERT-type encoders, GPT-2 and Llama-type decoders.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import MethodRecord

__all__ = ["RECORDS", "value_zeroing_layers", "value_zeroing_maps"]

CHUNK = 1 << 22  # elements of one (copies, T, width) block through the FFN


def _rest(kind: str, layer: Any, ctx: Any, h: Any) -> Any:
    """The layer's output (N, T, D) from its merged context vectors ctx (N, T, H*dh) and its input h
    (N, T, D): everything after the attention weights, the model's own modules (eval mode)."""
    if kind == "encoder":
        att = layer.attention.output(ctx, h)  # dense, dropout, LayerNorm(· + h)
        return layer.output(layer.intermediate(att), att)
    if kind == "gpt2":
        r = h + layer.attn.c_proj(ctx)
        return r + layer.mlp(layer.ln_2(r))
    r = h + layer.self_attn.o_proj(ctx)
    return r + layer.mlp(layer.post_attention_layernorm(r))


def value_zeroing_layers(model: Any, inputs: Mapping[str, Any], valid: np.ndarray) -> list[np.ndarray]:
    """C(l) (L, T_b, T_b) per sample (float64): each layer's row-normalised cosine distances."""
    import torch

    from attnflow.bridge import forward
    from attnflow.bridge.eager import eager_attention
    from attnflow.bridge.hf import TOKENIZER_ONLY_KEYS
    from attnflow.devices import model_device
    from attnflow.modes import eval_mode
    from attnflow.needs.value_path import family, layers, value_projection

    kind = family(model)
    device = model_device(model)
    batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()
             if k not in TOKENIZER_ONLY_KEYS}  # fmt: skip
    blocks = layers(model)
    values: list[Any] = []
    inputs_of: list[Any] = []  # each block's input hidden states, in layer order
    meta = []
    handles = []
    for layer in blocks:
        module, _, heads, kv = value_projection(model, layer)
        meta.append((heads, kv))
        handles.append(module.register_forward_hook(lambda m, a, out: values.append(out.detach())))
        handles.append(layer.register_forward_pre_hook(
            lambda m, a, kw: inputs_of.append((a[0] if a else kw["hidden_states"]).detach()), with_kwargs=True
        ))  # fmt: skip
    out: list[list[np.ndarray]] = [[] for _ in range(len(valid))]
    try:
        with eval_mode(model), eager_attention(model), torch.no_grad():
            # the attentions through the bridge (the one place a model is run for them)
            attentions = forward(model, batch, ("attentions",), target=None).attentions  # (B, L, H, T, T)
            for layer_idx, (layer, v_all, (heads, kv)) in enumerate(zip(blocks, values, meta, strict=True)):
                h_all, attn_all = inputs_of[layer_idx], attentions[:, layer_idx]
                for b, keep in enumerate(valid):
                    idx = torch.as_tensor(np.flatnonzero(keep), device=device)
                    out[b].append(_one_layer(kind, layer, h_all[b, idx], attn_all[b][:, idx][:, :, idx],
                                             v_all[b, idx], heads, kv))  # fmt: skip
    finally:
        for h in handles:
            h.remove()
    return [np.stack(layers_b) for layers_b in out]


def _merge(c: Any) -> Any:
    """Context vectors (..., H, T, dh) -> (..., T, H*dh), heads side by side as the model merges them."""
    return c.transpose(-3, -2).reshape(*c.shape[:-3], c.shape[-2], -1)


def _one_layer(kind: str, layer: Any, h: Any, a: Any, v: Any, heads: int, kv: int) -> np.ndarray:
    """C (T, T) of one layer and sample: h (T, D) its input, a (H, T, T) its attention, v (T, ·)
    the value module's output on the real tokens."""
    import torch

    tokens = h.shape[0]
    if kind == "gpt2":
        v = v[..., 2 * h.shape[-1] :]  # c_attn: [q | k | v]
    v = v.reshape(tokens, kv, -1).transpose(0, 1)  # (KV, T, dh)
    if kv != heads:
        v = v.repeat_interleave(heads // kv, dim=0)  # (H, T, dh)
    a = a.to(v.dtype)
    ctx = a @ v  # (H, T_i, dh): the context vectors, as the model computes them
    original = _rest(kind, layer, _merge(ctx)[None], h[None])[0]  # (T, D)
    dist = torch.zeros((tokens, tokens), dtype=torch.float64)
    width = max(h.shape[-1] * 4, v.shape[-1] * heads)
    step = max(1, CHUNK // max(1, tokens * width))
    for start in range(0, tokens, step):
        js = torch.arange(start, min(tokens, start + step), device=h.device)
        # ctx^{¬j}_i = ctx_i - α^h_ij v^h_j: (J, H, T_i, dh)
        zeroed = ctx[None] - a[:, :, js].permute(2, 0, 1)[..., None] * v[:, js].transpose(0, 1)[:, :, None, :]
        changed = _rest(kind, layer, _merge(zeroed), h[None].expand(len(js), -1, -1))  # (J, T_i, D)
        cos = torch.nn.functional.cosine_similarity(
            changed.double(), original.double()[None], dim=-1
        )  # (J, T_i)
        dist[:, start : start + len(js)] = (1.0 - cos).T.cpu()
    total = dist.sum(-1, keepdim=True)
    return torch.where(total > 0, dist / torch.where(total > 0, total, 1.0), 0.0).numpy()


def _rollout(per_layer: np.ndarray) -> np.ndarray:
    out = per_layer.copy()
    for layer in range(1, len(out)):
        out[layer] = per_layer[layer] @ out[layer - 1]
    return out


def value_zeroing_maps(ctx: Any, valid: np.ndarray, positions: Sequence[int] | None) -> list[np.ndarray]:
    """Value-zeroing rollout maps (L, T_b) per sample of one batch of `attnflow.hf` (``ctx``: its
    InputContext), at the explained row: a language model's scored position, a causal model's last
    real token, an encoder's first ([CLS])."""
    from attnflow.needs.value_path import family

    per_layer = value_zeroing_layers(ctx.model, ctx.inputs, valid)
    causal = family(ctx.model) != "encoder"
    maps = []
    for b, c in enumerate(per_layer):
        real = np.flatnonzero(valid[b])
        if positions is not None:
            row = int(np.searchsorted(real, int(positions[b])))
        else:
            row = len(real) - 1 if causal else 0
        maps.append(_rollout(c)[:, row])
    return maps


RECORDS = (
    MethodRecord(
        "value_zeroing", "Value zeroing", value_zeroing_maps, kind="model", study=False, generation=False,
        order=73,
        summary="cosine distance of a layer's outputs when a token's value vector is zeroed, rolled out "
        "(Mohebbi et al., EACL 2023)",
    ),
)  # fmt: skip
