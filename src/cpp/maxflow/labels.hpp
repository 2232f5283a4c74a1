// Labels of push-relabel: exact distances by breadth-first search, active buckets, the gap rule.
#pragma once

#include "workspace.hpp"

namespace maxflow {

// Exact distance-to-sink labels by breadth-first search on the residual graph (bit sets);
// label sets and counts rebuilt. Returns the highest finite label.
template <class WS>
inline i64 global_relabel(const double* bcap, WS& ws) {
    const i64 K = ws.K, n = ws.n, W = ws.W, nn = ws.nn;
    const i64 inf = nn + 1;  // a path to the sink visits at most nn nodes: nn + 1 = cannot reach
    i64* d = ws.d.data();
    for (i64 m = 0; m < K; ++m)
        for (i64 k = 0; k < n; ++k) {
            const i64 x = m * n + k;
            if (d[x] != inf) ws.lab_(m, d[x], k >> 6) = 0;  // clear the label sets in use
            d[x] = inf;
        }
    for (i64 m = 0; m < K; ++m)
        for (i64 w = 0; w < W; ++w) {
            const i64 left = n - 64 * w;
            ws.unseen[m * W + w] = left >= 64 ? ~u64(0) : (u64(1) << u64(left)) - u64(1);
        }
    i64 qt = 0;
    i64* queue = ws.queue.data();
    for (i64 k = 0; k < n; ++k) {
        if (bcap[k] - ws.g[k] > RESIDUAL_EPS) {
            d[k] = 1;
            ws.unseen[k >> 6] &= ~bit(k);
            queue[qt++] = k;
        }
    }
    i64 qh = 0;
    while (qh < qt) {
        const i64 u = queue[qh++];
        const i64 m = ws.lay[u], k = ws.pos[u];
        const i64 du = d[u] + 1;
        if (m + 1 <= K - 1) {  // (m+2, i) -> (m+1, k) with residual
            const i64 base = (m + 1) * n;
            for (i64 w = 0; w < W; ++w) {
                u64& uns = ws.unseen[(m + 1) * W + w];
                u64 c = ws.downT_(m, k, w) & uns;
                uns &= ~c;
                while (c != 0) {
                    const i64 x = base + 64 * w + tz(c);
                    c &= c - 1;
                    d[x] = du;
                    queue[qt++] = x;
                }
            }
        }
        if (m >= 1) {  // (m, i) -> (m+1, k) residual = flow on (m+1, k) -> (m, i)
            const i64 base = (m - 1) * n;
            for (i64 w = 0; w < W; ++w) {
                u64& uns = ws.unseen[(m - 1) * W + w];
                u64 c = ws.upT_(m - 1, k, w) & uns;
                uns &= ~c;
                while (c != 0) {
                    const i64 x = base + 64 * w + tz(c);
                    c &= c - 1;
                    d[x] = du;
                    queue[qt++] = x;
                }
            }
        }
    }
    const i64 dmax = qt > 0 ? d[queue[qt - 1]] : 0;
    ws.ensure_label(dmax + 1);
    for (i64 v = 0; v < nn + 2; ++v) ws.cnt[v] = 0;
    for (i64 m = 0; m < K; ++m)
        for (i64 k = 0; k < n; ++k) {
            const i64 v = d[m * n + k];
            if (v != inf) ws.lab_(m, v, k >> 6) |= bit(k);
            ws.cnt[v] += 1;
        }
    return dmax;
}

// Active nodes (excess, finite label) by label; returns the highest active label.
template <class WS>
inline i64 buckets(WS& ws) {
    const i64 nn = ws.nn;
    for (i64 v = 0; v < nn + 2; ++v) ws.bhead[v] = -1;
    i64 hi = 0;
    for (i64 z = 0; z < nn; ++z) {
        const i64 dz = ws.d[z];
        if (dz <= nn && ws.e[z] > RESIDUAL_EPS) {
            ws.bnext[z] = ws.bhead[dz];
            ws.bhead[dz] = z;
            if (dz > hi) hi = dz;
        }
    }
    return hi;
}

// Give node x = (layer index m, position k) the label v (label sets and counts follow).
template <class WS>
inline void move(WS& ws, i64 x, i64 m, i64 k, i64 v) {
    const u64 bk = bit(k);
    const i64 old = ws.d[x], inf = ws.nn + 1;
    if (old != inf) ws.lab_(m, old, k >> 6) &= ~bk;
    ws.cnt[old] -= 1;
    if (v != inf) {
        ws.ensure_label(v + 1);  // the caller raises its highest label to v next
        ws.lab_(m, v, k >> 6) |= bk;
    }
    ws.cnt[v] += 1;
    ws.d[x] = v;
}

// No node has label `level`: nodes above it cannot reach the sink; lift them out.
template <class WS>
inline void gap(WS& ws, i64 level, i64 dmax) {
    const i64 K = ws.K, n = ws.n, W = ws.W;
    const i64 inf = K * n + 1;
    for (i64 v = level + 1; v < dmax + 1; ++v) {
        if (ws.cnt[v] == 0) continue;
        for (i64 m = 0; m < K; ++m)
            for (i64 w = 0; w < W; ++w) {
                u64 c = ws.lab_(m, v, w);
                if (c == 0) continue;
                ws.lab_(m, v, w) = 0;
                while (c != 0) {
                    const i64 x = m * n + 64 * w + tz(c);
                    c &= c - 1;
                    ws.d[x] = inf;
                }
            }
        ws.cnt[inf] += ws.cnt[v];
        ws.cnt[v] = 0;
    }
}

// Lowest label v in [v0, vmax] held by a node of layer m+1 in the bit set `mask` (W words);
// vmax + 1 if none.
template <class WS>
inline i64 lowest(WS& ws, const u64* mask, i64 m, i64 v0, i64 vmax) {
    const i64 W = ws.W;
    for (i64 v = v0; v <= vmax; ++v)
        for (i64 w = 0; w < W; ++w)
            if ((mask[w] & ws.lab_(m, v, w)) != 0) return v;
    return vmax + 1;
}

}  // namespace maxflow
