"""Apply method records to a padded batch and keep the explained row: ``apply(records, attn, inputs,
rows, causal)``, the one loop of the study's explain stage, the Python API / CLI and the cost table.

`RowSpec` is the only decoder of a row choice: "cls" (row 0), "last" (the last real token), "auto"
("last" for causal models, else "cls"), a token index, or "max" / "mean" over the real query rows;
and of a record's ``rows`` ("task": the choice as given; "classification": the classifier's token,
"cls", whatever the task's choice, where the choice is the study's task setting). `CausalSpec`
holds the causal options of decoders (attention sinks and the receptive field,
`attnflow.explain.causal`); the plain spec adds nothing.

Per method, a single call serves the whole batch when every sample explains the same row position
(or a "max" / "mean" reduction), with padding passed as `mask`; otherwise each sample is explained
on its own real tokens. Results are per sample, cut to its real tokens: ``[{name: (L, T_b)}]``.

>>> import numpy as np
>>> from attnflow.methods import METHODS
>>> attn = np.array([[[[[1.0, 0.0], [0.5, 0.5]]], [[[0.5, 0.5], [0.0, 1.0]]]]])  # (1, 2, 1, 2, 2)
>>> out = apply([METHODS["rollout"]], attn, rows=RowSpec("cls"), residual=0.0)
>>> out[0]["rollout"].tolist()  # (L, T): the CLS row of rollout after layers 1 and 2
[[1.0, 0.0], [0.75, 0.25]]
>>> RowSpec("auto", causal=True).position(5), RowSpec("max").position(5), RowSpec(-1).position(5)
(4, 'max', 4)
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnflow.needs import NEEDS
from attnflow.options import HF_ROW_CHOICES, RECEPTIVE_FIELDS, SINK_CHOICES

from .rows import select_rows

__all__ = ["CausalSpec", "RowSpec", "apply"]

REDUCTIONS = ("max", "mean")  # row choices that reduce over the real query rows


@dataclass(frozen=True)
class RowSpec:
    """Which query row of a map explains the input.

    rows: "auto", "cls", "last", "max", "mean", a token index (negative: from the end), or several
    indices, each row kept (generation: the row that predicted each generated token).
    causal: the model's attention is causal ("auto" then reads the last real token).
    task: `rows` is the study's task setting (``task.<name>.rows``): a record whose ``rows`` is
    "classification" reads the classifier's token (CLS) instead.
    """

    rows: str | int | tuple[int, ...] = "cls"
    causal: bool = False
    task: bool = False

    def __post_init__(self) -> None:
        rows = self.rows
        if isinstance(rows, tuple | list):  # several rows, each kept (generation: one per generated token)
            if not rows or any(isinstance(r, bool) or not isinstance(r, numbers.Integral) for r in rows):
                raise ValueError(f"rows must name at least one token index, got {rows!r}")
            object.__setattr__(self, "rows", tuple(int(r) for r in rows))
        elif isinstance(rows, str):
            if rows not in HF_ROW_CHOICES:
                raise ValueError(
                    f"rows must be one of {', '.join(HF_ROW_CHOICES)} or a token index, got {rows!r}"
                )
        elif isinstance(rows, bool) or not isinstance(rows, numbers.Integral):
            raise ValueError(
                f"rows must be one of {', '.join(HF_ROW_CHOICES)} or a token index, got {rows!r}"
            )

    def for_record(self, record: Any) -> RowSpec:
        """The row `record` reads: the task's choice, or the classification row (CLS)."""
        if self.task and record.rows == "classification":
            return RowSpec("cls", causal=self.causal)
        return self

    def position(self, tokens: int) -> int | str | tuple[int, ...]:
        """The query row for a sample of `tokens` real tokens: a position, "max" / "mean", or the
        positions of several rows."""
        rows = self.rows
        if isinstance(rows, tuple):
            return tuple(RowSpec(r).position(tokens) for r in rows)  # type: ignore[misc]
        if rows == "auto":
            rows = "last" if self.causal else "cls"
        if rows == "cls":
            return 0
        if rows == "last":
            return tokens - 1
        if rows in REDUCTIONS:
            return rows
        if not -tokens <= rows < tokens:
            raise ValueError(f"rows={rows} is out of range for an input of {tokens} tokens")
        return int(rows) % tokens

    @staticmethod
    def computed(position: int | str | tuple[int, ...]) -> list[int] | None:
        """The rows a method computes for `position`: None (every row, then reduced) or indices."""
        if isinstance(position, str):
            return None
        return list(position) if isinstance(position, tuple) else [position]

    @staticmethod
    def reduce(
        maps: np.ndarray, position: int | str | tuple[int, ...], *, lengths: Any = None, mask: Any = None
    ) -> np.ndarray:
        """maps [..., layer, R, key] computed for `position` -> [..., layer, key]: the one row
        computed (R = 1), or "max" / "mean" over the real query rows; several rows stay
        [..., layer, R, key]."""
        if isinstance(position, str):
            return select_rows(maps, position, lengths=lengths, mask=mask)
        if isinstance(position, tuple):
            return maps
        return maps[..., 0, :]


@dataclass(frozen=True)
class CausalSpec:
    """The causal options of decoders, for every attention method that takes them: sinks ("none",
    "auto", "drop", "diagonal") at sink_positions ("auto", positions or a mask) and the receptive
    field ("none", "column", "uniform"). The default is plain attention."""

    sinks: str = "none"
    sink_positions: Any = "auto"
    receptive_field: str = "none"

    def __post_init__(self) -> None:
        if self.sinks not in SINK_CHOICES:
            raise ValueError(f"sinks must be one of {SINK_CHOICES}, got {self.sinks!r}")
        if self.receptive_field not in RECEPTIVE_FIELDS:
            raise ValueError(
                f"receptive_field must be one of {RECEPTIVE_FIELDS}, got {self.receptive_field!r}"
            )

    @property
    def plain(self) -> bool:
        return self.sinks == "none" and self.receptive_field == "none"

    def options(self) -> dict[str, Any]:
        """The keyword arguments a method gets: none for plain attention."""
        if self.plain:
            return {}
        return {
            "sinks": self.sinks,
            "sink_positions": self.sink_positions,
            "receptive_field": self.receptive_field,
        }


PLAIN = CausalSpec()


def _cut(name: str, x: np.ndarray, b: int, real: np.ndarray) -> np.ndarray:
    """Sample b of a padded need, at its real tokens along its token axes (its record,
    `attnflow.needs`; a need no record declares is shaped like the attention)."""
    record = NEEDS.get(name)
    if record is None:
        return x[b][:, :, real][:, :, :, real]
    return record.select(x, batch=b, tokens=real)


def apply(
    records: Sequence[Any],
    attn: np.ndarray,
    inputs: Mapping[str, np.ndarray] | None = None,
    rows: RowSpec = RowSpec(),
    causal: CausalSpec = PLAIN,
    *,
    residual: float = 0.5,
    heads: str | int = "mean",
    valid: np.ndarray | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    per_sample_inputs: Sequence[str] = (),
    at: Sequence[int] | None = None,
    batched: bool = True,
) -> list[dict[str, np.ndarray]]:
    """Every attention record's explained row on a padded batch: ``[{name: (L, T_b)}]`` per sample.

    attn: (B, L, H, T, T) float64, padding 0. inputs: the records' needs, shaped like attn.
    valid: (B, T) bool real tokens (None: all real). options: per method, its own keyword
    arguments (e.g. ``{"chefer": {"cls_self": "zero"}}``). per_sample_inputs: needs given for one
    sample of its real tokens only (the API's extra_inputs), which explain each sample alone.
    at: each sample's row, a position among its real tokens, chosen by the model instead of
    `rows` (a masked language model's mask token). batched=False: every sample alone on its real
    tokens, never one call for the batch.
    """
    inputs = dict(inputs or {})
    options = options or {}
    bsz, _, _, tokens, _ = attn.shape
    valid = np.ones((bsz, tokens), dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    idx = [np.flatnonzero(v) for v in valid]  # real positions of each sample
    out: list[dict[str, np.ndarray]] = [{} for _ in range(bsz)]
    for record in records:
        spec = rows.for_record(record)
        row_of = list(at) if at is not None else [spec.position(len(i)) for i in idx]
        kwargs = {**causal.options(), **options.get(record.name, {})}
        fn = record.function
        row = row_of[0]
        shared = batched and all(r == row for r in row_of) and not set(record.needs) & set(per_sample_inputs)
        if shared and (isinstance(row, str) or valid[:, RowSpec.computed(row)].all()):
            # one call for the batch (same row everywhere, e.g. [CLS]): padding handled by `mask`
            m = fn(attn, residual=residual, heads=heads, rows=RowSpec.computed(row), mask=valid,
                   **{k: inputs[k] for k in record.needs}, **kwargs)  # fmt: skip
            m = RowSpec.reduce(np.asarray(m, dtype=np.float64), row, mask=valid)  # (B, L, T) or (B, L, R, T)
            for b in range(bsz):
                out[b][record.name] = m[b][..., idx[b]]  # (L, T_b) or (L, R, T_b)
            continue
        for b in range(bsz):  # one sample at a time, real tokens only
            i, row = idx[b], row_of[b]
            needs = {
                k: inputs[k] if k in per_sample_inputs else _cut(k, inputs[k], b, i) for k in record.needs
            }
            m = fn(attn[b][:, :, i][:, :, :, i], residual=residual, heads=heads, rows=RowSpec.computed(row),
                   **needs, **kwargs)  # fmt: skip
            out[b][record.name] = RowSpec.reduce(np.asarray(m, dtype=np.float64), row)  # (L, T_b)
    return out
