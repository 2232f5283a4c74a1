"""Private helpers shared by the attribution methods: calling a classifier and choosing a class.

A model is anything with the classifier interface of ``attnflow.models``::

    model(input_ids=None, attention_mask=None, *, inputs_embeds=None) -> output with ``.logits`` (B, C)
    model.get_input_embeddings() -> nn.Embedding          # only needed for input gradients

A plain callable returning the logits tensor itself is accepted too (handy in doctests).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor

TargetClass = Literal["predicted", "gold"] | int


def _logits(output: Any) -> Tensor:
    """The ``(B, C)`` logits of a model output (a ``ClassifierOutput`` or a bare tensor)."""
    logits = output.logits if hasattr(output, "logits") else output
    if not isinstance(logits, Tensor) or logits.ndim != 2:
        raise TypeError(f"the model must return logits of shape (B, C), got {type(logits).__name__}")
    return logits


def _target_classes(logits: Tensor, target_class: TargetClass, labels: Tensor | None) -> Tensor:
    """Class index per sample, ``(B,)`` long: the argmax, the gold label, or a fixed index.

    A negative int counts from the last class, as Python indexing does (the authors' SST-2 script
    indexed the logits with the hidden test label -1, i.e. the positive class).
    """
    n, c = logits.shape
    if target_class == "predicted":
        return logits.detach().argmax(dim=-1)
    if target_class == "gold":
        if labels is None:
            raise ValueError("target class 'gold' needs labels")
        labels = torch.as_tensor(labels, device=logits.device).long().reshape(-1)
        if labels.shape != (n,):
            raise ValueError(f"labels must have shape ({n},), got {tuple(labels.shape)}")
        if bool(((labels < 0) | (labels >= c)).any()):
            raise ValueError(f"gold labels must lie in [0, {c}); got {labels.tolist()}")
        return labels
    if isinstance(target_class, int) and not isinstance(target_class, bool):
        if not -c <= target_class < c:
            raise ValueError(f"class index {target_class} out of range for {c} classes")
        return torch.full((n,), target_class % c, dtype=torch.long, device=logits.device)
    raise ValueError(f"target class must be 'predicted', 'gold' or an int, got {target_class!r}")


def _check_batch(input_ids: Tensor, attention_mask: Tensor | None) -> Tensor:
    """Validate ``(B, T)`` ids and return the attention mask (all ones when None)."""
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids must be (B, T), got shape {tuple(input_ids.shape)}")
    if attention_mask is None:
        return torch.ones_like(input_ids)
    if attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask shape {tuple(attention_mask.shape)} != input_ids shape {tuple(input_ids.shape)}"
        )
    return attention_mask
