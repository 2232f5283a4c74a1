"""Exact maximum flow on the layered attention graph (internal solver behind `attention_flow`).

The graph of Abnar & Zuidema (2020): node (l, i) for layer l = 0..L and position i, an edge
(l, i) -> (l-1, k) with capacity A_l[i, k]. We need the max-flow value from one node (L, s) to
every input node (0, j), for many (sample, layer, source) at once. Structure used here:

* Only layers L..1 matter and, in layer 0, only the sink: the last hop is (1, k) -> (0, j) with
  capacity A_1[k, j]; other input nodes are dead ends. The first hop is (L, s) -> (L-1, k) with
  capacity A_L[s, k]. So one problem is a "middle" network of node layers L-1..1 with a supply
  vector a = A_L[s, :] on top and sink capacities b = A_1[:, j] at the bottom.
* L = 1: the value is A_1[s, j]. L = 2: the paths s -> (1, k) -> j share no edge, so the value is
  sum_k min(A_2[s, k], A_1[k, j]) in closed form.
* L >= 3: highest-label push-relabel (float64) with global relabelling, the gap heuristic, a
  look-ahead that pushes from layer 2 straight through layer 1 into the sink, and an exact early
  stop: the two trivial cuts give value <= U = min(sum(a), sum(b)), so a solve ends as soon as the
  sink holds U. Candidate arcs are found with bit sets instead of scans: per node, one bit per
  arc with residual capacity (down and up, row and column views), and per (layer, label) the set
  of nodes with that label. A discharge ANDs two words to find its admissible arcs, a relabel
  ANDs words label by label, and a global relabel (exact distances by breadth-first search) costs
  O(nodes) word operations instead of a pass over every arc -- cheap enough to start every solve
  with exact labels.
* A problem solved on its own starts from a greedy preflow instead of zero flow: one pass down
  the layers where the fullest nodes send first, each to the children that could pass on the most
  first (rho = what a node could pass to the sink with the network to itself, computed bottom-up),
  never giving a child more than its rho. It often reaches U outright (then push-relabel does not
  run at all) and otherwise leaves little to do. Each problem runs from the end with the smaller
  trivial cut (the reversed network is the same kind of network with transposed matrices).
* Many problems share one network: for a fixed (sample, layer) they differ only in the supply a
  (the source row) and the sink capacities b (the sink column). With many source rows that come
  in runs of alike rows (per-head flow: the heads of one source; `_plan.SWEEP_ROWS_PER_SOURCE`)
  and 4+ layers, each sink j is one "sweep" on the reversed network:
  supply = column j of A_1 (fixed), sink capacities = the rows, taken in an order that keeps
  consecutive rows alike (grouped by their largest entry, i.e. by source position), each problem
  warm-started from the previous one's preflow. New sink capacities keep the preflow valid once
  flow above a lowered capacity returns as excess at its node; a global relabel makes the labels
  exact and push-relabel continues to the new maximum. Excess that cannot reach the sink stays
  where it is (phase one of push-relabel only). With 3 layers the greedy start alone beats sweeps.
* Work is split into tasks (closed-form rows, rows solved problem by problem, or a sweep over some
  sinks of one (sample, layer)), taken by the extension's threads longest first, each thread
  taking the next task as it frees up; a call with fewer problem-by-problem tasks than threads
  cuts them into sink ranges (every problem starts from zero flow, so the values do not change);
  a small call runs on the calling thread.
* A small call (<= SMALL_ROWS rows, none swept, e.g. CLS flow of one sample) skips the plan: one
  kernel (`run_rows`) runs the closed forms and the sink ranges of the other rows, the same
  kernels as the planned path. Without padding, `small_full_flow` does the whole call -- the
  rows, their supplies, the small test, the thread count -- in one kernel call (`run_full_small`).
  `direct_mean_flow` goes one step further for float64 attention: the head mean too, and also for
  a batch of any size none of whose rows is swept (Table-1 CLS flow), each job mixing a few
  samples' heads and solving their rows while they are in cache.
* Memory: without padding the forward network is read in place from `caps`; the sinks' rho is
  kept for the sample's next rows only when it has some (one slot for a single row). Label sets
  are grown with the highest label. A causal graph too large to hold twice can be given packed
  (`lower_max_flow`: lower triangles only, forward network only, one thread).

Exactness: arcs with residual <= RESIDUAL_EPS count as saturated and excess <= RESIDUAL_EPS as
zero, so the value found is within (#arcs + #nodes) * RESIDUAL_EPS + STOP_TOL of the true maximum
(1e-13 per arc: < 3e-8 for 12 layers x 128 tokens), warm-started or not. No integer rounding.

The kernels are C++17 (src/cpp/maxflow/: workspace, labels, push_relabel, greedy, solve, tasks,
pool), compiled into the extension `_kernels` when the package is built: nothing is compiled or
cached at run time. They release the GIL while they run. Threads: `_threads.flow_threads`
(ATTNFLOW_THREADS fixes the count, bounded by the CPUs). Planning (which rows are swept, task
costs, the spread over threads) is numpy, in `_plan`.

Every kernel call can be stopped: between problems the calling thread polls for Ctrl-C every
50 ms (control.hpp: PyErr_CheckSignals with the GIL taken), so a KeyboardInterrupt ends any call
within about that plus one problem, and nothing is returned. A call estimated above PROGRESS_WORK
-- small calls included -- shows a progress bar fed by the kernels as they go (unless
progress=False).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from . import _kernels
from ._plan import SMALL_ROWS, SWEEP_LAYERS_MIN, SWEEP_ROWS_MIN, _assign, _plan, _rounds, _small, _split_sinks
from ._threads import check_env, flow_threads

__all__ = [
    "PROGRESS_WORK",
    "RESIDUAL_EPS",
    "STOP_TOL",
    "check_env",
    "flow_threads",
    "layered_max_flow",
    "lower_max_flow",
    "small_full_flow",
]

# The tolerances live in the C++ kernels (workspace.hpp); these are their values.
RESIDUAL_EPS: float = _kernels.RESIDUAL_EPS
STOP_TOL: float = _kernels.STOP_TOL
# Below this much estimated work (~ arc visits; ~0.2 ms on one thread) a call runs on the calling
# thread: a second thread adds ~0.1 ms (waking it, and each thread's own setup of the rows it
# shares), so a one-sample Table-1 CLS call (8e4: 0.12 ms on one thread, 0.16 ms on two) runs
# serially and a 12-layer one at 32 tokens (1.8e6: 1.9 ms, 1.1 ms on two) does not
# (benchmarks/flow_speed.py, section "idle"; measured 2026-11-27).
SERIAL_WORK = 1.5e5
# Above this much estimated work a call shows a progress bar with a time estimate (measured: ~5e8
# to 1e9 per second on two busy cores, so about 1-2 s there; every row of 12 layers x 2048 tokens
# is ~1e13, CLS flow of 10 layers x 2048 tokens ~3e11). Small calls too (until issue 57 they ran
# in one kernel call without a bar whatever their size: 179 s without a word).
PROGRESS_WORK = 1.0e9
# A call with a progress bar runs its tasks in about this many rounds, the bar moving after each.
PROGRESS_ROUNDS = 50


@contextlib.contextmanager
def _progress_bar(total: float, show: bool) -> Iterator[Callable[[float], Callable[[int], None]] | None]:
    """A tqdm bar (stderr) over `total` estimated work when `show`, else nothing. Yields
    `feed(base)`: the kernels' progress callback for work done after `base` (the kernels call it
    with their own count, on the calling thread), or None without a bar."""
    if not show:
        yield None
        return
    from tqdm.auto import tqdm

    bar_format = "{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]"
    with tqdm(total=float(total), desc="attention flow", bar_format=bar_format, leave=False) as bar:

        def feed(base: float) -> Callable[[int], None]:
            def update(done: int) -> None:
                bar.update(max(min(base + float(done), bar.total) - bar.n, 0.0))

            return update

        yield feed
        bar.update(max(bar.total - bar.n, 0.0))


def _execute(
    caps, lengths, row_b, row_L, supply, plan, tasks: np.ndarray, out: np.ndarray, threads: int,
    progress: Callable[[int], None] | None = None,
) -> None:  # fmt: skip
    """Run the plan's tasks `tasks` (ids) on up to `threads` threads when there is enough work (a
    call with fewer tasks than threads cuts them into sink ranges); on the calling thread
    otherwise. progress: the kernels' callback (see `_progress_bar`)."""
    order, cost = plan[0], plan[-1]
    work = float(cost[tasks].sum())
    if work < SERIAL_WORK or threads <= 1:
        kind, t0, t1, t2, t3, _ = (v[tasks] for v in plan[1:])
        one_worker = np.array([0, tasks.size], np.int64)
        worker_tasks = np.arange(tasks.size, dtype=np.int64)
        _kernels.run_tasks(
            caps, lengths, row_b, row_L, supply, order, kind, t0, t1, t2, t3, one_worker, worker_tasks, 1, out,
            progress,
        )  # fmt: skip
        return
    kind, t0, t1, t2, t3, sub_cost = _split_sinks(plan, tasks, threads)
    worker_ptr, worker_tasks = _assign(sub_cost)
    _kernels.run_tasks(
        caps,
        lengths,
        row_b,
        row_L,
        supply,
        order,
        kind,
        t0,
        t1,
        t2,
        t3,
        worker_ptr,
        worker_tasks,
        threads,
        out,
        progress,
    )


def _small_limits(*extra: int) -> np.ndarray:
    """What the one-call kernels test a call against: (SMALL_ROWS, SWEEP_ROWS_MIN,
    SWEEP_LAYERS_MIN, the threads free now, *extra)."""
    return np.array((SMALL_ROWS, SWEEP_ROWS_MIN, SWEEP_LAYERS_MIN, flow_threads(None), *extra), np.int64)


def small_full_flow(
    caps: np.ndarray, row_layer: np.ndarray, row_src: np.ndarray, progress: bool | None = None
) -> np.ndarray | None:
    """`layered_max_flow` of a small call on a batch without padding, in one kernel call, or None
    when the call is not small (`_small`) or, unless `progress` is False, its estimated work is
    above PROGRESS_WORK (it then shows a bar on the general path). caps: (B, L, N, N) float64,
    C-contiguous; the rows are (b, q) for every sample b and q < Q, the source at 0-based layer
    row_layer[q] (non-decreasing) and position row_src[q]. Returns (B * Q, N), the values
    layered_max_flow gives for these rows. Ctrl-C stops it (KeyboardInterrupt).
    """
    max_work = np.inf if progress is False else PROGRESS_WORK
    return _kernels.run_full_small(caps, row_layer, row_src, _small_limits(), SERIAL_WORK, max_work)


def direct_mean_flow(
    attn: np.ndarray, batched: bool, residual: float, tol: float, layers: Any, sources: Any, normalize: bool,
    mix_min: int, progress: bool | None,
) -> np.ndarray | None:  # fmt: skip
    """`attention_flow` on float64 attention (B, L, H, T, T) without padding, heads averaged, in
    one kernel call (`_kernels.mean_flow_direct`: the head mean and residual, the checks of
    `prepare` with row sums within `tol` of 1, the rows, the values and, with `normalize`, their
    normalisation) when the call is small (see `small_full_flow`) or has no row to sweep, and,
    unless `progress` is False, at most PROGRESS_WORK of work (a larger one shows its bar on the
    other paths); None, before any work, for any other call, or after the mix when a check
    fails. A small call's attention of at least `mix_min` entries is mixed on the threads free
    now; a batch mixes each sample's heads in the task that solves its rows."""
    return _kernels.mean_flow_direct(
        attn,
        batched,
        residual,
        tol,
        layers,
        sources,
        normalize,
        _small_limits(mix_min),
        SERIAL_WORK,
        np.inf if progress is False else PROGRESS_WORK,
    )


def lower_max_flow(
    packed: np.ndarray, tokens: int, row_L: np.ndarray, supply: np.ndarray, *, progress: bool | None = None
) -> np.ndarray:
    """`layered_max_flow` of one causal sample whose capacities are packed lower triangles.

    packed: (L, T (T + 1) / 2) float64, packed[l] = layer l+1's A[i, k] for k <= i, row by row
    (entry i (i + 1) / 2 + k); row r is a source at 1-based layer row_L[r] (non-decreasing) with
    out-capacities supply[r] (T,). Returns (R, T). The kernel (`run_lower`) reads the network in
    place and, per row, sweeps the sinks from the last input to the first on the forward network,
    each sink warm-started from the previous one's preflow, on the calling thread with one
    workspace: half the memory of the dense path, which also builds the reversed network and a
    workspace per thread. Values agree with `layered_max_flow` on the same graph within the
    solver's tolerance (the two take different paths to the same maximum). progress: as in
    `layered_max_flow`; Ctrl-C stops it (KeyboardInterrupt).
    """
    row_L = np.ascontiguousarray(row_L, dtype=np.int64)
    n = float(tokens)
    work = float((n * n * np.where(row_L <= 2, 1.0, n * np.maximum(row_L - 2, 1))).sum())  # as `_small`
    with _progress_bar(work, progress if progress is not None else work > PROGRESS_WORK) as feed:
        return _kernels.run_lower_rows(
            np.ascontiguousarray(packed, dtype=np.float64),
            int(tokens),
            row_L,
            np.ascontiguousarray(supply, dtype=np.float64),
            None if feed is None else feed(0.0),
        )


def layered_max_flow(
    caps: np.ndarray,
    lengths: np.ndarray,
    row_b: np.ndarray,
    row_L: np.ndarray,
    supply: np.ndarray,
    *,
    progress: bool | None = None,
    threads: int | None = None,
) -> np.ndarray:
    """Max-flow values from a source with out-capacities `supply[r]` to every input node.

    caps: (B, Lmax, N, N) float64, caps[b, l] = capacity matrix of layer l+1, positions of sample b
    packed at the front (0..lengths[b]-1). Row r is a source at 1-based layer row_L[r] of sample
    row_b[r] whose edges to layer row_L[r]-1 have capacities supply[r] (N,), e.g. caps[b, L-1, s].
    Rows must be sorted by (row_b, row_L). Returns (R, N) float64: the max-flow value from that
    source to input node j, for j < lengths[row_b[r]], and 0 beyond.

    progress: a tqdm bar (stderr) with the remaining time; None = only when the estimated work
    exceeds PROGRESS_WORK. The bar changes the order tasks run in, never a value. Any call stops
    on Ctrl-C within about 50 ms plus one problem (KeyboardInterrupt; nothing is returned).
    threads: how many threads may run the kernels; None = `flow_threads()` (the CPUs free now, or
    ATTNFLOW_THREADS). Values never depend on it.
    """
    caps = np.ascontiguousarray(caps, dtype=np.float64)
    supply = np.ascontiguousarray(supply, dtype=np.float64)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    row_b = np.ascontiguousarray(row_b, dtype=np.int64)
    row_L = np.ascontiguousarray(row_L, dtype=np.int64)
    out = np.zeros((row_b.shape[0], caps.shape[-1]), dtype=np.float64)
    if threads is None:
        check_env()  # a bad ATTNFLOW_THREADS is refused on every call, not only on those using threads
    else:
        threads = flow_threads(threads)
    if row_b.shape[0] == 0:
        return out
    work = None if progress else _small(row_b, row_L, lengths)
    if work is not None:  # one kernel, no plan: the Python around a call is most of a small call's time
        threads = 1 if work < SERIAL_WORK else min(flow_threads(threads), caps.shape[-1])
        with _progress_bar(work, progress is None and work > PROGRESS_WORK) as feed:
            _kernels.run_rows(
                caps,
                lengths,
                row_b,
                row_L,
                supply,
                threads,
                threads,
                out,
                None if feed is None else feed(0.0),
            )  # a sink range per thread
        return out
    threads = flow_threads(threads)
    plan = _plan(row_b, row_L, lengths, supply)
    cost = plan[-1]
    if not (cost.sum() > PROGRESS_WORK if progress is None else progress):
        _execute(caps, lengths, row_b, row_L, supply, plan, np.arange(cost.shape[0]), out, threads)
        return out
    with _progress_bar(float(cost.sum()), True) as feed:
        base = 0.0
        for tasks in _rounds(cost, PROGRESS_ROUNDS):
            _execute(caps, lengths, row_b, row_L, supply, plan, tasks, out, threads, feed(base))
            base += float(cost[tasks].sum())
            feed(base)(0)  # the round is done: the bar at its end
    return out
