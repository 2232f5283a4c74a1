"""Where models run: ``auto`` is the GPU when there is one (the one place that decides it)."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["model_device", "resolve_device"]


def resolve_device(name: str = "auto") -> torch.device:
    """``auto``: the first CUDA device when there is one, else the CPU; else ``torch.device(name)``.

    >>> resolve_device("cpu")
    device(type='cpu')
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} asked for, but no CUDA device is available; use auto or cpu")
    return device


def model_device(model: Any) -> torch.device:
    """The device of a model's first parameter (the CPU for a model without parameters)."""
    try:
        return next(model.parameters()).device
    except (StopIteration, AttributeError):
        return torch.device("cpu")
