// One max-flow problem from zero flow (solve), and warm-started sweeps of problems (sweep).
#pragma once

#include <limits>

#include "greedy.hpp"
#include "push_relabel.hpp"

namespace maxflow {

// Max flow from supplies `a` on node layer K to sink capacities `bcap` on node layer 1, from zero
// flow, leaving the workspace at zero flow again. The supply starts as excess on layer K (the
// source is implicit: its edges stay saturated, which is all phase one of push-relabel needs).
// Stops at the smallest of the cut bounds min(sum a, sum b, sum_k min(a_k, rho_k)) and `hint`,
// an upper bound the caller knows (top_down); `have_rho`, `a_order`, `a_count`, `kids`: see greedy.
// solve_sums: the same with ua = sum(a) and ub = sum(bcap) given (added k = 0, 1, ... as here).
template <class WS>
inline double solve_sums(const double* C, const double* a, const double* bcap, WS& ws, double ua, double ub,
                         double hint, bool have_rho, const i64* a_order = nullptr, i64 a_count = 0,
                         const i64* kids = nullptr);

template <class WS>
inline double solve(const double* C, const double* a, const double* bcap, WS& ws,
                    double hint = std::numeric_limits<double>::infinity(), bool have_rho = false,
                    const i64* a_order = nullptr, i64 a_count = 0) {
    const i64 n = ws.n;
    double ua = 0.0, ub = 0.0;
    for (i64 k = 0; k < n; ++k) {
        ua += a[k];
        ub += bcap[k];
    }
    return solve_sums(C, a, bcap, ws, ua, ub, hint, have_rho, a_order, a_count);
}

template <class WS>
inline double solve_sums(const double* C, const double* a, const double* bcap, WS& ws, double ua, double ub,
                         double hint, bool have_rho, const i64* a_order, i64 a_count, const i64* kids) {
    double upper = std::min(std::min(ua, ub), hint);
    if (upper <= RESIDUAL_EPS) return 0.0;
    const GreedyResult gr = greedy(C, a, bcap, ws, have_rho, a_order, a_count, kids);
    upper = std::min(upper, gr.bound);
    if (gr.value >= upper - STOP_TOL) {  // the greedy pass reached a bound; it wrote no residual bits
        reset(C, ws, gr.n_touched, false);
        return gr.value;
    }
    sync_bits(C, ws, gr.n_touched);
    const PushRelabelResult pr = push_relabel(C, bcap, ws, true, gr.n_touched, gr.value, upper);
    reset(C, ws, pr.n_touched);
    return pr.value;
}

// Warm start: the max flow for new sink capacities `bcap`, from the preflow that the previous
// solve (same network, same supply) left in the workspace. Flow above a lowered sink capacity
// returns as excess at its layer-1 node, which keeps the preflow valid; push-relabel (starting
// with exact labels) runs on from there.
template <class WS>
inline double resolve(const double* C, const double* bcap, WS& ws, double supply_sum) {
    const i64 n = ws.n;
    double value = 0.0, ub = 0.0;
    for (i64 k = 0; k < n; ++k) {
        const double c = bcap[k];
        ub += c;
        if (ws.g[k] > c) {
            ws.e[k] += ws.g[k] - c;
            ws.g[k] = c;
        }
        value += ws.g[k];
    }
    return push_relabel(C, bcap, ws, false, 0, value, std::min(supply_sum, ub)).value;
}

// One warm-started sweep: supply `fixed` (n,), sink capacities bcap_of(q) (a pointer to n values,
// valid until the next call) for q < count. The first problem starts from zero flow, each next one
// from the previous preflow (resolve). out_vals[q] = the max-flow value of problem q. Leaves the
// workspace dirty (reset with -1). halt() is asked after each problem; when it says true the sweep
// ends there (false is returned; the values after that problem are not computed).
struct NoHalt {
    bool operator()() const { return false; }
};

template <class WS, class Bcap, class Halt = NoHalt>
inline bool sweep_with(const double* C, const double* fixed, Bcap bcap_of, i64 count, WS& ws, double* out_vals,
                       Halt halt = Halt()) {
    const i64 K = ws.K, n = ws.n;
    double sa = 0.0;
    for (i64 k = 0; k < n; ++k) sa += fixed[k];
    if (sa <= RESIDUAL_EPS) {
        for (i64 q = 0; q < count; ++q) out_vals[q] = 0.0;
        return true;
    }
    reset(C, ws, -1);
    const i64 top = (K - 1) * n;
    for (i64 k = 0; k < n; ++k)
        if (fixed[k] > RESIDUAL_EPS) ws.e[top + k] = fixed[k];
    for (i64 q = 0; q < count; ++q) {
        out_vals[q] = resolve(C, bcap_of(q), ws, sa);
        if (halt()) return false;
    }
    return true;
}

// sweep_with over the rows of vary (count, n).
template <class WS>
inline void sweep(const double* C, const double* fixed, const double* vary, i64 count, WS& ws,
                  double* out_vals) {
    sweep_with(C, fixed, [vary, n = ws.n](i64 q) { return vary + q * n; }, count, ws, out_vals);
}

}  // namespace maxflow
