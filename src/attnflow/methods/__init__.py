"""One record per explanation method: what it needs, which row it reads, how it is shown.

Every module of this package declares its methods as ``RECORDS`` (a tuple of ``MethodRecord``);
the registry below collects them, in ``order``. Everything that lists methods reads it: the
explainer registry (``attnflow.methods.EXPLAINERS``), what the capture stage keeps
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
>>> [r.name for r in resolve(["rollout", "alti"])], EXPLAINER_INPUTS["attention_norm"]
(['rollout', 'alti'], ('value_outputs',))

A method name becomes a record here and nowhere else (`resolve`); the layers below (the method kit
and the algorithms, `attnflow.explain`; the needs, `attnflow.needs`) never read this package, they
are handed records. `register` adds a method from outside the package: its module defines a
record (and, for a new model quantity, a need: `attnflow.needs.register_need`) and calls it; the
method then runs in ``explain_text``, the CLI (``--methods``) and wherever the views below are read.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from attnflow.options import CLS_SELF

__all__ = [
    "EXPLAINERS",
    "EXPLAINER_INPUTS",
    "KINDS",
    "METHODS",
    "MODEL_METHODS",
    "ROWS",
    "ROW_SUM_LAWS",
    "MethodRecord",
    "generation_methods",
    "labels",
    "load_plugins",
    "map_methods",
    "needed_inputs",
    "register",
    "resolve",
    "study_methods",
    "unregister",
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

# Views of the records, kept in step by `register`: attention method -> its function (called
# fn(attn, *, residual, heads, rows, lengths, mask, **needs, **options)); attention method -> the
# needs it reads besides attn (`attnflow.needs`); the methods computed from the model itself.
EXPLAINERS: dict[str, Callable[..., Any]] = {}
EXPLAINER_INPUTS: dict[str, tuple[str, ...]] = {}
MODEL_METHODS: dict[str, Callable[..., Any]] = {}


def _publish() -> None:
    for view in (EXPLAINERS, EXPLAINER_INPUTS, MODEL_METHODS):
        view.clear()
    for r in sorted(METHODS.values(), key=lambda r: (r.order, r.name)):
        if r.kind == "attention":
            EXPLAINERS[r.name] = r.function
            EXPLAINER_INPUTS[r.name] = tuple(r.needs or ())
        else:
            MODEL_METHODS[r.name] = r.function


_publish()


def register(record: MethodRecord, *, replace: bool = False) -> MethodRecord:
    """Add a method from outside the package (``attnflow.methods.register(MethodRecord(...))``); a
    name already taken raises unless ``replace``. Every need it reads must have a record
    (`attnflow.needs.NEEDS`, `attnflow.needs.register_need`). Returns the record."""
    from attnflow.needs import NEEDS

    if not isinstance(record, MethodRecord):
        raise ValueError(f"register takes a MethodRecord, got {type(record).__name__}")
    if record.name in METHODS and not replace and METHODS[record.name] is not record:
        raise ValueError(f"method {record.name!r} is already registered (pass replace=True to replace it)")
    if missing := [n for n in record.needs or () if n not in NEEDS]:
        raise ValueError(
            f"method {record.name!r} reads {missing}, which no need record declares: register them first "
            "(attnflow.needs.register_need)"
        )
    METHODS[record.name] = record
    ordered = sorted(METHODS.values(), key=lambda r: (r.order, r.name))
    METHODS.clear()
    METHODS.update({r.name: r for r in ordered})
    _publish()
    return record


def unregister(name: str) -> MethodRecord:
    """Remove a method added with `register` (tests, a plugin replaced); returns its record."""
    if name not in METHODS:
        raise ValueError(f"no method {name!r} to unregister")
    record = METHODS.pop(name)
    _publish()
    return record


PLUGINS_ENV = "ATTNFLOW_PLUGINS"


def load_plugins(modules: str | None = None) -> list[str]:
    """Import the modules named in ``modules`` (default: the environment variable ATTNFLOW_PLUGINS),
    comma-separated: each registers its methods and needs when imported (`register`,
    `attnflow.needs.register_need`). Called when this package is imported, so a method written
    outside attnflow runs in the CLI (``ATTNFLOW_PLUGINS=my_methods attnflow explain --method
    mine ...``) as in Python. Returns the modules imported."""
    text = os.environ.get(PLUGINS_ENV, "") if modules is None else modules
    names = [m.strip() for m in text.split(",") if m.strip()]
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ImportError(f"{PLUGINS_ENV}: cannot import the method module {name!r}: {exc}") from exc
    return names


def resolve(names: str | Sequence[str]) -> list[MethodRecord]:
    """The records of method names, in the order given (duplicates dropped); an unknown name
    raises with the choices. The one place a name becomes a method."""
    names = [names] if isinstance(names, str) else list(names)
    if not names:
        raise ValueError(f"methods is empty; choose from {', '.join(METHODS)}")
    if unknown := [n for n in names if n not in METHODS]:
        raise ValueError(f"unknown method(s) {unknown}; choose from {', '.join(METHODS)}")
    return [METHODS[n] for n in dict.fromkeys(names)]


def needed_inputs(methods: Iterable[str]) -> list[str]:
    """The needs of the named methods (besides the attentions), sorted.

    >>> needed_inputs(["flow", "chefer_lrp", "chefer"])
    ['attn_grad', 'attn_relevance']
    """
    return sorted({k for r in resolve(list(methods)) for k in r.needs or ()})


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


load_plugins()  # last: a plugin imports this package's names
