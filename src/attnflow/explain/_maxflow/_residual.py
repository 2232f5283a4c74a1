"""The state of one network: flows, residual bit sets, label sets (the workspace), and its resets."""

from __future__ import annotations

import numpy as np

from ._jit import (
    _WDOWN,
    _WDOWNT,
    _WE,
    _WF,
    _WG,
    _WTOUCHED,
    _WUP,
    _WUPT,
    _ZERO,
    RESIDUAL_EPS,
    _bit,
    njit,
)


@njit(cache=True)
def _workspace(K, n):  # pragma: no cover - compiled
    """State of one network with K node layers of n nodes (node m * n + k = layer m+1, position k;
    layer 1 holds the sink arcs, layer K the supply).

    F[t, i, k]: flow on the arc (t+2, i) -> (t+1, k). Residual bit sets, W words per node:
    down[t, i] bit k  = residual of (t+2, i) -> (t+1, k)   (downT[t, k] bit i: the same arcs)
    up[t, k] bit i    = flow on (t+2, i) -> (t+1, k), i.e. residual of the reverse arc
                        (t+1, k) -> (t+2, i)                (upT[t, i] bit k: the same arcs)
    lab[m, v]: nodes of layer m+1 with label v; cnt[v]: how many nodes have label v.
    """
    W = (n + 63) // 64
    nn = K * n
    T = max(K - 1, 1)
    F = np.zeros((T, n, n))
    down = np.zeros((T, n, W), np.uint64)
    downT = np.zeros((T, n, W), np.uint64)
    up = np.zeros((T, n, W), np.uint64)
    upT = np.zeros((T, n, W), np.uint64)
    e = np.zeros(nn)
    g = np.zeros(n)  # flow on the sink arcs of layer 1
    d = np.zeros(nn, np.int64)  # labels
    lab = np.zeros((K, nn + 2, W), np.uint64)
    cnt = np.zeros(nn + 2, np.int64)
    bhead = np.full(nn + 2, -1, np.int64)  # active nodes by label
    bnext = np.full(nn, -1, np.int64)
    queue = np.empty(nn, np.int64)
    unseen = np.zeros((K, W), np.uint64)
    touched = np.empty(8 * nn + 1024, np.int64)  # arcs whose flow became nonzero (cold resets)
    lay = np.empty(nn, np.int64)  # node -> layer index, position (no divisions in the loops)
    pos = np.empty(nn, np.int64)
    for x in range(nn):
        lay[x] = x // n
        pos[x] = x - lay[x] * n
    rho = np.empty((K, n))  # the greedy start's buffers (see _greedy)
    kids = np.empty((K, n), np.int64)  # per layer: positions by decreasing rho (children order)
    send = np.empty(n, np.int64)
    nxt = np.empty(n + 1, np.int64)
    return (
        F,
        down,
        downT,
        up,
        upT,
        e,
        g,
        d,
        lab,
        cnt,
        bhead,
        bnext,
        queue,
        unseen,
        touched,
        lay,
        pos,
        rho,
        kids,
        send,
        nxt,
    )


@njit(cache=True)
def _arc_bits(C, F, down, downT, up, upT, t, i, k):  # pragma: no cover - compiled
    """Refresh the residual bits of the arc (t+2, i) -> (t+1, k) after its flow changed."""
    f = F[t, i, k]
    bk = _bit(k)
    bi = _bit(i)
    wk = k >> 6
    wi = i >> 6
    if C[t, i, k] - f > RESIDUAL_EPS:
        down[t, i, wk] |= bk
        downT[t, k, wi] |= bi
    else:
        down[t, i, wk] &= ~bk
        downT[t, k, wi] &= ~bi
    if f > RESIDUAL_EPS:
        up[t, k, wi] |= bi
        upT[t, i, wk] |= bk
    else:
        up[t, k, wi] &= ~bi
        upT[t, i, wk] &= ~bk


@njit(cache=True)
def _unpack(idx, n):  # pragma: no cover - compiled
    """An entry of `touched`, (t * n + i) * n + k, back to the arc (t+2, i) -> (t+1, k)."""
    t = idx // (n * n)
    rest = idx - t * n * n
    i = rest // n
    return t, i, rest - i * n


@njit(cache=True)
def _sync_bits(C, K, n, ws, n_touched):  # pragma: no cover - compiled
    """Residual bits from the flow: of the `n_touched` listed arcs, or of every arc if negative."""
    F, down, downT, up, upT = ws[_WF], ws[_WDOWN], ws[_WDOWNT], ws[_WUP], ws[_WUPT]
    touched = ws[_WTOUCHED]
    if n_touched < 0:
        for t in range(K - 1):
            for i in range(n):
                for k in range(n):
                    _arc_bits(C, F, down, downT, up, upT, t, i, k)
    else:
        for q in range(n_touched):
            t, i, k = _unpack(touched[q], n)
            _arc_bits(C, F, down, downT, up, upT, t, i, k)


@njit(cache=True)
def _reset(C, K, n, ws, n_touched, bits=True):  # pragma: no cover - compiled
    """Back to zero flow: only the `n_touched` arcs listed in `touched` (the only ones that carried
    flow) or, if negative, every arc; with `bits`, their residual bits too."""
    F, down, downT, up, upT = ws[_WF], ws[_WDOWN], ws[_WDOWNT], ws[_WUP], ws[_WUPT]
    e, g, touched = ws[_WE], ws[_WG], ws[_WTOUCHED]
    W = down.shape[2]
    if n_touched < 0:
        for t in range(K - 1):
            for i in range(n):
                for k in range(n):
                    F[t, i, k] = 0.0
        if bits:
            for t in range(K - 1):
                for i in range(n):
                    for w in range(W):
                        down[t, i, w] = _ZERO
                        downT[t, i, w] = _ZERO
                        up[t, i, w] = _ZERO
                        upT[t, i, w] = _ZERO
                for i in range(n):
                    for k in range(n):
                        if C[t, i, k] > RESIDUAL_EPS:
                            down[t, i, k >> 6] |= _bit(k)
                            downT[t, k, i >> 6] |= _bit(i)
    else:
        for q in range(n_touched):
            t, i, k = _unpack(touched[q], n)
            F[t, i, k] = 0.0
            if bits:
                _arc_bits(C, F, down, downT, up, upT, t, i, k)
    for x in range(K * n):
        e[x] = 0.0
    for k in range(n):
        g[k] = 0.0
