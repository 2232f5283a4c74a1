"""Attention flow (Abnar & Zuidema 2020, Section 3): max flow in the layered attention graph."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ._common import (
    ROW_SUM_TOLS,
    aggregate_heads,
    check_positions,
    check_residual,
    mix_residual,
    normalize_rows,
    prepare,
    row_sums,
)
from ._maxflow import (
    _kernels,
    check_env,
    direct_mean_flow,
    flow_threads,
    layered_max_flow,
    lower_max_flow,
    small_full_flow,
)

__all__ = ["attention_flow"]

# The common call -- float64 numpy attention, no padding, mean heads -- skips `prepare` when its
# checks pass by this margin (row sums computed in another order may differ in the last bits);
# anything else, or a borderline row, takes the general path, which words the error.
FAST_MARGIN = 1e-9
# Attention of at least this many entries (2 MiB of float64) is mixed on the solver's threads (the
# CPUs free now): a smaller one costs less than waking a thread.
MIX_THREADS_MIN = 2**18


@functools.cache
def _np_sums_agree() -> bool:
    """Whether the kernels' row sums equal `row_sums` to the bit (lengths 1-130), checked once per
    process: `_kernels.mean_flow_direct` and `mix_heads` normalise rows with numpy's order of
    additions (einsum's, as `row_sums`) only then; else the calls take numpy's row sums."""
    # rows of lengths 1-33 (every remainder mod 8 with up to four blocks of 8) and a few long
    # ones, entries of many magnitudes: sums whose rounding depends on the order of the
    # additions (a plain left-to-right sum differs from numpy's at almost every length)
    x = np.sin(np.arange(64 * 130, dtype=np.float64) * 0.7).reshape(64, 130) ** 2
    x *= np.exp(np.cos(np.arange(64 * 130) * 1.3).reshape(64, 130) * 20.0)
    return all(
        np.array_equal(
            _kernels.row_sums_np(x[:, :tokens]).view(np.uint64), row_sums(x[:, :tokens]).view(np.uint64)
        )
        for tokens in (*range(1, 34), 64, 127, 130)
    )


def _common_call(attn: Any, heads: Any, lengths: Any, mask: Any, renormalize: bool) -> bool:
    """Whether a call is the common one the kernels take whole: float64 numpy attention of shape
    ([B,] L, H, T, T), mean heads, no padding, no renormalisation."""
    return (
        type(attn) is np.ndarray
        and attn.dtype == np.float64
        and isinstance(heads, str)
        and heads == "mean"
        and not renormalize
        and lengths is None
        and mask is None
        and attn.ndim in (4, 5)
        and attn.shape[-1] == attn.shape[-2]
    )


def _fast_direct(
    attn: Any, residual: float, heads: Any, lengths: Any, mask: Any, renormalize: bool,
    sources: Any, layers: Any, normalize: bool, progress: bool | None,
) -> np.ndarray | None:  # fmt: skip
    """The common call (see `_fast_caps`) with sources and layers as None, an int or a list of
    ints, layers in order and no row to sweep, no progress bar asked for, in one kernel call
    (`_kernels.mean_flow_direct`), when its work would not show a bar (progress=False, or an
    estimate at most PROGRESS_WORK): a small call (at most SMALL_ROWS rows, e.g. CLS flow of one
    sample), or a batch of any size (e.g. Table-1 CLS flow of many samples: each sample's heads
    mixed and its rows solved in one pass). The values of
    `_fast_caps` + `_fast_flow` bit for bit; None for any other call (nothing computed)."""
    if progress or not _common_call(attn, heads, lengths, mask, renormalize) or not _np_sums_agree():
        return None
    batched = attn.ndim == 5
    return direct_mean_flow(
        attn if batched else attn[None],
        batched,
        residual,
        ROW_SUM_TOLS["float64"] - FAST_MARGIN,
        layers,
        sources,
        bool(normalize),
        MIX_THREADS_MIN,
        progress,
    )


def _fast_caps(attn: Any, residual: float, heads: Any, lengths: Any, mask: Any, renormalize: bool):
    """(B, L, T, T) capacities of the common call, bit-identical to the general path (the same
    float64 operations in the same order, in one C++ pass plus numpy's row sums), and whether the
    input had a batch axis; None when the call is not the common one or a check is borderline."""
    if not _common_call(attn, heads, lengths, mask, renormalize) or 0 in attn.shape:
        return None
    batched = attn.ndim == 5
    x = attn if batched else attn[None]  # (B, L, H, T, T)
    # with the checks of `prepare` in the same pass: >= 0, every row summing to 1 (NaN, inf fail)
    threads = flow_threads() if x.size >= MIX_THREADS_MIN else 1
    # the row normalisation in the same pass when the kernels' row sums are numpy's (checked once)
    divide = _np_sums_agree()
    caps = _kernels.mix_heads(
        np.ascontiguousarray(x), residual, ROW_SUM_TOLS["float64"] - FAST_MARGIN, threads, divide
    )
    if caps is None:
        return None
    if not divide:
        _kernels.divide_rows(caps, row_sums(caps))  # = normalize_rows, in place on our own array
    return caps, batched


def flow_rows(
    caps: np.ndarray,
    valid: np.ndarray,
    row_layer: np.ndarray,
    supply: np.ndarray,
    row_valid: np.ndarray,
    *,
    progress: bool | None = None,
    threads: int | None = None,
) -> np.ndarray:
    """Max-flow values for many sources of a padded batch, in original positions.

    caps: (B, L, T, T) residual-mixed capacities, padding 0. Row r of sample b is a source at
    layer index row_layer[r] (0-based) whose out-capacities are supply[b, r] (T,); rows with
    row_valid[b, r] False are skipped. Returns (B, R, T): value from that source to input node j.
    progress: see :func:`attention_flow`. threads: of the solver (None: the CPUs free now); each
    thread holds a workspace the size of `caps`, so a very large graph is best solved on one.
    """
    batch, _, tokens, _ = caps.shape
    n_rows = row_layer.shape[0]
    lengths = valid.sum(axis=1)
    if valid.all():
        order = None
        packed, packed_supply = caps, supply
    else:
        # pack each sample's real positions to the front so the solver sees a dense prefix
        order = np.argsort(~valid, axis=1, kind="stable")  # (B, T)
        packed = np.take_along_axis(caps, order[:, None, :, None], axis=2)
        packed = np.take_along_axis(packed, order[:, None, None, :], axis=3)  # (B, L, T, T)
        packed_supply = np.take_along_axis(supply, order[:, None, :], axis=2)  # (B, R, T)
    bb, rr = np.nonzero(row_valid)  # (n,) each
    sort = np.lexsort((row_layer[rr], bb))  # the solver wants rows grouped by (sample, layer)
    bb, rr = bb[sort], rr[sort]
    values = layered_max_flow(
        packed, lengths, bb, row_layer[rr] + 1, packed_supply[bb, rr], progress=progress, threads=threads
    )  # (n, T)
    out = np.zeros((batch, n_rows, tokens))
    if order is None:
        out[bb, rr] = values
    else:
        out[bb[:, None], rr[:, None], order[bb]] = values
    return out


def pack_lower(x: np.ndarray) -> np.ndarray:
    """The lower triangles of (..., T, T), row by row: (..., T (T + 1) / 2), entry i (i + 1) / 2 + k
    = x[..., i, k] for k <= i. A causal model's capacities are 0 above the diagonal, so this is all
    of them in half the memory."""
    tokens = x.shape[-1]
    below = np.tri(tokens, dtype=bool)
    out = np.empty(
        (*x.shape[:-2], tokens * (tokens + 1) // 2), dtype=x.dtype
    )  # C-contiguous, as the solver reads it
    for lead in np.ndindex(x.shape[:-2]):  # one matrix at a time: no (..., P) temporary
        out[lead] = x[lead][below]
    return out


def flow_rows_packed(
    packed: np.ndarray, tokens: int, row_layer: np.ndarray, row_src: np.ndarray
) -> np.ndarray:
    """`flow_rows` of one causal sample without padding, from its packed capacities.

    packed: (L, T (T + 1) / 2) float64 residual-mixed capacities (`pack_lower`); row r is the
    source at 0-based layer row_layer[r], position row_src[r], with out-capacities A(l)[s, :].
    Returns (R, T): the max-flow value from each source to every input node (not normalised).
    See `lower_max_flow` for what the packed path saves and how its values relate to `flow_rows`'.
    """
    row_src = check_positions(row_src, "row_src", tokens, "positions")
    row_layer = np.asarray(row_layer, dtype=np.int64).reshape(-1)
    n_layers = packed.shape[0]
    if packed.ndim != 2 or packed.shape[1] != tokens * (tokens + 1) // 2:
        raise ValueError(
            f"packed must be (layers, {tokens * (tokens + 1) // 2}) for {tokens} tokens, got {packed.shape}"
        )
    if row_layer.shape != row_src.shape:
        raise ValueError(
            f"row_layer and row_src must have one entry per row, got {row_layer.shape}, {row_src.shape}"
        )
    if ((row_layer < 0) | (row_layer >= n_layers)).any():
        raise ValueError(f"row_layer must be 0-based layers in [0, {n_layers}), got {row_layer.tolist()}")
    supply = np.zeros((row_src.size, tokens))
    for r, (layer, s) in enumerate(zip(row_layer, row_src, strict=True)):
        start = s * (s + 1) // 2
        supply[r, : s + 1] = packed[layer, start : start + s + 1]
    order = np.argsort(row_layer, kind="stable")  # the kernel wants rows by layer
    out = np.empty((row_src.size, tokens))
    out[order] = lower_max_flow(packed, tokens, row_layer[order] + 1, supply[order])
    return out


def attention_flow(
    attn: Any,
    *,
    residual: float = 0.5,
    heads: str | int = "mean",
    sources: int | list[int] | None = None,
    layers: int | list[int] | None = None,
    normalize: bool = True,
    lengths: Any = None,
    mask: Any = None,
    renormalize: bool = False,
    progress: bool | None = None,
) -> Any:
    """Maximum attention flow from chosen (layer, position) nodes to every input token.

    The graph: node (l, i) for layer l = 0..L and position i, edge (l, i) -> (l-1, k) with
    capacity A_l[i, k], where A = (1 - residual) W + residual I (rows re-normalised) and W is the
    head aggregate (mean by default). flow[l, s, j] = max-flow value from (l, s) to input (0, j),
    each value found by an exact max-flow solver; with normalize=True each source row is divided
    by its sum, as the authors did. Abnar & Zuidema (2020), Section 3 and Tables 1-3.
    Layer 1 equals the residual-mixed attention row (one edge per path), as does rollout.

    sources: positions of the source nodes (None = all; 0 = CLS); an int is a list of one.
    layers: 0-based indices into the layer axis (None = all; index l is the paper's layer l+1).
    Asking only for the sources you need is cheaper: cost grows linearly with len(sources).
    lengths / mask: real tokens of a padded batch; padded positions get 0 and are never a source
    or sink. Returns [..., len(layers), len(sources), key] of the input's kind.
    progress: a progress bar on stderr with the time left (True / False); None (default) shows
    one when the call is estimated to take more than a second or two (e.g. every row at T = 2048:
    a minute or more; ``sources=0`` makes it ~T times cheaper). Ctrl-C stops any call within
    about a tenth of a second (KeyboardInterrupt), with or without a bar.

    >>> import numpy as np
    >>> a1 = [[1.0, 0.0], [0.5, 0.5]]
    >>> a2 = [[0.5, 0.5], [0.0, 1.0]]
    >>> attn = np.array([[a1], [a2]])  # (2 layers, 1 head, 2, 2)
    >>> flow = attention_flow(attn, residual=0.0, sources=[0], layers=[1], normalize=False)
    >>> flow[0, 0].tolist()  # 1.0 to input 0; 0.5 to input 1 (bottleneck (1,1) -> (0,1))
    [1.0, 0.5]
    >>> attention_flow(attn, residual=0.0, sources=0, layers=1)[0, 0].round(4).tolist()
    [0.6667, 0.3333]
    """
    residual = check_residual(residual)
    if not isinstance(normalize, bool | np.bool_):
        raise ValueError(f"normalize must be True or False, got {normalize!r}")
    check_env()  # ATTNFLOW_THREADS: a bad value is refused on every call, short or long
    values = _fast_direct(
        attn, residual, heads, lengths, mask, renormalize, sources, layers, normalize, progress
    )
    if values is not None:
        return values
    fast = _fast_caps(attn, residual, heads, lengths, mask, renormalize)
    if fast is not None:
        return _fast_flow(*fast, sources, layers, normalize, progress)
    p = prepare(attn, lengths=lengths, mask=mask, renormalize=renormalize)
    n_layers, tokens = p.attn.shape[1], p.attn.shape[-1]
    layer_idx = check_positions(layers, "layers", n_layers, f"the input has {n_layers} layers")
    src = check_positions(sources, "sources", tokens, f"the input has {tokens} positions")
    if sources is not None and not p.valid[:, src].all():
        b, s = np.argwhere(~p.valid[:, src])[0]
        raise ValueError(f"sources index {int(src[s])} out of range: it is padding in sample {int(b)}")
    caps = mix_residual(aggregate_heads(p, heads, renormalize=renormalize), p.valid, residual)  # (B, L, T, T)
    row_layer = np.repeat(layer_idx, src.size)  # (R,) with R = len(layers) * len(sources)
    row_src = np.tile(src, layer_idx.size)
    supply = caps[:, row_layer, row_src, :]  # (B, R, T): the source's edges to the layer below
    values = flow_rows(caps, p.valid, row_layer, supply, p.valid[:, row_src], progress=progress)  # (B, R, T)
    values = values.reshape(values.shape[0], layer_idx.size, src.size, tokens)  # (B, layers, sources, T)
    if normalize:
        values = normalize_rows(values)
    return p.to_output(values)


def _fast_flow(
    caps: np.ndarray, batched: bool, sources: Any, layers: Any, normalize: bool, progress: bool | None
) -> np.ndarray:
    """`attention_flow` of the common call (see `_fast_caps`): no padding, numpy float64 out."""
    batch, n_layers, tokens = caps.shape[0], caps.shape[1], caps.shape[-1]
    layer_idx = check_positions(layers, "layers", n_layers, f"the input has {n_layers} layers")
    src = check_positions(sources, "sources", tokens, f"the input has {tokens} positions")
    n_rows = layer_idx.size * src.size
    row_layer = np.repeat(layer_idx, src.size)  # (R,)
    row_src = np.tile(src, layer_idx.size)
    if not progress and (n_rows == 1 or np.all(row_layer[1:] >= row_layer[:-1])):
        values = small_full_flow(caps, row_layer, row_src, progress)  # (B * R, T), None unless small, short
        if values is not None:
            values = values.reshape(batch, layer_idx.size, src.size, tokens)  # (B, layers, sources, T)
            if normalize:
                values = normalize_rows(values)
            return values if batched else values[0]
    supply = caps[:, row_layer, row_src, :].reshape(batch * n_rows, tokens)  # (B * R, T)
    row_b = np.repeat(np.arange(batch), n_rows)
    row_L = np.tile(row_layer + 1, batch)
    if n_rows > 1 and np.any(row_layer[1:] < row_layer[:-1]):  # the solver wants rows sorted by layer
        sort = np.argsort(row_layer, kind="stable")
        rows = (np.arange(batch)[:, None] * n_rows + sort).reshape(-1)
        values = np.empty((batch * n_rows, tokens))
        values[rows] = layered_max_flow(
            caps, np.full(batch, tokens), row_b, row_L[rows], supply[rows], progress=progress
        )
    else:
        values = layered_max_flow(caps, np.full(batch, tokens), row_b, row_L, supply, progress=progress)
    values = values.reshape(batch, layer_idx.size, src.size, tokens)  # (B, layers, sources, T)
    if normalize:
        values = normalize_rows(values)
    return values if batched else values[0]
