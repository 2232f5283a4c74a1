"""What each method needs beyond the bridge's inputs (`attnflow.bridge`): providers a user registers,
methods computed from the model itself (AttnLRP), and the method check against the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnflow.bridge.hf import AttentionOutput, Target
from attnflow.methods import METHODS


@dataclass
class InputContext:
    """What an input provider sees: the model, its inputs, and the forward (with gradients if asked)."""

    model: Any
    inputs: Mapping[str, Any]
    out: AttentionOutput
    target: Target


# Extra inputs an explainer may declare beyond the bridge's (attnflow.bridge.NEEDS: attentions,
# attn_grad, attn_relevance), each made once per batch: provider(ctx) -> (B, L, H, T, T). Empty
# unless a user registers one for a method of their own.
INPUT_PROVIDERS: dict[str, Callable[[InputContext], torch.Tensor]] = {}


# Methods computed from the model (one extra pass each), not from the attentions: the records of
# kind "model" (attnflow.methods), name -> maker of per-sample (L, T_b) maps.
MODEL_METHODS: dict[str, Callable[..., list[np.ndarray]]] = {
    r.name: r.function for r in METHODS.values() if r.kind == "model"
}


def _method_specs(methods: str | Sequence[str]) -> list[tuple[str, Callable[..., Any], tuple[str, ...]]]:
    """(name, explainer, extra input names) per method, checked against the registry."""
    from attnflow import explain

    names = [methods] if isinstance(methods, str) else list(methods)
    choices = sorted([*explain.EXPLAINERS, *MODEL_METHODS])
    if not names:
        raise ValueError(f"methods is empty; choose from {choices}")
    declared = explain.EXPLAINER_INPUTS
    specs = []
    for name in dict.fromkeys(names):
        if name in MODEL_METHODS:  # computed from the model itself, not from its attentions
            specs.append((name, MODEL_METHODS[name], ()))
            continue
        if name not in explain.EXPLAINERS:
            raise ValueError(f"unknown method {name!r}; choose from {', '.join(choices)}")
        fn = explain.EXPLAINERS[name]
        # the record's needs (attnflow.methods); a method made with the kit and not (yet) recorded
        # carries its own (attnflow.explain.kit.attention_method(needs=...))
        needs = declared.get(name, getattr(fn, "needs", ()))
        specs.append((name, fn, tuple(sorted(needs))))
    return specs
