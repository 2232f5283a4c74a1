"""Receptive-field normalisation, and rollout / flow for decoders (sinks, then the explainer, then
the receptive field). See `attnflow.explain.causal` for the causal bias this corrects.

- `uniform_attention` / `uniform_baseline`: the same explainer applied to uniform attention of the
  same shape and mask (causal when the input is).
- `normalize_receptive_field(maps, mode=...)` on explainer outputs [..., layer, query, key]:
  "uniform" divides by the uniform baseline (so that uniform attention maps to uniform rows; a
  no-op for raw attention, whose uniform baseline is constant on each row);
  "column" divides each key's column by its mean over the rows that can see it. Rows are then
  rescaled to their original sums.
- `causal_rollout` / `causal_flow`: sinks, then rollout / flow, then the receptive field, with the
  registry's options (``EXPLAINERS["rollout"](attn, sinks="diagonal", receptive_field="uniform")``).

>>> from attnflow.explain import uniform_attention
>>> u = uniform_attention(8, layers=6)  # (6, 1, 8, 8), row i = 1/(i+1) on keys 0..i
>>> causal_rollout(u, receptive_field="uniform")[-1, -1].round(4).tolist()  # uniform -> uniform
[0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125]
"""

from __future__ import annotations

import numbers
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._common import (
    as_numpy,
    check_positions,
    check_residual,
    is_torch,
    normalize_rows,
    prepare,
    valid_positions,
    with_batch_axis,
)
from .causal import (
    RECEPTIVE_FIELDS,
    SINK_MIN_ROWS,
    SINK_MODES,  # noqa: F401  (the doctest of causal_rollout)
    SINK_THRESHOLD,
    _causal,
    _check_causal_flag,
    _output_like,
    _visible,
    is_causal,
    remove_sinks,
    sink_mode,
)
from .flow import attention_flow
from .rollout import attention_rollout

__all__ = [
    "causal_flow",
    "causal_raw",
    "causal_rollout",
    "normalize_receptive_field",
    "uniform_attention",
    "uniform_baseline",
    "uniform_rollout_rows",
]


def uniform_attention(tokens: int, *, layers: int = 1, heads: int = 1, causal: bool = True) -> np.ndarray:
    """Uniform attention [layer, head, query, key]: row i is 1/(i+1) on keys 0..i (causal) or 1/T.

    >>> uniform_attention(3)[0, 0].round(3).tolist()
    [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.333, 0.333, 0.333]]
    """
    for name, value in (("tokens", tokens), ("layers", layers), ("heads", heads)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    _check_causal_flag(causal)
    one = _uniform(np.ones((1, tokens), dtype=bool), bool(causal))[0]  # (T, T)
    return np.broadcast_to(one, (layers, heads, tokens, tokens)).copy()


def _uniform(valid: np.ndarray, causal: bool) -> np.ndarray:
    """(B, T, T) uniform attention over each row's visible real keys, padding 0."""
    return normalize_rows(_visible(valid, causal, self_visible=True).astype(np.float64))


def uniform_baseline(
    explainer: Callable[..., Any],
    attn: Any,
    *,
    causal: bool | None = None,
    lengths: Any = None,
    mask: Any = None,
    **kwargs: Any,
) -> Any:
    """`explainer` applied to uniform attention shaped and masked like `attn` (for "uniform").

    Each sample gets, in every layer and head, uniform attention over the keys its real rows can
    see (causal when `attn` is, or as `causal` says); `kwargs` (residual, heads, sources, ...) go
    to the explainer unchanged, so the baseline has the same depth, residual and rows.

    >>> import numpy as np
    >>> from attnflow.explain import attention_rollout
    >>> attn = np.stack([np.eye(3)[None]] * 2)  # (2 layers, 1 head, 3, 3), causal
    >>> uniform_baseline(attention_rollout, attn, residual=0.0)[0, 1].tolist()  # layer 1 = uniform
    [0.5, 0.5, 0.0]
    """
    p = prepare(attn, lengths=lengths, mask=mask)
    c = _causal(attn, causal, lengths, mask)
    batch, layers, heads, tokens, _ = p.attn.shape
    u = _uniform(p.valid, c)[:, None, None]  # (B, 1, 1, T, T)
    u = np.broadcast_to(u, (batch, layers, heads, tokens, tokens))
    pad = {} if p.full else {"mask": p.valid}
    base = explainer(u if p.batched else u[0], **pad, **kwargs)
    return base


def uniform_rollout_rows(
    tokens: int, rows: Sequence[int], *, layers: int, residual: float = 0.5
) -> np.ndarray:
    """(L, R, T) the rows ``rows`` of every layer of the rollout of causal uniform attention (the
    "uniform" baseline of rollout on an unpadded causal input), without forming a T x T matrix.

    With A = (1 - r) U + r I, U_ij = 1/(i+1) for j <= i, every layer's rollout row is
    e_q A^l (l = 1..L), and a row vector times A costs O(T):

        (v A)_j = (1 - r) Σ_{i >= j} v_i / (i + 1) + r v_j

    (a suffix sum): O(L·R·T) in all, where `uniform_baseline` takes L products of T x T matrices.

    >>> from attnflow.explain import attention_rollout
    >>> full = uniform_baseline(attention_rollout, uniform_attention(7, layers=3), residual=0.3)
    >>> bool(np.allclose(uniform_rollout_rows(7, [2, 6], layers=3, residual=0.3), full[:, [2, 6]]))
    True
    """
    check_residual(residual)
    r = float(residual)
    idx = np.arange(tokens, dtype=np.float64)
    v = np.zeros((len(rows), tokens))
    v[np.arange(len(rows)), np.asarray(rows, dtype=int)] = 1.0
    out = np.empty((layers, len(rows), tokens))
    for layer in range(layers):
        share = v / (idx + 1.0)
        v = (1.0 - r) * np.cumsum(share[:, ::-1], axis=1)[:, ::-1] + r * v
        out[layer] = v
    return out


def normalize_receptive_field(
    maps: Any,
    *,
    mode: str = "uniform",
    baseline: Any = None,
    causal: bool = True,
    lengths: Any = None,
    mask: Any = None,
) -> Any:
    """Explainer maps [..., layer, query, key] corrected for each key's receptive field.

    "uniform": M'[l, i, j] = M[l, i, j] / B[l, i, j], B = `baseline` (the same explainer on uniform
               attention of the same shape, depth and residual: `uniform_baseline`); 0 where B = 0.
               Uniform attention thus maps to uniform rows over each row's visible keys.
    "column":  M'[l, i, j] = M[l, i, j] / c[l, j], c[l, j] = mean of column j over the real rows
               that can see it (i >= j under a causal mask, all real rows otherwise): how much more
               than its average over all queries row i takes from key j. Needs every row
               (query == key).
    "none":    M unchanged.
    Then every row is rescaled to its original sum (rollout and flow rows keep summing to 1).
    Padded rows and columns are 0. numpy in -> numpy out, torch in -> torch out.

    >>> import numpy as np
    >>> m = np.array([[[1.0, 0.0], [0.75, 0.25]]])  # (1 layer, 2, 2)
    >>> normalize_receptive_field(m, mode="column")[0, 1].round(4).tolist()  # 0.75/0.875 : 0.25/0.25
    [0.4615, 0.5385]
    """
    if mode not in RECEPTIVE_FIELDS:
        raise ValueError(f"receptive_field must be one of {RECEPTIVE_FIELDS}, got {mode!r}")
    if mode == "none":
        return maps
    _check_causal_flag(causal)
    m, batched = with_batch_axis(
        as_numpy(maps, "maps").astype(np.float64),
        "maps",
        ("layer", "query", "key"),
        "batched maps",
        lengths,
        mask,
    )
    if not np.all(np.isfinite(m)):
        raise ValueError("maps contain NaN or inf")
    batch, _, rows, tokens = m.shape
    valid = valid_positions(lengths, mask, batch, tokens)  # (B, T)
    if mode == "uniform":
        if baseline is None:
            raise ValueError("receptive_field='uniform' needs baseline= (see uniform_baseline)")
        b = as_numpy(baseline, "baseline").astype(np.float64)
        b = b if batched else b[None]
        if b.shape != m.shape:
            raise ValueError(
                f"baseline must have the shape of maps {m.shape[int(not batched) :]}, got {b.shape[int(not batched) :]}"
            )
        ratio = np.divide(m, b, out=np.zeros_like(m), where=b > 0)
    else:
        if rows != tokens:
            raise ValueError(
                f"receptive_field='column' needs every query row (a square [query, key] map), got {rows} x {tokens}"
            )
        sees = _visible(valid, causal, self_visible=True)[:, None]  # (B, 1, T, T) [i, j]
        count = sees.sum(axis=-2)  # (B, 1, T)
        col = np.where(sees, m, 0.0).sum(axis=-2)  # (B, L, T)
        mean = np.divide(col, count, out=np.zeros_like(col), where=count > 0)
        mean = mean[:, :, None, :]  # (B, L, 1, T)
        ratio = np.divide(m, mean, out=np.zeros_like(m), where=mean > 0)
    if rows == tokens:  # padding of square maps: rows and columns
        ratio = np.where(valid[:, None, :, None] & valid[:, None, None, :], ratio, 0.0)
    else:
        ratio = np.where(valid[:, None, None, :], ratio, 0.0)
    out = normalize_rows(ratio) * m.sum(axis=-1, keepdims=True)
    return _output_like(out, maps, batched)


# --------------------------------------------------------------------------------------------------
# Rollout and flow for decoders
# --------------------------------------------------------------------------------------------------


def _with_sinks(
    attn: Any, sinks: str, sink_positions: Any, threshold: float, min_rows: int, scope: str, lengths: Any,
    mask: Any,
) -> Any:  # fmt: skip
    mode = sink_mode(sinks)
    if mode == "none":
        return attn
    return remove_sinks(attn, mode=mode, sinks=sink_positions, threshold=threshold, min_rows=min_rows,
                        scope=scope, lengths=lengths, mask=mask)  # fmt: skip


def causal_rollout(
    attn: Any,
    *,
    residual: float = 0.5,
    heads: str | int = "mean",
    receptive_field: str = "none",
    sinks: str = "none",
    sink_positions: Any = "auto",
    sink_threshold: float = SINK_THRESHOLD,
    sink_min_rows: int = SINK_MIN_ROWS,
    sink_scope: str = "position",
    lengths: Any = None,
    mask: Any = None,
) -> Any:
    """Attention rollout with sink handling and receptive-field normalisation, [..., layer, query, key].

    R(l) = normalize_receptive_field(rollout(remove_sinks(attn)), baseline = rollout(uniform)).
    sinks: "none", "drop", "diagonal" or "auto" (= "diagonal"), at `sink_positions` ("auto" =
    `find_sinks` with sink_threshold, sink_min_rows and sink_scope, or explicit positions / a
    mask); receptive_field: "none", "column", "uniform".
    With the defaults this is `attention_rollout`. The uniform baseline is the rollout of uniform
    attention (causal when attn is) of the same depth and residual.

    >>> import numpy as np
    >>> from attnflow.explain import uniform_attention
    >>> u = uniform_attention(6, layers=2)  # (2, 1, 6, 6)
    >>> a = np.concatenate([0.2 * u + 0.8 * np.eye(6)[0], u], axis=1)  # head 0: a sink at token 0
    >>> [round(float(causal_rollout(a, sinks=s, sink_scope="head")[-1, -1, 0]), 3) for s in SINK_MODES]
    [0.447, 0.096, 0.089]
    >>> [round(float(causal_rollout(a, sinks=s)[-1, -1, 0]), 3) for s in SINK_MODES]  # scope="position"
    [0.447, 0.0, 0.0]
    """
    check_residual(residual)
    if receptive_field not in RECEPTIVE_FIELDS:
        raise ValueError(f"receptive_field must be one of {RECEPTIVE_FIELDS}, got {receptive_field!r}")
    a = _with_sinks(attn, sinks, sink_positions, sink_threshold, sink_min_rows, sink_scope, lengths, mask)
    maps = attention_rollout(a, residual=residual, heads=heads, lengths=lengths, mask=mask)
    return _receptive(attention_rollout, attn, maps, receptive_field, lengths, mask,
                      residual=residual, heads=heads)  # fmt: skip


def causal_raw(
    attn: Any,
    *,
    heads: str | int = "mean",
    receptive_field: str = "none",
    sinks: str = "none",
    sink_positions: Any = "auto",
    sink_threshold: float = SINK_THRESHOLD,
    sink_min_rows: int = SINK_MIN_ROWS,
    sink_scope: str = "position",
    lengths: Any = None,
    mask: Any = None,
) -> Any:
    """Raw attention for decoders: sinks, then the heads' attention, then the receptive field.

    W(l) = normalize_receptive_field(agg_h remove_sinks(attn)(l), baseline = agg_h uniform(l)),
    the options as in `causal_rollout` (with "uniform", raw attention's baseline is uniform
    attention itself: the receptive-field bias of raw attention alone).

    >>> import numpy as np
    >>> a = np.tril(np.ones((3, 3)))[None, None] / np.arange(1, 4)[:, None]  # (1, 1, 3, 3) uniform causal
    >>> causal_raw(a, receptive_field="uniform")[0, 2].round(4).tolist()  # W / baseline = 1 everywhere seen
    [0.3333, 0.3333, 0.3333]
    """
    from .raw import raw_attention

    if receptive_field not in RECEPTIVE_FIELDS:
        raise ValueError(f"receptive_field must be one of {RECEPTIVE_FIELDS}, got {receptive_field!r}")
    a = _with_sinks(attn, sinks, sink_positions, sink_threshold, sink_min_rows, sink_scope, lengths, mask)
    maps = raw_attention(a, heads=heads, lengths=lengths, mask=mask)
    return _receptive(raw_attention, attn, maps, receptive_field, lengths, mask, heads=heads)


def causal_flow(
    attn: Any,
    *,
    residual: float = 0.5,
    heads: str | int = "mean",
    sources: int | Sequence[int] | None = None,
    receptive_field: str = "none",
    sinks: str = "none",
    sink_positions: Any = "auto",
    sink_threshold: float = SINK_THRESHOLD,
    sink_min_rows: int = SINK_MIN_ROWS,
    sink_scope: str = "position",
    lengths: Any = None,
    mask: Any = None,
) -> Any:
    """Attention flow with sink handling and receptive-field normalisation, [..., layer, source, key].

    F(l) = normalize_receptive_field(flow(remove_sinks(attn)), baseline = flow(uniform)), each
    source row normalised to sum 1 as in `attention_flow`. receptive_field="uniform" solves the
    flow of the uniform baseline for the same sources (twice the cost); "column" needs the flow
    of every row (sources are then taken from the full map: cost of all rows).

    >>> import numpy as np
    >>> from attnflow.explain import uniform_attention
    >>> causal_flow(uniform_attention(4, layers=3), sources=[3], receptive_field="uniform")[-1, 0].round(4).tolist()
    [0.25, 0.25, 0.25, 0.25]
    """
    check_residual(residual)
    if receptive_field not in RECEPTIVE_FIELDS:
        raise ValueError(f"receptive_field must be one of {RECEPTIVE_FIELDS}, got {receptive_field!r}")
    a = _with_sinks(attn, sinks, sink_positions, sink_threshold, sink_min_rows, sink_scope, lengths, mask)
    pick = None
    if receptive_field == "column" and sources is not None:
        tokens = (attn.shape if hasattr(attn, "shape") else np.shape(attn))[-1]
        pick = check_positions(sources, "sources", tokens, f"the input has {tokens} positions")
        sources = None
    maps = attention_flow(a, residual=residual, heads=heads, sources=sources, lengths=lengths, mask=mask)
    maps = _receptive(attention_flow, attn, maps, receptive_field, lengths, mask,
                      residual=residual, heads=heads, sources=sources)  # fmt: skip
    if pick is None:
        return maps
    if is_torch(maps):
        torch = sys.modules["torch"]
        return maps.index_select(-2, torch.as_tensor(pick, device=maps.device))
    return maps[..., pick, :]


def _receptive(
    explainer: Callable[..., Any],
    attn: Any,
    maps: Any,
    mode: str,
    lengths: Any,
    mask: Any,
    **kwargs: Any,
) -> Any:
    if mode == "none":
        return maps
    causal = is_causal(attn, lengths=lengths, mask=mask)
    baseline = None
    if mode == "uniform":
        baseline = uniform_baseline(explainer, attn, causal=causal, lengths=lengths, mask=mask, **kwargs)
    return normalize_receptive_field(
        maps, mode=mode, baseline=baseline, causal=causal, lengths=lengths, mask=mask
    )
