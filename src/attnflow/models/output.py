"""What every classifier in ``attnflow.models`` returns.

Attention axes, fixed everywhere in attnflow: ``(batch, layer, head, query, key)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

__all__ = ["ClassifierOutput", "TransformerClassifier"]


@dataclass
class ClassifierOutput:
    """Logits and (optionally) the attention probabilities of every layer.

    ``attentions`` is ``(B, L, H, T, T)``, post-softmax, each row a distribution over keys;
    padded keys get exactly 0. ``None`` unless the forward was asked for them.
    """

    logits: Tensor  # (B, C)
    attentions: Tensor | None = None  # (B, L, H, T, T)


class TransformerClassifier(nn.Module):
    """The interface of the study's transformer classifiers (what `attnflow.bridge` and the LRP rules
    take): ``forward(input_ids, attention_mask, *, inputs_embeds, output_attentions)`` ->
    :class:`ClassifierOutput`, from token ids or from word embeddings (for gradients w.r.t. them).
    Subclasses implement ``classify``; the interface's checks live here once."""

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        *,
        inputs_embeds: Tensor | None = None,
        output_attentions: bool = False,
    ) -> ClassifierOutput:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids and inputs_embeds")
        return self.classify(input_ids, attention_mask, inputs_embeds, output_attentions)

    def classify(
        self,
        input_ids: Tensor | None,
        attention_mask: Tensor | None,
        inputs_embeds: Tensor | None,
        output_attentions: bool,
    ) -> ClassifierOutput:
        raise NotImplementedError
