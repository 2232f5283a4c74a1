"""Labels of push-relabel: exact distances by breadth-first search, active buckets, the gap rule."""

from __future__ import annotations

import numpy as np

from ._jit import (
    _ONE,
    _WCNT,
    _WD,
    _WDOWN,
    _WDOWNT,
    _WG,
    _WLAB,
    _WLAY,
    _WPOS,
    _WQUEUE,
    _WUNSEEN,
    _WUPT,
    _ZERO,
    RESIDUAL_EPS,
    _bit,
    _tz,
    njit,
)


@njit(cache=True)
def _global_relabel(bcap, K, n, ws):  # pragma: no cover - compiled
    """Exact distance-to-sink labels by breadth-first search on the residual graph (bit sets);
    label sets and counts rebuilt. Returns the highest finite label."""
    down, downT, upT, g, d = ws[_WDOWN], ws[_WDOWNT], ws[_WUPT], ws[_WG], ws[_WD]
    lab, cnt, queue, unseen, lay = ws[_WLAB], ws[_WCNT], ws[_WQUEUE], ws[_WUNSEEN], ws[_WLAY]
    pos = ws[_WPOS]
    W = down.shape[2]
    nn = K * n
    inf = nn + 1  # a path to the sink visits at most nn nodes, so nn + 1 means "cannot reach"
    for m in range(K):
        for k in range(n):
            x = m * n + k
            lab[m, d[x], k >> 6] = _ZERO  # clear the label sets in use (all nodes get a new label)
            d[x] = inf
    for m in range(K):
        for w in range(W):
            left = n - 64 * w
            unseen[m, w] = ~_ZERO if left >= 64 else (_ONE << np.uint64(left)) - _ONE
    qt = 0
    for k in range(n):
        if bcap[k] - g[k] > RESIDUAL_EPS:
            d[k] = 1
            unseen[0, k >> 6] &= ~_bit(k)
            queue[qt] = k
            qt += 1
    qh = 0
    while qh < qt:
        u = queue[qh]
        qh += 1
        m = lay[u]
        k = pos[u]
        du = d[u] + 1
        if m + 1 <= K - 1:  # (m+2, i) -> (m+1, k) with residual
            base = (m + 1) * n
            for w in range(W):
                c = downT[m, k, w] & unseen[m + 1, w]
                unseen[m + 1, w] &= ~c
                while c != _ZERO:
                    x = base + 64 * w + _tz(c)
                    c &= c - _ONE
                    d[x] = du
                    queue[qt] = x
                    qt += 1
        if m >= 1:  # (m, i) -> (m+1, k) residual = flow on (m+1, k) -> (m, i)
            base = (m - 1) * n
            for w in range(W):
                c = upT[m - 1, k, w] & unseen[m - 1, w]
                unseen[m - 1, w] &= ~c
                while c != _ZERO:
                    x = base + 64 * w + _tz(c)
                    c &= c - _ONE
                    d[x] = du
                    queue[qt] = x
                    qt += 1
    dmax = d[queue[qt - 1]] if qt > 0 else 0
    for v in range(nn + 2):
        cnt[v] = 0
    for m in range(K):
        for k in range(n):
            v = d[m * n + k]
            lab[m, v, k >> 6] |= _bit(k)
            cnt[v] += 1
    return dmax


@njit(cache=True)
def _buckets(e, d, bhead, bnext, nn):  # pragma: no cover - compiled
    """Active nodes (excess, finite label) by label; returns the highest active label."""
    for v in range(nn + 2):
        bhead[v] = -1
    hi = 0
    for z in range(nn):
        if d[z] <= nn and e[z] > RESIDUAL_EPS:
            bnext[z] = bhead[d[z]]
            bhead[d[z]] = z
            if d[z] > hi:
                hi = d[z]
    return hi


@njit(cache=True)
def _move(lab, cnt, d, x, m, k, v):  # pragma: no cover - compiled
    """Give node x = (layer index m, position k) the label v (label sets and counts follow)."""
    bk = _bit(k)
    old = d[x]
    lab[m, old, k >> 6] &= ~bk
    cnt[old] -= 1
    lab[m, v, k >> 6] |= bk
    cnt[v] += 1
    d[x] = v


@njit(cache=True)
def _gap(K, n, ws, level, dmax):  # pragma: no cover - compiled
    """No node has label `level`: nodes above it cannot reach the sink; lift them out."""
    down, d, lab, cnt = ws[_WDOWN], ws[_WD], ws[_WLAB], ws[_WCNT]
    W = down.shape[2]
    inf = K * n + 1
    for v in range(level + 1, dmax + 1):
        if cnt[v] == 0:
            continue
        for m in range(K):
            for w in range(W):
                c = lab[m, v, w]
                if c == _ZERO:
                    continue
                lab[m, inf, w] |= c
                lab[m, v, w] = _ZERO
                while c != _ZERO:
                    x = m * n + 64 * w + _tz(c)
                    c &= c - _ONE
                    d[x] = inf
        cnt[inf] += cnt[v]
        cnt[v] = 0


@njit(cache=True)
def _lowest(lab, mask_t, mask_row, m, v0, vmax, W):  # pragma: no cover - compiled
    """Lowest label v in [v0, vmax] held by a node of layer m+1 in the bit set mask_t[mask_row];
    vmax + 1 if none."""
    v = v0
    while v <= vmax:
        for w in range(W):
            if mask_t[mask_row, w] & lab[m, v, w] != _ZERO:
                return v
        v += 1
    return vmax + 1
