"""Causal (decoder-only) attention: mask detection, attention sinks, receptive-field normalisation.

Rollout and flow were defined for encoders (Abnar & Zuidema 2020); their conclusion warns that
under a causal mask "there is more attention toward initial tokens ... and both attention rollout
and attention flow will be biased toward these tokens", and asks to "normalize based on the
receptive field of attention". Two effects add up in a decoder:

- the receptive field: key j is visible to the rows i >= j only, so token 0 is in every row and a
  row of a causal rollout keeps whatever reaches token 0 (row 0 is e_0 in every layer). Perfectly
  uniform causal attention (row i = 1/(i+1) on keys 0..i) already gives 0.53 of row 7's rollout
  to token 0 after 6 layers of 8 tokens (residual 0.5);
- attention sinks (Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks"):
  trained LMs park most of many heads' attention on the first token as a no-op (its value vector
  is typically small). On SmolLM2-135M, plain rollout puts 1.000 of every generated token's row on token 0.

Functions (axis order [batch, layer, head, query, key], or [layer, head, query, key] for one
sample; numpy in -> numpy out, torch in -> torch out; inputs never written to; padded positions
exactly 0):

- `is_causal(attn)`: every real row puts exactly 0 on later real keys.
- `sink_scores` / `find_sinks`: per (layer, head), key j's sink score is the mean attention it gets
  from the rows that can see it other than itself (i > j under a causal mask, every real i != j
  otherwise): s[l, h, j] = mean_{i in V(j)} A[l, h, i, j]. Key j is a sink of head (l, h) when
  s > SINK_THRESHOLD (0.5: the head sends more than half of every later row there, on average)
  and |V(j)| >= SINK_MIN_ROWS (4: with fewer rows a content head, e.g. two rows both reading
  one earlier word, would look like a sink). scope="position" (the default) then makes the keys
  that are sinks of at least SINK_HEAD_SHARE (1/4) of all heads sinks of every head: handling
  the sink heads only is not enough for rollout, where token 0 is absorbing (row 0 is e_0), so
  the attention the other heads still give it piles up over the layers (0.84-0.98 of the row on
  SmolLM2 with per-head "diagonal"/"drop", against 0 with scope="position").
- `remove_sinks(attn, mode=...)`: "drop" deletes the sink columns (other than a row's own
  diagonal entry) and re-normalises each row; "diagonal" moves that attention onto the row's
  diagonal (a no-op head keeps the token's own state, i.e. joins the residual); sinks="auto"
  means "diagonal" at the sinks found. Rows stay stochastic; without sinks the input comes back
  unchanged.
- `uniform_attention` / `uniform_baseline`: the same explainer applied to uniform attention of the
  same shape and mask (causal when the input is).
- `normalize_receptive_field(maps, mode=...)` on explainer outputs [..., layer, query, key]:
  "uniform" divides by the uniform baseline (so that uniform attention maps to uniform rows; a
  no-op for raw attention, whose uniform baseline is constant on each row);
  "column" divides each key's column by its mean over the rows that can see it. Rows are then
  rescaled to their original sums.
- `causal_rollout` / `causal_flow`: sinks, then rollout / flow, then the receptive field, with the
  registry's options (``EXPLAINERS["rollout"](attn, sinks="diagonal", receptive_field="uniform")``).

>>> import numpy as np
>>> u = uniform_attention(8, layers=6)  # (6, 1, 8, 8), row i = 1/(i+1) on keys 0..i
>>> is_causal(u)
True
>>> from attnflow.explain import attention_rollout
>>> round(float(attention_rollout(u)[-1, -1, 0]), 2)  # the causal bias on token 0
0.53
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
)
from .flow import attention_flow
from .rollout import attention_rollout

__all__ = [
    "RECEPTIVE_FIELDS",
    "SINK_CHOICES",
    "SINK_HEAD_SHARE",
    "SINK_MIN_ROWS",
    "SINK_MODES",
    "SINK_SCOPES",
    "SINK_THRESHOLD",
    "causal_flow",
    "causal_rollout",
    "find_sinks",
    "is_causal",
    "normalize_receptive_field",
    "remove_sinks",
    "sink_mode",
    "sink_scores",
    "uniform_attention",
    "uniform_baseline",
]

# How attention on sink keys is handled.
SINK_MODES = ("none", "drop", "diagonal")
# What a caller may pass as `sinks`: a mode, or "auto" = the recommended mode (AUTO_SINK_MODE).
SINK_CHOICES = ("auto", *SINK_MODES)
# On SmolLM2-135M (4 prompts, 50 generated tokens), deleting the prompt tokens ranked first by
# Chefer's rule cost log p 1.49 / 1.89 nats (top-1 / top-3) with "diagonal", 0.77 / 1.58 with "drop",
# 0.02 / 1.59 with none (random: 0.14 / 0.69); raw attention: 1.12 / 1.40 vs 1.19 / 1.60.
AUTO_SINK_MODE = "diagonal"
# Key j is a sink of a head when the rows that can see it give it more than this on average ...
SINK_THRESHOLD = 0.5
# ... and at least this many rows (other than j itself) can see it.
SINK_MIN_ROWS = 4
# scope="position": a key that is a sink of at least this share of all (layer, head) pairs is a
# sink of every head (token 0 of SmolLM2-135M: 0.55-0.80 of the heads; the next key: < 0.1).
SINK_HEAD_SHARE = 0.25
SINK_SCOPES = ("position", "head")
RECEPTIVE_FIELDS = ("none", "column", "uniform")


# --------------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------------


def _output_like(x: np.ndarray, like: Any, batched: bool) -> Any:
    """A float64 (or bool) result in the kind of `like`: numpy / torch, float dtype, device."""
    if not batched:
        x = x[0]
    if is_torch(like):
        torch = sys.modules["torch"]
        t = torch.from_numpy(np.ascontiguousarray(x))
        if x.dtype == np.bool_:
            return t.to(device=like.device)
        dtype = like.dtype if like.dtype.is_floating_point else torch.float64
        return t.to(device=like.device, dtype=dtype)
    if x.dtype == np.bool_:
        return x
    arr = np.asarray(like)
    dtype = arr.dtype if np.issubdtype(arr.dtype, np.floating) else np.float64
    return np.asarray(x, dtype=dtype)


def _visible(valid: np.ndarray, causal: bool, *, self_visible: bool) -> np.ndarray:
    """(B, T, T) bool: row i can see key j (both real; j <= i under a causal mask)."""
    tokens = valid.shape[1]
    pair = valid[:, :, None] & valid[:, None, :]  # (B, T, T)
    if causal:
        pair &= np.tril(np.ones((tokens, tokens), dtype=bool))[None]
    if not self_visible:
        pair &= ~np.eye(tokens, dtype=bool)[None]
    return pair


def _check_causal_flag(causal: Any) -> None:
    if causal is not None and not isinstance(causal, bool | np.bool_):
        raise ValueError(f"causal must be True, False or None (detect), got {causal!r}")


def sink_mode(sinks: str) -> str:
    """The sink handling behind a `sinks` choice: "auto" -> AUTO_SINK_MODE ("diagonal").

    >>> sink_mode("auto"), sink_mode("drop")
    ('diagonal', 'drop')
    """
    if sinks not in SINK_CHOICES:
        raise ValueError(f"sinks must be one of {SINK_CHOICES}, got {sinks!r}")
    return AUTO_SINK_MODE if sinks == "auto" else sinks


# --------------------------------------------------------------------------------------------------
# The causal mask
# --------------------------------------------------------------------------------------------------


def is_causal(attn: Any, *, lengths: Any = None, mask: Any = None) -> bool:
    """True when every real row of every head puts exactly 0 on later real keys.

    A[..., i, j] == 0 for all real positions j > i (padding, from lengths / mask, is ignored;
    "later" is the position order, so left and right padding both work). Exact zeros are what a
    causal softmax gives (exp(-inf) = 0); a 1-token input is causal.

    >>> import numpy as np
    >>> is_causal(np.array([[[[1.0, 0.0], [0.5, 0.5]]]])), is_causal(np.full((1, 1, 2, 2), 0.5))
    (True, False)
    """
    p = prepare(attn, lengths=lengths, mask=mask)
    tokens = p.attn.shape[-1]
    later = np.triu(np.ones((tokens, tokens), dtype=bool), 1)[None] & _visible(
        p.valid, causal=False, self_visible=True
    )  # (B, T, T): pairs of real positions with key j after query i
    return not bool(np.any((p.attn != 0) & later[:, None, None]))


def _causal(p_attn: Any, causal: bool | None, lengths: Any, mask: Any) -> bool:
    _check_causal_flag(causal)
    return is_causal(p_attn, lengths=lengths, mask=mask) if causal is None else bool(causal)


# --------------------------------------------------------------------------------------------------
# Attention sinks
# --------------------------------------------------------------------------------------------------


def _sink_scores(attn: np.ndarray, valid: np.ndarray, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """(scores (B, L, H, T), rows seeing each key (B, T)). attn: (B, L, H, T, T) float64, padding 0."""
    seen_by = _visible(valid, causal, self_visible=False)  # (B, T, T) [i, j]
    rows = seen_by.sum(axis=1)  # (B, T): how many rows i != j can see key j
    total = np.einsum("blhij,bij->blhj", attn, seen_by.astype(np.float64))  # (B, L, H, T)
    scores = np.divide(
        total, rows[:, None, None, :], out=np.zeros_like(total), where=rows[:, None, None, :] > 0
    )
    return scores, rows


def _float_heads(attn: Any, lengths: Any, mask: Any) -> tuple[Any, np.ndarray]:
    """(Prepared, every head as float64 with padding zeroed) (B, L, H, T, T)."""
    p = prepare(attn, lengths=lengths, mask=mask)
    x = p.attn.astype(np.float64)
    if not p.full:
        pair = p.valid[:, None, None, :, None] & p.valid[:, None, None, None, :]
        x = np.where(pair, x, 0.0)
    return p, x


def sink_scores(attn: Any, *, causal: bool | None = None, lengths: Any = None, mask: Any = None) -> Any:
    """Mean attention each key gets from the rows that can see it, per head: [..., layer, head, key].

    s[l, h, j] = mean_{i in V(j)} A[l, h, i, j], V(j) = the real rows i != j that can see key j
    (i > j under a causal mask; causal=None detects it with `is_causal`). A key no other row can
    see (the last one under a causal mask) scores 0.

    >>> import numpy as np
    >>> a = np.array([[[[1, 0, 0], [0.5, 0.5, 0], [0.5, 0.25, 0.25]]]])  # (1 layer, 1 head, 3, 3)
    >>> sink_scores(a)[0, 0].tolist()  # key 0: mean(0.5, 0.5); key 1: row 2 only; key 2: none
    [0.5, 0.25, 0.0]
    """
    p, x = _float_heads(attn, lengths, mask)
    scores, _ = _sink_scores(x, p.valid, _causal(attn, causal, lengths, mask))
    return _output_like(scores, attn, p.batched)


def find_sinks(
    attn: Any,
    *,
    threshold: float = SINK_THRESHOLD,
    min_rows: int = SINK_MIN_ROWS,
    scope: str = "position",
    head_share: float = SINK_HEAD_SHARE,
    causal: bool | None = None,
    lengths: Any = None,
    mask: Any = None,
) -> Any:
    """Attention sinks: bool [..., layer, head, key], True where key j is a sink of head (l, h).

    scope="head": sink[l, h, j] = s[l, h, j] > threshold and |V(j)| >= min_rows, with s =
    `sink_scores` (the mean attention key j gets from the rows V(j) that can see it, other than
    itself). scope="position" (default): the keys j with mean_{l,h} sink[l, h, j] >= head_share
    (sinks of at least that share of all heads) are sinks of every head, other keys of none.
    Defaults: SINK_THRESHOLD = 0.5, SINK_MIN_ROWS = 4, SINK_HEAD_SHARE = 0.25. Padded keys are
    never sinks.

    >>> import numpy as np
    >>> from attnflow.explain import uniform_attention
    >>> u = uniform_attention(6)
    >>> a = np.concatenate([0.2 * u + 0.8 * np.eye(6)[0], u], axis=1)  # (1, 2, 6, 6): head 0 parks 0.8 on token 0
    >>> find_sinks(a, scope="head")[0, :, 0].tolist(), find_sinks(a)[0, :, 0].tolist()
    ([True, False], [True, True])
    >>> bool(find_sinks(uniform_attention(6)).any())  # uniform attention has no sink
    False
    """
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not 0.0 <= threshold < 1.0:
        raise ValueError(f"threshold must be a number in [0, 1), got {threshold!r}")
    if isinstance(min_rows, bool) or not isinstance(min_rows, numbers.Integral) or min_rows < 1:
        raise ValueError(f"min_rows must be an int >= 1, got {min_rows!r}")
    if scope not in SINK_SCOPES:
        raise ValueError(f"scope must be one of {SINK_SCOPES}, got {scope!r}")
    if (
        isinstance(head_share, bool)
        or not isinstance(head_share, numbers.Real)
        or not 0.0 < head_share <= 1.0
    ):
        raise ValueError(f"head_share must be a number in (0, 1], got {head_share!r}")
    p, x = _float_heads(attn, lengths, mask)
    scores, rows = _sink_scores(x, p.valid, _causal(attn, causal, lengths, mask))
    sinks = (scores > threshold) & (rows >= min_rows)[:, None, None, :]  # (B, L, H, T)
    if scope == "position":
        keys = sinks.mean(axis=(1, 2)) >= head_share  # (B, T)
        sinks = np.broadcast_to(keys[:, None, None, :], sinks.shape).copy()
    return _output_like(sinks, attn, p.batched)


def _sink_mask(sinks: Any, shape: tuple[int, ...], valid: np.ndarray) -> np.ndarray:
    """Explicit sinks -> (B, L, H, T) bool. Positions (an int or ints) hold for every sample,
    layer and head; a bool array may be [key], [batch, key], [layer, head, key] or
    [batch, layer, head, key]."""
    batch, layers, heads, _, tokens = shape
    if sinks is None:
        return np.zeros((batch, layers, heads, tokens), dtype=bool)
    arr = as_numpy(sinks, "sinks") if not isinstance(sinks, numbers.Integral) else np.asarray([sinks])
    if arr.dtype == np.bool_:
        if arr.shape == (tokens,):
            out = arr[None, None, None, :]
        elif arr.shape == (batch, tokens):
            out = arr[:, None, None, :]
        elif arr.shape == (layers, heads, tokens):
            out = arr[None]
        elif arr.shape == (batch, layers, heads, tokens):
            out = arr
        else:
            raise ValueError(
                f"a boolean sinks mask must have shape [key] ({tokens},), [batch, key], [layer, head, key] "
                f"({layers}, {heads}, {tokens}) or [batch, layer, head, key], got {arr.shape}"
            )
        out = np.broadcast_to(out, (batch, layers, heads, tokens))
    else:
        if arr.size == 0:
            return np.zeros((batch, layers, heads, tokens), dtype=bool)
        idx = check_positions(arr.tolist() if arr.ndim else int(arr), "sinks", tokens,
                              f"the input has {tokens} positions")  # fmt: skip
        keys = np.zeros(tokens, dtype=bool)
        keys[idx] = True
        out = np.broadcast_to(keys, (batch, layers, heads, tokens))
    return out & valid[:, None, None, :]


def remove_sinks(
    attn: Any,
    *,
    mode: str = "diagonal",
    sinks: Any = "auto",
    threshold: float = SINK_THRESHOLD,
    min_rows: int = SINK_MIN_ROWS,
    scope: str = "position",
    causal: bool | None = None,
    lengths: Any = None,
    mask: Any = None,
) -> Any:
    """Attention with the attention on sink keys dropped or moved to the diagonal, per head.

    With S the sink keys of head (l, h) and m_i = sum_{j in S, j != i} A[i, j] the sink attention
    of row i (a row's attention to itself is never sink attention):
      "diagonal": A'[i, j] = 0 for j in S \\ {i};  A'[i, i] = A[i, i] + m_i
                  (a head that parks attention on a sink does nothing: the token keeps its state);
      "drop":     A'[i, j] = A[i, j] [j not in S \\ {i}] / (1 - m_i), re-normalising the rest;
                  a row with everything on other sinks gets A'[i, i] = 1;
      "none":     the input, unchanged.
    Rows without sink attention (m_i = 0) are left exactly as they are, so a stack without sinks
    comes back unchanged (up to the dtype round trip); rows stay stochastic.
    sinks: "auto" (`find_sinks` with threshold / min_rows / scope / causal), None or [] (no sinks), a
    position or positions (every sample, layer and head), or a bool mask [key], [batch, key],
    [layer, head, key] or [batch, layer, head, key].

    >>> import numpy as np
    >>> a = np.array([[[[1, 0, 0], [0.5, 0.5, 0], [0.5, 0.25, 0.25]]]])  # (1, 1, 3, 3)
    >>> remove_sinks(a, mode="diagonal", sinks=[0])[0, 0].tolist()
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.25, 0.75]]
    >>> remove_sinks(a, mode="drop", sinks=[0])[0, 0].tolist()
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.5, 0.5]]
    """
    if mode not in SINK_MODES:
        raise ValueError(f"mode must be one of {SINK_MODES}, got {mode!r}")
    if mode == "none":
        prepare(attn, lengths=lengths, mask=mask)  # the same input checks as the other modes
        return attn
    p, x = _float_heads(attn, lengths, mask)
    if isinstance(sinks, str):
        if sinks != "auto":
            raise ValueError(f"sinks must be 'auto', None, positions or a boolean mask, got {sinks!r}")
        found = find_sinks(x, threshold=threshold, min_rows=min_rows, scope=scope, causal=causal,
                           mask=None if p.full else p.valid)  # fmt: skip
        smask = np.asarray(found, dtype=bool)  # (B, L, H, T)
    else:
        smask = _sink_mask(sinks, x.shape, p.valid)
    # x is our own float64 copy (padding zeroed): edited in place, so a long prompt costs one array
    diag = np.arange(x.shape[-1])
    self_attn = x[..., diag, diag].copy()  # (B, L, H, T): a row's own entry is never sink attention
    weights = smask.astype(np.float64)  # (B, L, H, T) over keys
    sink_mass = np.einsum("blhij,blhj->blhi", x, weights) - self_attn * weights  # (B, L, H, T) = m_i
    touched = sink_mass > 0  # rows that change at all; the others stay exactly as they were
    x *= ~smask[:, :, :, None, :]  # every sink column emptied ...
    x[..., diag, diag] = self_attn  # ... except on the diagonal
    if mode == "diagonal":
        x[..., diag, diag] += np.where(touched, sink_mass, 0.0)
    else:  # "drop"
        rest = x.sum(axis=-1)  # (B, L, H, T)
        scale = np.divide(1.0, rest, out=np.ones_like(rest), where=touched & (rest > 0))
        x *= scale[..., None]
        empty = touched & (rest <= 0)  # every bit of the row was on other sinks: the token keeps itself
        x[..., diag, diag] += empty
    out = x
    return _output_like(out, attn, p.batched)


# --------------------------------------------------------------------------------------------------
# Receptive field
# --------------------------------------------------------------------------------------------------


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
    m = as_numpy(maps, "maps").astype(np.float64)
    if m.ndim not in (3, 4):
        raise ValueError(
            f"maps must have 3 dims [layer, query, key] or 4 dims [batch, layer, query, key], got shape {m.shape}"
        )
    batched = m.ndim == 4
    if not batched:
        if lengths is not None or mask is not None:
            raise ValueError("lengths / mask need batched maps [batch, layer, query, key]")
        m = m[None]
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
    sinks: str = "none",
    sink_positions: Any = "auto",
    sink_threshold: float = SINK_THRESHOLD,
    sink_min_rows: int = SINK_MIN_ROWS,
    sink_scope: str = "position",
    receptive_field: str = "none",
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


def causal_flow(
    attn: Any,
    *,
    residual: float = 0.5,
    heads: str | int = "mean",
    sources: int | Sequence[int] | None = None,
    sinks: str = "none",
    sink_positions: Any = "auto",
    sink_threshold: float = SINK_THRESHOLD,
    sink_min_rows: int = SINK_MIN_ROWS,
    sink_scope: str = "position",
    receptive_field: str = "none",
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
