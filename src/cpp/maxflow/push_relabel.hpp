// Highest-label push-relabel on the layered network (phase one: a maximum preflow value).
#pragma once

#include "labels.hpp"

namespace maxflow {

// Global relabel after this many relabels per node of the network (a global relabel costs about
// as much as one relabel per node here).
constexpr double GLOBAL_RELABEL_FREQ = 1.0;

struct PushRelabelResult {
    double value;
    i64 n_touched;
};

// Highest-label push-relabel from the current preflow until no active node can reach the sink or
// the sink holds `upper` - STOP_TOL. Starts with a global relabel. Returns the value and the
// number of arcs listed in `touched` (-1 once it overflowed).
template <class WS>
inline PushRelabelResult push_relabel(const double* C, const double* bcap, WS& ws, bool track,
                                      i64 n_touched, double value, double upper) {
    const i64 K = ws.K, n = ws.n, W = ws.W, nn = ws.nn;
    const i64 inf = nn + 1;
    double* F = ws.F.data();
    double* e = ws.e.data();
    double* g = ws.g.data();
    i64* d = ws.d.data();
    i64* bhead = ws.bhead.data();
    i64* bnext = ws.bnext.data();
    const i64 touched_cap = i64(ws.touched.size());
    i64 dmax = global_relabel(bcap, ws);
    i64 hi = buckets(ws);
    i64 relabels = 0;
    const i64 budget = i64(GLOBAL_RELABEL_FREQ * double(nn)) + 8;
    while (hi > 0) {
        if (value >= upper - STOP_TOL) break;  // the trivial cut is reached: this is the maximum
        const i64 x = bhead[hi];
        if (x == -1) {
            hi -= 1;
            continue;
        }
        bhead[hi] = bnext[x];
        if (d[x] != hi || e[x] <= RESIDUAL_EPS) continue;  // lifted by a gap, or already drained
        const i64 m = ws.lay[x], k = ws.pos[x];
        while (e[x] > RESIDUAL_EPS && d[x] < inf) {
            const i64 dx = d[x];
            // (1) the sink arc of a layer-1 node
            if (m == 0 && dx == 1) {
                const double r = bcap[k] - g[k];
                if (r > RESIDUAL_EPS) {
                    const double delta = std::min(e[x], r);
                    g[k] += delta;
                    e[x] -= delta;
                    value += delta;
                    if (e[x] <= RESIDUAL_EPS) break;
                }
            }
            // (2) admissible down arcs: residual, to a node one label lower
            if (m >= 1) {
                const i64 t = m - 1;
                const bool ahead = m == 1 && dx == 2;
                for (i64 w = 0; w < W; ++w) {
                    u64 c = ws.down_(t, k, w) & ws.lab_(t, dx - 1, w);
                    while (c != 0) {
                        const i64 yk = 64 * w + tz(c);
                        c &= c - 1;
                        const i64 y = t * n + yk;
                        const i64 a = ws.geo.arc(t, k, yk);
                        double delta = std::min(e[x], C[a] - F[a]);
                        // look-ahead through an idle (layer 1, yk); an active one keeps its excess
                        // and its bucket, so it takes a plain push
                        const bool look = ahead && e[y] <= RESIDUAL_EPS;
                        if (look) delta = std::min(delta, bcap[yk] - g[yk]);  // straight into the sink
                        if (delta > RESIDUAL_EPS) {
                            if (track && F[a] == 0.0) {
                                if (n_touched >= 0 && n_touched < touched_cap) {
                                    ws.touched[n_touched] = pack(t, k, yk);
                                    ws.touched_arc[n_touched] = a;
                                    n_touched += 1;
                                } else {
                                    n_touched = -1;
                                }
                            }
                            F[a] += delta;
                            arc_bits(C, ws, t, k, yk);
                            e[x] -= delta;
                            if (look) {
                                g[yk] += delta;
                                value += delta;
                            } else {
                                const double ey = e[y];
                                e[y] = ey + delta;
                                if (ey <= RESIDUAL_EPS && ey + delta > RESIDUAL_EPS) {
                                    bnext[y] = bhead[dx - 1];
                                    bhead[dx - 1] = y;
                                    if (dx - 1 > hi) hi = dx - 1;  // x was relabelled above hi
                                }
                            }
                        }
                        if (look && bcap[yk] - g[yk] <= RESIDUAL_EPS) {
                            // (layer 1, yk) lost its sink arc: raise its label now (valid: its
                            // only residual arcs lead back up to layer 2)
                            const i64 v = lowest(ws, &ws.up_(0, yk, 0), 1, 1, dmax);
                            move(ws, y, 0, yk, v <= dmax ? v + 1 : inf);
                            if (v + 1 > dmax && v <= dmax) dmax = v + 1;
                            if (ws.cnt[1] == 0) {
                                gap(ws, 1, dmax);
                                break;
                            }
                        }
                        if (e[x] <= RESIDUAL_EPS) break;
                    }
                    if (e[x] <= RESIDUAL_EPS || d[x] != dx) break;
                }
                if (e[x] <= RESIDUAL_EPS || d[x] != dx) break;
            }
            // (3) admissible up arcs (returning flow), to a node one label lower
            if (m + 1 <= K - 1) {
                for (i64 w = 0; w < W; ++w) {
                    u64 c = ws.up_(m, k, w) & ws.lab_(m + 1, dx - 1, w);
                    while (c != 0) {
                        const i64 i = 64 * w + tz(c);
                        c &= c - 1;
                        const i64 y = (m + 1) * n + i;
                        const i64 a = ws.geo.arc(m, i, k);
                        const double delta = std::min(e[x], F[a]);
                        F[a] -= delta;
                        arc_bits(C, ws, m, i, k);
                        e[x] -= delta;
                        const double ey = e[y];
                        e[y] = ey + delta;
                        if (ey <= RESIDUAL_EPS && ey + delta > RESIDUAL_EPS) {
                            bnext[y] = bhead[dx - 1];
                            bhead[dx - 1] = y;
                            if (dx - 1 > hi) hi = dx - 1;
                        }
                        if (e[x] <= RESIDUAL_EPS) break;
                    }
                    if (e[x] <= RESIDUAL_EPS) break;
                }
                if (e[x] <= RESIDUAL_EPS) break;
            }
            // (4) relabel: one above the lowest label among residual out-arcs (>= dx by validity)
            i64 v = dmax + 1;
            if (m == 0 && bcap[k] - g[k] > RESIDUAL_EPS) v = 0;
            if (m >= 1 && v > dx) v = lowest(ws, &ws.down_(m - 1, k, 0), m - 1, dx, std::min(v - 1, dmax));
            if (m + 1 <= K - 1 && v > dx) {
                const i64 v2 = lowest(ws, &ws.up_(m, k, 0), m + 1, dx, std::min(v - 1, dmax));
                if (v2 < v) v = v2;
            }
            const i64 newd = v <= dmax ? v + 1 : inf;
            relabels += 1;
            move(ws, x, m, k, newd);
            if (newd < inf && newd > dmax) dmax = newd;
            if (ws.cnt[dx] == 0) gap(ws, dx, dmax);
        }
        if (e[x] > RESIDUAL_EPS && d[x] < inf) {
            bnext[x] = bhead[d[x]];
            bhead[d[x]] = x;
            if (d[x] > hi) hi = d[x];
        }
        if (relabels > budget) {
            relabels = 0;
            dmax = global_relabel(bcap, ws);
            hi = buckets(ws);
        }
    }
    return {value, n_touched};
}

}  // namespace maxflow
