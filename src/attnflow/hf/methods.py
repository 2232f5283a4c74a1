"""What each method needs beyond the bridge's inputs (`attnflow.bridge`): providers a user registers,
methods computed from the model itself (AttnLRP), and the method check against the registry.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnflow.hf.eager import eager_attention
from attnflow.hf.forward import AttentionOutput, Target
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


def _attnlrp(ctx: InputContext, valid: np.ndarray, positions: torch.Tensor | None) -> list[np.ndarray]:
    """AttnLRP maps (L, T_b) per sample (attnflow.attnlrp.maps), for the target's class / token."""
    from attnflow.attnlrp.maps import attnlrp_maps

    ids = ctx.inputs.get("input_ids") if isinstance(ctx.inputs, Mapping) else None
    if not isinstance(ids, torch.Tensor):
        raise ValueError("attnlrp explains token inputs (input_ids); images are not supported")
    targets = ctx.out.target  # the class / token the gradient pass explained
    if targets is None:
        raise ValueError(
            "attnlrp explains a class or token id: pass target as 'predicted' or ids, not a callable"
        )
    with eager_attention(ctx.model):
        return attnlrp_maps(
            ctx.model, ids, valid, targets=[int(t) for t in targets],
            positions=None if ctx.out.positions is None else ctx.out.positions.tolist(),
            token_type_ids=ctx.inputs.get("token_type_ids"),
        )  # fmt: skip


def _maker(record: Any) -> Callable[..., list[np.ndarray]]:
    module, _, name = record.implementation.partition(":")
    return globals()[name] if module == __name__ else record.load()


# Methods computed from the model (one extra pass each), not from the attentions: the records of
# kind "model" (attnflow.methods), name -> maker of per-sample (L, T_b) maps.
MODEL_METHODS: dict[str, Callable[..., list[np.ndarray]]] = {
    r.name: _maker(r) for r in METHODS.values() if r.kind == "model"
}
# Inputs every explainer takes (not "extra").
_STANDARD_PARAMS = frozenset({"attn", "residual", "heads", "rows", "lengths", "mask"})


def _method_specs(methods: str | Sequence[str]) -> list[tuple[str, Callable[..., Any], tuple[str, ...]]]:
    """(name, explainer, extra input names) per method, checked against the registry."""
    from attnflow import explain

    names = [methods] if isinstance(methods, str) else list(methods)
    choices = sorted([*explain.EXPLAINERS, *MODEL_METHODS])
    if not names:
        raise ValueError(f"methods is empty; choose from {choices}")
    declared = getattr(explain, "EXPLAINER_INPUTS", {}) or {}
    specs = []
    for name in dict.fromkeys(names):
        if name in MODEL_METHODS:  # computed from the model itself, not from its attentions
            specs.append((name, MODEL_METHODS[name], ()))
            continue
        if name not in explain.EXPLAINERS:
            raise ValueError(f"unknown method {name!r}; choose from {', '.join(choices)}")
        fn = explain.EXPLAINERS[name]
        needs = set(declared.get(name, ()))
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            params = []
        needs |= {
            p.name
            for p in params
            if p.kind is p.KEYWORD_ONLY and p.default is p.empty and p.name not in _STANDARD_PARAMS
        }
        specs.append((name, fn, tuple(sorted(needs))))
    return specs
