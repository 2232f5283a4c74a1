"""Export and reload a trained classifier without pickle: safetensors + json + vocabulary/tokenizer.

An exported folder holds ``attnflow_model.json`` (what to build), the weights as safetensors and
what rebuilds the inputs: ``vocab.json`` (agreement) or the tokenizer files (Hugging Face).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attnflow.data.vocab import Vocab
from attnflow.io import umask_modes
from attnflow.models.agreement import AgreementConfig, AgreementTransformer
from attnflow.models.encoders import HFEncoder, WordEncoder
from attnflow.models.hf import HFClassifier

__all__ = ["MANIFEST", "load_classifier", "save_classifier"]

MANIFEST = "attnflow_model.json"
_FORMAT = "attnflow-classifier"
_VERSION = 1
_WEIGHTS = "model.safetensors"


def save_classifier(model: nn.Module, encoder: Any, model_dir: str | Path) -> Path:
    """Write ``model`` and its ``encoder`` to ``model_dir``, replacing it atomically."""
    from safetensors.torch import save_file

    model_dir = Path(model_dir)
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=model_dir.parent, prefix=f".{model_dir.name}.", suffix=".tmp"))
    try:
        if isinstance(model, AgreementTransformer):
            state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
            save_file(state, str(tmp / _WEIGHTS))
            manifest = {"kind": "agreement", "config": asdict(model.config)}
        elif isinstance(model, HFClassifier):
            model.hf.save_pretrained(str(tmp), safe_serialization=True)
            manifest = {"kind": "hf"}
        else:
            raise TypeError(f"cannot export a {type(model).__name__}")
        encoder.save(tmp)
        manifest = {"format": _FORMAT, "version": _VERSION, **manifest}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        old = None
        if model_dir.exists():
            old = model_dir.with_name(f".{model_dir.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(model_dir, old)
        umask_modes(tmp)  # mkdtemp makes a 0700 folder
        os.replace(tmp, model_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return model_dir


def load_classifier(model_dir: str | Path, *, device: str | torch.device = "cpu") -> tuple[nn.Module, Any]:
    """Rebuild ``(model, encoder)`` from an exported folder; the model is in eval mode.

    Raises ``FileNotFoundError`` for a missing folder or file and ``ValueError`` for weights or a
    manifest that do not match, naming the path in both cases. No pickled code is executed: a
    pickled checkpoint holding code is refused (``attnflow.models.unsafe.UnsafeCheckpointError``).
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model folder not found: {model_dir}")
    manifest_path = model_dir / MANIFEST
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{model_dir}: no {MANIFEST}; not a model exported by attnflow")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{manifest_path}: unreadable manifest ({exc})") from None
    if manifest.get("format") != _FORMAT or manifest.get("version") != _VERSION:
        raise ValueError(
            f"{manifest_path}: format {manifest.get('format')!r} v{manifest.get('version')!r} is not "
            f"{_FORMAT!r} v{_VERSION}"
        )
    kind = manifest.get("kind")
    if kind == "agreement":
        model, encoder = _load_agreement(model_dir, manifest)
    elif kind == "hf":
        from transformers import AutoTokenizer

        from attnflow.models.unsafe import is_unsafe_pickle, unsafe_checkpoint_error

        try:
            model = HFClassifier.from_pretrained(str(model_dir), strict=True)
        except Exception as exc:
            if is_unsafe_pickle(exc):  # a pickled checkpoint with code: name it, never load it unsafely
                raise unsafe_checkpoint_error(model_dir) from None
            if isinstance(exc, OSError):
                raise FileNotFoundError(f"{model_dir}: cannot load the Hugging Face model ({exc})") from exc
            first = (str(exc).splitlines() or [""])[0]  # e.g. a truncated model.safetensors
            raise ValueError(
                f"{model_dir}: cannot load the Hugging Face model ({type(exc).__name__}: {first})"
            ) from exc
        encoder = HFEncoder(AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True))
    else:
        raise ValueError(f"{manifest_path}: unknown model kind {kind!r}")
    return model.to(device).eval(), encoder


def _load_agreement(model_dir: Path, manifest: dict[str, Any]) -> tuple[AgreementTransformer, WordEncoder]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    known = {f.name for f in fields(AgreementConfig)}
    cfg = manifest.get("config", {})
    if unknown := sorted(set(cfg) - known):
        raise ValueError(f"{model_dir / MANIFEST}: unknown model config keys {unknown}")
    config = AgreementConfig(**cfg)
    vocab = Vocab.load(model_dir / "vocab.json")
    if len(vocab) != config.vocab_size:
        raise ValueError(
            f"{model_dir}: vocab.json has {len(vocab)} entries, the model expects {config.vocab_size}"
        )
    weights = model_dir / _WEIGHTS
    if not weights.is_file():
        raise FileNotFoundError(f"{model_dir}: weights file {_WEIGHTS} not found")
    try:
        state = load_file(str(weights))
    except (SafetensorError, OSError) as exc:
        raise ValueError(f"{weights}: unreadable safetensors file ({exc})") from None
    model = AgreementTransformer(config)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ValueError(f"{weights}: weights do not match the model config ({exc})") from None
    return model, WordEncoder(vocab, max_length=config.block_size, append_eos=config.append_eos)
