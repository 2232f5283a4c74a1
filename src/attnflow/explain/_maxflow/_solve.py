"""One max-flow problem from zero flow (`_solve`), and warm-started sweeps of problems (`_sweep`)."""

from __future__ import annotations

import numpy as np

from ._greedy import _greedy
from ._jit import _WE, _WG, RESIDUAL_EPS, STOP_TOL, njit
from ._push_relabel import _push_relabel
from ._residual import _reset, _sync_bits


@njit(cache=True)
def _solve(C, a, bcap, K, n, ws, hint=np.inf, have_rho=False):  # pragma: no cover - compiled
    """Max flow from supplies `a` on node layer K to sink capacities `bcap` on node layer 1, from
    zero flow, leaving the workspace at zero flow again.

    C[t][i, k] is the capacity of the arc (layer t+2, i) -> (layer t+1, k), t = 0..K-2. The supply
    starts as excess on layer K (the source itself is implicit: its edges stay saturated, which is
    all phase one of push-relabel needs). The workspace must be at zero flow on entry (`_reset`).
    Stops at the smallest of the cut bounds min(sum a, sum b, sum_k min(a_k, rho_k)) (`_greedy`)
    and `hint`, an upper bound the caller knows (`_top_down`); `have_rho`: see `_greedy`.
    """
    ua = 0.0
    ub = 0.0
    for k in range(n):
        ua += a[k]
        ub += bcap[k]
    upper = min(ua, ub, hint)
    if upper <= RESIDUAL_EPS:
        return 0.0
    value, n_touched, bound = _greedy(C, a, bcap, K, n, ws, have_rho)
    upper = min(upper, bound)
    if value >= upper - STOP_TOL:  # the greedy pass reached a bound; it wrote no residual bits
        _reset(C, K, n, ws, n_touched, False)
        return value
    _sync_bits(C, K, n, ws, n_touched)
    value, n_touched = _push_relabel(C, bcap, K, n, ws, True, n_touched, value, upper)
    _reset(C, K, n, ws, n_touched)
    return value


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
