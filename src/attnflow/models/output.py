"""What every classifier in ``attnflow.models`` returns.

Attention axes, fixed everywhere in attnflow: ``(batch, layer, head, query, key)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

__all__ = ["ClassifierOutput"]


@dataclass
class ClassifierOutput:
    """Logits and (optionally) the attention probabilities of every layer.

    ``attentions`` is ``(B, L, H, T, T)``, post-softmax, each row a distribution over keys;
    padded keys get exactly 0. ``None`` unless the forward was asked for them.
    """

    logits: Tensor  # (B, C)
    attentions: Tensor | None = None  # (B, L, H, T, T)
