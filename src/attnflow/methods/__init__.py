"""One record per explanation method: what it needs, which row it reads, how it is shown.

Every module of this package declares its methods as ``RECORDS`` (a tuple of ``MethodRecord``);
the registry below collects them, in ``order``. Everything that lists methods reads it: the
explainer registry (``attnflow.explain.EXPLAINERS``), what the capture stage keeps
(``attnflow.method_inputs``), the Python API and the CLI's choices, generation, the config's
allowed values, the explain stage's per-head maps and CLS convention, the report's labels, order
and figures, and the invariant tests. Adding a method is one module here (its algorithm on the
method kit, ``attnflow.explain.kit``, and its record) and its test: docs/develop/add-a-method.md.

A record holds its function itself. Importing this package stays light (no torch, no flow solver):
heavy implementations import their dependencies when first called.

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

from attnflow.options import CLS_SELF

__all__ = [
    "KINDS",
    "METHODS",
    "ROWS",
    "ROW_SUM_LAWS",
    "MethodRecord",
    "generation_methods",
    "labels",
    "map_methods",
    "study_methods",
]

KINDS = ("attention", "model")  # a function of attention arrays | a pass through the model itself
ROWS = ("task", "classification")  # the task's row setting (task.<name>.rows) | the classifier's token
# What an attention method's rows sum to on real positions, for identity-free random attention:
# "one" (row-stochastic maps), "identity_plus_nonnegative" (I plus a nonnegative matrix: rows >= 1,
# and identity attention gives a diagonal map >= I), "nonnegative" (no law beyond >= 0: a
# weighting of the attention itself, which identity attention leaves diagonal).
ROW_SUM_LAWS = ("one", "identity_plus_nonnegative", "nonnegative")


@dataclass(frozen=True)
class MethodRecord:
    """The facts of one method.

    name: its key everywhere (config, CLI, tables). label: its display name. function: kind
    "attention": ``function(attn, *, residual, heads, rows, lengths, mask, **needs, **options) ->
    [..., layer, query, key]`` (made with ``attnflow.explain.kit.attention_method``); kind "model":
    ``function(ctx, valid, positions) -> [(layer, T_b)]`` (``attnflow.hf``'s model-level methods).
    needs: the per-sample arrays an attention method takes besides attn, shaped like it
    ("attn_grad" = ∂ logit / ∂ attention, "attn_relevance" = LRP's R(A)); by default the ones its
    kit-made function declares. rows: "task" or "classification". study: computed by the study's
    explain stage (attention methods). generation: offered by ``attnflow generate`` and the
    generation study. identity: the map holds each token's own identity term (R(0) = I), which
    generation leaves out of the explained row. signed: maps hold negative evidence (generation
    normalises by the sum of |values|). generator: for a "model" method in generation,
    ``generator(model, run) -> (n, layer, T)``. options: the method's own settings the study passes
    from its config (``explain.<option>``, e.g. "cls_self"). authors_cls_self: with the
    "cls_self" option, the CLS-to-CLS entry as the method's authors' code sets it (the study's
    ``cls_self: authors``). per_head: the per-head variant (Appendix A.1), ``per_head(attn, *,
    sources, heads, residual, lengths) -> (B, L, H, R, T)``, or None. row_sums: the law of its rows
    (`ROW_SUM_LAWS`; every attention method states one, the invariant tests check it). figure: its
    position among the maps the report draws first (None: after them). order: position in tables.
    summary: one line for help texts.
    """

    name: str
    label: str
    function: Callable[..., Any]
    kind: str = "attention"
    needs: tuple[str, ...] | None = None
    rows: str = "task"
    study: bool = True
    generation: bool = True
    identity: bool = False
    signed: bool = False
    generator: Callable[..., Any] | None = None
    options: tuple[str, ...] = ()
    authors_cls_self: str = "keep"
    per_head: Callable[..., Any] | None = None
    row_sums: str = ""
    figure: int | None = None
    order: int = 100
    summary: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"method {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.rows not in ROWS:
            raise ValueError(f"method {self.name!r}: rows must be one of {ROWS}, got {self.rows!r}")
        if not callable(self.function):
            raise ValueError(f"method {self.name!r}: function must be callable, got {self.function!r}")
        declared = tuple(getattr(self.function, "needs", ()))
        if self.needs is None:
            object.__setattr__(self, "needs", declared)
        elif declared and set(declared) != set(self.needs):
            raise ValueError(f"method {self.name!r}: needs {self.needs} but its function declares {declared}")
        if self.row_sums and self.row_sums not in ROW_SUM_LAWS:
            raise ValueError(
                f"method {self.name!r}: row_sums must be one of {ROW_SUM_LAWS}, got {self.row_sums!r}"
            )
        if self.authors_cls_self not in CLS_SELF:
            raise ValueError(f"method {self.name!r}: authors_cls_self must be one of {CLS_SELF}")
        if self.kind == "model" and self.study:
            raise ValueError(f"method {self.name!r}: a model-level method is not an explain-stage method")
        if self.kind == "model" and self.generation and not callable(self.generator):
            raise ValueError(f"method {self.name!r}: a model-level method in generation names its generator")


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


def map_methods() -> tuple[str, ...]:
    """The methods the report draws first in its map figures, in their ``figure`` order."""
    return tuple(
        r.name for r in sorted(METHODS.values(), key=lambda r: r.figure or 0) if r.figure is not None
    )


def labels() -> dict[str, str]:
    """name -> display label of every method."""
    return {r.name: r.label for r in METHODS.values()}
