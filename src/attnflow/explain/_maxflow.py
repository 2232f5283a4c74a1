"""Exact maximum flow on the layered attention graph (internal solver behind `attention_flow`).

The graph of Abnar & Zuidema (2020): node (l, i) for layer l = 0..L and position i, an edge
(l, i) -> (l-1, k) with capacity A_l[i, k]. We need the max-flow value from one node (L, s) to
every input node (0, j), for many (sample, layer, source) at once. Structure used here:

* Only layers L..1 matter and, in layer 0, only the sink: the last hop is (1, k) -> (0, j) with
  capacity A_1[k, j]; other input nodes are dead ends. The first hop is (L, s) -> (L-1, k) with
  capacity A_L[s, k]. So one problem is a "middle" network of node layers L-1..1 with a supply
  vector a = A_L[s, :] on top and sink capacities b = A_1[:, j] at the bottom.
* L = 1: the value is A_1[s, j]. L = 2: the paths s -> (1, k) -> j share no edge, so the value is
  sum_k min(A_2[s, k], A_1[k, j]) in closed form.
* L >= 3: highest-label push-relabel (float64) with global relabelling, the gap heuristic, a
  look-ahead that pushes from layer 2 straight through layer 1 into the sink, and an exact early
  stop: the two trivial cuts give value <= U = min(sum(a), sum(b)), so a solve ends as soon as the
  sink holds U. Candidate arcs are found with bit sets instead of scans: per node, one bit per
  arc with residual capacity (down and up, row and column views), and per (layer, label) the set
  of nodes with that label. A discharge ANDs two words to find its admissible arcs, a relabel
  ANDs words label by label, and a global relabel (exact distances by breadth-first search) costs
  O(nodes) word operations instead of a pass over every arc -- cheap enough to start every solve
  with exact labels.
* A problem solved on its own starts from a greedy preflow instead of zero flow: one pass down
  the layers where the fullest nodes send first, each to the children that could pass on the most
  first (rho = what a node could pass to the sink with the network to itself, computed bottom-up),
  never giving a child more than its rho. It often reaches U outright (then push-relabel does not
  run at all) and otherwise leaves little to do. Each problem runs from the end with the smaller
  trivial cut (the reversed network is the same kind of network with transposed matrices).
* Many problems share one network: for a fixed (sample, layer) they differ only in the supply a
  (the source row) and the sink capacities b (the sink column). With many source rows (every row
  of every layer, per head) and 4+ layers, each sink j is one "sweep" on the reversed network:
  supply = column j of A_1 (fixed), sink capacities = the rows, taken in an order that keeps
  consecutive rows alike (grouped by their largest entry, i.e. by source position), each problem
  warm-started from the previous one's preflow. New sink capacities keep the preflow valid once
  flow above a lowered capacity returns as excess at its node; a global relabel makes the labels
  exact and push-relabel continues to the new maximum. Excess that cannot reach the sink stays
  where it is (phase one of push-relabel only). With 3 layers the greedy start alone beats sweeps.
* Work is split into tasks (closed-form rows, rows solved problem by problem, or a sweep over some
  sinks of one (sample, layer)) spread over numba's threads, longest first; a small call runs on
  the calling thread (no thread start-up).

Exactness: arcs with residual <= RESIDUAL_EPS count as saturated and excess <= RESIDUAL_EPS as
zero, so the value found is within (#arcs + #nodes) * RESIDUAL_EPS + STOP_TOL of the true maximum
(1e-13 per arc: < 3e-8 for 12 layers x 128 tokens), warm-started or not. No integer rounding.

numba compiles the kernels (cached on disk, `cache=True`); without numba the same code runs as
plain Python (correct, slow).
"""

from __future__ import annotations

import numpy as np

try:  # numba is what makes this fast; the code is also valid plain Python.
    import numba
    from numba import njit, prange

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised only where numba is missing
    numba = None
    HAVE_NUMBA = False
    prange = range

    def njit(*args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return lambda fn: fn


if HAVE_NUMBA and not numba.config.DISABLE_JIT:
    from numba.cpython.unsafe.numbers import trailing_zeros as _trailing_zeros

    @njit(cache=True, inline="always")
    def _tz(x):  # pragma: no cover - compiled
        """Index of the lowest set bit of a nonzero uint64."""
        return np.int64(_trailing_zeros(x))

else:  # pragma: no cover - plain Python

    def _tz(x):
        x = int(x)
        return (x & -x).bit_length() - 1


__all__ = ["PROGRESS_WORK", "RESIDUAL_EPS", "STOP_TOL", "layered_max_flow", "warm_up"]

# An arc whose residual capacity is at most this is treated as saturated; excess at most this as zero.
RESIDUAL_EPS = 1e-13
# Stop as soon as the sink holds the trivial upper bound U minus this (the value cannot exceed U).
STOP_TOL = 1e-12
# Global relabel after this many relabels per node of the network (a global relabel costs about
# as much as one relabel per node here).
GLOBAL_RELABEL_FREQ = 1.0
# Closed-form (1-2 layer) rows per task.
ROWS_PER_TASK = 256
# A (sample, layer) with at least this many source rows is swept, sink by sink, on the reversed
# network (the rows vary along a sweep); fewer rows are solved problem by problem.
SWEEP_ROWS_MIN = 4
# Sweeps only from this source layer up: with one middle layer (L = 3) the greedy start alone
# leaves almost nothing for push-relabel, which beats warm-starting (measured on SST-2 attention).
SWEEP_LAYERS_MIN = 4
# Sinks per sweep task: enough to amortise a sweep's start, few enough to balance the threads.
SWEEP_CHUNK = 8
# Rows per task when the rows are few (each (row, sink) problem solved on its own).
ROWS_PER_COLD = 16
# Below this much estimated work (~ arc visits) a call runs on the calling thread.
SERIAL_WORK = 3.0e5
# Above this much estimated work a call shows a progress bar with a time estimate (measured: ~5e8
# to 1e9 per second on two busy cores, so about 2-4 s there; every row of 12 layers x 2048 tokens
# is ~1e13).
PROGRESS_WORK = 2.0e9
# A call with a progress bar runs its tasks in about this many rounds, the bar moving after each.
PROGRESS_ROUNDS = 50

_ONE = np.uint64(1)
_ZERO = np.uint64(0)
# positions in the workspace tuple (see _workspace)
(
    _WF,
    _WDOWN,
    _WDOWNT,
    _WUP,
    _WUPT,
    _WE,
    _WG,
    _WD,
    _WLAB,
    _WCNT,
    _WBHEAD,
    _WBNEXT,
    _WQUEUE,
    _WUNSEEN,
    _WTOUCHED,
    _WLAY,
    _WPOS,
) = range(17)


@njit(cache=True, inline="always")
def _bit(i):  # pragma: no cover - compiled
    return _ONE << np.uint64(i & 63)


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
    return F, down, downT, up, upT, e, g, d, lab, cnt, bhead, bnext, queue, unseen, touched, lay, pos


@njit(cache=True, inline="always")
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


@njit(cache=True, inline="always")
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
    F, down, downT, up, upT, e, g, touched = (
        ws[_WF],
        ws[_WDOWN],
        ws[_WDOWNT],
        ws[_WUP],
        ws[_WUPT],
        ws[_WE],
        ws[_WG],
        ws[_WTOUCHED],
    )
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


@njit(cache=True)
def _global_relabel(bcap, K, n, ws):  # pragma: no cover - compiled
    """Exact distance-to-sink labels by breadth-first search on the residual graph (bit sets);
    label sets and counts rebuilt. Returns the highest finite label."""
    down, downT, upT, g, d, lab, cnt, queue, unseen, lay, pos = (
        ws[_WDOWN],
        ws[_WDOWNT],
        ws[_WUPT],
        ws[_WG],
        ws[_WD],
        ws[_WLAB],
        ws[_WCNT],
        ws[_WQUEUE],
        ws[_WUNSEEN],
        ws[_WLAY],
        ws[_WPOS],
    )
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


@njit(cache=True, inline="always")
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


@njit(cache=True, inline="always")
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


@njit(cache=True)
def _push_relabel(C, bcap, K, n, ws, track, n_touched, value, upper):  # pragma: no cover
    """Highest-label push-relabel from the current preflow until no active node can reach the sink
    or the sink holds `upper` - STOP_TOL. Starts with a global relabel.

    Returns (value, number of arcs listed in `touched`, -1 once it overflowed).
    """
    F, down, downT, up, upT, e, g, d, lab, cnt, bhead, bnext, touched, lay, pos = (
        ws[_WF],
        ws[_WDOWN],
        ws[_WDOWNT],
        ws[_WUP],
        ws[_WUPT],
        ws[_WE],
        ws[_WG],
        ws[_WD],
        ws[_WLAB],
        ws[_WCNT],
        ws[_WBHEAD],
        ws[_WBNEXT],
        ws[_WTOUCHED],
        ws[_WLAY],
        ws[_WPOS],
    )
    W = down.shape[2]
    nn = K * n
    inf = nn + 1
    dmax = _global_relabel(bcap, K, n, ws)
    hi = _buckets(e, d, bhead, bnext, nn)
    relabels = 0
    budget = int(GLOBAL_RELABEL_FREQ * nn) + 8
    while hi > 0:
        if value >= upper - STOP_TOL:
            break  # the trivial cut is reached: this is the maximum
        x = bhead[hi]
        if x == -1:
            hi -= 1
            continue
        bhead[hi] = bnext[x]
        if d[x] != hi or e[x] <= RESIDUAL_EPS:
            continue  # lifted by a gap, or already drained
        m = lay[x]
        k = pos[x]
        while e[x] > RESIDUAL_EPS and d[x] < inf:
            dx = d[x]
            # (1) the sink arc of a layer-1 node
            if m == 0 and dx == 1:
                r = bcap[k] - g[k]
                if r > RESIDUAL_EPS:
                    delta = min(e[x], r)
                    g[k] += delta
                    e[x] -= delta
                    value += delta
                    if e[x] <= RESIDUAL_EPS:
                        break
            # (2) admissible down arcs: residual, to a node one label lower
            if m >= 1:
                t = m - 1
                ahead = m == 1 and dx == 2
                for w in range(W):
                    c = down[t, k, w] & lab[t, dx - 1, w]
                    while c != _ZERO:
                        yk = 64 * w + _tz(c)
                        c &= c - _ONE
                        y = t * n + yk
                        delta = min(e[x], C[t, k, yk] - F[t, k, yk])
                        # look-ahead through an idle (layer 1, yk); an active one keeps its excess
                        # and its bucket, so it takes a plain push
                        look = ahead and e[y] <= RESIDUAL_EPS
                        if look:  # push through (layer 1, yk) straight into the sink
                            delta = min(delta, bcap[yk] - g[yk])
                        if delta > RESIDUAL_EPS:
                            if track and F[t, k, yk] == 0.0:
                                if n_touched >= 0 and n_touched < touched.shape[0]:
                                    touched[n_touched] = (t * n + k) * n + yk
                                    n_touched += 1
                                else:
                                    n_touched = -1
                            F[t, k, yk] += delta
                            _arc_bits(C, F, down, downT, up, upT, t, k, yk)
                            e[x] -= delta
                            if look:
                                g[yk] += delta
                                value += delta
                            else:
                                ey = e[y]
                                e[y] = ey + delta
                                if ey <= RESIDUAL_EPS and ey + delta > RESIDUAL_EPS:
                                    bnext[y] = bhead[dx - 1]
                                    bhead[dx - 1] = y
                                    if dx - 1 > hi:
                                        hi = dx - 1  # x was relabelled above hi
                        if look and bcap[yk] - g[yk] <= RESIDUAL_EPS:
                            # (layer 1, yk) lost its sink arc: raise its label now (valid: its
                            # only residual arcs lead back up to layer 2)
                            v = _lowest(lab, up[0], yk, 1, 1, dmax, W)
                            _move(lab, cnt, d, y, 0, yk, v + 1 if v <= dmax else inf)
                            if v + 1 > dmax and v <= dmax:
                                dmax = v + 1
                            if cnt[1] == 0:
                                _gap(K, n, ws, 1, dmax)
                                break
                        if e[x] <= RESIDUAL_EPS:
                            break
                    if e[x] <= RESIDUAL_EPS or d[x] != dx:
                        break
                if e[x] <= RESIDUAL_EPS or d[x] != dx:
                    break
            # (3) admissible up arcs (returning flow), to a node one label lower
            if m + 1 <= K - 1:
                for w in range(W):
                    c = up[m, k, w] & lab[m + 1, dx - 1, w]
                    while c != _ZERO:
                        i = 64 * w + _tz(c)
                        c &= c - _ONE
                        y = (m + 1) * n + i
                        delta = min(e[x], F[m, i, k])
                        F[m, i, k] -= delta
                        _arc_bits(C, F, down, downT, up, upT, m, i, k)
                        e[x] -= delta
                        ey = e[y]
                        e[y] = ey + delta
                        if ey <= RESIDUAL_EPS and ey + delta > RESIDUAL_EPS:
                            bnext[y] = bhead[dx - 1]
                            bhead[dx - 1] = y
                            if dx - 1 > hi:
                                hi = dx - 1
                        if e[x] <= RESIDUAL_EPS:
                            break
                    if e[x] <= RESIDUAL_EPS:
                        break
                if e[x] <= RESIDUAL_EPS:
                    break
            # (4) relabel: one above the lowest label among residual out-arcs (>= dx by validity)
            v = dmax + 1
            if m == 0 and bcap[k] - g[k] > RESIDUAL_EPS:
                v = 0
            if m >= 1 and v > dx:
                v = _lowest(lab, down[m - 1], k, m - 1, dx, min(v - 1, dmax), W)
            if m + 1 <= K - 1 and v > dx:
                v2 = _lowest(lab, up[m], k, m + 1, dx, min(v - 1, dmax), W)
                if v2 < v:
                    v = v2
            newd = v + 1 if v <= dmax else inf
            relabels += 1
            _move(lab, cnt, d, x, m, k, newd)
            if newd < inf and newd > dmax:
                dmax = newd
            if cnt[dx] == 0:
                _gap(K, n, ws, dx, dmax)
        if e[x] > RESIDUAL_EPS and d[x] < inf:
            bnext[x] = bhead[d[x]]
            bhead[d[x]] = x
            if d[x] > hi:
                hi = d[x]
        if relabels > budget:
            relabels = 0
            dmax = _global_relabel(bcap, K, n, ws)
            hi = _buckets(e, d, bhead, bnext, nn)
    return value, n_touched


@njit(cache=True)
def _solve(C, a, bcap, K, n, ws):  # pragma: no cover - compiled
    """Max flow from supplies `a` on node layer K to sink capacities `bcap` on node layer 1, from
    zero flow, leaving the workspace at zero flow again.

    C[t][i, k] is the capacity of the arc (layer t+2, i) -> (layer t+1, k), t = 0..K-2. The supply
    starts as excess on layer K (the source itself is implicit: its edges stay saturated, which is
    all phase one of push-relabel needs). The workspace must be at zero flow on entry (`_reset`).
    """
    ua = 0.0
    ub = 0.0
    for k in range(n):
        ua += a[k]
        ub += bcap[k]
    upper = min(ua, ub)
    if upper <= RESIDUAL_EPS:
        return 0.0
    value, n_touched = _greedy(C, a, bcap, K, n, ws)
    if value >= upper - STOP_TOL:  # the greedy pass reached the bound; it wrote no residual bits
        _reset(C, K, n, ws, n_touched, False)
        return value
    _sync_bits(C, K, n, ws, n_touched)
    value, n_touched = _push_relabel(C, bcap, K, n, ws, True, n_touched, value, upper)
    _reset(C, K, n, ws, n_touched)
    return value


@njit(cache=True, inline="always")
def _order_desc(vals, idx, n):  # pragma: no cover - compiled
    """idx[:n] = positions 0..n-1 by decreasing vals[:n] (insertion sort: n is small)."""
    for q in range(n):
        v = vals[q]
        p = q
        while p > 0 and vals[idx[p - 1]] < v:
            idx[p] = idx[p - 1]
            p -= 1
        idx[p] = q


@njit(cache=True)
def _greedy(C, a, bcap, K, n, ws):  # pragma: no cover - compiled
    """A first preflow in one pass down the layers, then the sink arcs (flow only: the residual
    bits are left as they were, see `_sync_bits`).

    rho[m, k] = sum_i min(arc, rho one layer down), rho = the sink capacity on layer 1: what node
    (m+1, k) could pass on to the sink if it had the network to itself (an upper bound). Layer by
    layer, the nodes holding the most send first, each to the children that can pass on the most
    first, never giving a child more than its remaining rho. What a node cannot place stays as its
    excess. On attention graphs this often reaches the trivial bound already, and otherwise leaves
    little for push-relabel. Returns (value, number of arcs listed in `touched`, -1 if it
    overflowed).
    """
    F, e, g, touched = ws[_WF], ws[_WE], ws[_WG], ws[_WTOUCHED]
    rho = np.empty((K, n))
    for k in range(n):
        rho[0, k] = bcap[k]
    for m in range(1, K):
        for i in range(n):
            v = 0.0
            for k in range(n):
                v += min(C[m - 1, i, k], rho[m - 1, k])
            rho[m, i] = v
    top = (K - 1) * n
    for k in range(n):
        e[top + k] = a[k]
    n_touched = 0
    cap_t = touched.shape[0]
    children = np.empty(n, np.int64)
    senders = np.empty(n, np.int64)
    nxt = np.empty(n + 1, np.int64)  # linked list of the children that can still take flow
    for m in range(K - 1, 0, -1):
        t = m - 1
        _order_desc(rho[t], children, n)  # most capable first
        _order_desc(e[m * n : (m + 1) * n], senders, n)  # fullest first
        for p in range(n):
            nxt[p] = p + 1  # position p -> next position; n ends the list; nxt[n] is the head
        nxt[n] = 0
        for q in range(n):
            i = senders[q]
            x = m * n + i
            left = e[x]
            if left <= RESIDUAL_EPS:
                break
            prev = n
            p = nxt[n]
            while p < n:
                k = children[p]
                amt = min(left, C[t, i, k], rho[t, k])
                if amt > RESIDUAL_EPS:
                    if n_touched >= 0 and n_touched < cap_t:
                        touched[n_touched] = (t * n + i) * n + k
                        n_touched += 1
                    else:
                        n_touched = -1
                    F[t, i, k] = amt
                    rho[t, k] -= amt
                    e[t * n + k] += amt
                    left -= amt
                if rho[t, k] <= RESIDUAL_EPS:  # full: drop it from the list
                    nxt[prev] = nxt[p]
                else:
                    prev = p
                if left <= RESIDUAL_EPS:
                    break
                p = nxt[p]
            e[x] = left
    value = 0.0
    for k in range(n):
        amt = min(e[k], bcap[k])
        g[k] = amt
        e[k] -= amt
        value += amt
    return value, n_touched


@njit(cache=True)
def _resolve(C, bcap, K, n, ws, supply_sum):  # pragma: no cover - compiled
    """Warm start: the max flow for new sink capacities `bcap`, from the preflow that the previous
    solve (same network, same supply) left in the workspace.

    Flow above a lowered sink capacity returns as excess at its layer-1 node, which keeps the
    preflow valid; push-relabel (starting with exact labels) runs on from there.
    """
    g, e = ws[_WG], ws[_WE]
    value = 0.0
    ub = 0.0
    for k in range(n):
        c = bcap[k]
        ub += c
        if g[k] > c:
            e[k] += g[k] - c
            g[k] = c
        value += g[k]
    value, _ = _push_relabel(C, bcap, K, n, ws, False, 0, value, min(supply_sum, ub))
    return value


@njit(cache=True)
def _sweep(C, fixed, vary, count, K, n, ws, out_vals):  # pragma: no cover - compiled
    """One warm-started sweep: supply `fixed` (n,), sink capacities vary[q] (n,) for q < count.

    The first problem starts from zero flow, each next one from the previous preflow (`_resolve`).
    out_vals[q] = the max-flow value of problem q. Leaves the workspace dirty (`_reset` with -1).
    """
    e = ws[_WE]
    sa = 0.0
    for k in range(n):
        sa += fixed[k]
    if sa <= RESIDUAL_EPS:
        for q in range(count):
            out_vals[q] = 0.0
        return
    _reset(C, K, n, ws, -1)
    top = (K - 1) * n
    for k in range(n):
        if fixed[k] > RESIDUAL_EPS:
            e[top + k] = fixed[k]
    for q in range(count):
        out_vals[q] = _resolve(C, vary[q], K, n, ws, sa)


@njit(cache=True)
def _network(caps, b, L, n, reverse):  # pragma: no cover - compiled
    """Middle network of source layer L: C[t] = A_{t+2} (t = 0..L-3); reversed: C[t] = A_{L-1-t}^T."""
    K = L - 1
    C = np.empty((max(K - 1, 1), n, n))
    for t in range(K - 1):
        for i in range(n):
            for k in range(n):
                if reverse:
                    C[t, i, k] = caps[b, L - 2 - t, k, i]
                else:
                    C[t, i, k] = caps[b, t + 1, i, k]
    return C


@njit(cache=True)
def _run_closed(caps, lengths, row_b, row_L, supply, rows, out):  # pragma: no cover - compiled
    """Rows of source layer 1 or 2, in closed form: L = 1: the supply row itself; L = 2:
    sum_k min(a_k, A_1[k, j]) (the paths s -> (1, k) -> j share no edge)."""
    for r in rows:
        b = row_b[r]
        n = lengths[b]
        if row_L[r] == 1:
            for j in range(n):
                out[r, j] = supply[r, j]
            continue
        for j in range(n):
            v = 0.0
            for k in range(n):
                v += min(supply[r, k], caps[b, 0, k, j])
            out[r, j] = v


@njit(cache=True)
def _run_sweep_sinks(caps, b, L, n, rows, j0, j1, supply, out):  # pragma: no cover - compiled
    """Sinks j0..j1-1 of one (sample b, layer L): per sink, one sweep over the rows `rows` (in that
    order) on the reversed network (supply = column j of A_1, sink capacities = the rows)."""
    K = L - 1
    C = _network(caps, b, L, n, True)
    ws = _workspace(K, n)
    count = rows.shape[0]
    vary = np.empty((count, n))
    for q in range(count):
        for k in range(n):
            vary[q, k] = supply[rows[q], k]
    bcol = np.empty(n)
    vals = np.empty(count)
    for j in range(j0, j1):
        for k in range(n):
            bcol[k] = caps[b, 0, k, j]
        _sweep(C, bcol, vary, count, K, n, ws, vals)
        for q in range(count):
            out[rows[q], j] = vals[q]


@njit(cache=True)
def _run_cold(caps, lengths, row_b, row_L, supply, rows, out):  # pragma: no cover - compiled
    """Each (row, sink) problem on its own (from a greedy start), for rows sorted by (sample,
    layer): on the forward network or, when the sink column is the smaller trivial cut, on the
    reversed one."""
    b = -1
    L = -1
    n = 0
    K = 1
    Cf = Cr = np.empty((1, 1, 1))
    wsf = wsr = _workspace(1, 1)
    a = np.empty(caps.shape[-1])
    bcol = np.empty(caps.shape[-1])
    for r in rows:
        if row_b[r] != b or row_L[r] != L:  # a new network
            b, L = row_b[r], row_L[r]
            n = lengths[b]
            K = L - 1
            Cf = _network(caps, b, L, n, False)
            Cr = _network(caps, b, L, n, True)
            wsf = _workspace(K, n)
            wsr = _workspace(K, n)
            _reset(Cf, K, n, wsf, -1)
            _reset(Cr, K, n, wsr, -1)
        sa = 0.0
        for k in range(n):
            a[k] = supply[r, k]
            sa += a[k]
        for j in range(n):
            sb = 0.0
            for k in range(n):
                bcol[k] = caps[b, 0, k, j]
                sb += bcol[k]
            if sb < sa:
                out[r, j] = _solve(Cr, bcol[:n], a[:n], K, n, wsr)
            else:
                out[r, j] = _solve(Cf, a[:n], bcol[:n], K, n, wsf)


@njit(cache=True)
def _run_task(caps, lengths, row_b, row_L, supply, order, kind, t0, t1, t2, t3, out):  # pragma: no cover
    """One task over the rows order[t0:t1]: kind 0 = closed forms; 1 = sweeps over those rows (one
    sample and layer) for the sinks t2..t3-1; 2 = every (row, sink) problem on its own."""
    rows = order[t0:t1]
    if kind == 0:
        _run_closed(caps, lengths, row_b, row_L, supply, rows, out)
    elif kind == 1:
        b = row_b[rows[0]]
        _run_sweep_sinks(caps, b, row_L[rows[0]], lengths[b], rows, t2, t3, supply, out)
    else:
        _run_cold(caps, lengths, row_b, row_L, supply, rows, out)


@njit(cache=True, parallel=True)
def _run_parallel(
    caps, lengths, row_b, row_L, supply, order, kind, t0, t1, t2, t3, worker_ptr, worker_tasks, out
):  # pragma: no cover
    for w in prange(worker_ptr.shape[0] - 1):
        for q in range(worker_ptr[w], worker_ptr[w + 1]):
            t = worker_tasks[q]
            _run_task(caps, lengths, row_b, row_L, supply, order, kind[t], t0[t], t1[t], t2[t], t3[t], out)


@njit(cache=True)
def _run_serial(caps, lengths, row_b, row_L, supply, order, kind, t0, t1, t2, t3, out):  # pragma: no cover
    for t in range(kind.shape[0]):
        _run_task(caps, lengths, row_b, row_L, supply, order, kind[t], t0[t], t1[t], t2[t], t3[t], out)


def _sweep_order(supply: np.ndarray) -> np.ndarray:
    """Rows in an order that keeps consecutive rows alike (a sweep's work grows with how much the
    rows change): grouped by their largest entry -- the source position, for residual-mixed rows,
    so e.g. the heads of one source follow each other. supply: (R, N) -> (R,)."""
    return np.argsort(np.argmax(supply, axis=1), kind="stable")


def _plan(row_b: np.ndarray, row_L: np.ndarray, lengths: np.ndarray, supply: np.ndarray):
    """Tasks and their estimated costs (~ arc visits). Rows must be sorted by (row_b, row_L).

    Rows of layers 1-2 (closed forms) come first in `order`, then the rows solved one problem at
    a time, then each swept (sample, layer) with its rows in sweep order. Returns (order, kind, t0,
    t1, t2, t3, cost); a task works on the rows order[t0:t1] (see `_run_task`).
    """
    n_rows = row_b.shape[0]
    cut = np.flatnonzero((np.diff(row_b) != 0) | (np.diff(row_L) != 0)) + 1
    starts = np.concatenate(([0], cut)).astype(np.int64)
    ends = np.append(starts[1:], n_rows).astype(np.int64)
    g_rows = ends - starts
    g_L = row_L[starts]
    g_n = lengths[row_b[starts]].astype(np.int64)
    g_kind = np.where(g_L <= 2, 0, np.where((g_rows >= SWEEP_ROWS_MIN) & (g_L >= SWEEP_LAYERS_MIN), 1, 2))
    row_kind = np.repeat(g_kind, g_rows)
    order = np.argsort(row_kind, kind="stable").astype(np.int64)  # stable: still sorted by (b, L)
    n_of = np.repeat(g_n, g_rows)[order].astype(float)
    depth = np.maximum(np.repeat(g_L, g_rows)[order] - 2, 1).astype(float)
    # rough cost of a row over all its sinks: n^2 (closed form), or n problems of ~1-2 passes
    # over the (L-2) n^2 arcs
    row_cost = np.where(np.repeat(g_kind, g_rows)[order] == 0, n_of * n_of, n_of * depth * n_of * n_of)
    kind, t0, t1, t2, t3, cost = [], [], [], [], [], []
    bounds = np.searchsorted(row_kind[order], [0, 1, 2, 3])
    csum = np.concatenate(([0.0], np.cumsum(row_cost)))
    for k, step in ((0, ROWS_PER_TASK), (2, ROWS_PER_COLD)):
        lo, hi = bounds[k], bounds[k + 1]
        for r in range(lo, hi, step):
            kind.append(k), t0.append(r), t1.append(min(hi, r + step)), t2.append(0), t3.append(0)
            cost.append(csum[min(hi, r + step)] - csum[r])
    pos = bounds[1]
    for g in np.flatnonzero(g_kind == 1):
        s, e, n = int(starts[g]), int(ends[g]), int(g_n[g])
        order[pos : pos + e - s] = s + _sweep_order(supply[s:e])
        per = (e - s) * float(max(g_L[g] - 2, 1)) * n * n  # a sweep: ~ one pass over the arcs per row
        for j in range(0, n, SWEEP_CHUNK):
            j1 = min(n, j + SWEEP_CHUNK)
            kind.append(1), t0.append(pos), t1.append(pos + e - s), t2.append(j), t3.append(j1)
            cost.append(per * (j1 - j))
        pos += e - s
    as_i64 = lambda v: np.asarray(v, dtype=np.int64)  # noqa: E731
    return order, as_i64(kind), as_i64(t0), as_i64(t1), as_i64(t2), as_i64(t3), np.asarray(cost, float)


def _assign(cost: np.ndarray, n_workers: int) -> tuple[np.ndarray, np.ndarray]:
    """Longest task first onto the least loaded worker."""
    order = np.argsort(-cost, kind="stable")
    load = np.zeros(n_workers)
    assigned: list[list[int]] = [[] for _ in range(n_workers)]
    for t in order:
        w = int(np.argmin(load))
        assigned[w].append(int(t))
        load[w] += cost[t]
    worker_ptr = np.zeros(n_workers + 1, dtype=np.int64)
    worker_ptr[1:] = np.cumsum([len(a) for a in assigned])
    worker_tasks = np.asarray([t for a in assigned for t in a], dtype=np.int64)
    return worker_ptr, worker_tasks


def _rounds(cost: np.ndarray, n_rounds: int) -> list[np.ndarray]:
    """Task ids, longest first, cut into up to `n_rounds` rounds of about equal estimated work."""
    order = np.argsort(-cost, kind="stable")
    csum = np.cumsum(cost[order])
    cuts = np.searchsorted(csum, np.linspace(0.0, csum[-1], n_rounds + 1)[1:-1], side="right")
    return [r for r in np.split(order, np.unique(cuts)) if r.size]


def _execute(caps, lengths, row_b, row_L, supply, plan, tasks: np.ndarray, out: np.ndarray) -> None:
    """Run the plan's tasks `tasks` (ids), on numba's threads when there is enough work."""
    order, kind, t0, t1, t2, t3, cost = plan
    n_workers = numba.get_num_threads() if HAVE_NUMBA else 1
    if n_workers <= 1 or tasks.shape[0] == 1 or cost[tasks].sum() < SERIAL_WORK:
        sub = [np.ascontiguousarray(v[tasks]) for v in (kind, t0, t1, t2, t3)]
        _run_serial(caps, lengths, row_b, row_L, supply, order, *sub, out)
    else:
        worker_ptr, local = _assign(cost[tasks], n_workers)
        worker_tasks = np.ascontiguousarray(tasks[local], dtype=np.int64)
        _run_parallel(
            caps, lengths, row_b, row_L, supply, order, kind, t0, t1, t2, t3, worker_ptr, worker_tasks, out
        )


def layered_max_flow(
    caps: np.ndarray,
    lengths: np.ndarray,
    row_b: np.ndarray,
    row_L: np.ndarray,
    supply: np.ndarray,
    *,
    progress: bool | None = None,
) -> np.ndarray:
    """Max-flow values from a source with out-capacities `supply[r]` to every input node.

    caps: (B, Lmax, N, N) float64, caps[b, l] = capacity matrix of layer l+1, positions of sample b
    packed at the front (0..lengths[b]-1). Row r is a source at 1-based layer row_L[r] of sample
    row_b[r] whose edges to layer row_L[r]-1 have capacities supply[r] (N,), e.g. caps[b, L-1, s].
    Rows must be sorted by (row_b, row_L). Returns (R, N) float64: the max-flow value from that
    source to input node j, for j < lengths[row_b[r]], and 0 beyond.

    progress: a tqdm bar (stderr) with the remaining time; None = only when the estimated work
    exceeds PROGRESS_WORK. The bar changes the order tasks run in, never a value.
    """
    caps = np.ascontiguousarray(caps, dtype=np.float64)
    supply = np.ascontiguousarray(supply, dtype=np.float64)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    row_b = np.ascontiguousarray(row_b, dtype=np.int64)
    row_L = np.ascontiguousarray(row_L, dtype=np.int64)
    out = np.zeros((row_b.shape[0], caps.shape[-1]), dtype=np.float64)
    if row_b.shape[0] == 0:
        return out
    plan = _plan(row_b, row_L, lengths, supply)
    cost = plan[-1]
    if not (cost.sum() > PROGRESS_WORK if progress is None else progress):
        _execute(caps, lengths, row_b, row_L, supply, plan, np.arange(cost.shape[0]), out)
        return out
    from tqdm.auto import tqdm

    bar_format = "{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]"
    with tqdm(total=float(cost.sum()), desc="attention flow", bar_format=bar_format, leave=False) as bar:
        for tasks in _rounds(cost, PROGRESS_ROUNDS):
            _execute(caps, lengths, row_b, row_L, supply, plan, tasks, out)
            bar.update(float(cost[tasks].sum()))
    return out


def warm_up() -> None:
    """Compile (or load from the on-disk cache) the kernels on a tiny input."""
    caps = np.tile(np.full((3, 3), 1.0 / 3.0), (1, 3, 1, 1))  # (1, 3, 3, 3)
    layered_max_flow(caps, np.array([3]), np.array([0]), np.array([3]), caps[0, 2, :1].copy())
