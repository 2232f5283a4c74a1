"""Tasks: the kernels one call runs, on the calling thread or on numba's threads."""

from __future__ import annotations

import numpy as np

from ._greedy import _order_desc
from ._jit import _WKIDS, _WRHO, njit, prange
from ._residual import _reset, _workspace
from ._solve import _solve, _sweep

# Layer-2 rows (closed form) computed together against one column of A_1 (see `_run_closed`).
CLOSED_BLOCK = 8


@njit(cache=True)
def _fill_network(caps, b, L, n, reverse, C):  # pragma: no cover - compiled
    """Middle network of source layer L into C: C[t] = A_{t+2} (t = 0..L-3); reversed:
    C[t] = A_{L-1-t}^T."""
    for t in range(L - 2):
        for i in range(n):
            for k in range(n):
                if reverse:
                    C[t, i, k] = caps[b, L - 2 - t, k, i]
                else:
                    C[t, i, k] = caps[b, t + 1, i, k]
    return C


@njit(cache=True)
def _network(caps, b, L, n, reverse):  # pragma: no cover - compiled
    """Middle network of source layer L (see `_fill_network`), newly allocated."""
    return _fill_network(caps, b, L, n, reverse, np.empty((max(L - 2, 1), n, n)))


@njit(cache=True)
def _top_down(C, a, K, n, sigma):  # pragma: no cover - compiled
    """sigma[m, k]: what node (m+1, k) could receive from the supply a on layer K with the network
    to itself: sigma[K-1] = a, sigma[m-1, k] = sum_i min(sigma[m, i], C[m-1, i, k]). Every unit
    reaching sink j passes some layer-1 node k, so value_j <= sum_k min(sigma[0, k], b_j[k]): one
    O(L n^2) pass per source bounds all n sinks."""
    for k in range(n):
        sigma[K - 1, k] = a[k]
    for m in range(K - 1, 0, -1):
        for k in range(n):
            sigma[m - 1, k] = 0.0
        for i in range(n):
            s = sigma[m, i]
            for k in range(n):
                sigma[m - 1, k] += min(s, C[m - 1, i, k])


@njit(cache=True)
def _min_dot(x, y, n):  # pragma: no cover - compiled
    """sum_k min(x_k, y_k) over k < n, in four interleaved partial sums (independent chains the
    CPU can overlap; the order of the additions is fixed, so the result is deterministic)."""
    v0 = v1 = v2 = v3 = 0.0
    k = 0
    while k + 4 <= n:
        v0 += min(x[k], y[k])
        v1 += min(x[k + 1], y[k + 1])
        v2 += min(x[k + 2], y[k + 2])
        v3 += min(x[k + 3], y[k + 3])
        k += 4
    while k < n:
        v0 += min(x[k], y[k])
        k += 1
    return (v0 + v1) + (v2 + v3)


@njit(cache=True)
def _run_closed(caps, lengths, row_b, row_L, supply, rows, out):  # pragma: no cover - compiled
    """Rows of source layer 1 or 2, in closed form: L = 1: the supply row itself; L = 2:
    value_j = sum_k min(a_k, A_1[k, j]) (the paths s -> (1, k) -> j share no edge).

    Layer-2 rows of one sample go in blocks of CLOSED_BLOCK against A_1 transposed (contiguous
    columns), so each column is read once per block: at T = 2048 this is the n^3 part of a call.
    """
    N = caps.shape[-1]
    At = np.empty((N, N))  # A_1 of sample tb, transposed
    tb = -1
    R = rows.shape[0]
    q = 0
    while q < R:
        r = rows[q]
        b = row_b[r]
        n = lengths[b]
        if row_L[r] == 1:
            for j in range(n):
                out[r, j] = supply[r, j]
            q += 1
            continue
        if b != tb:
            for k in range(n):
                for j in range(n):
                    At[j, k] = caps[b, 0, k, j]
            tb = b
        q1 = q + 1
        while q1 < R and q1 - q < CLOSED_BLOCK and row_b[rows[q1]] == b and row_L[rows[q1]] == 2:
            q1 += 1
        for j in range(n):
            col = At[j]
            for p in range(q, q1):
                out[rows[p], j] = _min_dot(supply[rows[p]], col, n)
        q = q1


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
def _rho_down(caps, b, j, n, depth, K, rho_f, ord_f):  # pragma: no cover - compiled
    """rho_f[j, m] for m = depth[j]..K-1: what node (m+1, k) of sample b could pass on to input j
    (`_greedy`'s rho on the forward network; it does not depend on the source layer, so the rows
    of every layer of a sample share it): rho_f[j, 0] = A_1[:, j],
    rho_f[j, m, i] = sum_k min(A_{m+1}[i, k], rho_f[j, m-1, k]); and ord_f[j, m], the positions
    by decreasing rho_f[j, m] (`_greedy`'s children order, shared the same way)."""
    for m in range(depth[j], K):
        if m == 0:
            for k in range(n):
                rho_f[j, 0, k] = caps[b, 0, k, j]
        else:
            for i in range(n):
                v = 0.0
                for k in range(n):
                    v += min(caps[b, m, i, k], rho_f[j, m - 1, k])
                rho_f[j, m, i] = v
        _order_desc(rho_f[j, m], ord_f[j, m], n)
    depth[j] = max(depth[j], K)


@njit(cache=True)
def _run_cold(caps, lengths, row_b, row_L, supply, rows, j0, j1, out):  # pragma: no cover - compiled
    """Each (row, sink) problem on its own (from a greedy start), for rows sorted by (sample,
    layer) and the sinks j0 <= j < min(j1, n): on the forward network or, when the sink column is
    the smaller trivial cut, on the reversed one. Shared, not recomputed: per sample, the forward
    rho of each sink (`_rho_down`); per row, its top-down capacities (`_top_down`), which bound
    every sink and are the reversed network's rho; and the children orders of both. Workspaces
    are kept per depth while the length stays the same (no allocation per sample). Each problem
    starts from zero flow, so the values do not depend on how the sinks are split into tasks."""
    N = caps.shape[-1]
    Kmax = max(caps.shape[1] - 1, 1)
    n = -1
    b = -1
    L = -1
    K = 1
    a = np.empty(N)
    bcol = np.empty(N)
    have = np.zeros(Kmax + 1, np.bool_)  # a forward / reversed network and workspace of depth K exist
    have_r = np.zeros(Kmax + 1, np.bool_)
    no_net = np.empty((1, 1, 1))
    no_space = _workspace(1, 1)  # placeholders: the real ones are made when a depth first occurs
    nets_f = [no_net for _ in range(Kmax + 1)]
    nets_r = [no_net for _ in range(Kmax + 1)]
    spaces_f = [no_space for _ in range(Kmax + 1)]
    spaces_r = [no_space for _ in range(Kmax + 1)]
    Cf, Cr, wsf, wsr = nets_f[0], nets_r[0], spaces_f[0], spaces_r[0]
    rho_f = np.empty((1, 1, 1))
    ord_f = np.empty((1, 1, 1), np.int64)
    depth = np.zeros(N, np.int64)
    sigma = np.empty((Kmax, N))
    ord_s = np.empty((Kmax, N), np.int64)  # the row's children orders on the reversed network
    reversed_ready = False
    sorted_sigma = False
    for r in rows:
        new_sample = row_b[r] != b
        if new_sample:
            b = row_b[r]
            if lengths[b] != n:
                n = lengths[b]
                have[:] = False
                have_r[:] = False
                rho_f = np.empty((n, Kmax, n))
                ord_f = np.empty((n, Kmax, n), np.int64)
            depth[:] = 0
        if new_sample or row_L[r] != L:  # a new network
            L = row_L[r]
            K = L - 1
            if not have[K]:
                nets_f[K] = np.empty((max(K - 1, 1), n, n))
                spaces_f[K] = _workspace(K, n)
                have[K] = True
            Cf, wsf = nets_f[K], spaces_f[K]
            _fill_network(caps, b, L, n, False, Cf)
            _reset(Cf, K, n, wsf, -1)
            reversed_ready = False
        sa = 0.0
        for k in range(n):
            a[k] = supply[r, k]
            sa += a[k]
        _top_down(Cf, a, K, n, sigma)
        sorted_sigma = False
        for j in range(j0, min(j1, n)):
            sb = 0.0
            hint = 0.0
            for k in range(n):
                bcol[k] = caps[b, 0, k, j]
                sb += bcol[k]
                hint += min(sigma[0, k], bcol[k])
            if sb < sa:
                if not reversed_ready:  # built (and its workspace made) when first needed
                    if not have_r[K]:
                        nets_r[K] = np.empty((max(K - 1, 1), n, n))
                        spaces_r[K] = _workspace(K, n)
                        have_r[K] = True
                    Cr, wsr = nets_r[K], spaces_r[K]
                    _fill_network(caps, b, L, n, True, Cr)
                    _reset(Cr, K, n, wsr, -1)
                    reversed_ready = True
                if not sorted_sigma:
                    for m in range(1, K):
                        _order_desc(sigma[m], ord_s[m], n)
                    sorted_sigma = True
                rho, kids = wsr[_WRHO], wsr[_WKIDS]  # the reversed network's rho: this row's top-down pass
                for m in range(K):
                    for k in range(n):
                        rho[m, k] = sigma[K - 1 - m, k]
                for m in range(K - 1):
                    for k in range(n):
                        kids[m, k] = ord_s[K - 1 - m, k]
                out[r, j] = _solve(Cr, bcol[:n], a[:n], K, n, wsr, hint, True)
            else:
                _rho_down(caps, b, j, n, depth, K, rho_f, ord_f)
                rho, kids = wsf[_WRHO], wsf[_WKIDS]
                for m in range(K):
                    for k in range(n):
                        rho[m, k] = rho_f[j, m, k]
                for m in range(K - 1):
                    for k in range(n):
                        kids[m, k] = ord_f[j, m, k]
                out[r, j] = _solve(Cf, a[:n], bcol[:n], K, n, wsf, hint, True)


@njit(cache=True)
def _run_task(caps, lengths, row_b, row_L, supply, order, kind, t0, t1, t2, t3, out):  # pragma: no cover
    """One task over the rows order[t0:t1]: kind 0 = closed forms; 1 = sweeps over those rows (one
    sample and layer) for the sinks t2..t3-1; 2 = every (row, sink) problem on its own, for the
    sinks t2..t3-1."""
    rows = order[t0:t1]
    if kind == 0:
        _run_closed(caps, lengths, row_b, row_L, supply, rows, out)
    elif kind == 1:
        b = row_b[rows[0]]
        _run_sweep_sinks(caps, b, row_L[rows[0]], lengths[b], rows, t2, t3, supply, out)
    else:
        _run_cold(caps, lengths, row_b, row_L, supply, rows, t2, t3, out)


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


@njit(cache=True, parallel=True)
def _run_rows(caps, lengths, row_b, row_L, supply, parts, out):  # pragma: no cover - compiled
    """A small call without a plan (rows sorted by (sample, layer), no sweeps): the closed forms,
    then every (row, sink) problem on its own, the sinks cut into `parts` ranges that run on
    numba's threads. The same kernels as the planned path, so the same values."""
    R = row_b.shape[0]
    n_closed = 0
    for r in range(R):
        if row_L[r] <= 2:
            n_closed += 1
    closed = np.empty(n_closed, np.int64)
    cold = np.empty(R - n_closed, np.int64)
    q = 0
    for r in range(R):
        if row_L[r] <= 2:
            closed[q] = r
            q += 1
        else:
            cold[r - q] = r
    N = caps.shape[-1]
    width = (N + parts - 1) // parts
    for p in prange(parts):
        if p == 0 and n_closed > 0:
            _run_closed(caps, lengths, row_b, row_L, supply, closed, out)
        if cold.shape[0] > 0:
            _run_cold(caps, lengths, row_b, row_L, supply, cold, p * width, min(p * width + width, N), out)
