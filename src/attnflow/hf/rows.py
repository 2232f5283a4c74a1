"""Which query row a model explains: [CLS] for encoders, the last real token for causal models and
decoder-only classifiers, a masked LM's mask position, or an explicit index (the row choice itself
is decoded by `attnflow.explain.apply.RowSpec` alone).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from attnflow.explain.apply import RowSpec

__all__ = ["is_causal_model"]


def _check_layer(layer: int, layers: int) -> int:
    if isinstance(layer, bool) or not isinstance(layer, int | np.integer) or not -layers <= layer < layers:
        raise ValueError(
            f"layer must be an index in [-{layers}, {layers - 1}] (the model has {layers} layers), got {layer!r}"
        )
    return int(layer) % layers


def is_causal_model(model: Any) -> bool:
    """Whether the model's attention is causal, so that "auto" reads the last real token.

    Decoder-only language models predict after their last token, and decoder-only sequence
    classifiers (GPT-2, Llama, Qwen ``ForSequenceClassification``) pool the last non-padding token:
    a causal row 0 sees only itself. Causal: ``config.is_decoder``, a model that can generate, or a
    model type that transformers knows only as a causal LM (never as a masked LM: BERT-type models
    with ``is_decoder=False`` stay bidirectional).
    """
    config = getattr(model, "config", None)
    if getattr(config, "is_decoder", False):
        return True
    can_generate = getattr(model, "can_generate", None)
    if callable(can_generate) and can_generate():
        return True
    model_type = getattr(config, "model_type", None)
    if not model_type:
        return False
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    return (
        model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        and model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES
    )


def _pools_without_pad_id(model: Any) -> bool:
    """A decoder-only sequence classifier whose config has no pad_token_id: its head cannot find
    the last real token of a padded batch (transformers refuses batches of more than one)."""
    config = getattr(model, "config", None)
    return (
        type(model).__name__.endswith("ForSequenceClassification")
        and getattr(config, "pad_token_id", None) is None
        and is_causal_model(model)
    )


def _is_masked_lm(model: Any) -> bool:
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    return type(model).__name__ in set(MODEL_FOR_MASKED_LM_MAPPING_NAMES.values())


def _scored_positions(
    model: Any, inputs: Mapping[str, Any], rows: str | int, mask_token_id: int | None
) -> torch.Tensor | None:
    """(B,) absolute positions whose language-model logits are explained, or None (the default:
    the last real token). An explicit row index is scored where it stands; a masked LM with
    rows="auto" explains the first `mask_token_id` of each sample."""
    ids = inputs.get("input_ids") if isinstance(inputs, Mapping) else None
    if not isinstance(ids, torch.Tensor) or ids.ndim != 2:
        return None
    mask = inputs.get("attention_mask")
    valid = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
    idx = [torch.nonzero(v).flatten() for v in valid.cpu()]
    if rows == "auto" and _is_masked_lm(model):
        if mask_token_id is None:
            raise ValueError(
                f"{type(model).__name__} is a masked language model: pass rows=<position> (the token to "
                "explain), or a tokenizer with a mask token so rows='auto' finds it"
            )
        found = []
        for b, i in enumerate(idx):
            hits = torch.nonzero(ids[b].cpu()[i] == mask_token_id).flatten()
            if len(hits) == 0:
                raise ValueError(
                    f"{type(model).__name__} is a masked language model and text {b} has no mask token "
                    f"(id {mask_token_id}): put one where the model should predict, or pass rows=<position>"
                )
            found.append(int(i[hits[0]]))
        return torch.tensor(found)
    if isinstance(rows, bool) or not isinstance(rows, int | np.integer):
        return None
    return torch.tensor([int(i[RowSpec(rows).position(len(i))]) for i in idx])
