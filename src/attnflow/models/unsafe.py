"""Pickled weight files: refused, named, never loaded as code (no import of the explainers here,
so every stage that loads a model can use it)."""

from __future__ import annotations

import pickle
from pathlib import Path

__all__ = ["PICKLE_SUFFIXES", "UnsafeCheckpointError", "is_unsafe_pickle", "unsafe_checkpoint_error"]

# Weight files in pickle format (torch.save): loaded only as plain tensors, never as code.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


class UnsafeCheckpointError(ValueError):
    """A pickled weights file that the safe loader refused: it holds code that would run on loading."""


def is_unsafe_pickle(exc: BaseException) -> bool:
    """Whether `exc` is torch's refusal of a pickled checkpoint (``weights_only`` loading)."""
    return isinstance(exc, pickle.UnpicklingError) or "weights_only" in str(exc)


def unsafe_checkpoint_error(path: str | Path) -> UnsafeCheckpointError:
    """The error for a refused pickle in the model `path`, naming its pickled weight files."""
    folder = Path(path)
    files = sorted(p for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES) if folder.is_dir() else []
    where = ", ".join(str(f) for f in files) or f"the pickled weights of {path} (pytorch_model.bin)"
    return UnsafeCheckpointError(
        f"{where}: refused as unsafe: a pickled checkpoint that holds code, which would run when loaded; "
        "use weights saved as safetensors (model.safetensors) instead"
    )
