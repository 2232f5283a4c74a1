"""One record per model quantity a method reads (a *need*), like one record per method.

A method record (`attnflow.methods`) names the needs it reads; a `NeedRecord` says, for each, its
shape (axes after the batch axis), which of those axes index tokens, how it is captured for each
model family (`FAMILIES`: BERT-type post-LayerNorm encoders, GPT-2, Llama), and how the shared
invariant tests draw a valid one for a given attention (`sample`). The method kit
(`attnflow.explain.kit`) checks and pads a need by its record; `attnflow.explain.apply` cuts it to
a sample's real tokens by its token axes; the API (`attnflow.hf`) captures it with its `capture`.

Every module of this package declares its needs as ``RECORDS``; `register_need` adds one from
outside the package (a user's method and its need, without editing attnflow). Importing this
package stays light (numpy only): capture functions import torch when called.

>>> NEEDS["attn_grad"].axes
('layer', 'head', 'query', 'key')
>>> NEEDS["value_outputs"].token_axes
(2,)
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ATTENTION_AXES", "FAMILIES", "NEEDS", "TOKEN_AXES", "NeedRecord", "register_need"]

# The model families a need says how to capture: BERT-type post-LayerNorm encoders (BERT, RoBERTa,
# MiniLM, ELECTRA), GPT-2 and Llama-type pre-LayerNorm decoders (Llama, Mistral, Qwen2).
FAMILIES = ("encoder", "gpt2", "llama")
ATTENTION_AXES = ("layer", "head", "query", "key")  # an attention-shaped need (∇A, R(A))
TOKEN_AXES = ("query", "key", "token")  # axis names that index tokens (padding is cut along them)
AXES = ("layer", "head", "query", "key", "token", "hidden")


@dataclass(frozen=True)
class NeedRecord:
    """The facts of one model quantity.

    name: its key (a method's ``needs``, the keyword argument it is passed as). summary: one line.
    axes: its axes after the batch axis, from `AXES` ("hidden": the model width D, never cut).
    capture: per family in `FAMILIES`, a line saying how it is captured (the method contract's
    documentation; a family missing here has no such quantity, e.g. no LayerNorm after the
    attention block in a pre-LayerNorm decoder).
    sample: ``sample(rng, attn) -> array (B?, *axes)``, a valid value for the attention ``attn``
    (B?, L, H, T, T) (the shared invariant tests; padding need not be zero: the kit zeroes it).
    capturer: ``capturer(model, inputs) -> {need: tensor (B, *axes)}``, one forward with hooks that
    makes this need and possibly others (the API calls each capturer once per batch); None: the
    bridge makes it (`attnflow.bridge.NEEDS`). hooks: optionally, the capturer's hooks alone,
    ``hooks(model)`` a context manager around any one forward of the model that yields ``made()``
    (after that forward: what ``capturer`` returns), so the API reads the need during its own
    attention forward instead of a second pass.
    """

    name: str
    summary: str
    axes: tuple[str, ...]
    capture: Mapping[str, str]
    sample: Callable[[np.random.Generator, np.ndarray], np.ndarray]
    capturer: Callable[..., Any] | None = None
    hooks: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        if unknown := [a for a in self.axes if a not in AXES]:
            raise ValueError(f"need {self.name!r}: unknown axes {unknown}; choose from {AXES}")
        if "layer" not in self.axes or not any(a in TOKEN_AXES for a in self.axes):
            raise ValueError(f"need {self.name!r}: axes must hold 'layer' and a token axis, got {self.axes}")
        if unknown := sorted(set(self.capture) - set(FAMILIES)):
            raise ValueError(
                f"need {self.name!r}: capture names unknown families {unknown}; choose from {FAMILIES}"
            )
        if not callable(self.sample):
            raise ValueError(f"need {self.name!r}: sample must be callable, got {self.sample!r}")

    @property
    def like_attention(self) -> bool:
        """Shaped like the attention (B, L, H, T, T)."""
        return self.axes == ATTENTION_AXES

    @property
    def token_axes(self) -> tuple[int, ...]:
        """The positions (after the batch axis) of its token axes."""
        return tuple(i for i, a in enumerate(self.axes) if a in TOKEN_AXES)

    def expected_shape(self, attn_shape: Sequence[int], given: Sequence[int]) -> tuple[int, ...]:
        """The shape it must have for a batched attention (B, L, H, T, T); "hidden" is read from
        ``given`` (any width)."""
        b, n_layers, n_heads, t, _ = attn_shape
        sizes = {"layer": n_layers, "head": n_heads, "query": t, "key": t, "token": t}
        width = -1
        if "hidden" in self.axes and len(given) == 1 + len(self.axes):
            width = given[1 + self.axes.index("hidden")]
        return (b, *(sizes.get(a, width) for a in self.axes))

    def select(
        self, x: Any, *, batch: Any = None, heads: Any = None, tokens: Any = None, batched: bool | None = None
    ) -> Any:
        """x with the given indices taken along its batch, head and token axes (numpy or torch):
        ``tokens`` along every token axis at once. A scalar batch index drops the batch axis.
        batched: whether x has the batch axis (default: from its number of axes)."""
        if batched is None:
            batched = len(x.shape) == 1 + len(self.axes)
        offset = 1 if batched else 0
        if batch is not None:
            if not batched:
                raise ValueError(f"need {self.name!r}: batch= on an unbatched value")
            x = x[batch]
            if np.ndim(batch) == 0:
                offset = 0
        for i, a in enumerate(self.axes):
            idx = heads if a == "head" else tokens if a in TOKEN_AXES else None
            if idx is not None:
                x = _take(x, offset + i, idx)
        return x


def _take(x: Any, axis: int, idx: Any) -> Any:
    """x indexed by ``idx`` along ``axis`` (numpy or torch)."""
    key = (slice(None),) * axis + (np.asarray(idx),)
    if hasattr(x, "index_select"):
        import torch

        return x.index_select(axis, torch.as_tensor(np.asarray(idx), device=x.device))
    return x[key]


def _collect() -> dict[str, NeedRecord]:
    records: list[NeedRecord] = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        records += list(getattr(module, "RECORDS", ()))
    names = [r.name for r in records]
    if dup := sorted({n for n in names if names.count(n) > 1}):
        raise ValueError(f"needs declared twice in attnflow.needs: {dup}")
    return {r.name: r for r in records}


NEEDS: dict[str, NeedRecord] = _collect()


def register_need(record: NeedRecord, *, replace: bool = False) -> NeedRecord:
    """Add a need from outside the package (its module imports it and calls this); a name already
    taken raises unless ``replace``. Returns the record."""
    if not isinstance(record, NeedRecord):
        raise ValueError(f"register_need takes a NeedRecord, got {type(record).__name__}")
    if record.name in NEEDS and not replace and NEEDS[record.name] is not record:
        raise ValueError(f"need {record.name!r} is already registered (pass replace=True to replace it)")
    NEEDS[record.name] = record
    return record
