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
- receptive-field normalisation and `causal_rollout` / `causal_flow` (sinks, then the explainer,
  then the receptive field) live in `attnflow.explain.receptive_field`.

>>> import numpy as np
>>> from attnflow.explain import uniform_attention
>>> u = uniform_attention(8, layers=6)  # (6, 1, 8, 8), row i = 1/(i+1) on keys 0..i
>>> is_causal(u)
True
>>> from attnflow.explain import attention_rollout
>>> round(float(attention_rollout(u)[-1, -1, 0]), 2)  # the causal bias on token 0
0.53
"""

from __future__ import annotations

import numbers
import sys
from typing import Any

import numpy as np

from attnflow.options import RECEPTIVE_FIELDS, SINK_CHOICES, SINK_MODES, SINK_SCOPES

from ._common import (
    as_numpy,
    check_positions,
    head_stack,
    is_torch,
    prepare,
)

__all__ = [
    "RECEPTIVE_FIELDS",
    "SINK_CHOICES",
    "SINK_HEAD_SHARE",
    "SINK_MIN_ROWS",
    "SINK_MODES",
    "SINK_SCOPES",
    "SINK_THRESHOLD",
    "find_sinks",
    "is_causal",
    "remove_sinks",
    "sink_key_mask",
    "sink_mode",
    "sink_scores",
    "sinks_from_scores",
]

# SINK_MODES (how attention on sink keys is handled) and SINK_CHOICES (what a caller may pass as
# `sinks`: a mode, or "auto" = the recommended mode AUTO_SINK_MODE) live in attnflow.options.
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
    return p, head_stack(p, renormalize=False)


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
    sinks = sinks_from_scores(
        scores, rows, threshold=threshold, min_rows=min_rows, scope=scope, head_share=head_share
    )
    return _output_like(sinks, attn, p.batched)


def sinks_from_scores(
    scores: np.ndarray,
    rows: np.ndarray,
    *,
    threshold: float = SINK_THRESHOLD,
    min_rows: int = SINK_MIN_ROWS,
    scope: str = "position",
    head_share: float = SINK_HEAD_SHARE,
) -> np.ndarray:
    """`find_sinks`'s rule on scores computed elsewhere (the streaming capture computes them layer
    by layer, `attnflow.stream.stream_sink_scores`): scores (B, L, H, T) = `sink_scores`, rows
    (B, T) = |V(j)|, the rows other than j that can see key j. Returns (B, L, H, T) bool.

    >>> s = np.array([[[[0.9, 0.1]], [[0.2, 0.1]]]])  # (1 sample, 2 layers, 1 head, 2 keys)
    >>> n = np.array([[5, 0]])
    >>> sinks_from_scores(s, n, scope="head")[0, :, 0].tolist()  # key 0 is a sink of layer 0's head
    [[True, False], [False, False]]
    >>> sinks_from_scores(s, n)[0, :, 0].tolist()  # 1 of 2 heads >= 1/4: a sink of every head
    [[True, False], [True, False]]
    """
    sinks = (scores > threshold) & (rows >= min_rows)[:, None, None, :]  # (B, L, H, T)
    if scope == "position":
        keys = sinks.mean(axis=(1, 2)) >= head_share  # (B, T)
        sinks = np.broadcast_to(keys[:, None, None, :], sinks.shape).copy()
    return sinks


def sink_key_mask(sinks: Any, shape: tuple[int, ...], valid: np.ndarray) -> np.ndarray:
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
        smask = sink_key_mask(sinks, x.shape, p.valid)
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
