"""One record per explanation method: what it needs, which row it reads, how it is shown.

Every module of this package declares its methods as ``RECORDS`` (a tuple of ``MethodRecord``);
the registry below collects them, in ``order``. Everything that lists methods reads it: the
explainer registry (``attnflow.explain.EXPLAINERS``), what the capture stage keeps
(``attnflow.method_inputs``), the Python API and the CLI's choices, generation, the config's
allowed values, and the report's labels and order. Adding a method is one module here (the record
and, for a new algorithm, its function), its test and its docs page.

Importing this package is light (no torch, no numba): implementations are named by
``"module:function"`` and imported on first use.

>>> [m.name for m in study_methods()][:3]  # in report order
['raw', 'rollout', 'flow']
>>> METHODS["chefer"].needs, METHODS["chefer"].rows
(('attn_grad',), 'classification')
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["KINDS", "METHODS", "ROWS", "MethodRecord", "generation_methods", "labels", "resolve", "study_methods"]

KINDS = ("attention", "model")  # a function of attention arrays | a pass through the model itself
ROWS = ("task", "classification")  # the task's row setting (task.<name>.rows) | the classifier's token


@dataclass(frozen=True)
class MethodRecord:
    """The facts of one method.

    name: its key everywhere (config, CLI, tables). label: its display name. kind: "attention"
    (``implementation(attn, *, residual, heads, rows, lengths, mask, **needs) -> [..., layer,
    query, key]``, ``attnflow.explain.registry``'s signature) or "model" (``implementation(ctx,
    valid, positions) -> [(layer, T_b)]``, ``attnflow.hf``'s model-level methods). needs: the
    per-sample arrays an attention method takes besides attn, shaped like it ("attn_grad" =
    ∂ logit / ∂ attention, "attn_relevance" = LRP's R(A)). rows: "task" or "classification".
    study: computed by the study's explain stage (attention methods). generation: offered by
    ``attnflow generate`` and the generation study. identity: the map holds each token's own
    identity term (R(0) = I), which generation leaves out of the explained row. signed: maps hold
    negative evidence (generation normalises by the sum of |values|). generator: for a "model"
    method in generation, ``"module:function"`` of ``(model, run) -> (n, layer, T)``. options: the
    method's own settings the study passes from its config (``explain.<option>``, e.g. "cls_self").
    order: position in tables. summary: one line for help texts.
    """

    name: str
    label: str
    implementation: str  # "module:function"
    kind: str = "attention"
    needs: tuple[str, ...] = ()
    rows: str = "task"
    study: bool = True
    generation: bool = True
    identity: bool = False
    signed: bool = False
    generator: str = ""
    options: tuple[str, ...] = ()
    order: int = 100
    summary: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"method {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.rows not in ROWS:
            raise ValueError(f"method {self.name!r}: rows must be one of {ROWS}, got {self.rows!r}")
        if ":" not in self.implementation:
            raise ValueError(f"method {self.name!r}: implementation must be 'module:function'")
        if self.kind == "model" and self.study:
            raise ValueError(f"method {self.name!r}: a model-level method is not an explain-stage method")
        if self.kind == "model" and self.generation and ":" not in self.generator:
            raise ValueError(f"method {self.name!r}: a model-level method in generation names its generator")

    def load(self) -> Callable[..., Any]:
        """The implementation (imported now)."""
        return resolve(self.implementation)


def resolve(reference: str) -> Callable[..., Any]:
    """``"package.module:function"`` -> the function."""
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


def _collect() -> dict[str, MethodRecord]:
    records: list[MethodRecord] = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        records += list(getattr(module, "RECORDS", ()))
    names = [r.name for r in records]
    if dup := sorted({n for n in names if names.count(n) > 1}):
        raise ValueError(f"methods declared twice in attnflow.methods: {dup}")
    return {r.name: r for r in sorted(records, key=lambda r: (r.order, r.name))}


METHODS: dict[str, MethodRecord] = _collect()


def study_methods() -> list[MethodRecord]:
    """The explain stage's methods (attention methods), in report order."""
    return [r for r in METHODS.values() if r.study]


def generation_methods() -> list[MethodRecord]:
    """The methods `attnflow generate` and the generation study offer, in order."""
    return [r for r in METHODS.values() if r.generation]


def labels() -> dict[str, str]:
    """name -> display label of every method."""
    return {r.name: r.label for r in METHODS.values()}
