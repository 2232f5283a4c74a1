"""The needs of the norm- and decomposition-based methods: what flows through attention, per token.

For layer l, head h and token j, with x_j the layer's input (the residual stream):

    f^h(x_j) = W_O^h (W_V^h x_j + b_V^h)                    value_outputs   (B, L, H, T, D)
    x_j                                                     layer_inputs    (B, L, T, D)

and, for post-LayerNorm encoders (BERT-type), where the attention block's output is
y_i = LN1(Σ_j Σ_h α^h_ij f^h(x_j) + b_O + x_i) and the layer's is LN2(FFN(y) + y):

    γ1 / σ1_i    the per-token scale of LN1's linear part      ln1_scale        (B, L, T, D)
    γ1 ⊙ (b_O - mean(b_O)) / σ1_i + β1                        attn_output_bias (B, L, T, D)
    γ2 / σ2_i    the per-token scale of LN2's linear part      ln2_scale        (B, L, T, D)

σ_i = sqrt(var(z_i) + ε) of the LayerNorm's input z_i; LN(z)_i = γ ⊙ (z_i - mean(z_i)) / σ_i + β, so
y_i = Σ_j T_i(x_j) + attn_output_bias_i with T_i(x_j) = ln1_scale_i ⊙ centre(Σ_h α^h_ij f^h(x_j) +
δ_ij x_j) exactly (Kobayashi et al. 2021; Ferrando et al. 2022). All are captured by one forward
with hooks (`capture`), in the model's own dtype.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from . import NeedRecord

__all__ = ["RECORDS", "capture", "family", "hooks", "layers", "value_projection"]

SAMPLE_WIDTH = 4  # the model width D of the samples the invariant tests draw


def family(model: Any) -> str:
    """The model's family in `attnflow.needs.FAMILIES`, from its config's model_type."""
    kind = getattr(getattr(model, "config", None), "model_type", None)
    if kind in ("bert", "roberta", "xlm-roberta", "electra", "camembert"):
        return "encoder"
    if kind == "gpt2":
        return "gpt2"
    if kind in ("llama", "mistral", "qwen2"):
        return "llama"
    raise ValueError(
        f"{type(model).__name__} (model_type {kind!r}) is no family the value-path needs know: "
        "BERT-type encoders (bert, roberta, electra), gpt2, llama-type decoders (llama, mistral, qwen2)"
    )


def layers(model: Any) -> list[Any]:
    """The model's transformer layers, in order."""
    base = getattr(model, "base_model", model)
    kind = family(model)
    if kind == "encoder":
        return list(base.encoder.layer)
    if kind == "gpt2":
        return list(base.h)
    return list(base.layers)


def value_projection(model: Any, layer: Any) -> tuple[Any, Any, int, int]:
    """(the module whose output holds the value vectors, the output projection's per-head weights
    (H, dh, D), the number of heads, the number of key-value heads)."""
    cfg = model.config
    kind = family(model)
    if kind == "encoder":
        heads = cfg.num_attention_heads
        w = layer.attention.output.dense.weight  # (D, H*dh): out = W ctx + b
        return layer.attention.self.value, w.T.reshape(heads, -1, w.shape[0]), heads, heads
    if kind == "gpt2":
        heads = cfg.n_head
        w = layer.attn.c_proj.weight  # Conv1D (H*dh, D): out = ctx W + b
        return layer.attn.c_attn, w.reshape(heads, -1, w.shape[1]), heads, heads
    heads = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", heads) or heads
    w = layer.self_attn.o_proj.weight  # (D, H*dh)
    return layer.self_attn.v_proj, w.T.reshape(heads, -1, w.shape[0]), heads, kv


def capture(model: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """One forward of `model` on `inputs` (no gradients, eval mode, its own attention kernel: no
    attention probabilities are read here) with the hooks of `hooks`: every need of this module the
    model's family has, as tensors (B, L, ...) in the model's dtype."""
    import torch

    from attnflow.bridge.hf import TOKENIZER_ONLY_KEYS
    from attnflow.devices import model_device
    from attnflow.modes import eval_mode

    device = model_device(model)
    batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()
             if k not in TOKENIZER_ONLY_KEYS}  # fmt: skip
    with hooks(model) as made, eval_mode(model), torch.no_grad():
        model(**batch, return_dict=True)
    return made()


@contextlib.contextmanager
def hooks(model: Any) -> Iterator[Callable[[], dict[str, Any]]]:
    """Hooks that read this module's needs during whatever forward of `model` runs inside the block
    (the API's own attention forward: no second pass); yields ``made()``, which after that forward
    returns them as `capture` does. Exactly one forward must run inside.

    The value vectors are read where the model makes them (the value projection's output, GPT-2's
    c_attn third), grouped-query heads repeated as the attention uses them, and multiplied by each
    head's block of the output projection; a layer's input by a hook on the layer."""
    kind = family(model)
    saved: dict[str, list[Any]] = {"values": [], "inputs": [], "ln1_in": [], "ln2_in": []}
    handles = []
    per_layer = []
    for layer in layers(model):
        module, w_out, heads, kv = value_projection(model, layer)
        per_layer.append((w_out, heads, kv))
        handles.append(module.register_forward_hook(lambda m, a, out: saved["values"].append(out.detach())))
        handles.append(layer.register_forward_pre_hook(
            lambda m, a, kw: saved["inputs"].append((a[0] if a else kw["hidden_states"]).detach()), with_kwargs=True
        ))  # fmt: skip
        if kind == "encoder":
            handles.append(layer.attention.output.LayerNorm.register_forward_pre_hook(
                lambda m, a: saved["ln1_in"].append(a[0].detach())))  # fmt: skip
            handles.append(layer.output.LayerNorm.register_forward_pre_hook(
                lambda m, a: saved["ln2_in"].append(a[0].detach())))  # fmt: skip
    try:
        yield lambda: _made(model, kind, saved, per_layer)
    finally:
        for h in handles:
            h.remove()


def _made(model: Any, kind: str, saved: Mapping[str, list[Any]], per_layer: list) -> dict[str, Any]:
    """The needs from what the hooks of one forward saved."""
    import torch

    if len(saved["values"]) != len(per_layer):
        raise RuntimeError(
            f"the value-path hooks saw {len(saved['values'])} layers of {len(per_layer)}: exactly one forward "
            "must run inside attnflow.needs.value_path.hooks"
        )
    got: dict[str, Any] = {"layer_inputs": torch.stack(saved["inputs"], dim=1)}  # (B, L, T, D)
    f = None  # (L, B, H, T, D), each layer written in place (no stacked copy of the largest need)
    with torch.no_grad():
        for layer, (v, (w_out, heads, kv)) in enumerate(zip(saved["values"], per_layer, strict=True)):
            d = w_out.shape[-1]
            if kind == "gpt2":
                v = v[..., 2 * d :]  # c_attn: [q | k | v]
            bsz, tokens, _ = v.shape
            v = v.reshape(bsz, tokens, kv, -1).transpose(1, 2)  # (B, KV, T, dh)
            if kv != heads:
                v = v.repeat_interleave(heads // kv, dim=1)  # (B, H, T, dh), as the attention uses them
            if f is None:
                f = v.new_empty((len(per_layer), bsz, heads, tokens, d))
            torch.matmul(v, w_out.detach().to(v.dtype), out=f[layer])  # f^h(x_j) = W_O^h v^h_j: (B, H, T, D)
        got["value_outputs"] = f.transpose(0, 1)  # (B, L, H, T, D)
        if kind == "encoder":
            s1, c1, s2 = [], [], []
            for layer, z1, z2 in zip(layers(model), saved["ln1_in"], saved["ln2_in"], strict=True):
                ln1, ln2 = layer.attention.output.LayerNorm, layer.output.LayerNorm
                sd1 = (z1.var(-1, unbiased=False, keepdim=True) + ln1.eps).sqrt()  # (B, T, 1)
                sd2 = (z2.var(-1, unbiased=False, keepdim=True) + ln2.eps).sqrt()
                b_out = layer.attention.output.dense.bias.detach()
                g1, g2 = ln1.weight.detach(), ln2.weight.detach()
                s1.append(g1 / sd1)
                c1.append(g1 * (b_out - b_out.mean()) / sd1 + ln1.bias.detach())
                s2.append(g2 / sd2)
            got["ln1_scale"], got["attn_output_bias"], got["ln2_scale"] = (
                torch.stack(s1, dim=1), torch.stack(c1, dim=1), torch.stack(s2, dim=1)
            )  # fmt: skip
    return got


def _normal(axes_of: str) -> Any:
    """A sampler of standard normal values shaped by the attention: "heads" (B?, L, H, T, D) or
    "tokens" (B?, L, T, D)."""

    def sample(rng: np.random.Generator, attn: np.ndarray) -> np.ndarray:
        lead = attn.shape[:-1] if axes_of == "heads" else attn.shape[:-3] + attn.shape[-1:]
        return rng.standard_normal((*lead, SAMPLE_WIDTH))

    return sample


def _residual(rng: np.random.Generator, attn: np.ndarray) -> np.ndarray:
    """x_j (B?, L, T, D), larger than the value outputs (scale 4 against 1): in trained transformers
    the residual stream outweighs a layer's attention update, which keeps every ALTI row defined (a
    row whose tokens' vectors all cancel in y_i has no contribution left)."""
    return 4.0 * rng.standard_normal((*attn.shape[:-3], attn.shape[-1], SAMPLE_WIDTH))


def _bias(rng: np.random.Generator, attn: np.ndarray) -> np.ndarray:
    """The attention block's bias term (B?, L, T, D), small beside the tokens' vectors: a bias that
    outweighs every token leaves ALTI's row without a contribution (the authors' code divides by 0)."""
    return 0.1 * rng.standard_normal((*attn.shape[:-3], attn.shape[-1], SAMPLE_WIDTH))


def _scale(rng: np.random.Generator, attn: np.ndarray) -> np.ndarray:
    """γ / σ_i: positive per token and feature (B?, L, T, D)."""
    return rng.uniform(0.5, 2.0, (*attn.shape[:-3], attn.shape[-1], SAMPLE_WIDTH))


_ENCODER = "BERT-type encoders"
RECORDS = (
    NeedRecord(
        "value_outputs", "f^h(x_j) = W_O^h (W_V^h x_j + b_V^h), each head's value vector through the output "
        "projection", ("layer", "head", "token", "hidden"),
        {"encoder": "hook on attention.self.value, times attention.output.dense's block of head h",
         "gpt2": "hook on attn.c_attn (its value third), times attn.c_proj's block of head h",
         "llama": "hook on self_attn.v_proj (grouped heads repeated), times self_attn.o_proj's block of head h"},
        _normal("heads"), capturer=capture, hooks=hooks,
    ),
    NeedRecord(
        "layer_inputs", "x_j, each layer's input (the residual stream entering it)", ("layer", "token", "hidden"),
        {"encoder": "hidden_states[l] of output_hidden_states", "gpt2": "hidden_states[l] of output_hidden_states",
         "llama": "hidden_states[l] of output_hidden_states"},
        _residual, capturer=capture, hooks=hooks,
    ),
    NeedRecord(
        "ln1_scale", "γ1 / σ1_i, the per-token scale of the LayerNorm after the attention block (" + _ENCODER + ")",
        ("layer", "token", "hidden"),
        {"encoder": "pre-hook on attention.output.LayerNorm: its weight / sqrt(var(input) + eps)"},
        _scale, capturer=capture, hooks=hooks,
    ),
    NeedRecord(
        "attn_output_bias", "γ1 ⊙ centre(b_O) / σ1_i + β1, the attention block's output not owed to any token ("
        + _ENCODER + ")", ("layer", "token", "hidden"),
        {"encoder": "attention.output.dense's bias through attention.output.LayerNorm's linear part, plus its bias"},
        _bias, capturer=capture, hooks=hooks,
    ),
    NeedRecord(
        "ln2_scale", "γ2 / σ2_i, the per-token scale of the layer's output LayerNorm (" + _ENCODER + ")",
        ("layer", "token", "hidden"),
        {"encoder": "pre-hook on output.LayerNorm: its weight / sqrt(var(input) + eps)"},
        _scale, capturer=capture, hooks=hooks,
    ),
)  # fmt: skip
