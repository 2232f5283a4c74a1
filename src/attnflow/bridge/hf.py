"""One forward of a transformers model: logits, attentions and their gradients (`forward_attentions`).

Axis order of every attention tensor: [batch, layer, head, query, key]. Padding (the batch's
``attention_mask``) is exactly 0 in every row and column.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from attnflow.devices import model_device
from attnflow.modes import eval_mode

from .captured import Captured, zero_padding
from .eager import AttentionUnavailableError, NoOutputHeadError, eager_attention

__all__ = [
    "TOKENIZER_ONLY_KEYS",
    "AttentionOutput",
    "Target",
    "forward_attentions",
    "last_positions",
    "target_scores",
]

# Keys a tokenizer may add to its output that no model forward takes.
TOKENIZER_ONLY_KEYS = frozenset(
    {"offset_mapping", "special_tokens_mask", "overflow_to_sample_mapping", "length", "word_ids"}
)


Target = int | str | Sequence[int] | torch.Tensor | Callable[[Any], torch.Tensor] | None


# What forward_attentions returns: the bridge's Captured (attnflow.bridge), under the name
# attnflow.hf has always exported.
AttentionOutput = Captured


def _model_inputs(batch: Any, device: torch.device) -> dict[str, Any]:
    """The tokenizer's / image processor's dict (or bare pixel_values) as model keyword arguments."""
    if isinstance(batch, torch.Tensor):
        batch = {"pixel_values": batch}
    if not isinstance(batch, Mapping):
        raise ValueError(
            f"batch must be the tokenizer's dict of tensors or a pixel_values tensor, got {type(batch).__name__}"
        )
    inputs = {}
    for key, value in batch.items():
        if key in TOKENIZER_ONLY_KEYS:
            continue
        inputs[key] = value.to(device) if isinstance(value, torch.Tensor) else value
    if not inputs:
        raise ValueError("batch is empty: expected input_ids (text) or pixel_values (images)")
    return inputs


def last_positions(valid: torch.Tensor | None, batch: int, tokens: int, device: torch.device) -> torch.Tensor:
    """(B,) index of the last real token of each sample (either padding side)."""
    if valid is None:
        return torch.full((batch,), tokens - 1, dtype=torch.long, device=device)
    idx = torch.arange(tokens, device=valid.device)
    return torch.where(valid, idx, -1).max(dim=1).values.to(device)


def _class_logits(logits: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """(B, C) logits; for language-model logits (B, T, V) those at `positions` (B,)."""
    if logits.ndim == 3:
        return logits[torch.arange(logits.shape[0], device=logits.device), positions]
    if logits.ndim != 2:
        raise ValueError(
            f"expected logits of shape (batch, classes) or (batch, tokens, vocab), got {tuple(logits.shape)}"
        )
    return logits


def target_scores(
    out: Any, target: Target, positions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(scores (B,), target ids (B,) or None) for `target` on the model output `out`."""
    logits = getattr(out, "logits", None)
    if callable(target) and not isinstance(target, torch.Tensor):
        scores = target(logits if logits is not None else out)
        if not isinstance(scores, torch.Tensor):
            raise ValueError(
                f"a callable target must return a torch tensor of shape (batch,), got {type(scores).__name__}"
            )
        batch = positions.shape[0]
        if scores.shape != (batch,):
            raise ValueError(
                f"a callable target must return scores of shape ({batch},), got {tuple(scores.shape)}"
            )
        if not scores.requires_grad:
            raise ValueError("the callable target's scores do not depend on the model output (no gradient)")
        return scores, None
    if logits is None:
        raise NoOutputHeadError(
            f"the model has no output head ({type(out).__name__} holds no logits), so there is no class to "
            "explain with gradients: use a classifier or language model, or pass target as a callable "
            "output -> (batch,) scores, e.g. lambda out: out.last_hidden_state[:, 0].norm(dim=-1)"
        )
    z = _class_logits(logits, positions)  # (B, C)
    batch, classes = z.shape
    if isinstance(target, str):
        if target != "predicted":
            raise ValueError(
                f"target must be 'predicted', a class index, a sequence of them or a callable, got {target!r}"
            )
        ids = z.detach().argmax(dim=-1)
    elif isinstance(target, bool):
        raise ValueError(f"target must be a class index, not a bool ({target!r})")
    elif isinstance(target, int | np.integer):
        ids = torch.full((batch,), int(target), dtype=torch.long, device=z.device)
    else:
        ids = torch.as_tensor(np.asarray(target) if not isinstance(target, torch.Tensor) else target)
        if ids.ndim != 1 or ids.shape[0] != batch or ids.dtype.is_floating_point:
            raise ValueError(f"a per-sample target must be {batch} integer class indices, got {target!r}")
        ids = ids.to(device=z.device, dtype=torch.long)
    if ((ids < 0) | (ids >= classes)).any():
        raise ValueError(f"target class out of range: the model has {classes} classes, got {ids.tolist()}")
    return z.gather(1, ids[:, None]).squeeze(1), ids


def _stack_attentions(out: Any, model: Any) -> tuple[torch.Tensor, ...]:
    """The per-layer attentions of `out`, checked: present, non-empty, one shape."""
    name = type(model).__name__
    layers = getattr(out, "attentions", None)
    if layers is None and getattr(out, "encoder_attentions", None) is not None:
        raise AttentionUnavailableError(
            f"{name} is an encoder-decoder model (encoder_attentions / decoder_attentions); "
            "attnflow explains encoder-only and decoder-only models"
        )
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if layers is None:
        raise AttentionUnavailableError(
            f"{name} returned no attentions (its output has none): the model has no attention layers "
            "to explain, or it cannot return attention probabilities"
        )
    layers = tuple(layers)
    if not layers or any(a is None for a in layers):
        raise AttentionUnavailableError(
            f"{name} returned empty attentions with attn_implementation={impl!r}: SDPA and flash attention "
            "never form attention probabilities; run it under eager_attention(model)"
        )
    shapes = {tuple(a.shape) for a in layers}
    if len(shapes) != 1 or len(next(iter(shapes))) != 4:
        raise AttentionUnavailableError(
            f"{name} returned attentions of shapes {sorted(shapes)}; expected one (batch, head, query, key) shape"
        )
    return layers


def forward_attentions(
    model: Any,
    batch: Any,
    *,
    target: Target = None,
    positions: torch.Tensor | None = None,
    attention_grads: bool = True,
) -> AttentionOutput:
    """One forward of a transformers model, returning logits, attentions and (optionally) their gradients.

    attentions[b, l, h, i, j] = softmax(q_i k_j^T / sqrt(d) + mask)_j of head h in layer l, taken
    from eager attention (switched on for this call, then restored). Padding positions (where the
    batch's attention_mask is 0) are exactly 0 in rows and columns.

    With a target, attention_grads = d score_b / d attentions[b] (same shape and padding), from
    the same forward: eager attentions are nodes of the autograd graph. The batch's scores are
    summed before differentiating, which keeps them per sample because samples do not interact.
    target:
      - "predicted": the arg-max class; an int: that class for every sample; a sequence of ints:
        one class per sample;
      - for language models (logits (B, T, V)) these are token ids scored at `positions` (B,),
        by default the last real position of each sample (a causal LM's next-token prediction;
        a masked LM explains its mask position);
      - a callable: logits (or, for models without logits, the model output) -> (B,) scores,
        e.g. ``lambda z: z[:, 3, 42]`` for the logit of token 42 at position 3.
    attention_grads=False: the target's ids and scores without the backward (no attention_grads),
    for methods that run their own pass on the chosen class (a callable target gives no ids).

    batch: the tokenizer's dict of tensors (input_ids, attention_mask, ...), or pixel_values
    (B, C, H, W) / {"pixel_values": ...} for vision transformers (no padding: every position is
    real). The model runs in eval mode (dropout off) and gets its training flag back afterwards.
    Raises AttentionUnavailableError when the model returns no (or empty) attentions.

    >>> import torch
    >>> from transformers import BertConfig, BertForSequenceClassification
    >>> _ = torch.manual_seed(0)
    >>> model = BertForSequenceClassification(BertConfig(hidden_size=8, num_hidden_layers=2,
    ...     num_attention_heads=2, intermediate_size=8, vocab_size=10))
    >>> batch = {"input_ids": torch.tensor([[2, 5, 3], [2, 3, 0]]),
    ...          "attention_mask": torch.tensor([[1, 1, 1], [1, 1, 0]])}
    >>> out = forward_attentions(model, batch, target="predicted")
    >>> tuple(out.attentions.shape), tuple(out.attention_grads.shape)  # (B, L, H, T, T)
    ((2, 2, 2, 3, 3), (2, 2, 2, 3, 3))
    >>> out.attentions[1, :, :, 2].abs().sum().item(), out.attentions[1, :, :, :, 2].abs().sum().item()
    (0.0, 0.0)
    """
    device = model_device(model)
    if device.type == "meta":
        raise ValueError(
            f"{type(model).__name__}'s weights are on the 'meta' device (shapes without values, e.g. built "
            "under init_empty_weights or loaded with device_map='meta'); load the real weights first"
        )
    if getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        raise AttentionUnavailableError(
            f"{type(model).__name__} is an encoder-decoder model: attnflow explains encoder-only and "
            "decoder-only models (an encoder-decoder's map would need a decoder prefix and cross-attention)"
        )
    inputs = _model_inputs(batch, device)
    mask = inputs.get("attention_mask")
    want_grad = target is not None and attention_grads
    with eval_mode(model), eager_attention(model), torch.set_grad_enabled(want_grad):
        try:
            out = model(**inputs, output_attentions=True, return_dict=True)
        except TypeError as exc:
            if "output_attentions" in str(exc):
                raise AttentionUnavailableError(
                    f"{type(model).__name__} cannot return attentions: {exc}"
                ) from exc
            raise
    layers = _stack_attentions(out, model)
    bsz, _, tokens, _ = layers[0].shape
    valid = None if mask is None else mask.to(device=layers[0].device).bool()  # (B, T)
    logits = getattr(out, "logits", None)
    if positions is None:
        positions = last_positions(valid, bsz, tokens, layers[0].device)
    else:
        positions = torch.as_tensor(positions, dtype=torch.long, device=layers[0].device)
        if positions.shape != (bsz,) or ((positions < 0) | (positions >= tokens)).any():
            raise ValueError(f"positions must be {bsz} indices in [0, {tokens}), got {positions.tolist()}")
    result = AttentionOutput(
        logits=None if logits is None else logits.detach(),
        attentions=zero_padding(torch.stack([a.detach() for a in layers], dim=1), valid),  # (B, L, H, T, T)
        attention_mask=valid,
    )
    if logits is not None and logits.ndim == 3:
        result.positions = positions
    if want_grad:
        if not layers[0].requires_grad:
            raise AttentionUnavailableError(
                f"{type(model).__name__}'s attentions are not part of the autograd graph; cannot differentiate"
            )
        scores, ids = target_scores(out, target, positions)
        grads = torch.autograd.grad(scores.sum(), layers, allow_unused=True)
        grads = [torch.zeros_like(a) if g is None else g for a, g in zip(layers, grads, strict=True)]
        result.attention_grads = zero_padding(torch.stack(grads, dim=1), valid)  # (B, L, H, T, T)
        result.scores = scores.detach()
        result.target = ids
    elif target is not None and logits is not None and not callable(target):
        scores, ids = target_scores(out, target, positions)  # no backward: the ids and their scores
        result.scores, result.target = scores.detach(), ids
    return result
