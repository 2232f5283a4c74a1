// The greedy first preflow: one pass down the layers.
#pragma once

#include "workspace.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace maxflow {

// Rows up to this length are ordered by counting ranks (below); longer ones by insertion or
// merge sort. Both give the same permutation.
constexpr i64 RANK_MAX_N = 64;

// #{j < m: x[j] >= v} (strict = false) or #{j < m: x[j] > v} (strict = true); a NaN is never
// counted. Two doubles per step with SSE2 (every x86-64 CPU has it), plain C++ elsewhere.
template <bool strict>
inline i64 count_above(const double* x, i64 m, double v) {
    i64 r = 0, j = 0;
#if defined(__SSE2__)
    const __m128d vv = _mm_set1_pd(v);
    __m128i acc = _mm_setzero_si128();
    for (; j + 2 <= m; j += 2) {
        const __m128d xj = _mm_loadu_pd(x + j);
        const __m128d hit = strict ? _mm_cmpgt_pd(xj, vv) : _mm_cmpge_pd(xj, vv);  // all ones: -1
        acc = _mm_sub_epi64(acc, _mm_castpd_si128(hit));
    }
    r = _mm_cvtsi128_si64(acc) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc));
#endif
    for (; j < m; ++j) r += (strict ? x[j] > v : x[j] >= v) ? 1 : 0;
    return r;
}

// The rank of position i in the order "decreasing vals, ties in position order": how many
// positions come before it, #{j < i: vals[j] >= v} + #{j > i: vals[j] > v} with v = vals[i].
// Branch-free: on rows of a few dozen entries it beats an insertion sort, whose comparisons the
// CPU mispredicts.
inline i64 rank_desc(const double* vals, i64 i, i64 n) {
    const double v = vals[i];
    return count_above<false>(vals, i, v) + count_above<true>(vals + i + 1, n - i - 1, v);
}

// idx[:n] = positions 0..n-1 by decreasing vals[:n], ties in position order (a stable order:
// ranks for short rows, merge sort for long ones -- the same permutation).
inline void order_desc(const double* vals, i64* idx, i64 n) {
    if (n <= RANK_MAX_N) {
        for (i64 i = 0; i < n; ++i) idx[rank_desc(vals, i, n)] = i;
        return;
    }
    for (i64 q = 0; q < n; ++q) idx[q] = q;
    std::stable_sort(idx, idx + n, [vals](i64 a, i64 b) { return vals[a] > vals[b]; });
}

// The positions with vals > RESIDUAL_EPS by decreasing vals, ties in position order, into
// idx[:count]; returns count. The same as the first `count` entries of order_desc (the entries
// at most RESIDUAL_EPS all sort after them, and the greedy pass stops at the first of those).
// Short rows by ranks (a position at most RESIDUAL_EPS is never counted before one above it),
// long ones by insertion.
inline i64 order_desc_positive(const double* vals, i64* idx, i64 n) {
    i64 count = 0;
    if (n <= RANK_MAX_N) {
        for (i64 i = 0; i < n; ++i) {
            if (!(vals[i] > RESIDUAL_EPS)) continue;
            idx[rank_desc(vals, i, n)] = i;
            count += 1;
        }
        return count;
    }
    for (i64 q = 0; q < n; ++q) {
        const double v = vals[q];
        if (!(v > RESIDUAL_EPS)) continue;
        i64 p = count;
        while (p > 0 && vals[idx[p - 1]] < v) {
            idx[p] = idx[p - 1];
            p -= 1;
        }
        idx[p] = q;
        count += 1;
    }
    return count;
}

struct GreedyResult {
    double value;
    i64 n_touched;
    double bound;
};

// A first preflow in one pass down the layers, then the sink arcs (flow only: the residual bits
// are left as they were, see sync_bits).
//
// rho[m, k] = sum_i min(arc, rho one layer down), rho = the sink capacity on layer 1: what node
// (m+1, k) could pass on to the sink with the network to itself (an upper bound). Layer by layer,
// the nodes holding the most send first, each to the children that can pass on the most first,
// never giving a child more than its remaining rho. What a node cannot place stays as its excess.
// rho also bounds the maximum: value <= sum_k min(a_k, rho[K-1, k]) (a cut bound).
// With `have_rho` the caller has put rho in the workspace already, and kids[t] = the positions by
// decreasing rho[t] for t < K-1. `a_order` (optional): order_desc_positive of `a`, for a caller
// that solves many problems from one supply (the top layer's senders, sorted once).
// Returns (value, arcs listed in `touched` (-1: overflow), bound).
template <class WS>
inline GreedyResult greedy(const double* C, const double* a, const double* bcap, WS& ws,
                           bool have_rho = false, const i64* a_order = nullptr, i64 a_count = 0) {
    const i64 K = ws.K, n = ws.n;
    double* F = ws.F.data();
    double* e = ws.e.data();
    double* rho = ws.rho.data();
    i64* kids = ws.kids.data();
    if (!have_rho) {
        for (i64 k = 0; k < n; ++k) rho[k] = bcap[k];
        for (i64 m = 1; m < K; ++m)
            for (i64 i = 0; i < n; ++i) {
                double v = 0.0;
                const double* Crow = C + ws.geo.arc(m - 1, i, 0);
                const double* below = rho + (m - 1) * n;
                for (i64 k = 0; k < ws.geo.end(i); ++k) v += std::min(Crow[k], below[k]);
                rho[m * n + i] = v;
            }
        for (i64 t = 0; t < K - 1; ++t) order_desc(rho + t * n, kids + t * n, n);  // most capable first
    }
    const i64 top = (K - 1) * n;
    double bound = 0.0;
    for (i64 k = 0; k < n; ++k) {
        e[top + k] = a[k];
        bound += std::min(a[k], rho[(K - 1) * n + k]);
    }
    i64 n_touched = 0;
    const i64 cap_t = i64(ws.touched.size());
    i64* senders = ws.send.data();
    i64* nxt = ws.nxt.data();  // linked list of the children that can still take flow
    for (i64 m = K - 1; m > 0; --m) {
        const i64 t = m - 1;
        const i64* children = kids + t * n;
        double* rho_t = rho + t * n;
        // fullest first (on the top layer, e = a)
        const bool given = m == K - 1 && a_order != nullptr;
        const i64 n_send = given ? a_count : order_desc_positive(e + m * n, senders, n);
        const i64* sending = given ? a_order : senders;
        for (i64 p = 0; p < n; ++p) nxt[p] = p + 1;  // position p -> next; n ends the list; nxt[n] = head
        nxt[n] = 0;
        for (i64 q = 0; q < n_send; ++q) {
            const i64 i = sending[q];
            const i64 x = m * n + i;
            double left = e[x];
            if (left <= RESIDUAL_EPS) break;
            i64 prev = n;
            i64 p = nxt[n];
            while (p < n) {
                const i64 k = children[p];
                const i64 arc = ws.geo.arc(t, i, k);
                // a packed (causal) row has no arcs to later positions: capacity 0
                const double cap = WS::Layout::packed && k > i ? 0.0 : C[arc];
                const double amt = std::min(std::min(left, cap), rho_t[k]);
                if (amt > RESIDUAL_EPS) {
                    if (n_touched >= 0 && n_touched < cap_t) {
                        ws.touched[n_touched] = pack(t, i, k) | (cap - amt > RESIDUAL_EPS ? 0 : TOUCH_FULL);
                        n_touched += 1;
                    } else {
                        n_touched = -1;
                    }
                    F[arc] = amt;
                    rho_t[k] -= amt;
                    e[t * n + k] += amt;
                    left -= amt;
                }
                if (rho_t[k] <= RESIDUAL_EPS) {  // full: drop it from the list
                    nxt[prev] = nxt[p];
                } else {
                    prev = p;
                }
                if (left <= RESIDUAL_EPS) break;
                p = nxt[p];
            }
            e[x] = left;
        }
    }
    double value = 0.0;
    for (i64 k = 0; k < n; ++k) {
        const double amt = std::min(e[k], bcap[k]);
        ws.g[k] = amt;
        e[k] -= amt;
        value += amt;
    }
    return {value, n_touched, bound};
}

}  // namespace maxflow
