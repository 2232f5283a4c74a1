"""The greedy first preflow: one pass down the layers."""

from __future__ import annotations

from ._jit import _WE, _WF, _WG, _WKIDS, _WNXT, _WRHO, _WSEND, _WTOUCHED, RESIDUAL_EPS, njit


@njit(cache=True)
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
def _greedy(C, a, bcap, K, n, ws, have_rho=False):  # pragma: no cover - compiled
    """A first preflow in one pass down the layers, then the sink arcs (flow only: the residual
    bits are left as they were, see `_sync_bits`).

    rho[m, k] = sum_i min(arc, rho one layer down), rho = the sink capacity on layer 1: what node
    (m+1, k) could pass on to the sink if it had the network to itself (an upper bound). Layer by
    layer, the nodes holding the most send first, each to the children that can pass on the most
    first, never giving a child more than its remaining rho. What a node cannot place stays as its
    excess. On attention graphs this often reaches the trivial bound already, and otherwise leaves
    little for push-relabel.

    rho also bounds the maximum: every unit leaves the supply layer through some node k, which
    passes on at most min(a_k, rho[K-1, k]), so value <= sum_k min(a_k, rho[K-1, k]) -- a cut
    bound that is often tight when the trivial bound min(sum a, sum b) is not.
    With `have_rho` the caller has put rho in the workspace already, and kids[t] = the positions
    by decreasing rho[t] for t < K-1 (both are shared by problems with the same sink side, see
    `_run_cold`). Returns (value, number of arcs listed in `touched` (-1 if
    it overflowed), that bound).
    """
    F, e, g, touched, rho, kids = ws[_WF], ws[_WE], ws[_WG], ws[_WTOUCHED], ws[_WRHO], ws[_WKIDS]
    if not have_rho:
        for k in range(n):
            rho[0, k] = bcap[k]
        for m in range(1, K):
            for i in range(n):
                v = 0.0
                for k in range(n):
                    v += min(C[m - 1, i, k], rho[m - 1, k])
                rho[m, i] = v
        for t in range(K - 1):
            _order_desc(rho[t], kids[t], n)  # most capable first (rho[t] is not yet spent)
    top = (K - 1) * n
    bound = 0.0
    for k in range(n):
        e[top + k] = a[k]
        bound += min(a[k], rho[K - 1, k])
    n_touched = 0
    cap_t = touched.shape[0]
    senders = ws[_WSEND]
    nxt = ws[_WNXT]  # linked list of the children that can still take flow
    for m in range(K - 1, 0, -1):
        t = m - 1
        children = kids[t]
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
    return value, n_touched, bound
