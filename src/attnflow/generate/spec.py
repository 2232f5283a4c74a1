"""What a generation explanation is asked for, as one object: `GenerationSpec`.

`explain_generation(model, tokenizer, prompt, spec, **options)` and `explain_generation_grid` take
it; keyword options override its fields (``GenerationSpec.with_options``), so
``explain_generation(m, t, p, methods=["flow"])`` and
``explain_generation(m, t, p, GenerationSpec(methods=("flow",)))`` ask the same. A spec can be built
once (from a config, the CLI's arguments) and passed to every call.

>>> GenerationSpec().with_options({"methods": "flow", "max_new_tokens": 4}).methods
'flow'
>>> GenerationSpec().with_options({"method": "flow"})
Traceback (most recent call last):
ValueError: unknown generation option 'method'; the options are: max_new_tokens, methods, ...
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from attnflow.explain import SINK_MIN_ROWS, SINK_THRESHOLD

__all__ = ["GRAD_BATCH_SIZE", "GenerationSpec"]

# Generated tokens explained per forward/backward of the "chefer" target (a batch of copies).
GRAD_BATCH_SIZE = 8


@dataclass(frozen=True)
class GenerationSpec:
    """The options of `explain_generation` (its docstring says what each does), with their defaults.

    max_new_tokens, methods: what is generated and explained; sinks, sink_positions,
    sink_threshold, sink_min_rows, sink_scope: the attention-sink handling; receptive_field: the
    decoder correction; over, residual, heads, normalize: how maps are read; generate_kwargs, seed,
    completion_ids: the completion; grad_batch_size, stream: how it is computed.
    """

    max_new_tokens: int = 20
    methods: str | Sequence[str] = ("rollout",)
    sinks: str = "auto"
    sink_positions: Any = "auto"
    sink_threshold: float = SINK_THRESHOLD
    sink_min_rows: int = SINK_MIN_ROWS
    sink_scope: str = "position"
    receptive_field: str = "none"
    over: str = "prompt"
    residual: float = 0.5
    heads: str | int = "mean"
    normalize: bool = True
    generate_kwargs: Mapping[str, Any] | None = None
    seed: int | None = None
    completion_ids: Sequence[int] | None = None
    grad_batch_size: int = GRAD_BATCH_SIZE
    stream: bool | None = None

    def with_options(self, options: Mapping[str, Any]) -> GenerationSpec:
        """This spec with ``options`` (field name -> value) replaced; an unknown name is refused in
        one line that lists the options."""
        names = [f.name for f in dataclasses.fields(self)]
        if unknown := [k for k in options if k not in names]:
            raise ValueError(
                f"unknown generation option {unknown[0]!r}; the options are: {', '.join(names[:2])}, ..."
                if len(names) > 2
                else f"unknown generation option {unknown[0]!r}"
            )
        return dataclasses.replace(self, **options) if options else self

    @staticmethod
    def of(spec: GenerationSpec | None, options: Mapping[str, Any]) -> GenerationSpec:
        """``spec`` (default: the defaults) with ``options`` applied."""
        if spec is not None and not isinstance(spec, GenerationSpec):
            raise TypeError(f"spec must be a GenerationSpec, got {type(spec).__name__}")
        return (spec or GenerationSpec()).with_options(options)
