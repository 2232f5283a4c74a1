// Python bindings of the max-flow kernels: attnflow.explain._maxflow._kernels.
// The GIL is released while a kernel runs; threads come from the extension's own pool (pool.hpp).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "pool.hpp"
#include "tasks.hpp"

namespace py = pybind11;
using namespace maxflow;

using F64 = py::array_t<double, py::array::c_style | py::array::forcecast>;
using I64 = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;

namespace {

void require(bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("attnflow max flow: " + what);
}

// One call's Control (control.hpp) with the Python side of its polls, run on the calling thread
// with the GIL taken: Ctrl-C (PyErr_CheckSignals runs the SIGINT handler, which raises
// KeyboardInterrupt) and `progress(done)` (a callable, or None), each ending the call when it
// raises. finish(), with the GIL held again after the kernel, raises what a poll caught: a stopped
// call never returns its partial values.
struct Watch {
    Control ctl;
    py::object progress;
    bool raised = false;
    explicit Watch(py::object progress_ = py::none()) : progress(std::move(progress_)) {
        ctl.poll = [this] { poll(); };
    }
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;
    void poll() {
        py::gil_scoped_acquire gil;
        if (raised) return;
        if (PyErr_CheckSignals() != 0) {
            raised = true;
            ctl.stop.store(true);
            return;
        }
        if (progress.is_none()) return;
        try {
            progress(ctl.done.load(std::memory_order_relaxed));
        } catch (py::error_already_set& e) {
            e.restore();
            raised = true;
            ctl.stop.store(true);
        }
    }
    void finish() const {
        if (raised) throw py::error_already_set();
    }
};

// The call's arrays, checked: shapes agree and every row points inside caps (an index out of range
// would read outside the buffers).
Call make_call(const F64& caps, const I64& lengths, const I64& row_b, const I64& row_L, const F64& supply,
               py::array_t<double, py::array::c_style>& out) {
    require(caps.ndim() == 4 && caps.shape(2) == caps.shape(3), "caps must be (B, L, N, N)");
    const i64 B = caps.shape(0), Lmax = caps.shape(1), N = caps.shape(2);
    require(N <= TOUCH_MASK, "at most 2**21 - 1 positions");
    require(Lmax < TOUCH_LAYERS, "at most 2**20 - 1 layers");
    const i64 R = row_b.size();
    require(lengths.ndim() == 1 && lengths.shape(0) == B, "lengths must be (B,)");
    require(row_b.ndim() == 1 && row_L.ndim() == 1 && row_L.shape(0) == R, "row_b, row_L must be (R,)");
    require(supply.ndim() == 2 && supply.shape(0) == R && supply.shape(1) == N, "supply must be (R, N)");
    require(out.ndim() == 2 && out.shape(0) == R && out.shape(1) == N, "out must be (R, N)");
    const i64* len = lengths.data();
    for (i64 b = 0; b < B; ++b) require(len[b] >= 0 && len[b] <= N, "lengths must lie in [0, N]");
    const i64* rb = row_b.data();
    const i64* rl = row_L.data();
    for (i64 r = 0; r < R; ++r) {
        require(rb[r] >= 0 && rb[r] < B, "row_b out of range");
        require(rl[r] >= 1 && rl[r] <= Lmax, "row_L out of range");
        require(r == 0 || rb[r] > rb[r - 1] || (rb[r] == rb[r - 1] && rl[r] >= rl[r - 1]),
                "rows must be sorted by (row_b, row_L)");
    }
    return Call{caps.data(), B, Lmax, N, len, rb, rl, supply.data(), out.mutable_data()};
}

// Closed forms, then each (row, sink) problem on its own with the sinks cut into `parts` ranges.
void rows_kernel(const Call& c, i64 R, i64 parts, i64 threads) {
    std::vector<i64> closed, cold;
    for (i64 r = 0; r < R; ++r) (c.row_L[r] <= 2 ? closed : cold).push_back(r);
    const i64 N = c.N;
    const i64 width = (N + parts - 1) / parts;
    Pool& p = pool();
    py::gil_scoped_release release;
    p.run(
        parts, threads,
        [&](i64 part) {
            if (part == 0 && !closed.empty()) run_closed(c, closed.data(), i64(closed.size()));
            if (!cold.empty())
                run_cold(c, cold.data(), i64(cold.size()), part * width, std::min(part * width + width, N));
        },
        c.ctl);
}

void run_rows(const F64& caps, const I64& lengths, const I64& row_b, const I64& row_L, const F64& supply,
              i64 parts, i64 threads, py::array_t<double, py::array::c_style>& out, const py::object& progress) {
    Call c = make_call(caps, lengths, row_b, row_L, supply, out);
    require(parts >= 1, "parts must be >= 1");
    Watch watch(progress);
    c.ctl = &watch.ctl;
    rows_kernel(c, row_b.size(), parts, threads);
    watch.finish();
}

// The rows of a small call of a full batch (no padding): r = (b, q) for every sample b and q < Q,
// source (layer lq[q] + 1, position sq[q]); lq non-decreasing and in range. False when the call is
// not small (`_small`: more than SMALL_ROWS rows, or SWEEP_ROWS_MIN rows of one (sample, layer) at
// layer >= SWEEP_LAYERS_MIN); nothing is computed then. lim = (SMALL_ROWS, SWEEP_ROWS_MIN,
// SWEEP_LAYERS_MIN, threads free).
bool small_rows(i64 B, i64 Q, const i64* lq, const i64* lim, std::vector<i64>& rb, std::vector<i64>& rl) {
    const i64 R = B * Q, gap = lim[1] - 1;
    if (R > lim[0]) return false;
    rb.resize(R), rl.resize(R);
    for (i64 r = 0; r < R; ++r) rb[r] = r / Q, rl[r] = lq[r % Q] + 1;
    for (i64 r = 0; gap >= 1 && r + gap < R; ++r)
        if (rb[r + gap] == rb[r] && rl[r + gap] == rl[r] && rl[r + gap] >= lim[2]) return false;
    return true;
}

// The values of the rows of small_rows (out: (B * Q, N), zero-filled here): the supplies
// caps[b, lq[q], sq[q]], the thread count from the estimated work, then the closed forms and the
// sink ranges of the other rows (rows_kernel). What layered_max_flow does with such a call.
// The estimated work of the rows rl (1-based layers) of N tokens (`_small`'s).
double small_work(i64 N, const std::vector<i64>& rl) {
    double work = 0.0;  // whole numbers below 2**53: exact in any order
    const double n = double(N);
    for (const i64 L : rl) work += n * n * (L <= 2 ? 1.0 : n * double(std::max<i64>(L - 2, 1)));
    return work;
}

void small_flow(const double* cp, i64 B, i64 Lmax, i64 N, i64 Q, const i64* sq, const i64* lim,
                double serial_work, const std::vector<i64>& rb, const std::vector<i64>& rl, double* out,
                Control* ctl) {
    const i64 R = B * Q;
    const double work = small_work(N, rl);
    const i64 threads = work < serial_work ? 1 : std::min(lim[3], N);
    std::vector<double> supply(R * N);
    std::vector<i64> lengths(B, N);
    for (i64 r = 0; r < R; ++r) {
        const double* src = cp + ((rb[r] * Lmax + rl[r] - 1) * N + sq[r % Q]) * N;
        std::copy(src, src + N, supply.data() + r * N);
    }
    std::fill(out, out + R * N, 0.0);
    const Call c{cp, B, Lmax, N, lengths.data(), rb.data(), rl.data(), supply.data(), out, ctl};
    rows_kernel(c, R, threads, threads);
}

// The small call of a full batch (no padding) in one step: rows r = (b, q) for every sample b and
// q < Q, source (layer row_layer[q] + 1, position row_src[q]); row_layer non-decreasing. Does what
// layered_max_flow does with such a call (the rows, their supplies caps[b, row_layer[q],
// row_src[q]], the `_small` test and the thread count, then run_rows): returns the (B * Q, N)
// values, or None when the call is not small (it then needs the plan) or its estimated work is
// above max_work (it then shows a progress bar). limits = (SMALL_ROWS, SWEEP_ROWS_MIN,
// SWEEP_LAYERS_MIN, threads free); serial_work = SERIAL_WORK. Ctrl-C stops it (KeyboardInterrupt).
py::object run_full_small(const F64& caps, const I64& row_layer, const I64& row_src, const I64& limits,
                          double serial_work, double max_work) {
    require(caps.ndim() == 4 && caps.shape(2) == caps.shape(3), "caps must be (B, L, N, N)");
    require(limits.size() == 4, "limits must be (SMALL_ROWS, SWEEP_ROWS_MIN, SWEEP_LAYERS_MIN, threads)");
    const i64 B = caps.shape(0), Lmax = caps.shape(1), N = caps.shape(2), Q = row_layer.size();
    require(row_src.size() == Q && Q >= 1, "row_layer, row_src must be (Q,), Q >= 1");
    const i64 *lq = row_layer.data(), *sq = row_src.data();
    for (i64 q = 0; q < Q; ++q) {
        require(lq[q] >= 0 && lq[q] < Lmax && sq[q] >= 0 && sq[q] < N, "a row is out of range");
        require(q == 0 || lq[q] >= lq[q - 1], "row_layer must be non-decreasing");
    }
    std::vector<i64> rb, rl;
    if (!small_rows(B, Q, lq, limits.data(), rb, rl) || small_work(N, rl) > max_work) return py::none();
    py::array_t<double, py::array::c_style> out({B * Q, N});
    Watch watch;
    small_flow(caps.data(), B, Lmax, N, Q, sq, limits.data(), serial_work, rb, rl, out.mutable_data(), &watch.ctl);
    watch.finish();
    return std::move(out);
}

void run_tasks(const F64& caps, const I64& lengths, const I64& row_b, const I64& row_L, const F64& supply,
               const I64& order, const I64& kind, const I64& t0, const I64& t1, const I64& t2, const I64& t3,
               const I64& worker_ptr, const I64& worker_tasks, i64 threads,
               py::array_t<double, py::array::c_style>& out, const py::object& progress) {
    Call c = make_call(caps, lengths, row_b, row_L, supply, out);
    Watch watch(progress);
    c.ctl = &watch.ctl;
    const i64 R = row_b.size(), n_tasks = kind.size();
    require(order.size() == R, "order must be (R,)");
    for (const I64* v : {&t0, &t1, &t2, &t3}) require(v->size() == n_tasks, "task arrays must be alike");
    const i64 n_workers = worker_ptr.size() - 1;
    require(n_workers >= 1, "worker_ptr must have >= 2 entries");
    const i64 *o = order.data(), *k = kind.data(), *a0 = t0.data(), *a1 = t1.data(), *a2 = t2.data(),
              *a3 = t3.data(), *wp = worker_ptr.data(), *wt = worker_tasks.data();
    for (i64 r = 0; r < R; ++r) require(o[r] >= 0 && o[r] < R, "order out of range");
    for (i64 t = 0; t < n_tasks; ++t) {
        require(0 <= a0[t] && a0[t] < a1[t] && a1[t] <= R, "a task's rows are out of range");
        require(0 <= a2[t] && a2[t] <= a3[t] && a3[t] <= c.N, "a task's sinks are out of range");
        require(k[t] >= 0 && k[t] <= 2, "task kind must be 0, 1 or 2");
    }
    require(wp[0] == 0 && wp[n_workers] == i64(worker_tasks.size()), "worker_ptr must span worker_tasks");
    for (i64 w = 0; w < n_workers; ++w) require(wp[w] <= wp[w + 1], "worker_ptr must be non-decreasing");
    for (i64 q = 0; q < i64(worker_tasks.size()); ++q) require(wt[q] >= 0 && wt[q] < n_tasks, "bad task id");
    Pool& p = pool();
    {
        py::gil_scoped_release release;
        p.run(
            n_workers, threads,
            [&](i64 w) {
                for (i64 q = wp[w]; q < wp[w + 1] && !watch.ctl.stop.load(std::memory_order_relaxed); ++q) {
                    const i64 t = wt[q];
                    run_task(c, o, k[t], a0[t], a1[t], a2[t], a3[t]);
                }
            },
            c.ctl);
    }
    watch.finish();
}

// --- the capacities of a call, from attention as given (the numpy steps of flow.py, fused) ------

// numpy's einsum("...k->...") of one contiguous row of float64 (`row_sums`), its order of additions
// (numpy 2's sum_of_arr with two-lane vectors): lane l takes entries 2p + l, eight at a time as
// (x0 + x1) + (x2 + x3) of their pairs added to the lane, then pairs one by one (the last lane of
// an odd row gets 0.0), and lane 0 + lane 1 at the end. flow.py checks it against numpy once per
// process before it trusts it (`row_sums_np`), and takes numpy's row sums otherwise.
inline double np_row_sum(const double* d, i64 count) {
    double acc0 = 0.0, acc1 = 0.0;
    for (; count >= 8; count -= 8, d += 8) {
        acc0 = ((d[0] + d[2]) + (d[4] + d[6])) + acc0;
        acc1 = ((d[1] + d[3]) + (d[5] + d[7])) + acc1;
    }
    for (; count > 0; count -= 2, d += 2) {
        acc0 = d[0] + acc0;
        acc1 = (count >= 2 ? d[1] : 0.0) + acc1;
    }
    return acc0 + acc1;
}

// row[k] / d for k < T where d > 0, else 0: numpy's divide(x, s, out=zeros_like(x), where=s > 0)
// of `normalize_rows`, one row.
inline void divide_row(double* row, i64 T, double d) {
    if (d > 0)
        for (i64 k = 0; k < T; ++k) row[k] = row[k] / d;
    else
        for (i64 k = 0; k < T; ++k) row[k] = 0.0;
}

// np_row_sum over the last axis of x: (..., T) -> (...,), for the check against numpy.
py::array_t<double> row_sums_np(const F64& x) {
    require(x.ndim() >= 1, "x needs a last axis");
    const i64 T = x.shape(x.ndim() - 1), rows = T == 0 ? 0 : x.size() / T;
    py::array_t<double> out(rows);
    for (i64 r = 0; r < rows; ++r) out.mutable_data()[r] = np_row_sum(x.data() + r * T, T);
    return out;
}

// One head added to the running sum `og` (or copied into it, `first`), each entry the same addition
// (heads in order), and its rows checked: all entries >= 0 and each row's sum within `tol` of 1
// (four partial sums, independent chains; a sum is only compared with tol). False when a row fails.
inline bool add_head_plain(const double* xh, double* og, i64 T, bool first, double tol) {
    const i64 TT = T * T;
    if (first)
        std::copy(xh, xh + TT, og);
    else
        for (i64 k = 0; k < TT; ++k) og[k] += xh[k];
    bool good = true;
    for (i64 i = 0; i < T; ++i) {
        const double* row = xh + i * T;
        double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0, low = 0.0;
        i64 k = 0;
        for (; k + 4 <= T; k += 4) {
            s0 += row[k], s1 += row[k + 1], s2 += row[k + 2], s3 += row[k + 3];
            low = std::min(low, std::min(std::min(row[k], row[k + 1]), std::min(row[k + 2], row[k + 3])));
        }
        for (; k < T; ++k) s0 += row[k], low = std::min(low, row[k]);
        const double sum = (s0 + s1) + (s2 + s3);
        if (low < 0 || !(std::fabs(sum - 1.0) <= tol)) good = false;
    }
    return good;
}

#if defined(MAXFLOW_AVX2)
// add_head_plain with four doubles per instruction and the check in the same pass over a row (the
// row is read once): the same sums entry by entry, so the same bits; the check's four partial
// sums are the four lanes.
__attribute__((target("avx2"))) inline bool add_head_avx2(const double* xh, double* og, i64 T, bool first,
                                                          double tol) {
    bool good = true;
    for (i64 i = 0; i < T; ++i) {
        const double* row = xh + i * T;
        double* orow = og + i * T;
        __m256d acc = _mm256_setzero_pd(), low = _mm256_setzero_pd();
        i64 k = 0;
        for (; k + 4 <= T; k += 4) {
            const __m256d v = _mm256_loadu_pd(row + k);
            acc = _mm256_add_pd(acc, v);
            low = _mm256_min_pd(low, v);
            _mm256_storeu_pd(orow + k, first ? v : _mm256_add_pd(_mm256_loadu_pd(orow + k), v));
        }
        alignas(32) double s[4], m[4];
        _mm256_store_pd(s, acc);
        _mm256_store_pd(m, low);
        double lo = std::min(std::min(m[0], m[1]), std::min(m[2], m[3]));
        for (; k < T; ++k) {
            s[0] += row[k], lo = std::min(lo, row[k]);
            orow[k] = first ? row[k] : orow[k] + row[k];
        }
        const double sum = (s[0] + s[1]) + (s[2] + s[3]);
        if (lo < 0 || !(std::fabs(sum - 1.0) <= tol)) good = false;
    }
    return good;
}
#endif

inline bool add_head(const double* xh, double* og, i64 T, bool first, double tol) {
#if defined(MAXFLOW_AVX2)
    if (HAS_AVX2) return add_head_avx2(xh, og, T, first, tol);
#endif
    return add_head_plain(xh, og, T, first, tol);
}

// One (b, l) matrix of mix_into: the heads xg (H, T, T) added, checked and mixed into og (T, T).
struct Mix {
    i64 H, T;
    double residual, tol;
    bool divide;
    bool operator()(const double* xg, double* og) const {
        const i64 TT = T * T;
        const double keep = 1.0 - residual, heads = double(H);
        for (i64 h = 0; h < H; ++h)
            if (!add_head(xg + h * TT, og, T, h == 0, tol)) return false;
        if ((H & (H - 1)) == 0) {  // H = 2^p: x / 2^p and x * 2^-p are the same real number, rounded alike
            const double inv_heads = 1.0 / heads;
            for (i64 k = 0; k < TT; ++k) og[k] = keep * (og[k] * inv_heads);
        } else {
            for (i64 k = 0; k < TT; ++k) og[k] = keep * (og[k] / heads);
        }
        for (i64 i = 0; i < T; ++i) og[i * T + i] += residual;
        if (divide)
            for (i64 i = 0; i < T; ++i) divide_row(og + i * T, T, np_row_sum(og + i * T, T));
        return true;
    }
};

// Head mean and residual of a full batch: out[b, l] = (1 - r) * (sum_h attn[b, l, h]) / H + r I.
// The same float64 operations in the same order as numpy's attn.mean(axis=2) (heads added one
// after another from head 0, then divided by H) followed by `mix_residual` before its row
// normalisation, so the result is bit-identical. attn: (B, L, H, T, T) -> (B, L, T, T).
// In the same pass, the checks of `prepare` on every row of every head: all entries >= 0 and the
// row sum within `tol` of 1 (a NaN or inf makes the sum fail); false when one fails (the caller
// then takes the general path, which words the error). The sums here are only compared with
// the tolerance, so their order does not matter (the caller leaves a margin). With `divide`, each
// row is then divided by its sum (np_row_sum; 0 where the sum is not > 0): `normalize_rows`. The
// (b, l) matrices are split over up to `threads` threads of the pool (each matrix computed by one
// thread, in the same order: the same values).
bool mix_into(const double* x, i64 B, i64 L, i64 H, i64 T, double residual, double tol, i64 threads,
              bool divide, double* o, Control* ctl) {
    const i64 TT = T * T;
    const Mix mix_one{H, T, residual, tol, divide};
    std::atomic<bool> ok{true};
    const i64 G = B * L, parts = std::max<i64>(std::min(threads, G), 1);
    auto mix = [&](i64 part) {
        for (i64 g = G * part / parts; g < G * (part + 1) / parts && ok.load(std::memory_order_relaxed); ++g)
            if (halted(ctl, 0) || !mix_one(x + g * H * TT, o + g * TT)) {
                ok.store(false, std::memory_order_relaxed);
                return;
            }
    };
    pool().run(parts, parts, mix, ctl);
    return ok.load();
}

py::object mix_heads(const F64& attn, double residual, double tol, i64 threads, bool divide) {
    require(attn.ndim() == 5 && attn.shape(3) == attn.shape(4), "attn must be (B, L, H, T, T)");
    const i64 B = attn.shape(0), L = attn.shape(1), H = attn.shape(2), T = attn.shape(3);
    require(H >= 1, "attn needs at least one head");
    require(threads >= 1, "threads must be >= 1");
    py::array_t<double, py::array::c_style> out({B, L, T, T});
    bool ok;
    Watch watch;
    {
        py::gil_scoped_release release;
        ok = mix_into(attn.data(), B, L, H, T, residual, tol, threads, divide, out.mutable_data(), &watch.ctl);
    }
    watch.finish();  // a Ctrl-C during the mix raises (not None: the caller would redo the call)
    if (!ok) return py::none();
    return std::move(out);
}

// Positions of `attention_flow`'s sources or layers as given, when they are the common kinds:
// None (all of 0..upper-1), a Python int, or a list of Python ints, each in [0, upper). False for
// anything else (the caller's general path checks it and words the error).
bool positions(const py::handle& v, i64 upper, std::vector<i64>& out) {
    out.clear();
    if (v.is_none()) {
        for (i64 i = 0; i < upper; ++i) out.push_back(i);
        return upper > 0;
    }
    auto one = [&](PyObject* o) {
        if (!PyLong_CheckExact(o)) return false;
        int overflow = 0;
        const long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow != 0 || x < 0 || x >= upper) return false;
        out.push_back(i64(x));
        return true;
    };
    if (PyLong_CheckExact(v.ptr())) return one(v.ptr());
    if (!PyList_CheckExact(v.ptr())) return false;
    const Py_ssize_t size = PyList_GET_SIZE(v.ptr());
    if (size == 0) return false;
    for (Py_ssize_t q = 0; q < size; ++q)
        if (!one(PyList_GET_ITEM(v.ptr(), q))) return false;
    return true;
}

// Whether no (sample, layer) of a call would be swept (`_plan`): every sample has the rows lq (0-based
// layers, non-decreasing), so it is enough that no layer >= SWEEP_LAYERS_MIN holds SWEEP_ROWS_MIN rows.
bool none_swept(i64 Q, const i64* lq, const i64* lim) {
    for (i64 q = 0, e = 0; q < Q; q = e) {
        while (e < Q && lq[e] == lq[q]) ++e;
        if (e - q >= lim[1] && lq[q] + 1 >= lim[2]) return false;
    }
    return true;
}

// A call of many samples, none of its rows swept, in one pass over the samples: each job mixes the
// heads of a few samples into caps[b] (Mix), takes their rows' supplies caps[b, lq[q], sq[q]] and
// solves their rows -- the closed forms (run_closed) and every (row, sink) problem on its own
// (run_cold) -- while the samples are in cache. The values of mix_into + layered_max_flow's planned path bit for bit: the
// same Mix per matrix, and each problem starts from zero flow, so how rows are grouped into tasks
// changes no value. out: (B * Q, T). False when a check of the attention fails (nothing useful in
// out then). The mix and the solves in one pass: -9.5 % of a Table-1 call of 100 samples against
// mix_heads + the planned path (docs/performance.md, Issue 31, sixth round).
//
// Samples per job of batch_flow: 1, 2, 4, 6, 8 and 16 took the same time within the noise of a
// shared machine (Table-1 CLS flow, 100 samples, 2026-11-27).
constexpr i64 BATCH_JOB_SAMPLES = 4;

bool batch_flow(const double* x, i64 B, i64 L, i64 H, i64 T, const Mix& mix_one, i64 Q, const i64* lq,
                const i64* sq, i64 threads, double* caps, double* out, Control* ctl) {
    const i64 R = B * Q, TT = T * T;
    std::vector<i64> rb(R), rl(R), lengths(B, T), closed, cold;
    for (i64 r = 0; r < R; ++r) rb[r] = r / Q, rl[r] = lq[r % Q] + 1;
    for (i64 q = 0; q < Q; ++q) (lq[q] + 1 <= 2 ? closed : cold).push_back(q);
    std::vector<double> supply(R * T);
    const Call c{caps, B, L, T, lengths.data(), rb.data(), rl.data(), supply.data(), out, ctl};
    std::atomic<bool> ok{true};
    // jobs of a few samples each (fewer calls of run_cold's set-up), at least four per thread
    const i64 per_job = std::max<i64>(1, std::min<i64>(BATCH_JOB_SAMPLES, B / (4 * threads)));
    const i64 jobs = (B + per_job - 1) / per_job;
    auto job = [&](i64 j) {
        thread_local std::vector<i64> closed_rows, cold_rows;
        closed_rows.clear(), cold_rows.clear();
        for (i64 b = j * per_job; b < std::min(B, j * per_job + per_job); ++b) {
            if (!ok.load(std::memory_order_relaxed) || halted(ctl, 0)) return;
            for (i64 l = 0; l < L; ++l)
                if (!mix_one(x + (b * L + l) * H * TT, caps + (b * L + l) * TT)) {
                    ok.store(false, std::memory_order_relaxed);
                    return;
                }
            for (i64 q = 0; q < Q; ++q) {
                const double* src = caps + ((b * L + lq[q]) * T + sq[q]) * T;
                std::copy(src, src + T, supply.data() + (b * Q + q) * T);
            }
            for (const i64 q : closed) closed_rows.push_back(b * Q + q);
            for (const i64 q : cold) cold_rows.push_back(b * Q + q);
        }
        if (!closed_rows.empty()) run_closed(c, closed_rows.data(), i64(closed_rows.size()));
        if (!cold_rows.empty()) run_cold(c, cold_rows.data(), i64(cold_rows.size()), 0, T);
    };
    {
        py::gil_scoped_release release;
        pool().run(jobs, threads, job, ctl);
    }
    return ok.load();
}

// attention_flow of the common call in one step: float64 attention (B, L, H, T, T) (or (L, H, T, T),
// batched = false) without padding, mean heads; `layers` and `sources` as given to attention_flow.
// The capacities (Mix, rows normalised as `normalize_rows` does), the rows (layers x sources, the
// order of `_fast_flow`), the values and, with `normalize`, each value row divided by its sum: the
// values of `_fast_caps` + `_fast_flow`, bit for bit, shaped (B, layers, sources, T) (without B when
// not batched). Two kinds of call are taken: a small one (`_small`: mix_into, then small_flow, e.g.
// CLS flow of one sample) and a batch none of whose rows would be swept (batch_flow, e.g. Table-1
// CLS flow of many samples) whose estimated work is at most `progress_work` (a larger one shows a
// progress bar on the planned path). None, before any work, for any other call (layers out of
// order, rows to sweep, positions not given as None / int / list of ints in range), or after the
// mix when a check fails: the caller then takes the paths that word errors and plan large calls.
// limits = (SMALL_ROWS, SWEEP_ROWS_MIN, SWEEP_LAYERS_MIN, threads free, MIX_THREADS_MIN).
py::object mean_flow_direct(const F64& attn, bool batched, double residual, double tol, const py::object& layers,
                           const py::object& sources, bool normalize, const I64& limits, double serial_work,
                           double progress_work) {
    require(limits.size() == 5, "limits must be (SMALL_ROWS, SWEEP_ROWS_MIN, SWEEP_LAYERS_MIN, threads, MIX_MIN)");
    if (attn.ndim() != 5 || attn.shape(3) != attn.shape(4)) return py::none();
    const i64 B = attn.shape(0), L = attn.shape(1), H = attn.shape(2), T = attn.shape(3);
    if (B == 0 || L == 0 || H == 0 || T == 0) return py::none();
    require(T <= TOUCH_MASK && L < TOUCH_LAYERS, "too many positions or layers");
    const i64* lim = limits.data();
    thread_local std::vector<i64> lay, src, rb, rl;
    if (!positions(layers, L, lay) || !positions(sources, T, src)) return py::none();
    const i64 nl = i64(lay.size()), ns = i64(src.size()), Q = nl * ns;
    for (i64 q = 1; q < nl; ++q)
        if (lay[q] < lay[q - 1]) return py::none();  // rows out of layer order: the planned path
    std::vector<i64> lq(Q), sq(Q);
    for (i64 q = 0; q < Q; ++q) lq[q] = lay[q / ns], sq[q] = src[q % ns];
    const bool small = small_rows(B, Q, lq.data(), lim, rb, rl);
    double work = 0.0;  // of the whole call (`_plan`'s estimate); whole numbers below 2**53: exact
    const double n = double(T);
    for (i64 q = 0; q < Q; ++q)
        work += double(B) * n * n * (lq[q] + 1 <= 2 ? 1.0 : n * double(std::max<i64>(lq[q] - 1, 1)));
    // a call estimated long, small or not, shows its progress bar on the planned path
    if (work > progress_work || (!small && !none_swept(Q, lq.data(), lim))) return py::none();
    thread_local std::vector<double> caps;
    caps.resize(B * L * T * T);
    std::vector<py::ssize_t> shape{B, nl, ns, T};
    if (!batched) shape.erase(shape.begin());
    py::array_t<double, py::array::c_style> out(shape);
    double* o = out.mutable_data();
    bool ok;
    Watch watch;  // Ctrl-C stops the call (no progress bar: a call estimated long is not taken here)
    if (small) {
        const i64 mix_threads = attn.size() >= lim[4] ? lim[3] : 1;
        {
            py::gil_scoped_release release;
            ok = mix_into(attn.data(), B, L, H, T, residual, tol, mix_threads, true, caps.data(), &watch.ctl);
        }
        if (ok && !watch.raised)  // small_flow releases the GIL
            small_flow(caps.data(), B, L, T, Q, sq.data(), lim, serial_work, rb, rl, o, &watch.ctl);
    } else {
        const i64 threads = work < serial_work ? 1 : lim[3];
        ok = batch_flow(attn.data(), B, L, H, T, Mix{H, T, residual, tol, true}, Q, lq.data(), sq.data(), threads,
                        caps.data(), o, &watch.ctl);
    }
    watch.finish();
    if (!ok) return py::none();
    if (normalize)
        for (i64 r = 0; r < B * Q; ++r) divide_row(o + r * T, T, np_row_sum(o + r * T, T));
    if (caps.size() > std::size_t(1) << 20) caps = std::vector<double>();  // keep only a small call's
    return std::move(out);
}

// Max flow of a causal model's one sample from its packed capacities (run_lower). caps: (Ltot,
// n (n + 1) / 2) float64; row_L: (R,) 1-based, non-decreasing; supply: (R, n). Returns (R, n).
py::array_t<double> run_lower_rows(const F64& caps, i64 n, const I64& row_L, const F64& supply,
                                   const py::object& progress) {
    require(n >= 1 && n <= TOUCH_MASK, "n must lie in [1, 2**21 - 1]");
    require(caps.ndim() == 2 && caps.shape(1) == n * (n + 1) / 2, "caps must be (L, n (n + 1) / 2)");
    const i64 Ltot = caps.shape(0), R = row_L.size();
    require(row_L.ndim() == 1, "row_L must be (R,)");
    require(supply.ndim() == 2 && supply.shape(0) == R && supply.shape(1) == n, "supply must be (R, n)");
    const i64* rl = row_L.data();
    for (i64 r = 0; r < R; ++r) {
        require(rl[r] >= 1 && rl[r] <= Ltot, "row_L out of range");
        require(r == 0 || rl[r] >= rl[r - 1], "row_L must be non-decreasing");
    }
    py::array_t<double> out({R, n});
    double* o = out.mutable_data();
    Watch watch(progress);
    {
        py::gil_scoped_release release;
        run_lower(caps.data(), n, rl, supply.data(), R, o, &watch.ctl);
    }
    watch.finish();
    return out;
}

// divide(x, s, out=zeros_like(x), where=s > 0) of `normalize_rows`. x: (..., T), sums: (...).
void divide_rows(py::array_t<double, py::array::c_style>& x, const F64& sums) {
    require(x.ndim() >= 1, "x needs a last axis");
    const i64 T = x.shape(x.ndim() - 1);
    require(sums.size() * T == x.size(), "sums must hold one entry per row of x");
    double* v = x.mutable_data();
    const double* s = sums.data();
    const i64 rows = sums.size();
    py::gil_scoped_release release;
    for (i64 r = 0; r < rows; ++r) divide_row(v + r * T, T, s[r]);
}

// --- single problems on one network, for the tests (same kernels as the calls above) ----------

F64 network(const F64& caps, i64 b, i64 L, i64 n, bool reverse) {
    require(caps.ndim() == 4 && b >= 0 && b < caps.shape(0) && L >= 1 && L <= caps.shape(1), "bad network");
    require(n >= 0 && n <= caps.shape(2), "bad n");
    const Call c{caps.data(), caps.shape(0), caps.shape(1), caps.shape(2), nullptr, nullptr, nullptr, nullptr, nullptr};
    F64 C({std::max<i64>(L - 2, 1), n, n});
    std::fill(C.mutable_data(), C.mutable_data() + C.size(), 0.0);
    fill_network(c, b, L, n, reverse, C.mutable_data());
    return C;
}

void check_net(const F64& C, const Workspace& ws) {
    require(C.ndim() == 3 && C.shape(0) == ws.T && C.shape(1) == ws.n && C.shape(2) == ws.n,
            "C must be (max(K-1, 1), n, n) for the workspace");
}

void check_vec(const F64& v, const Workspace& ws, const char* name) {
    require(v.ndim() == 1 && v.shape(0) >= ws.n, std::string(name) + " must have n entries");
}

template <class T>
py::array_t<T> view(std::vector<T>& v, std::vector<py::ssize_t> shape, py::handle owner) {
    return py::array_t<T>(shape, v.data(), owner);
}

}  // namespace

PYBIND11_MODULE(_kernels, m) {
    m.doc() = "Max-flow kernels of attnflow's attention flow (C++17, compiled when the package is built).";
    m.attr("RESIDUAL_EPS") = RESIDUAL_EPS;
    m.attr("STOP_TOL") = STOP_TOL;
    m.def("run_rows", &run_rows, py::arg("caps"), py::arg("lengths"), py::arg("row_b"), py::arg("row_L"),
          py::arg("supply"), py::arg("parts"), py::arg("threads"), py::arg("out"), py::arg("progress") = py::none(),
          "Closed forms, then each (row, sink) problem on its own, sinks cut into parts; progress(done) is "
          "called now and then with the work done; Ctrl-C stops it (KeyboardInterrupt).");
    m.def("run_full_small", &run_full_small, py::arg("caps"), py::arg("row_layer"), py::arg("row_src"),
          py::arg("limits"), py::arg("serial_work"), py::arg("max_work") = std::numeric_limits<double>::infinity(),
          "A small call of a full batch: rows, supplies, the small test and run_rows in one step (None: not small, "
          "or its estimated work is above max_work).");
    m.def("mean_flow_direct", &mean_flow_direct, py::arg("attn"), py::arg("batched"), py::arg("residual"),
          py::arg("tol"), py::arg("layers"), py::arg("sources"), py::arg("normalize"), py::arg("limits"),
          py::arg("serial_work"), py::arg("progress_work"),
          "attention_flow of a small call, or of a batch with no rows to sweep, on float64 mean-head "
          "attention without padding, in one step (None: not such a call, or a check failed).");
    m.def("row_sums_np", &row_sums_np, py::arg("x"), "Row sums in numpy's einsum order (see flow.py).");
    m.def("run_tasks", &run_tasks, py::arg("caps"), py::arg("lengths"), py::arg("row_b"), py::arg("row_L"),
          py::arg("supply"), py::arg("order"), py::arg("kind"), py::arg("t0"), py::arg("t1"), py::arg("t2"),
          py::arg("t3"), py::arg("worker_ptr"), py::arg("worker_tasks"), py::arg("threads"), py::arg("out"),
          py::arg("progress") = py::none(),
          "The planned tasks, per worker list, on up to `threads` threads; progress(done) as in run_rows.");
    m.def("mix_heads", &mix_heads, py::arg("attn"), py::arg("residual"), py::arg("tol"), py::arg("threads") = 1,
          py::arg("divide") = false,
          "Head mean and residual of (B, L, H, T, T) float64 attention, before the row normalisation "
          "(with divide: after it, row sums in numpy's order); None when an entry is negative or a row "
          "does not sum to 1 within tol.");
    m.def("run_lower_rows", &run_lower_rows, py::arg("caps"), py::arg("n"), py::arg("row_L"), py::arg("supply"),
          py::arg("progress") = py::none(),
          "Max flow of one causal sample from its packed lower-triangular capacities, forward only, one thread.");
    m.def("divide_rows", &divide_rows, py::arg("x"), py::arg("sums"),
          "Rows of x divided in place by their sums (0 where a sum is not > 0).");
    m.def("network", &network, py::arg("caps"), py::arg("b"), py::arg("L"), py::arg("n"), py::arg("reverse"));

    py::class_<Workspace>(m, "Workspace")
        .def(py::init<i64, i64, i64>(), py::arg("K"), py::arg("n"), py::arg("touched_cap") = -1)
        .def_readonly("K", &Workspace::K)
        .def_readonly("n", &Workspace::n)
        .def_property_readonly("F", [](py::object self) {
            auto& ws = self.cast<Workspace&>();
            return view(ws.F, {ws.T, ws.n, ws.n}, self);
        })
        .def_property_readonly("down", [](py::object self) {
            auto& ws = self.cast<Workspace&>();
            return view(ws.down, {ws.T, ws.n, ws.W}, self);
        })
        .def_property_readonly("up", [](py::object self) {
            auto& ws = self.cast<Workspace&>();
            return view(ws.up, {ws.T, ws.n, ws.W}, self);
        })
        .def_property_readonly("upT", [](py::object self) {
            auto& ws = self.cast<Workspace&>();
            return view(ws.upT, {ws.T, ws.n, ws.W}, self);
        })
        .def_property_readonly("e", [](py::object self) {
            auto& ws = self.cast<Workspace&>();
            return view(ws.e, {ws.nn}, self);
        })
        .def_property_readonly("g", [](py::object self) {
            auto& ws = self.cast<Workspace&>();
            return view(ws.g, {ws.n}, self);
        });

    m.def("reset", [](const F64& C, Workspace& ws, i64 n_touched) {
        check_net(C, ws);
        require(n_touched <= i64(ws.touched.size()), "n_touched out of range");
        reset(C.data(), ws, n_touched);
    });
    m.def(
        "solve",
        [](const F64& C, const F64& a, const F64& bcap, Workspace& ws) {
            check_net(C, ws);
            check_vec(a, ws, "a");
            check_vec(bcap, ws, "bcap");
            return solve(C.data(), a.data(), bcap.data(), ws);
        },
        "Max flow of one problem from zero flow (the workspace must be at zero flow; left so).");
    m.def(
        "greedy",
        [](const F64& C, const F64& a, const F64& bcap, Workspace& ws) {
            check_net(C, ws);
            check_vec(a, ws, "a");
            check_vec(bcap, ws, "bcap");
            const GreedyResult r = greedy(C.data(), a.data(), bcap.data(), ws);
            return py::make_tuple(r.value, r.n_touched, r.bound);
        },
        "The greedy first preflow: (value, arcs touched, cut bound); the flow stays in the workspace.");
    m.def(
        "sweep",
        [](const F64& C, const F64& fixed, const F64& vary, Workspace& ws) {
            check_net(C, ws);
            check_vec(fixed, ws, "fixed");
            require(vary.ndim() == 2 && vary.shape(1) == ws.n, "vary must be (count, n)");
            F64 out({vary.shape(0)});
            sweep(C.data(), fixed.data(), vary.data(), vary.shape(0), ws, out.mutable_data());
            return out;
        },
        "One warm-started sweep: supply `fixed`, sink capacities vary[q]; the values.");
}
