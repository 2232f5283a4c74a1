"""How a model is run for a computation: in eval mode for its length, every submodule's own flag
given back after (`eval_mode`); its logits formed at the positions read only, where its forward
can (`keeps_logits`)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn

__all__ = ["eval_mode", "keeps_logits"]


def keeps_logits(model: Any) -> bool:
    """Whether ``model.forward`` takes ``logits_to_keep`` (transformers' causal LMs): the output
    layer at the positions asked for only, not (B, T, vocabulary) -- a vocabulary of 49k is a
    fifth of a small LM's work at every position.

    >>> keeps_logits(nn.Linear(2, 2))
    False
    """
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError, AttributeError):
        return False


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
