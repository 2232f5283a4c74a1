// Tasks: what one call runs -- closed forms, sweeps, and problems solved one at a time.
#pragma once

#include <memory>
#include <vector>

#include "control.hpp"
#include "solve.hpp"

namespace maxflow {

// Layer-2 rows (closed form) computed together against one column of A_1 (see run_closed).
constexpr i64 CLOSED_BLOCK = 8;

// The arrays of one call. caps: (B, Lmax, N, N), caps[b, l] = capacity matrix of layer l+1,
// positions of sample b packed at the front; row r: a source at 1-based layer row_L[r] of sample
// row_b[r] with out-capacities supply[r] (N,); out: (R, N). ctl: stops the call and counts its
// work between problems (control.hpp; none: run to the end).
struct Call {
    const double* caps;
    i64 B, Lmax, N;
    const i64* lengths;
    const i64* row_b;
    const i64* row_L;
    const double* supply;
    double* out;
    Control* ctl = nullptr;
    double cap(i64 b, i64 l, i64 i, i64 k) const { return caps[((b * Lmax + l) * N + i) * N + k]; }
};

// Middle network of source layer L into C (max(L-2, 1) matrices of n x n): C[t] = A_{t+2}
// (t = 0..L-3); reversed: C[t] = A_{L-1-t}^T.
inline void fill_network(const Call& c, i64 b, i64 L, i64 n, bool reverse, double* C) {
    for (i64 t = 0; t < L - 2; ++t)
        for (i64 i = 0; i < n; ++i)
            for (i64 k = 0; k < n; ++k)
                C[(t * n + i) * n + k] = reverse ? c.cap(b, L - 2 - t, k, i) : c.cap(b, t + 1, i, k);
}

// sigma[m, k] (row stride N): what node (m+1, k) could receive from the supply a on layer K with
// the network to itself: sigma[K-1] = a, sigma[m-1, k] = sum_i min(sigma[m, i], C[m-1, i, k]).
// Every unit reaching sink j passes some layer-1 node k, so value_j <= sum_k min(sigma[0, k],
// b_j[k]): one O(L n^2) pass per source bounds all n sinks.
inline void top_down(const double* C, const double* a, i64 K, i64 n, i64 N, double* sigma) {
    for (i64 k = 0; k < n; ++k) sigma[(K - 1) * N + k] = a[k];
    for (i64 m = K - 1; m > 0; --m) {
        double* below = sigma + (m - 1) * N;
        for (i64 k = 0; k < n; ++k) below[k] = 0.0;
        for (i64 i = 0; i < n; ++i) {
            const double s = sigma[m * N + i];
            const double* Crow = C + ((m - 1) * n + i) * n;
            for (i64 k = 0; k < n; ++k) below[k] += std::min(s, Crow[k]);
        }
    }
}

// out[i] = sum_k min(M[i, k], y[k]) for i, k < n (M: rows of stride `stride`), each sum taken
// k = 0, 1, ... in order; four rows at a time (independent chains the CPU can overlap: the same
// additions in the same order, so the same values as one row after another).
inline void min_sums(const double* M, i64 stride, const double* y, i64 n, double* out) {
    i64 i = 0;
    for (; i + 4 <= n; i += 4) {
        const double *m0 = M + i * stride, *m1 = m0 + stride, *m2 = m1 + stride, *m3 = m2 + stride;
        double v0 = 0.0, v1 = 0.0, v2 = 0.0, v3 = 0.0;
        for (i64 k = 0; k < n; ++k) {
            const double yk = y[k];
            v0 += std::min(m0[k], yk);
            v1 += std::min(m1[k], yk);
            v2 += std::min(m2[k], yk);
            v3 += std::min(m3[k], yk);
        }
        out[i] = v0, out[i + 1] = v1, out[i + 2] = v2, out[i + 3] = v3;
    }
    for (; i < n; ++i) {
        const double* mi = M + i * stride;
        double v = 0.0;
        for (i64 k = 0; k < n; ++k) v += std::min(mi[k], y[k]);
        out[i] = v;
    }
}

// sum_k min(x_k, y_k) over k < n, in four interleaved partial sums (independent chains the CPU
// can overlap; the order of the additions is fixed, so the result is deterministic).
inline double min_dot(const double* x, const double* y, i64 n) {
    double v0 = 0.0, v1 = 0.0, v2 = 0.0, v3 = 0.0;
    i64 k = 0;
    while (k + 4 <= n) {
        v0 += std::min(x[k], y[k]);
        v1 += std::min(x[k + 1], y[k + 1]);
        v2 += std::min(x[k + 2], y[k + 2]);
        v3 += std::min(x[k + 3], y[k + 3]);
        k += 4;
    }
    while (k < n) {
        v0 += std::min(x[k], y[k]);
        k += 1;
    }
    return (v0 + v1) + (v2 + v3);
}

// Rows of source layer 1 or 2, in closed form: L = 1: the supply row itself; L = 2:
// value_j = sum_k min(a_k, A_1[k, j]) (the paths s -> (1, k) -> j share no edge). Layer-2 rows
// of one sample go in blocks of CLOSED_BLOCK against A_1 transposed (contiguous columns).
inline void run_closed(const Call& c, const i64* rows, i64 R) {
    const i64 N = c.N;
    std::vector<double> At(N * N);  // A_1 of sample tb, transposed
    i64 tb = -1;
    i64 q = 0;
    while (q < R) {
        const i64 r = rows[q];
        const i64 b = c.row_b[r];
        const i64 n = c.lengths[b];
        if (halted(c.ctl, 0)) return;
        if (c.row_L[r] == 1) {
            for (i64 j = 0; j < n; ++j) c.out[r * N + j] = c.supply[r * N + j];
            q += 1;
            halted(c.ctl, n * n);  // counted as the plan counts it (a closed-form row: n^2)
            continue;
        }
        if (b != tb) {
            for (i64 k = 0; k < n; ++k)
                for (i64 j = 0; j < n; ++j) At[j * N + k] = c.cap(b, 0, k, j);
            tb = b;
        }
        i64 q1 = q + 1;
        while (q1 < R && q1 - q < CLOSED_BLOCK && c.row_b[rows[q1]] == b && c.row_L[rows[q1]] == 2) q1 += 1;
        for (i64 j = 0; j < n; ++j) {
            const double* col = At.data() + j * N;
            for (i64 p = q; p < q1; ++p) c.out[rows[p] * N + j] = min_dot(c.supply + rows[p] * N, col, n);
        }
        halted(c.ctl, (q1 - q) * n * n);
        q = q1;
    }
}

// Sinks j0..j1-1 of one (sample b, layer L): per sink, one sweep over the rows `rows` (in that
// order) on the reversed network (supply = column j of A_1, sink capacities = the rows).
inline void run_sweep_sinks(const Call& c, i64 b, i64 L, i64 n, const i64* rows, i64 count, i64 j0, i64 j1) {
    const i64 K = L - 1, N = c.N;
    std::vector<double> C(std::max<i64>(L - 2, 1) * n * n);
    fill_network(c, b, L, n, true, C.data());
    Workspace ws(K, n);
    std::vector<double> vary(count * n);
    for (i64 q = 0; q < count; ++q)
        for (i64 k = 0; k < n; ++k) vary[q * n + k] = c.supply[rows[q] * N + k];
    std::vector<double> bcol(n), vals(count);
    for (i64 j = j0; j < j1; ++j) {
        for (i64 k = 0; k < n; ++k) bcol[k] = c.cap(b, 0, k, j);
        sweep(C.data(), bcol.data(), vary.data(), count, ws, vals.data());
        for (i64 q = 0; q < count; ++q) c.out[rows[q] * N + j] = vals[q];
        if (halted(c.ctl, count * std::max<i64>(L - 2, 1) * n * n)) return;  // between sinks
    }
}

// rho_f[j, m] for m = depth[j]..K-1: what node (m+1, k) of sample b could pass on to input j
// (greedy's rho on the forward network; it does not depend on the source layer, so the rows of
// every layer of a sample share it): rho_f[j, 0] = A_1[:, j],
// rho_f[j, m, i] = sum_k min(A_{m+1}[i, k], rho_f[j, m-1, k]); and ord_f[j, m], the positions by
// decreasing rho_f[j, m] (greedy's children order, shared the same way). rho_f: (n, Kmax, n).
// The sink's rows live in slot `slot` of rho_f / ord_f / depth (slot j when they are kept for
// the sample's other rows, else one slot reused sink after sink).
inline void rho_down(const Call& c, i64 b, i64 j, i64 slot, i64 n, i64* depth, i64 K, i64 Kmax, double* rho_f,
                     i64* ord_f) {
    for (i64 m = depth[slot]; m < K; ++m) {
        double* r = rho_f + (slot * Kmax + m) * n;
        if (m == 0) {
            for (i64 k = 0; k < n; ++k) r[k] = c.cap(b, 0, k, j);
        } else {
            const double* below = rho_f + (slot * Kmax + m - 1) * n;
            min_sums(c.caps + (b * c.Lmax + m) * c.N * c.N, c.N, below, n, r);
        }
        order_desc(r, ord_f + (slot * Kmax + m) * n, n);
    }
    depth[slot] = std::max(depth[slot], K);
}

// The reversed network and the two workspaces (forward, reversed) run_cold keeps per thread
// between calls while the length stays the same: a one-sample call then allocates nothing. One
// workspace per direction serves every depth (Workspace::shape), so a call touches the memory of
// its deepest network once, not once per depth (the first call in a process pays for it). Every
// solve starts by resetting the flow (reset) and recomputing the labels (global_relabel), so a
// reused workspace gives the values a new one gives. Long sequences do not keep theirs
// (KEEP_MAX_N).
struct ColdScratch {
    static constexpr i64 KEEP_MAX_N = 256;
    i64 n = -1;
    std::vector<double> net_r;
    std::unique_ptr<Workspace> space_f, space_r;
    void fit(i64 n_) {
        if (n_ != n) {
            net_r = std::vector<double>();
            space_f.reset();
            space_r.reset();
            n = n_;
        }
    }
    // the workspace of one direction, shaped for K node layers
    Workspace* space(std::unique_ptr<Workspace>& ws, i64 K) {
        if (!ws) ws = std::make_unique<Workspace>(K, n);
        ws->shape(K);
        return ws.get();
    }
    void release_if_large() {
        if (n > KEEP_MAX_N) fit(-1);
    }
};

inline ColdScratch& cold_scratch() {
    thread_local ColdScratch scratch;
    return scratch;
}

// Each (row, sink) problem on its own (from a greedy start), for rows sorted by (sample, layer)
// and the sinks j0 <= j < min(j1, n): on the forward network or, when the sink column is the
// smaller trivial cut, on the reversed one. Shared, not recomputed: per sample, the forward rho
// of each sink (rho_down); per row, its top-down capacities (top_down), which bound every sink
// and are the reversed network's rho; and the children orders of both. The reversed network and
// one workspace per direction are kept (reshaped per depth) while the length stays the same. Each problem starts from zero flow, so the
// values do not depend on how the sinks are split into tasks. Without padding (n == N) the forward
// network is read in place from caps (it is caps[b, 1..L-2]): no copy.
inline void run_cold(const Call& c, const i64* rows, i64 R, i64 j0, i64 j1) {
    const i64 N = c.N;
    const i64 Kmax = std::max<i64>(c.Lmax - 1, 1);
    i64 n = -1, b = -1, L = -1, K = 1;
    std::vector<double> a(N), bcol(N);
    std::vector<i64> a_order(N);
    ColdScratch& scratch = cold_scratch();
    std::vector<double> net_f;  // the forward network of a padded sample (else read in place)
    const double* Cf = nullptr;
    double* Cr = nullptr;
    Workspace* wsf = nullptr;
    Workspace* wsr = nullptr;
    std::vector<double> rho_f;
    std::vector<i64> ord_f;
    std::vector<i64> depth(N, 0);
    std::vector<double> sigma(Kmax * N);
    std::vector<i64> ord_r(Kmax * N, 0);  // the row's children orders on the reversed network, (K-1, n)
    bool reversed_ready = false, sorted_sigma = false, keep = false, stopped = false;
    for (i64 q = 0; q < R && !stopped; ++q) {
        const i64 r = rows[q];
        const bool new_sample = c.row_b[r] != b;
        if (new_sample) {
            b = c.row_b[r];
            if (c.lengths[b] != n) {
                n = c.lengths[b];
                scratch.fit(n);  // the network and workspaces of this length
            }
            // the sinks' rho is kept for the sample's next rows only when it has some: a single
            // row (e.g. last-row flow of a long input) needs one slot, not n (n^2 Kmax doubles)
            keep = q + 1 < R && c.row_b[rows[q + 1]] == b;
            const i64 slots = keep ? n : 1;
            if (i64(rho_f.size()) < slots * Kmax * n) {
                rho_f.assign(slots * Kmax * n, 0.0);
                ord_f.assign(slots * Kmax * n, 0);
            }
            std::fill(depth.begin(), depth.end(), 0);
        }
        if (new_sample || c.row_L[r] != L) {  // a new network
            // the same sample one layer up, read in place: the network so far is the new one's
            // bottom, at zero flow with its residual bits (every solve leaves it so); only the
            // matrices above it are reset
            const bool grows = !new_sample && n == N && c.row_L[r] > L;
            const i64 kept = grows ? std::max<i64>(K - 1, 0) : 0;
            L = c.row_L[r];
            K = L - 1;
            wsf = scratch.space(scratch.space_f, K);
            if (n == N) {  // no padding: the forward network is caps[b, 1..L-2] itself, read in place
                Cf = c.caps + (b * c.Lmax + 1) * N * N;
            } else {
                net_f.assign(std::max<i64>(K - 1, 1) * n * n, 0.0);
                fill_network(c, b, L, n, false, net_f.data());
                Cf = net_f.data();
            }
            reset_from(Cf, *wsf, kept);
            reversed_ready = false;
        }
        double sa = 0.0;
        for (i64 k = 0; k < n; ++k) {
            a[k] = c.supply[r * N + k];
            sa += a[k];
        }
        const i64 a_count = order_desc_positive(a.data(), a_order.data(), n);  // greedy's top senders
        top_down(Cf, a.data(), K, n, N, sigma.data());
        sorted_sigma = false;
        const i64 jend = std::min(j1, n);
        for (i64 j = j0; j < jend; ++j) {
            double sb = 0.0, hint = 0.0;
            for (i64 k = 0; k < n; ++k) {
                bcol[k] = c.cap(b, 0, k, j);
                sb += bcol[k];
                hint += std::min(sigma[k], bcol[k]);
            }
            if (sb < sa) {
                if (!reversed_ready) {  // built (and its workspace shaped) when first needed
                    scratch.net_r.resize(std::max<i64>(K - 1, 1) * n * n);  // every entry is written below
                    Cr = scratch.net_r.data();
                    wsr = scratch.space(scratch.space_r, K);
                    fill_network(c, b, L, n, true, Cr);
                    // = reset(Cr, *wsr, -1): the forward network is at zero flow with its bits
                    reset_reversed(*wsf, *wsr);
                    reversed_ready = true;
                }
                if (!sorted_sigma) {
                    for (i64 m = 1; m < K; ++m) order_desc(sigma.data() + m * N, ord_r.data() + (K - 1 - m) * n, n);
                    sorted_sigma = true;
                }
                // the reversed network's rho: this row's top-down pass
                for (i64 m = 0; m < K; ++m)
                    for (i64 k = 0; k < n; ++k) wsr->rho[m * n + k] = sigma[(K - 1 - m) * N + k];
                c.out[r * N + j] =
                    solve_sums(Cr, bcol.data(), a.data(), *wsr, sb, sa, hint, true, nullptr, 0, ord_r.data());
            } else {
                const i64 slot = keep ? j : 0;
                if (!keep) depth[0] = 0;  // the one slot holds the previous sink's rho
                rho_down(c, b, j, slot, n, depth.data(), K, Kmax, rho_f.data(), ord_f.data());
                for (i64 m = 0; m < K; ++m)
                    for (i64 k = 0; k < n; ++k) wsf->rho[m * n + k] = rho_f[(slot * Kmax + m) * n + k];
                c.out[r * N + j] = solve_sums(Cf, a.data(), bcol.data(), *wsf, sa, sb, hint, true, a_order.data(),
                                              a_count, ord_f.data() + slot * Kmax * n);
            }
            // between problems (each leaves its workspace at zero flow): a stop leaves nothing half done
            if (halted(c.ctl, std::max<i64>(L - 2, 1) * n * n)) {
                stopped = true;
                break;
            }
        }
    }
    scratch.release_if_large();
}

// A causal model's one sample with its capacities packed (Lower): caps holds Ltot matrices of
// n (n + 1) / 2 entries, caps[l] = layer l+1's lower triangle row by row (A_{l+1}[i, k], k <= i).
// Row r: a source at 1-based layer row_L[r] (non-decreasing) with out-capacities supply[r] (n,);
// out[r, j] = the max-flow value to input j. Per row, one warm-started sweep over the sinks on the
// forward network, read in place (no reversed copy: it would hold the graph a second time), one
// workspace at a time, on the calling thread: the path for graphs too large to hold twice (a
// 30-layer model at 4,096 tokens: 2 GiB of capacities, 1.9 GiB of flows).
inline void run_lower(const double* caps, i64 n, const i64* row_L, const double* supply, i64 R, double* out,
                      Control* ctl = nullptr) {
    const Lower lay{n};
    const i64 P = lay.matrix();
    std::vector<double> bcol(n), vals(n);
    std::unique_ptr<WorkspaceT<Lower>> ws;
    i64 K = -1;
    for (i64 r = 0; r < R; ++r) {
        const i64 L = row_L[r];
        const double* a = supply + r * n;
        double* o = out + r * n;
        if (halted(ctl, 0)) return;
        if (L == 1) {  // the supply row itself
            for (i64 j = 0; j < n; ++j) o[j] = a[j];
            halted(ctl, n * n);
            continue;
        }
        if (L == 2) {  // value_j = sum_{k >= j} min(a_k, A_1[k, j])
            for (i64 j = 0; j < n; ++j) {
                double v = 0.0;
                for (i64 k = j; k < n; ++k) v += std::min(a[k], caps[lay.arc(0, k, j)]);
                o[j] = v;
            }
            halted(ctl, n * n);
            continue;
        }
        const double* C = caps + P;  // the middle network: layers 2..L-1, read in place
        if (L - 1 != K) {
            K = L - 1;
            ws.reset();  // one workspace alive at a time
            ws = std::make_unique<WorkspaceT<Lower>>(K, n);
        }
        // one sweep over the sinks, from the last input to the first (problem q = sink n-1-q): a
        // causal sink j is fed by positions k >= j only, so each next sink is fed by one more
        // position (5x faster than each sink from a greedy start at 512 tokens, 4x at 1,024)
        auto column = [&](i64 q) {  // A_1[:, j], built as it is needed (not n x n at once)
            const i64 j = n - 1 - q;
            for (i64 k = 0; k < n; ++k) bcol[k] = k >= j ? caps[lay.arc(0, k, j)] : 0.0;
            return bcol.data();
        };
        // between sinks of the sweep: a sink's work counted as the plan counts it ((L-2) n^2)
        const i64 units = std::max<i64>(L - 2, 1) * n * n;
        if (!sweep_with(C, a, column, n, *ws, vals.data(), [&] { return halted(ctl, units); })) return;
        for (i64 q = 0; q < n; ++q) o[n - 1 - q] = vals[q];
    }
}

// One task over the rows order[t0:t1]: kind 0 = closed forms; 1 = sweeps over those rows (one
// sample and layer) for the sinks t2..t3-1; 2 = every (row, sink) problem on its own, for the
// sinks t2..t3-1.
inline void run_task(const Call& c, const i64* order, i64 kind, i64 t0, i64 t1, i64 t2, i64 t3) {
    const i64* rows = order + t0;
    const i64 R = t1 - t0;
    if (kind == 0) {
        run_closed(c, rows, R);
    } else if (kind == 1) {
        const i64 b = c.row_b[rows[0]];
        run_sweep_sinks(c, b, c.row_L[rows[0]], c.lengths[b], rows, R, t2, t3);
    } else {
        run_cold(c, rows, R, t2, t3);
    }
}

}  // namespace maxflow
