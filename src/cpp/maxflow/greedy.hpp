// The greedy first preflow: one pass down the layers.
#pragma once

#include <limits>

#include "simd.hpp"
#include "workspace.hpp"

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

// pad[:n] = vals[:n], then NaN up to pad[to - 1]: whole vectors to compare, the padding never
// counted.
inline void pad_row(const double* vals, i64 n, i64 to, double* pad) {
    for (i64 j = 0; j < n; ++j) pad[j] = vals[j];
    for (i64 j = n; j < to; ++j) pad[j] = std::numeric_limits<double>::quiet_NaN();
}

// Ranks of rows up to RANK_MAX_N entries without ties: rank_i = #{j: vals[j] > vals[i]}, the
// rank of rank_desc when no two ranked entries are equal (then #{j < i: vals[j] >= v} counts no
// equal entry). One pass over the row per entry (padded with NaN, never counted), two doubles per
// SSE2 compare, no tail. Ties make two entries share a rank: found by the ranks taken (a bit per
// rank), and then false is returned and the caller ranks the row with rank_desc. With
// `positive`, only entries > RESIDUAL_EPS are ranked (order_desc_positive); *count = how many.
#if defined(MAXFLOW_AVX2)
// ranks_untied with four doubles per compare, on CPUs with AVX2 (checked once, at load): compares
// only, so the same ranks on any CPU.
__attribute__((target("avx2"))) inline bool ranks_untied_avx2(const double* vals, i64* idx, i64 n, bool positive,
                                                              i64* count) {
    alignas(32) double pad[RANK_MAX_N + 4];
    const i64 n4 = (n + 3) & ~i64(3);
    pad_row(vals, n, n4, pad);
    u64 taken = 0;
    i64 c = 0;
    for (i64 i = 0; i < n; ++i) {
        const double v = pad[i];
        if (positive && !(v > RESIDUAL_EPS)) continue;
        const __m256d vv = _mm256_set1_pd(v);
        __m256i acc = _mm256_setzero_si256();
        for (i64 j = 0; j < n4; j += 4)
            acc = _mm256_sub_epi64(acc, _mm256_castpd_si256(_mm256_cmp_pd(_mm256_load_pd(pad + j), vv, _CMP_GT_OQ)));
        const __m128i half = _mm_add_epi64(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
        const i64 r = _mm_cvtsi128_si64(half) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(half, half));
        const u64 b = u64(1) << u64(r);
        if ((taken & b) != 0 || v != v) return false;
        taken |= b;
        idx[r] = i;
        c += 1;
    }
    *count = c;
    return true;
}
#endif

inline bool ranks_untied(const double* vals, i64* idx, i64 n, bool positive, i64* count) {
#if defined(MAXFLOW_AVX2)
    if (HAS_AVX2) return ranks_untied_avx2(vals, idx, n, positive, count);
#endif
#if defined(__SSE2__)
    alignas(16) double pad[RANK_MAX_N + 2];
    const i64 n2 = (n + 1) & ~i64(1);
    pad_row(vals, n, n2, pad);
    u64 taken = 0;
    i64 c = 0;
    for (i64 i = 0; i < n; ++i) {
        const double v = pad[i];
        if (positive && !(v > RESIDUAL_EPS)) continue;
        const __m128d vv = _mm_set1_pd(v);
        __m128i acc = _mm_setzero_si128();
        for (i64 j = 0; j < n2; j += 2)
            acc = _mm_sub_epi64(acc, _mm_castpd_si128(_mm_cmpgt_pd(_mm_load_pd(pad + j), vv)));
        const i64 r = _mm_cvtsi128_si64(acc) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc));
        const u64 b = u64(1) << u64(r);
        if ((taken & b) != 0 || v != v) return false;  // a tie (or a NaN): rank_desc decides
        taken |= b;
        idx[r] = i;
        c += 1;
    }
    *count = c;
    return true;
#else
    (void)vals, (void)idx, (void)n, (void)positive, (void)count;
    return false;
#endif
}

// idx[:n] = positions 0..n-1 by decreasing vals[:n], ties in position order (a stable order:
// ranks for short rows, merge sort for long ones -- the same permutation).
inline void order_desc(const double* vals, i64* idx, i64 n) {
    if (n <= RANK_MAX_N) {
        i64 count;
        if (ranks_untied(vals, idx, n, false, &count)) return;
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
        if (ranks_untied(vals, idx, n, true, &count)) return count;
        count = 0;
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
// decreasing rho[t] for t < K-1 (or in `kids_given`, (K-1, n), when not null). `a_order` (optional): order_desc_positive of `a`, for a caller
// that solves many problems from one supply (the top layer's senders, sorted once).
// Returns (value, arcs listed in `touched` (-1: overflow), bound).
template <class WS>
inline GreedyResult greedy(const double* C, const double* a, const double* bcap, WS& ws,
                           bool have_rho = false, const i64* a_order = nullptr, i64 a_count = 0,
                           const i64* kids_given = nullptr) {
    const i64 K = ws.K, n = ws.n;
    double* F = ws.F.data();
    double* e = ws.e.data();
    double* rho = ws.rho.data();
    const i64* kids = kids_given != nullptr ? kids_given : ws.kids.data();
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
        for (i64 t = 0; t < K - 1; ++t) order_desc(rho + t * n, ws.kids.data() + t * n, n);  // most capable first
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
        double* e_t = e + t * n;
        for (i64 q = 0; q < n_send; ++q) {
            const i64 i = sending[q];
            const i64 x = m * n + i;
            double left = e[x];
            if (left <= RESIDUAL_EPS) break;
            const i64 row = ws.geo.arc(t, i, 0);  // arc (t, i, k) = row + k
            const double* Crow = C + row;
            double* Frow = F + row;
            // room for a whole row of arcs in `touched`: no check per arc (the list cannot overflow)
            const bool room = n_touched >= 0 && n_touched + n <= cap_t;
            const i64 row_entry = pack(t, i, 0);
            i64 prev = n;
            i64 p = nxt[n];
            while (p < n) {
                const i64 k = children[p];
                // a packed (causal) row has no arcs to later positions: capacity 0
                const double cap = WS::Layout::packed && k > i ? 0.0 : Crow[k];
                double rk = rho_t[k];
                // min(min(left, cap), rk) for capacities and flows that are never NaN: the same
                // value (a +-0 result is <= RESIDUAL_EPS and never used), with min(cap, rk) off
                // the chain through `left`
                const double amt = std::min(left, std::min(cap, rk));
                if (amt > RESIDUAL_EPS) {
                    const i64 entry = row_entry | k | (cap - amt > RESIDUAL_EPS ? 0 : TOUCH_FULL);
                    if (room) {
                        ws.touched[n_touched] = entry;
                        ws.touched_arc[n_touched] = row + k;
                        n_touched += 1;
                    } else if (n_touched >= 0 && n_touched < cap_t) {
                        ws.touched[n_touched] = entry;
                        ws.touched_arc[n_touched] = row + k;
                        n_touched += 1;
                    } else {
                        n_touched = -1;
                    }
                    Frow[k] = amt;
                    rk = rk - amt;
                    rho_t[k] = rk;
                    e_t[k] += amt;
                    left -= amt;
                }
                if (rk <= RESIDUAL_EPS) {  // full: drop it from the list
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
