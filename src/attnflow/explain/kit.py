"""The method kit: what every attention method shares, done once, so a method module holds only its
algorithm and its record.

An attention method is called the same way everywhere (the study's explain stage, ``explain_text``,
the CLI, generation):

    method(attn, *, residual=0.5, heads="mean", rows=None, lengths=None, mask=None, **needs, **options)
        -> [..., layer, query (or len(rows)), key]       numpy in -> numpy out, torch in -> torch out

`attention_method` turns an algorithm into such a method. The algorithm sees one validated,
padded float64 batch (`Batch`) and each declared need by name, already checked and shaped like the
attention (float64, padded rows and columns 0), and returns its maps (B, L, T, T). Given torch
tensors, the batch and the needs are torch tensors on attn's device, in its dtype promoted to at
least float32 (`attnflow.explain.torch_ops`): an algorithm written with the operations numpy and
torch share (``*``, ``@``, ``.clip(min=0.0)``, `Batch.heads`, `Batch.aggregate`) runs where the
tensors live. The kit does the
rest: it checks `residual` (and hands it on only to an algorithm that declares it uses it), checks
`heads`, checks `rows` against the tokens and the padding, fetches each need by its name (a missing
one is named in the error), hands the result back in the caller's kind and dtype, and keeps only
the rows asked for. It also gives every method the causal options of decoders (sinks= /
sink_positions= / receptive_field=, `CAUSAL_OPTIONS`): the attention with its sinks handled
(`remove_sinks`) goes to the algorithm, and the maps are normalised by the receptive field:
"column" for every method (the maps alone), "uniform" for the methods of the attention alone (the
method on uniform attention as the baseline: a method with needs has none). An algorithm that takes
them itself (raw, rollout and flow: their causal variants) gets them instead. The helpers
(`check_rows`, `take_rows`) are public for code that selects rows the same way.

>>> import numpy as np
>>> @attention_method(needs=("attn_grad",))
... def grad_times_attention(batch, *, heads, attn_grad):
...     return batch.aggregate(attn_grad * batch.heads(), heads)
>>> a = np.full((1, 1, 2, 2), 0.5)  # one layer, one head, two tokens
>>> grad_times_attention(a, attn_grad=np.ones_like(a), rows=[1]).tolist()
[[[0.5, 0.5]]]
>>> grad_times_attention(a)
Traceback (most recent call last):
    ...
ValueError: grad_times_attention needs attn_grad, shaped like attn (see attnflow.lrp.lrp_relevance)
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnflow.needs import NEEDS

from ._common import (
    ROW_SUM_TOL,
    Prepared,
    aggregate_heads,
    as_numpy,
    check_heads,
    check_positions,
    check_residual,
    head_stack,
    is_torch,
    prepare,
    row_sum_tolerance,
    valid_positions,
)
from .causal import RECEPTIVE_FIELDS, remove_sinks, sink_mode
from .relevance import companion

__all__ = [
    "CAUSAL_OPTIONS",
    "Batch",
    "attention_method",
    "check_rows",
    "fetch_need",
    "need_array",
    "take_rows",
]


def check_rows(
    attn: Any, rows: int | Sequence[int] | None, lengths: Any = None, mask: Any = None
) -> np.ndarray | None:
    """The query rows asked for as an index array (None: every row): in range, and a real token of
    every sample (never padding). A torch attn's padding is checked on its device."""
    if rows is None:
        return None
    shape = attn.shape if hasattr(attn, "shape") else np.shape(attn)
    tokens = shape[-1]
    idx = check_positions(rows, "rows", tokens, f"the input has {tokens} query rows")
    if (lengths is not None or mask is not None) and len(shape) == 5:
        if is_torch(attn):
            from .torch_ops import valid_positions as on_device

            valid = on_device(lengths, mask, shape[0], tokens, attn.device)  # (B, T)
            if valid[:, idx].all():
                return idx
            b, r = (int(i) for i in (~valid[:, idx]).nonzero()[0])
            raise ValueError(f"rows index {int(idx[r])} out of range: it is padding in sample {b}")
        valid = valid_positions(lengths, mask, shape[0], tokens)  # (B, T)
        if not valid[:, idx].all():
            b, r = np.argwhere(~valid[:, idx])[0]
            raise ValueError(f"rows index {int(idx[r])} out of range: it is padding in sample {int(b)}")
    return idx


def take_rows(maps: Any, idx: np.ndarray | None) -> Any:
    """maps [..., layer, query, key] -> [..., layer, len(idx), key]; None keeps every row."""
    if idx is None:
        return maps
    if hasattr(maps, "index_select"):  # torch
        import torch

        return maps.index_select(-2, torch.as_tensor(idx, device=maps.device))
    return maps[..., idx, :]


def _prepared(attn: Any, lengths: Any, mask: Any) -> tuple[Any, Callable[..., Any]]:
    """The validated batch of `attn` and the function that fetches its needs: numpy float64
    (`prepare`, `companion`), or torch on attn's device (`torch_ops.prepare`, `torch_ops.companion`).
    float16 / bfloat16 rows, checked against their own tolerance, are rescaled (in float64 / float32)
    so that the algorithms (which may check again) see sums of 1."""
    if is_torch(attn):
        from . import torch_ops

        t = torch_ops.prepare(attn, lengths=lengths, mask=mask)
        if row_sum_tolerance(attn) > ROW_SUM_TOL:
            t = torch_ops.TorchPrepared(torch_ops.normalize_rows(t.attn), t.valid, t.batched, t.like)
        return t, torch_ops.companion
    p = prepare(attn, lengths=lengths, mask=mask)
    if row_sum_tolerance(attn) > ROW_SUM_TOL:
        p = Prepared(head_stack(p, renormalize=True), p.valid, p.batched, p.like)
    return p, companion


def need_array(x: Any, name: str, p: Any, method: str) -> Any:
    """A need that is not shaped like the attention (its record in `attnflow.needs`: e.g. value
    vectors (B, L, H, T, D)), checked against its record's axes, in p's kind and compute type
    (float64 numpy, or torch on attn's device), zero at padded tokens, finite at real ones."""
    record = NEEDS[name]
    if x is None:
        raise ValueError(f"{method} needs {name} ({record.summary}), axes (batch, {', '.join(record.axes)})")
    torch_in = is_torch(p.attn)
    if torch_in:
        import torch

        arr = (x if is_torch(x) else torch.tensor(as_numpy(x, name))).to(
            device=p.attn.device, dtype=p.attn.dtype
        )
    else:
        arr = np.asarray(as_numpy(x, name), dtype=np.float64)
    if not p.batched:
        arr = arr[None]
    expected = record.expected_shape(tuple(p.attn.shape), tuple(arr.shape))
    if tuple(arr.shape) != expected:
        got = tuple(arr.shape if p.batched else arr.shape[1:])
        want = expected if p.batched else expected[1:]
        raise ValueError(f"{name} must have the shape {want} ({', '.join(record.axes)}), got {got}")
    import torch  # one pass each for the padding and the finiteness, numpy arrays shared (not copied)

    t = arr if torch_in else torch.from_numpy(np.ascontiguousarray(arr))
    valid = p.valid if torch_in else torch.from_numpy(np.asarray(p.valid, dtype=bool))
    if not bool(valid.all()):  # no padding: nothing to zero (a copy of the whole need spared)
        for axis in record.token_axes:  # zero at padded tokens, along every token axis
            shape = [1] * t.ndim
            shape[0], shape[1 + axis] = valid.shape[0], valid.shape[1]
            t = t.masked_fill(~valid.to(t.device).reshape(shape), 0.0)
    # finite everywhere iff the sum is: one reduction, no (B, L, H, T, D) mask (a sum of finite
    # activations does not overflow; a NaN or inf anywhere makes it NaN or inf)
    if not bool(torch.isfinite(t.sum())):
        raise ValueError(f"{name} holds NaN or inf at real tokens")
    arr = t if torch_in else t.numpy()
    return arr


def fetch_need(x: Any, name: str, p: Any, fetch: Callable[..., Any], method: str) -> Any:
    """A need by its record: attention-shaped ones (and needs no record declares) by `fetch`
    (padded rows and columns 0), the others by `need_array`."""
    record = NEEDS.get(name)
    if record is None or record.like_attention:
        return fetch(x, name, p, method)
    return need_array(x, name, p, method)


@dataclass(frozen=True)
class Batch:
    """One validated batch of attention, as an algorithm of the kit sees it.

    attn: (B, L, H, T, T) as given (never written to); valid: (B, T) bool, True for real tokens.
    Given torch tensors: `prepared` is a `torch_ops.TorchPrepared`, attn and valid torch tensors on
    the input's device (attn in the compute type, padding 0).
    """

    prepared: Any  # Prepared (numpy) or torch_ops.TorchPrepared

    @property
    def attn(self) -> Any:
        return self.prepared.attn

    @property
    def valid(self) -> Any:
        return self.prepared.valid

    def heads(self, *, renormalize: bool = False) -> Any:
        """The attention per head, float64 (B, L, H, T, T), padding 0 (rows re-normalised if asked);
        torch: in the compute type, on the device."""
        p = self.prepared
        if is_torch(p.attn):
            from .torch_ops import normalize_rows

            return normalize_rows(p.attn) if renormalize else p.attn
        return head_stack(p, renormalize=renormalize)

    def aggregate(self, per_head: Any, heads: str | int) -> Any:
        """(B, L, H, T, T) -> (B, L, T, T) by the `heads` choice ("mean", "sum", "max" or one head)."""
        p = self.prepared
        if is_torch(per_head):
            from . import torch_ops

            return torch_ops.aggregate_heads(
                torch_ops.TorchPrepared(per_head, p.valid, p.batched, p.like), heads
            )
        return aggregate_heads(Prepared(per_head, p.valid, p.batched, p.like), heads, renormalize=False)


# The causal options of decoders (`attnflow.explain.causal`) and their plain defaults: every method
# takes them; the kit applies them to an algorithm that does not handle them itself.
CAUSAL_OPTIONS = {"sinks": "none", "sink_positions": "auto", "receptive_field": "none"}


def _receptive_field(
    method: Callable[..., Any], attn: Any, causal: dict[str, Any], needs: Sequence[str], label: str, *,
    rows: Any, lengths: Any, mask: Any, **common: Any,
) -> Any:  # fmt: skip
    """The method's maps normalised by its receptive field (`normalize_receptive_field`): the maps
    of every row, then the rows asked for.

    "column" reads the maps alone (each key's column divided by its mean over the rows that see
    it), so it holds for every method with nonnegative maps, needs or not. "uniform" divides by the
    method on uniform attention: a method with needs has no such baseline, since its needs
    (gradients, LRP relevance) are the model's at the attention it computed, and no model run gave
    uniform attention (the needs of the real attention paired with uniform attention describe no
    state of the model)."""
    from .receptive_field import _receptive

    mode = causal.pop("receptive_field")
    if mode not in RECEPTIVE_FIELDS:
        raise ValueError(f"receptive_field must be one of {RECEPTIVE_FIELDS}, got {mode!r}")
    if needs and mode == "uniform":
        raise ValueError(
            f"{label} takes no receptive_field='uniform': it needs {', '.join(needs)}, which exist only for the "
            "attention the model computed, not for the uniform attention of the baseline; "
            "receptive_field='column' reads the maps alone"
        )
    idx = check_rows(attn, rows, lengths, mask)
    maps = method(attn, lengths=lengths, mask=mask, **common, **causal)  # every row, sinks handled if asked
    if mode == "column" and bool((maps < 0).any()):  # numpy or torch
        raise ValueError(
            f"{label} takes no receptive_field='column' here: its maps hold negative values, and a column's "
            "mean over the rows that see it is no scale for signed evidence"
        )
    # the baseline of "uniform": the method on uniform attention (which has no sinks), as causal_rollout does it
    maps = _receptive(functools.partial(method, **common), attn, maps, mode, lengths, mask)
    return take_rows(maps, idx)


def attention_method(
    algorithm: Callable[..., Any] | None = None,
    *,
    needs: Sequence[str] = (),
    uses_residual: bool = False,
    selects_rows: bool = False,
    name: str | None = None,
) -> Any:
    """Make an attention method from ``algorithm(batch: Batch, *, heads, [residual,] [rows,]
    **needs, **options) -> (B, L, T, T)``; see the module docstring.

    needs: the names of the per-sample arrays it takes besides attn (its record reads them from
    here). uses_residual: the algorithm applies `residual` (else the kit checks it and leaves it
    out: the method has no residual). selects_rows: the algorithm computes only the rows asked for
    (``rows``: a list of query positions, or None for all; flow, whose cost grows with them), else
    the kit keeps them from the full maps. name: the method's name in error messages (default:
    the algorithm's, without ``_map``). The options are the algorithm's other keyword arguments.
    """

    def wrap(algorithm: Callable[..., Any]) -> Callable[..., Any]:
        label = name or algorithm.__name__.removesuffix("_map")
        own = {"batch", "heads", "residual", "rows", *needs}
        options = [q for q in inspect.signature(algorithm).parameters.values() if q.name not in own]
        # the causal options the kit applies itself when the algorithm does not take them
        kit_causal = [n for n in CAUSAL_OPTIONS if n not in {q.name for q in options}]

        @functools.wraps(algorithm)
        def method(
            attn: Any,
            *,
            residual: float = 0.5,
            heads: str | int = "mean",
            rows: int | Sequence[int] | None = None,
            lengths: Any = None,
            mask: Any = None,
            **given: Any,
        ) -> Any:
            causal = {n: given.pop(n) for n in kit_causal if n in given}
            if causal.get("receptive_field", "none") != "none":
                return _receptive_field(method, attn, causal, needs, label, residual=residual, heads=heads,
                                        rows=rows, lengths=lengths, mask=mask, **given)  # fmt: skip
            if sink_mode(causal.get("sinks", "none")) != "none":  # A' = remove_sinks(A), then the method
                attn = remove_sinks(attn, mode=sink_mode(causal["sinks"]), sinks=causal.get("sink_positions", "auto"),
                                    lengths=lengths, mask=mask)  # fmt: skip
            check_residual(residual)
            idx = check_rows(attn, rows, lengths, mask)
            p, fetch = _prepared(attn, lengths, mask)
            check_heads(heads, p.attn.shape[2])
            arrays = {need: fetch_need(given.pop(need, None), need, p, fetch, label) for need in needs}
            if unknown := sorted(set(given) - {q.name for q in options}):
                raise TypeError(f"{label}() got unexpected keyword argument(s) {unknown}")
            if uses_residual:
                given["residual"] = residual
            if selects_rows:  # the algorithm computes only these rows
                given["rows"] = None if idx is None else idx.tolist()
            maps = algorithm(Batch(p), heads=heads, **arrays, **given)  # (B, L, T or len(rows), T)
            out = p.to_output(maps)
            return out if selects_rows else take_rows(out, idx)

        kw = inspect.Parameter.KEYWORD_ONLY
        method.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [
                inspect.Parameter("attn", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                inspect.Parameter("residual", kw, default=0.5),
                inspect.Parameter("heads", kw, default="mean"),
                inspect.Parameter("rows", kw, default=None),
                inspect.Parameter("lengths", kw, default=None),
                inspect.Parameter("mask", kw, default=None),
                *(inspect.Parameter(n, kw, default=None) for n in needs),
                *(q.replace(kind=kw) for q in options),
                *(inspect.Parameter(n, kw, default=CAUSAL_OPTIONS[n]) for n in kit_causal),
            ]
        )
        method.needs = tuple(needs)  # type: ignore[attr-defined]
        return method

    return wrap if algorithm is None else wrap(algorithm)
