"""Input gradients only: a backward that writes no parameter gradient need not save what only the
parameter gradients read (the input of every linear layer), so a long input's backward holds less.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["frozen_parameters"]


@contextmanager
def frozen_parameters(model: Any, *, leaf_embeddings: bool = False) -> Iterator[None]:
    """Within the block no parameter of `model` requires a gradient, so autograd saves only what the
    gradients of the inputs need (y = x Wᵀ saves W's use, not x); every flag is given back after,
    also on error. The values of any gradient with respect to activations are unchanged.

    leaf_embeddings: the word embeddings' output is made a leaf that requires a gradient, so that a
    forward on token ids still has a graph (for gradients of activations inside the model).

    >>> lin = torch.nn.Linear(2, 2)
    >>> with frozen_parameters(lin):
    ...     lin.weight.requires_grad
    False
    >>> lin.weight.requires_grad
    True
    """
    params = [p for p in model.parameters() if p.requires_grad]
    handle = None
    try:
        for p in params:
            p.requires_grad_(False)
        if leaf_embeddings:

            def make_leaf(module: Any, args: tuple, out: torch.Tensor) -> torch.Tensor:
                return out.detach().requires_grad_(True) if torch.is_grad_enabled() else out

            handle = model.get_input_embeddings().register_forward_hook(make_leaf)
        yield
    finally:
        if handle is not None:
            handle.remove()
        for p in params:
            p.requires_grad_(True)
