"""Highest-label push-relabel on the layered network (phase one: a maximum preflow value)."""

from __future__ import annotations

from ._jit import (
    _ONE,
    _WBHEAD,
    _WBNEXT,
    _WCNT,
    _WD,
    _WDOWN,
    _WDOWNT,
    _WE,
    _WF,
    _WG,
    _WLAB,
    _WLAY,
    _WPOS,
    _WTOUCHED,
    _WUP,
    _WUPT,
    _ZERO,
    RESIDUAL_EPS,
    STOP_TOL,
    _tz,
    njit,
)
from ._labels import _buckets, _gap, _global_relabel, _lowest, _move
from ._residual import _arc_bits

# Global relabel after this many relabels per node of the network (a global relabel costs about
# as much as one relabel per node here).
GLOBAL_RELABEL_FREQ = 1.0


@njit(cache=True)
def _push_relabel(C, bcap, K, n, ws, track, n_touched, value, upper):  # pragma: no cover
    """Highest-label push-relabel from the current preflow until no active node can reach the sink
    or the sink holds `upper` - STOP_TOL. Starts with a global relabel.

    Returns (value, number of arcs listed in `touched`, -1 once it overflowed).
    """
    F, down, downT, up, upT = ws[_WF], ws[_WDOWN], ws[_WDOWNT], ws[_WUP], ws[_WUPT]
    e, g, d, lab, cnt = ws[_WE], ws[_WG], ws[_WD], ws[_WLAB], ws[_WCNT]
    bhead, bnext, touched, lay, pos = ws[_WBHEAD], ws[_WBNEXT], ws[_WTOUCHED], ws[_WLAY], ws[_WPOS]
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
