"""What the bridge returns (`Captured`) and the one padding rule of every captured tensor."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["Captured", "zero_padding"]


@dataclass
class Captured:
    """What `forward` returns (all tensors detached; axes [batch, layer, head, query, key])."""

    logits: torch.Tensor | None  # (B, C), or (B, T, V) for language models; None for bare encoders
    attentions: torch.Tensor | None  # (B, L, H, T, T), padding rows / columns exactly 0
    attention_mask: torch.Tensor | None  # (B, T) bool, True = real token; None = all real (ViT)
    attention_grads: torch.Tensor | None = None  # d score / d attentions, shape and padding as attentions
    scores: torch.Tensor | None = None  # (B,) the differentiated scores
    target: torch.Tensor | None = None  # (B,) class / token ids behind `scores` (None for a callable)
    positions: torch.Tensor | None = None  # (B,) position whose logits were scored (language models)
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)  # need -> (B, L, H, T, T), as asked

    def need(self, name: str) -> torch.Tensor:
        """The tensor of one need ("attentions", "attn_grad", "attn_relevance")."""
        if name == "attentions" and self.attentions is not None:
            return self.attentions
        if name not in self.inputs:
            raise KeyError(f"{name!r} was not asked of this forward (it has {sorted(self.inputs)})")
        return self.inputs[name]


def zero_padding(x: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """x (B, L, H, T, T) with rows and columns of padded positions set to exactly 0; x itself when
    there is no padding (valid None or all True). valid: (B, T) bool."""
    if valid is None or bool(valid.all()):
        return x
    keep = valid[:, None, None, :, None] & valid[:, None, None, None, :]  # (B, 1, 1, T, T)
    return x.masked_fill(~keep, 0.0)
