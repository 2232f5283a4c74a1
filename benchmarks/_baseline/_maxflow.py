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
* L >= 3: highest-label push-relabel on dense layer arrays (float64): labels start at the layer
  index (exact in the zero flow); global relabelling, the gap heuristic; relabels reuse the
  lowest label seen while scanning (no second scan); a look-ahead pushes from layer 2 straight
  through layer 1 into the sink; and an exact early stop: the two trivial cuts give
  value <= U = min(sum(a), sum(b)), so a solve ends as soon as the sink holds U (most do).
  Each problem runs from the end with the smaller trivial cut (the reversed network is the same
  kind of network with transposed matrices), so the supply pushed can usually all arrive.
* Problems are grouped by (sample, layer); groups are split into tasks of ROWS_PER_TASK sources
  and spread over numba's threads (longest first).

Exactness: arcs with residual <= RESIDUAL_EPS count as saturated and excess <= RESIDUAL_EPS as
zero, so the value found is within (#arcs + #nodes) * RESIDUAL_EPS + STOP_TOL of the true maximum
(1e-13 per arc: < 3e-8 for 12 layers x 128 tokens). No integer rounding.

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


__all__ = ["RESIDUAL_EPS", "STOP_TOL", "layered_max_flow", "warm_up"]

# An arc whose residual capacity is at most this is treated as saturated; excess at most this as zero.
RESIDUAL_EPS = 1e-13
# Stop as soon as the sink holds the trivial upper bound U minus this (the value cannot exceed U).
STOP_TOL = 1e-12
# Global relabel after this many (x arcs of the network) units of local relabel work.
GLOBAL_RELABEL_FREQ = 1.0
# Rows (sources) per parallel task: small enough to balance two threads on one 12-layer input.
ROWS_PER_TASK = 16


@njit(cache=True)
def _global_relabel(M, MT, F, FT, g, bcap, K, n, d, queue):  # pragma: no cover - compiled
    """Exact distance-to-sink labels by breadth-first search on the residual graph."""
    nn = K * n
    inf = nn + 1  # a path to the sink visits at most nn nodes, so nn + 1 means "cannot reach"
    for x in range(nn):
        d[x] = inf
    qt = 0
    for k in range(n):
        if bcap[k] - g[k] > RESIDUAL_EPS:
            d[k] = 1
            queue[qt] = k
            qt += 1
    qh = 0
    while qh < qt:
        x = queue[qh]
        qh += 1
        m = x // n
        k = x - m * n
        dx = d[x] + 1
        if m + 1 <= K - 1:  # forward arcs (m+1, i) -> (m, k) with residual capacity
            base = (m + 1) * n
            for i in range(n):
                u = base + i
                if d[u] == inf and MT[m, k, i] - FT[m, k, i] > RESIDUAL_EPS:
                    d[u] = dx
                    queue[qt] = u
                    qt += 1
        if m >= 1:  # reverse arcs (m-1, i) -> (m, k): flow on (m, k) -> (m-1, i)
            base = (m - 1) * n
            for i in range(n):
                u = base + i
                if d[u] == inf and F[m - 1, k, i] > RESIDUAL_EPS:
                    d[u] = dx
                    queue[qt] = u
                    qt += 1


@njit(cache=True)
def _rebuild_buckets(e, d, cur, mind, cnt, bhead, bnext, nn):  # pragma: no cover - compiled
    """Active-node buckets and label counts from scratch; returns the highest active label."""
    for b in range(nn + 2):
        bhead[b] = -1
        cnt[b] = 0
    hi = 0
    for z in range(nn):
        cur[z] = 0
        mind[z] = nn + 1
        cnt[d[z]] += 1
        if d[z] <= nn and e[z] > RESIDUAL_EPS:
            bnext[z] = bhead[d[z]]
            bhead[d[z]] = z
            if d[z] > hi:
                hi = d[z]
    return hi


@njit(cache=True)
def _gap(d, cnt, nn, level):  # pragma: no cover - compiled
    """No node has label `level`: nodes above it cannot reach the sink; lift them out."""
    for z in range(nn):
        if d[z] > level and d[z] <= nn:
            cnt[d[z]] -= 1
            d[z] = nn + 1
            cnt[nn + 1] += 1


@njit(cache=True)
def _solve(
    M, MT, a, bcap, K, n, F, FT, e, g, d, cur, mind, bhead, bnext, queue, cnt, touched
):  # pragma: no cover
    """Max flow from supplies `a` on node layer K to sink capacities `bcap` on node layer 1.

    Node layer m + 1 (m = 0..K-1) holds nodes m * n + k. M[t][i, k] is the capacity of the arc
    (layer t+2, i) -> (layer t+1, k), t = 0..K-2, and MT[t] = M[t].T. F / FT hold the flow on those
    arcs (F[t][i, k] = FT[t][k, i]), e the excess, g[k] the flow (layer 1, k) -> sink; all zero on
    entry and returned to zero on exit (only the entries listed in `touched` are cleared).
    Highest-label push-relabel; labels start at the layer index, the exact distances to the sink
    in the zero flow, and the supply starts as excess on layer K (the source itself is implicit:
    its edges stay saturated, which is all phase one of push-relabel needs).
    """
    nn = K * n
    inf = nn + 1  # label of nodes that cannot reach the sink; a path visits at most nn nodes
    ua = 0.0
    ub = 0.0
    for k in range(n):
        ua += a[k]
        ub += bcap[k]
    upper = min(ua, ub)
    if upper <= RESIDUAL_EPS:
        return 0.0
    top = (K - 1) * n
    for k in range(n):
        if a[k] > RESIDUAL_EPS:
            e[top + k] = a[k]
    n_touched = 0
    overflow = False
    # a layer-1 node without sink capacity cannot reach the sink (no reverse arcs exist yet)
    for k in range(n):
        d[k] = 1 if bcap[k] > RESIDUAL_EPS else inf
    for m in range(1, K):
        for k in range(n):
            d[m * n + k] = m + 1
    hi = _rebuild_buckets(e, d, cur, mind, cnt, bhead, bnext, nn)
    value = 0.0
    relabel_work = 0
    relabel_budget = int(GLOBAL_RELABEL_FREQ * (K * n * n + n))
    while hi > 0:
        x = bhead[hi]
        if x == -1:
            hi -= 1
            continue
        bhead[hi] = bnext[x]
        m = x // n
        k = x - m * n
        dx = d[x]
        # Discharge x. Arcs 0..n-1: forward (for a layer-1 node: its sink arc), n..2n-1: reverse.
        # mind[x] is the lowest label seen on a residual, inadmissible arc since cur[x] was reset
        # (and on arcs that gained residual since): a lower bound of the exact relabel minimum,
        # so relabelling to max(d + 1, mind + 1) needs no second scan and stays valid.
        while True:
            ar = cur[x]
            if ar >= 2 * n:  # relabel
                dold = dx
                dx = min(max(dx, mind[x]) + 1, inf)
                cnt[dold] -= 1
                if cnt[dold] == 0:
                    _gap(d, cnt, nn, dold)
                    dx = inf
                d[x] = dx
                cnt[dx] += 1
                cur[x] = 0
                mind[x] = inf
                relabel_work += 2 * n
                if dx >= inf:
                    break
                continue
            if ar < n:
                if m == 0:
                    r = bcap[k] - g[k]
                    if r > RESIDUAL_EPS:
                        if dx == 1:
                            delta = min(e[x], r)
                            g[k] += delta
                            e[x] -= delta
                            value += delta
                            if e[x] <= RESIDUAL_EPS:
                                break
                        else:
                            mind[x] = 0
                    ar = n - 1  # a layer-1 node has a single forward arc
                else:
                    y = (m - 1) * n + ar
                    r = M[m - 1, k, ar] - F[m - 1, k, ar]
                    if r > RESIDUAL_EPS:
                        dy = d[y]
                        if dy == dx - 1:
                            look = m == 1 and dx == 2
                            if look:
                                # look-ahead: push through (layer 1, ar) straight into the sink
                                delta = min(e[x], r, bcap[ar] - g[ar])
                            else:
                                delta = min(e[x], r)
                            if F[m - 1, k, ar] == 0.0:
                                if n_touched < touched.shape[0]:
                                    touched[n_touched] = ((m - 1) * n + k) * n + ar
                                    n_touched += 1
                                else:
                                    overflow = True
                            F[m - 1, k, ar] += delta
                            FT[m - 1, ar, k] += delta
                            e[x] -= delta
                            if dx < mind[y]:
                                mind[y] = dx  # y -> x gained residual
                            if look:
                                g[ar] += delta
                                value += delta
                                if bcap[ar] - g[ar] <= RESIDUAL_EPS:
                                    # (layer 1, ar) lost its sink arc: raise its label now (valid:
                                    # its only residual arcs lead back to layer 2)
                                    dmin = inf
                                    for i in range(n):
                                        if d[n + i] < dmin and FT[0, ar, i] > RESIDUAL_EPS:
                                            dmin = d[n + i]
                                    cnt[1] -= 1
                                    d[y] = min(dmin + 1, inf)
                                    cnt[d[y]] += 1
                                    cur[y] = 0
                                    mind[y] = inf
                                    if cnt[1] == 0:
                                        _gap(d, cnt, nn, 1)
                                        dx = inf
                                        break
                            else:
                                ey = e[y]
                                e[y] = ey + delta
                                if ey <= RESIDUAL_EPS and ey + delta > RESIDUAL_EPS:
                                    bnext[y] = bhead[dy]
                                    bhead[dy] = y
                                    if dy > hi:
                                        hi = dy
                            if e[x] <= RESIDUAL_EPS:
                                break
                            if r - delta > RESIDUAL_EPS and d[y] < mind[x]:
                                mind[x] = d[y]  # the arc keeps residual but y was relabelled
                        elif dy < mind[x]:
                            mind[x] = dy
            else:
                i = ar - n
                if m + 1 <= K - 1:
                    y = (m + 1) * n + i
                    r = FT[m, k, i]
                    if r > RESIDUAL_EPS:
                        dy = d[y]
                        if dy == dx - 1:
                            delta = min(e[x], r)
                            F[m, i, k] -= delta
                            FT[m, k, i] -= delta
                            e[x] -= delta
                            if dx < mind[y]:
                                mind[y] = dx  # y -> x gained residual
                            ey = e[y]
                            e[y] = ey + delta
                            if ey <= RESIDUAL_EPS and ey + delta > RESIDUAL_EPS:
                                bnext[y] = bhead[dy]
                                bhead[dy] = y
                                if dy > hi:
                                    hi = dy
                            if e[x] <= RESIDUAL_EPS:
                                break
                        elif dy < mind[x]:
                            mind[x] = dy
                else:
                    ar = 2 * n - 1  # top layer: no reverse arcs (the source is implicit)
            cur[x] = ar + 1
        d[x] = dx
        if e[x] > RESIDUAL_EPS and dx < inf:
            bnext[x] = bhead[dx]
            bhead[dx] = x
            if dx > hi:
                hi = dx
        if value >= upper - STOP_TOL:
            break  # the trivial cut is reached: this is the maximum
        if relabel_work > relabel_budget:
            relabel_work = 0
            _global_relabel(M, MT, F, FT, g, bcap, K, n, d, queue)
            hi = _rebuild_buckets(e, d, cur, mind, cnt, bhead, bnext, nn)
    # return the workspace to zero flow
    if overflow:
        F[: K - 1] = 0.0
        FT[: K - 1] = 0.0
    else:
        for t in range(n_touched):
            idx = touched[t]
            row = idx // n
            kk = idx - row * n
            m1 = row // n
            i = row - m1 * n
            F[m1, i, kk] = 0.0
            FT[m1, kk, i] = 0.0
    for x in range(nn):
        e[x] = 0.0
    for k in range(n):
        g[k] = 0.0
    return value


@njit(cache=True)
def _run_task(caps, b, L, n, r0, r1, supply, out):  # pragma: no cover - compiled
    """Rows r0..r1-1 (same sample b, source layer L): max flow from each supply row to every sink.

    Each (row, sink) problem runs from the end with the smaller trivial cut: forward (supply on
    layer L-1, sink capacities = column j of A_1) or on the reversed network (transposed matrices,
    supply = column j of A_1, sink capacities = the row). All problems share one workspace.
    """
    if L == 1:
        for r in range(r0, r1):
            for j in range(n):
                out[r, j] = supply[r, j]
        return
    if L == 2:
        for r in range(r0, r1):
            for j in range(n):
                v = 0.0
                for k in range(n):
                    v += min(supply[r, k], caps[b, 0, k, j])
                out[r, j] = v
        return
    K = L - 1
    M = np.empty((K - 1, n, n))  # forward middle network, node layer t+2 -> t+1
    MT = np.empty((K - 1, n, n))
    for t in range(K - 1):
        for i in range(n):
            for k in range(n):
                c = caps[b, t + 1, i, k]
                M[t, i, k] = c
                MT[t, k, i] = c
    Mr = np.empty((K - 1, n, n))  # reversed network: Mr[t] = MT[K-2-t]
    MTr = np.empty((K - 1, n, n))
    for t in range(K - 1):
        Mr[t] = MT[K - 2 - t]
        MTr[t] = M[K - 2 - t]
    F = np.zeros((K - 1, n, n))
    FT = np.zeros((K - 1, n, n))
    nn = K * n
    e = np.zeros(nn)
    g = np.zeros(n)
    d = np.empty(nn, np.int64)  # labels
    cur = np.empty(nn, np.int64)  # current arc
    mind = np.empty(nn, np.int64)  # lowest label seen this pass
    bnext = np.empty(nn, np.int64)
    queue = np.empty(nn, np.int64)
    bhead = np.empty(nn + 2, np.int64)  # active nodes by label 0..nn+1
    cnt = np.empty(nn + 2, np.int64)  # nodes per label (gap heuristic)
    touched = np.empty(8 * nn + 1024, np.int64)  # arcs whose flow became nonzero
    a = np.empty(n)
    bcol = np.empty(n)
    for r in range(r0, r1):
        for k in range(n):
            a[k] = supply[r, k]
        sa = a.sum()
        for j in range(n):
            for k in range(n):
                bcol[k] = caps[b, 0, k, j]
            if bcol.sum() < sa:
                out[r, j] = _solve(
                    Mr, MTr, bcol, a, K, n, F, FT, e, g, d, cur, mind, bhead, bnext, queue, cnt, touched
                )
            else:
                out[r, j] = _solve(
                    M, MT, a, bcol, K, n, F, FT, e, g, d, cur, mind, bhead, bnext, queue, cnt, touched
                )


@njit(cache=True, parallel=True)
def _run_tasks(
    caps, lengths, row_b, row_L, supply, task_r0, task_r1, worker_ptr, worker_tasks, out
):  # pragma: no cover
    for w in prange(worker_ptr.shape[0] - 1):
        for q in range(worker_ptr[w], worker_ptr[w + 1]):
            t = worker_tasks[q]
            r0 = task_r0[t]
            b = row_b[r0]
            _run_task(caps, b, row_L[r0], lengths[b], r0, task_r1[t], supply, out)


def _plan(row_b: np.ndarray, row_L: np.ndarray, lengths: np.ndarray, n_workers: int):
    """Tasks = runs of <= ROWS_PER_TASK rows sharing (sample, layer); longest-first onto workers."""
    n_rows = row_b.shape[0]
    starts = [0]
    for r in range(1, n_rows):
        if row_b[r] != row_b[r - 1] or row_L[r] != row_L[r - 1] or r - starts[-1] >= ROWS_PER_TASK:
            starts.append(r)
    r0 = np.asarray(starts, dtype=np.int64)
    r1 = np.append(r0[1:], n_rows).astype(np.int64)
    n = lengths[row_b[r0]].astype(np.float64)
    layers = row_L[r0].astype(np.float64)
    # rough cost per (row, sink): ~n^2 for L >= 3 (the work concentrates in the bottom two layers,
    # measured flat beyond L = 4), closed forms for L <= 2
    cost = (r1 - r0) * n * np.where(layers >= 3, np.minimum(layers - 2, 2.5) * n * n, n)
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
    return r0, r1, worker_ptr, worker_tasks


def layered_max_flow(
    caps: np.ndarray, lengths: np.ndarray, row_b: np.ndarray, row_L: np.ndarray, supply: np.ndarray
) -> np.ndarray:
    """Max-flow values from a source with out-capacities `supply[r]` to every input node.

    caps: (B, Lmax, N, N) float64, caps[b, l] = capacity matrix of layer l+1, positions of sample b
    packed at the front (0..lengths[b]-1). Row r is a source at 1-based layer row_L[r] of sample
    row_b[r] whose edges to layer row_L[r]-1 have capacities supply[r] (N,), e.g. caps[b, L-1, s].
    Rows must be sorted by (row_b, row_L). Returns (R, N) float64: the max-flow value from that
    source to input node j, for j < lengths[row_b[r]], and 0 beyond.
    """
    caps = np.ascontiguousarray(caps, dtype=np.float64)
    supply = np.ascontiguousarray(supply, dtype=np.float64)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    row_b = np.ascontiguousarray(row_b, dtype=np.int64)
    row_L = np.ascontiguousarray(row_L, dtype=np.int64)
    out = np.zeros((row_b.shape[0], caps.shape[-1]), dtype=np.float64)
    if row_b.shape[0] == 0:
        return out
    n_workers = numba.get_num_threads() if HAVE_NUMBA else 1
    r0, r1, worker_ptr, worker_tasks = _plan(row_b, row_L, lengths, n_workers)
    _run_tasks(caps, lengths, row_b, row_L, supply, r0, r1, worker_ptr, worker_tasks, out)
    return out


def warm_up() -> None:
    """Compile (or load from the on-disk cache) the kernels on a tiny input."""
    caps = np.tile(np.full((3, 3), 1.0 / 3.0), (1, 3, 1, 1))  # (1, 3, 3, 3)
    layered_max_flow(caps, np.array([3]), np.array([0]), np.array([3]), caps[0, 2, :1].copy())
