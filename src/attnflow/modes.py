"""A model in eval mode for the length of a computation, every submodule's own flag given back after."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn

__all__ = ["eval_mode"]


@contextmanager
def eval_mode(model: Any) -> Iterator[None]:
    """Put ``model`` in eval mode (dropout off) and give every submodule back its own ``training``
    flag after, also when the body raises.

    ``model.train(flag)`` would set one flag on every submodule; restoring module by module
    changes nothing the caller had set differently (e.g. a frozen, eval-mode encoder). Anything
    that is not an ``nn.Module`` (a plain callable) is left as it is.

    >>> net = nn.Sequential(nn.Dropout(0.5), nn.Linear(2, 2)).train()
    >>> net[1].eval()  # the caller's own choice for one submodule
    Linear(in_features=2, out_features=2, bias=True)
    >>> with eval_mode(net):
    ...     [m.training for m in net.modules()]
    [False, False, False]
    >>> [m.training for m in net.modules()]
    [True, True, False]
    """
    if not isinstance(model, nn.Module):
        yield
        return
    flags = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, flag in flags:
            m.training = flag
