// The state of one layered network: flows, residual bit sets, label sets, and its resets.
// A line-by-line port of the former numba kernels (same float64 operations in the same order,
// so the same values bit for bit). Build with -ffp-contract=off and without -ffast-math.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace maxflow {

using i64 = std::int64_t;
using u64 = std::uint64_t;

// An arc whose residual capacity is at most this is treated as saturated; excess at most this as zero.
constexpr double RESIDUAL_EPS = 1e-13;
// Stop as soon as the sink holds the trivial upper bound U minus this (the value cannot exceed U).
constexpr double STOP_TOL = 1e-12;

inline u64 bit(i64 i) { return u64(1) << u64(i & 63); }
inline i64 tz(u64 x) { return i64(__builtin_ctzll(x)); }  // lowest set bit of a nonzero word

// Where the arc (t+2, i) -> (t+1, k) of matrix t lives in C and F, and which positions k a row i
// has (0 <= k < end(i)). Dense: every matrix n x n, row-major. Lower: a causal model's matrices,
// whose arcs run only to positions k <= i, packed: row i of matrix t holds k = 0..i, from
// t n (n + 1) / 2 + i (i + 1) / 2 -- half the memory of Dense for the capacities and the flows.
struct Dense {
    static constexpr bool packed = false;
    i64 n;
    i64 arc(i64 t, i64 i, i64 k) const { return (t * n + i) * n + k; }
    i64 end(i64) const { return n; }
    i64 matrix() const { return n * n; }
};
struct Lower {
    static constexpr bool packed = true;
    i64 n;
    i64 arc(i64 t, i64 i, i64 k) const { return t * matrix() + i * (i + 1) / 2 + k; }
    i64 end(i64 i) const { return i + 1; }
    i64 matrix() const { return n * (n + 1) / 2; }
};

// State of one network with K node layers of n nodes (node m * n + k = layer m+1, position k;
// layer 1 holds the sink arcs, layer K the supply). C (the capacities) has T = max(K-1, 1)
// matrices of n x n laid out by G (Dense or Lower): C[G::arc(t, i, k)] = capacity of the arc
// (t+2, i) -> (t+1, k).
//
// F[t, i, k]: flow on the arc (t+2, i) -> (t+1, k). Residual bit sets, W words per node:
// down[t, i] bit k  = residual of (t+2, i) -> (t+1, k)   (downT[t, k] bit i: the same arcs)
// up[t, k] bit i    = flow on (t+2, i) -> (t+1, k), i.e. residual of the reverse arc
//                     (t+1, k) -> (t+2, i)                (upT[t, i] bit k: the same arcs)
// lab[v, m]: nodes of layer m+1 with the finite label v (label-major, grown as the highest label
// grows: labels rarely pass a few times K, and a set per possible label, nn + 1 of them, would be
// K * nn * W words -- 2 GiB for 30 layers of 4,096 tokens); the unreachable label nn + 1 has no set
// (it is never searched). cnt[v]: how many nodes have label v, the unreachable one included.
template <class G>
struct WorkspaceT {
    using Layout = G;
    i64 K, n, W, nn, T;
    G geo;
    std::vector<double> F;                   // (T, matrix) laid out by G
    std::vector<u64> down, downT, up, upT;   // (T, n, W)
    std::vector<double> e;                   // (nn,) excess
    std::vector<double> g;                   // (n,) flow on the sink arcs of layer 1
    std::vector<i64> d;                      // (nn,) labels
    std::vector<u64> lab;                    // (labels, K, W), labels = lab_rows
    i64 lab_rows = 0;
    std::vector<i64> cnt, bhead;             // (nn + 2,) label counts, active nodes by label
    std::vector<i64> bnext, queue;           // (nn,)
    std::vector<u64> unseen;                 // (K, W)
    std::vector<i64> touched;                // arcs whose flow became nonzero (cold resets)
    std::vector<i64> touched_arc;            // the same arcs' positions in F (G::arc)
    std::vector<i64> lay, pos;               // node -> layer index, position
    std::vector<double> rho;                 // (K, n) the greedy start's buffers (see greedy)
    std::vector<i64> kids;                   // (K, n) per layer: positions by decreasing rho
    std::vector<i64> send;                   // (n,)
    std::vector<i64> nxt;                    // (n + 1,)
    i64 touched_arg;                         // touched's size (< 0: 8 nn + 1024)

    WorkspaceT(i64 K_, i64 n_, i64 touched_cap = -1)
        : K(-1), n(n_), W((n_ + 63) / 64), nn(0), T(0), geo{n_}, touched_arg(touched_cap) {
        shape(K_);
    }
    // (Re)shape for K node layers (same n), as a new workspace would be once reset(C, ws, -1) has
    // run: one workspace serves networks of every depth, and the memory of the deepest is
    // allocated (and touched) once.
    void shape(i64 K_) {
        if (K_ == K) return;
        K = K_;
        nn = K * n;
        T = std::max<i64>(K - 1, 1);
        // the flows and residual bits are set by reset(C, ws, -1), which every use of a (re)shaped
        // workspace starts with: resized here, not rewritten (new entries are zero)
        F.resize(T * geo.matrix(), 0.0);
        down.resize(T * n * W, 0);
        downT.resize(T * n * W, 0);
        up.resize(T * n * W, 0);
        upT.resize(T * n * W, 0);
        e.assign(nn, 0.0);
        g.assign(n, 0.0);
        d.assign(nn, 0);
        lab.clear();
        lab_rows = 0;
        ensure_label(std::min<i64>(nn, 4 * K + 8));
        // written before they are read (global_relabel, buckets, greedy or the caller): resized only
        cnt.resize(nn + 2, 0);
        bhead.resize(nn + 2, -1);
        bnext.resize(nn, -1);
        queue.resize(nn, 0);
        unseen.resize(K * W, 0);
        // touched is read only where written first (entries below n_touched): its size is what
        // counts; lay and pos depend on n only: filled up to the deepest shape so far
        touched.resize(touched_arg < 0 ? 8 * nn + 1024 : touched_arg);
        touched_arc.resize(touched.size());
        for (i64 x = i64(lay.size()); x < nn; ++x) {
            lay.push_back(x / n);
            pos.push_back(x - (x / n) * n);
        }
        rho.resize(K * n, 0.0);
        kids.resize(K * n, 0);
        send.resize(n, 0);
        nxt.resize(n + 1, 0);
    }
    // word w of the residual bit set of node row `row` in matrix t
    u64& down_(i64 t, i64 row, i64 w) { return down[(t * n + row) * W + w]; }
    u64& downT_(i64 t, i64 row, i64 w) { return downT[(t * n + row) * W + w]; }
    u64& up_(i64 t, i64 row, i64 w) { return up[(t * n + row) * W + w]; }
    u64& upT_(i64 t, i64 row, i64 w) { return upT[(t * n + row) * W + w]; }
    // word w of the set of finite label v on layer m+1 (v <= the highest label ensured)
    u64& lab_(i64 m, i64 v, i64 w) { return lab[(v * K + m) * W + w]; }
    // make room for the finite labels 0..v (appended sets are empty; references into lab die)
    void ensure_label(i64 v) {
        if (v < lab_rows) return;
        lab_rows = std::min<i64>(std::max<i64>(2 * lab_rows, v + 1), nn + 1);
        lab.resize(lab_rows * K * W, 0);
    }
};

using Workspace = WorkspaceT<Dense>;

// Refresh the residual bits of the arc (t+2, i) -> (t+1, k) after its flow changed. Branch-free
// (whether an arc is saturated after a push is what a CPU cannot predict): each bit is cleared,
// then set from a mask of all ones or zeros.
template <class WS>
inline void arc_bits(const double* C, WS& ws, i64 t, i64 i, i64 k) {
    const i64 a = ws.geo.arc(t, i, k);
    const double f = ws.F[a];
    const u64 bk = bit(k), bi = bit(i);
    const i64 wk = k >> 6, wi = i >> 6;
    const u64 residual = u64(0) - u64(C[a] - f > RESIDUAL_EPS);  // all ones if the arc has room
    const u64 flowing = u64(0) - u64(f > RESIDUAL_EPS);          // all ones if it carries flow
    u64& down = ws.down_(t, i, wk);
    u64& downT = ws.downT_(t, k, wi);
    u64& up = ws.up_(t, k, wi);
    u64& upT = ws.upT_(t, i, wk);
    down = (down & ~bk) | (bk & residual);
    downT = (downT & ~bi) | (bi & residual);
    up = (up & ~bi) | (bi & flowing);
    upT = (upT & ~bk) | (bk & flowing);
}

// An entry of `touched` names the arc (t+2, i) -> (t+1, k) as t << 42 | i << 21 | k (shifts, not
// divisions: resets walk this list after every solve), plus TOUCH_FULL where the greedy pass
// left the arc without residual (t < 2**20).
constexpr int TOUCH_SHIFT = 21;
constexpr i64 TOUCH_MASK = (i64(1) << TOUCH_SHIFT) - 1;
constexpr i64 TOUCH_FULL = i64(1) << 62;
constexpr i64 TOUCH_LAYERS = i64(1) << 20;
inline i64 pack(i64 t, i64 i, i64 k) { return (t << (2 * TOUCH_SHIFT)) | (i << TOUCH_SHIFT) | k; }
inline void unpack(i64 idx, i64& t, i64& i, i64& k) {
    t = (idx >> (2 * TOUCH_SHIFT)) & (TOUCH_LAYERS - 1);
    i = (idx >> TOUCH_SHIFT) & TOUCH_MASK;
    k = idx & TOUCH_MASK;
}

// Residual bits from the flow: of every arc (n_touched < 0), or of the `n_touched` arcs the
// greedy pass listed. Those went from zero flow (their bits: room, no flow) to a flow above
// RESIDUAL_EPS, and the greedy pass marked the ones it left without room (TOUCH_FULL): their
// bits follow without reading C or F (the same bits arc_bits gives).
template <class WS>
inline void sync_bits(const double* C, WS& ws, i64 n_touched) {
    const i64 K = ws.K, n = ws.n;
    if (n_touched < 0) {
        for (i64 t = 0; t < K - 1; ++t)
            for (i64 i = 0; i < n; ++i)
                for (i64 k = 0; k < ws.geo.end(i); ++k) arc_bits(C, ws, t, i, k);
        return;
    }
    for (i64 q = 0; q < n_touched; ++q) {
        const i64 entry = ws.touched[q];
        i64 t, i, k;
        unpack(entry, t, i, k);
        const u64 bk = bit(k), bi = bit(i);
        const i64 wk = k >> 6, wi = i >> 6;
        ws.up_(t, k, wi) |= bi;
        ws.upT_(t, i, wk) |= bk;
        const u64 keep = (entry & TOUCH_FULL) != 0 ? u64(0) : ~u64(0);  // clear the room bits if full
        ws.down_(t, i, wk) &= ~bk | keep;
        ws.downT_(t, k, wi) &= ~bi | keep;
    }
}

// No excess and no flow on the sink arcs (the end of every reset).
template <class WS>
inline void zero_excess(WS& ws) {
    std::fill(ws.e.begin(), ws.e.begin() + ws.K * ws.n, 0.0);
    std::fill(ws.g.begin(), ws.g.begin() + ws.n, 0.0);
}

// Matrices t0.. of the network back to zero flow, with the residual bits of C (flows and bits
// of the matrices below t0 are left as they are); excess and sink flows zero.
template <class WS>
inline void reset_from(const double* C, WS& ws, i64 t0) {
    const i64 K = ws.K, n = ws.n, W = ws.W;
    const i64 M = ws.geo.matrix();
    if (K - 1 > t0) std::fill(ws.F.begin() + t0 * M, ws.F.begin() + (K - 1) * M, 0.0);
    for (i64 t = t0; t < K - 1; ++t) {
        for (i64 i = 0; i < n; ++i)
            for (i64 w = 0; w < W; ++w) {
                ws.down_(t, i, w) = 0;
                ws.downT_(t, i, w) = 0;
                ws.up_(t, i, w) = 0;
                ws.upT_(t, i, w) = 0;
            }
        // branch-free: a bit per arc from its comparison (the same bits)
        for (i64 i = 0; i < n; ++i) {
            const double* Crow = C + ws.geo.arc(t, i, 0);
            const u64 bi = bit(i);
            const i64 wi = i >> 6;
            for (i64 w = 0; w * 64 < ws.geo.end(i); ++w) {
                u64 word = 0;
                const i64 k1 = std::min<i64>(ws.geo.end(i), 64 * w + 64);
                for (i64 k = 64 * w; k < k1; ++k) {
                    const u64 room = u64(Crow[k] > RESIDUAL_EPS);
                    word |= room << u64(k & 63);
                    ws.downT_(t, k, wi) |= bi & (u64(0) - room);
                }
                ws.down_(t, i, w) = word;
            }
        }
    }
    zero_excess(ws);
}

// reset_from(Cr, rev, 0) for the reversed network Cr of the network `fwd` is at zero flow with
// its residual bits (rev's matrix t is fwd's matrix K-2-t transposed, same K and n): the same
// state, with the bits copied from fwd's instead of comparing every capacity again (rev's room
// bits by rows are fwd's by columns, and the other way round; no flow, no up bits).
template <class WS>
inline void reset_reversed(const WS& fwd, WS& rev) {
    const i64 K = rev.K, n = rev.n, W = rev.W;
    const i64 M = rev.geo.matrix();
    if (K - 1 > 0) std::fill(rev.F.begin(), rev.F.begin() + (K - 1) * M, 0.0);
    for (i64 t = 0; t < K - 1; ++t) {
        const i64 f = (K - 2 - t) * n * W, r = t * n * W;
        for (i64 q = 0; q < n * W; ++q) {
            rev.down[r + q] = fwd.downT[f + q];
            rev.downT[r + q] = fwd.down[f + q];
            rev.up[r + q] = 0;
            rev.upT[r + q] = 0;
        }
    }
    zero_excess(rev);
}

// Back to zero flow: only the `n_touched` arcs listed in `touched` (the only ones that carried
// flow) or, if negative, every arc; with `bits`, their residual bits too.
template <class WS>
inline void reset(const double* C, WS& ws, i64 n_touched, bool bits = true) {
    if (n_touched < 0 && bits) {
        reset_from(C, ws, 0);
        return;
    }
    const i64 K = ws.K;
    if (n_touched < 0) {
        std::fill(ws.F.begin(), ws.F.begin() + std::max<i64>(K - 1, 0) * ws.geo.matrix(), 0.0);
    } else {
        // back to the bits of C: every listed arc has room at zero flow (it took more than
        // RESIDUAL_EPS of flow, at most its capacity), and no flow
        double* F = ws.F.data();
        const i64* arcs = ws.touched_arc.data();
        for (i64 q = 0; q < n_touched; ++q) F[arcs[q]] = 0.0;
        if (bits)
            for (i64 q = 0; q < n_touched; ++q) {
                i64 t, i, k;
                unpack(ws.touched[q], t, i, k);
                const u64 bk = bit(k), bi = bit(i);
                const i64 wk = k >> 6, wi = i >> 6;
                ws.down_(t, i, wk) |= bk;
                ws.downT_(t, k, wi) |= bi;
                ws.up_(t, k, wi) &= ~bi;
                ws.upT_(t, i, wk) &= ~bk;
            }
    }
    zero_excess(ws);
}

}  // namespace maxflow
