"""What each method needs beyond the bridge's inputs (`attnflow.bridge`): providers a user registers,
methods computed from the model itself (AttnLRP), and the method check against the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnflow import methods as records
from attnflow.bridge.hf import AttentionOutput, Target


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
# kind "model" (attnflow.methods), name -> maker of per-sample (L, T_b) maps (the live view: a
# method registered with attnflow.methods.register is in it).
MODEL_METHODS: dict[str, Callable[..., list[np.ndarray]]] = records.MODEL_METHODS


def need_makers(names: Sequence[str]) -> dict[str, Callable[[InputContext], Any]]:
    """need -> its maker for the needs the bridge does not make: a provider the user registered in
    `INPUT_PROVIDERS`, else the need record's capturer (`attnflow.needs`), each capturer run once
    for all the needs it makes. A need nobody makes raises, naming the methods' way out."""
    from attnflow.needs import NEEDS

    makers: dict[str, Callable[[InputContext], Any]] = {}
    runs: dict[int, dict[str, Any]] = {}
    for name in names:
        if name in INPUT_PROVIDERS:
            makers[name] = INPUT_PROVIDERS[name]
            continue
        record = NEEDS.get(name)
        if record is None or record.capturer is None:
            continue

        def make(ctx: InputContext, name: str = name, capturer: Callable[..., Any] = record.capturer) -> Any:
            key = id(capturer)
            if key not in runs:
                runs[key] = capturer(ctx.model, ctx.inputs)
            if name not in runs[key]:
                from attnflow.needs.value_path import family

                raise ValueError(
                    f"{name} is not defined for {type(ctx.model).__name__} (family {family(ctx.model)!r}): "
                    f"{NEEDS[name].summary}; captured for {sorted(NEEDS[name].capture)}"
                )
            return runs[key][name]

        makers[name] = make
    return makers


def need_hooks(names: Sequence[str]) -> list[Callable[..., Any]]:
    """The distinct ``hooks`` of the need records that make ``names`` (`attnflow.needs.NeedRecord`),
    to attach to the API's own forward; [] unless every one of them has hooks (and no user provider
    replaces it): the needs are then read from that forward, with no second pass."""
    from attnflow.needs import NEEDS

    found: list[Callable[..., Any]] = []
    for name in names:
        record = NEEDS.get(name)
        if name in INPUT_PROVIDERS or record is None or record.hooks is None:
            return []
        if record.hooks not in found:
            found.append(record.hooks)
    return found


def _method_specs(methods: str | Sequence[str]) -> list[tuple[str, Callable[..., Any], tuple[str, ...]]]:
    """(name, explainer, extra input names) per method, checked against the registry."""
    names = [methods] if isinstance(methods, str) else list(methods)
    choices = sorted([*records.EXPLAINERS, *MODEL_METHODS])
    if not names:
        raise ValueError(f"methods is empty; choose from {choices}")
    declared = records.EXPLAINER_INPUTS
    specs = []
    for name in dict.fromkeys(names):
        if name in MODEL_METHODS:  # computed from the model itself, not from its attentions
            specs.append((name, MODEL_METHODS[name], ()))
            continue
        if name not in records.EXPLAINERS:
            raise ValueError(f"unknown method {name!r}; choose from {', '.join(choices)}")
        fn = records.EXPLAINERS[name]
        # the record's needs (attnflow.methods); a method made with the kit and not (yet) recorded
        # carries its own (attnflow.explain.kit.attention_method(needs=...))
        needs = declared.get(name, getattr(fn, "needs", ()))
        specs.append((name, fn, tuple(sorted(needs))))
    return specs
