"""Cutting a call into tasks with estimated costs, and spreading them over threads or rounds."""

from __future__ import annotations

import heapq
import itertools

import numpy as np

# Closed-form (1-2 layer) rows per task.
ROWS_PER_TASK = 256
# A (sample, layer) with at least this many source rows is swept, sink by sink, on the reversed
# network (the rows vary along a sweep); fewer rows are solved problem by problem.
SWEEP_ROWS_MIN = 4
# Sweeps only from this source layer up: with one middle layer (L = 3) the greedy start alone
# leaves almost nothing for push-relabel, which beats warm-starting (measured on SST-2 attention).
SWEEP_LAYERS_MIN = 4
# ... and, from SWEEP_ALIKE_FROM_N tokens, only when its rows come in runs of alike rows: at least
# SWEEP_ROWS_PER_SOURCE rows per source position (the largest entry of a residual-mixed row), as
# with the heads of one source (per-head flow). Rows of distinct sources, as in every row of the
# all-heads map, gain nothing from a warm start (taken in nearest-neighbour or random order they
# cost the same) and are solved problem by problem: all pairs of 12 layers x 64 tokens 0.36 s
# against 0.55 s swept, x 128 tokens 3.8 s against 5.4 s (random attention, 2 threads). Shorter
# inputs -- the study's, up to 55 tokens -- keep their sweeps, so their maps stay bit for bit what
# they were: solved problem by problem, SST-2's every-row flow moved by at most 3e-16 (1.4 s
# against 1.9 s per 96 sentences), yet its Spearman correlations by up to 5e-3, since 14,786 pairs
# of tokens tie to within 1e-12 and the float noise orders them (benchmarks/flow_speed.py and
# docs/performance.md, 2026-11-26).
SWEEP_ROWS_PER_SOURCE = 2
SWEEP_ALIKE_FROM_N = 64
# Sinks per sweep task: enough to amortise a sweep's start, few enough to balance the threads.
SWEEP_CHUNK = 8
# A call of at most this many rows, none of them swept, runs without a plan (`_small`).
SMALL_ROWS = 64
# Rows per task when the rows are few (each (row, sink) problem solved on its own).
ROWS_PER_COLD = 16


def _sweep_order(supply: np.ndarray) -> np.ndarray:
    """Rows in an order that keeps consecutive rows alike (a sweep's work grows with how much the
    rows change): grouped by their largest entry -- the source position, for residual-mixed rows,
    so e.g. the heads of one source follow each other. supply: (R, N) -> (R,)."""
    return np.argsort(np.argmax(supply, axis=1), kind="stable")


def _small(row_b: np.ndarray, row_L: np.ndarray, lengths: np.ndarray) -> float | None:
    """The estimated work (see `_plan`) of a call small enough to run without a plan: at most
    SMALL_ROWS rows and no (sample, layer) that `_plan` would sweep; None otherwise. Rows must be
    sorted by (row_b, row_L)."""
    n_rows, gap = row_b.shape[0], SWEEP_ROWS_MIN - 1
    if n_rows > SMALL_ROWS:
        return None
    if n_rows > gap:  # rows r and r + gap in one (sample, layer): a group of SWEEP_ROWS_MIN rows
        same = (
            (row_b[gap:] == row_b[:-gap]) & (row_L[gap:] == row_L[:-gap]) & (row_L[gap:] >= SWEEP_LAYERS_MIN)
        )
        if same.any():
            return None
    n = lengths[row_b].astype(float)
    return float((n * n * np.where(row_L <= 2, 1.0, n * np.maximum(row_L - 2, 1))).sum())


def _plan(row_b: np.ndarray, row_L: np.ndarray, lengths: np.ndarray, supply: np.ndarray):
    """Tasks and their estimated costs (~ arc visits). Rows must be sorted by (row_b, row_L).

    Rows of layers 1-2 (closed forms) come first in `order`, then the rows solved one problem at
    a time, then each swept (sample, layer) with its rows in sweep order. Returns (order, kind, t0,
    t1, t2, t3, cost); a task works on the rows order[t0:t1] and the sinks t2..t3-1 (see
    `_run_task`).
    """
    n_rows = row_b.shape[0]
    starts = np.flatnonzero((row_b[1:] != row_b[:-1]) | (row_L[1:] != row_L[:-1])) + 1
    starts = np.concatenate((np.zeros(1, np.int64), starts))  # first row of each (sample, layer)
    g_rows = np.empty_like(starts)
    g_rows[:-1] = starts[1:] - starts[:-1]
    g_rows[-1] = n_rows - starts[-1]
    g_L = row_L[starts]
    sweep_g = (g_rows >= SWEEP_ROWS_MIN) & (g_L >= SWEEP_LAYERS_MIN)
    long_g = lengths[row_b[starts]] >= SWEEP_ALIKE_FROM_N
    if (sweep_g & long_g).any():  # rows per source position, see SWEEP_ROWS_PER_SOURCE
        group = np.repeat(np.arange(starts.size), g_rows)
        key = np.unique(group * supply.shape[1] + np.argmax(supply, axis=1))
        sources = np.bincount(key // supply.shape[1], minlength=starts.size)
        sweep_g &= ~long_g | (g_rows >= SWEEP_ROWS_PER_SOURCE * sources)
    g_kind = np.where(g_L <= 2, 0, 2 - sweep_g)  # 0 closed form, 1 swept, 2 problem by problem
    row_kind = np.repeat(g_kind, g_rows)
    order = np.argsort(row_kind, kind="stable")  # stable: still sorted by (b, L)
    n_of = lengths[row_b[order]].astype(float)
    # rough cost of a row over all its sinks: n^2 (closed form), or n problems of ~1-2 passes
    # over the (L-2) n^2 arcs
    sorted_kind = row_kind[order]
    row_cost = n_of * n_of * np.where(sorted_kind == 0, 1.0, n_of * np.maximum(row_L[order] - 2, 1))
    bounds = np.searchsorted(sorted_kind, (0, 1, 2, 3))
    csum = np.zeros(n_rows + 1)
    np.cumsum(row_cost, out=csum[1:])
    n_max = int(lengths.max())
    kind, t0, t1, t2, t3 = [], [], [], [], []
    for k, step in ((0, ROWS_PER_TASK), (2, ROWS_PER_COLD)):
        lo, hi = bounds[k], bounds[k + 1]
        if hi > lo:
            first = np.arange(lo, hi, step, dtype=np.int64)
            kind.append(np.full(first.size, k, np.int64))
            t0.append(first), t1.append(np.minimum(first + step, hi))
            t2.append(np.zeros(first.size, np.int64)), t3.append(np.full(first.size, n_max, np.int64))
    pos = bounds[1]
    for g in np.flatnonzero(g_kind == 1).tolist():
        s, e, n = int(starts[g]), int(starts[g] + g_rows[g]), int(lengths[row_b[starts[g]]])
        order[pos : pos + e - s] = s + _sweep_order(supply[s:e])
        sinks = np.arange(0, n, SWEEP_CHUNK, dtype=np.int64)
        kind.append(np.ones(sinks.size, np.int64)), t0.append(np.full(sinks.size, pos, np.int64))
        t1.append(np.full(sinks.size, pos + e - s, np.int64))
        t2.append(sinks), t3.append(np.minimum(sinks + SWEEP_CHUNK, n))
        pos += e - s
    kind, t0, t1, t2, t3 = (np.concatenate(v) for v in (kind, t0, t1, t2, t3))
    cost = csum[t1] - csum[t0]
    sweep = kind == 1  # a sweep: ~ one pass over the arcs per row, per sink
    if sweep.any():
        n_sweep = lengths[row_b[order[t0[sweep]]]]
        cost[sweep] = (
            (t1 - t0)[sweep]
            * np.maximum(row_L[order[t0[sweep]]] - 2, 1)
            * n_sweep
            * n_sweep
            * (t3 - t2)[sweep]
        )
    return order.astype(np.int64, copy=False), kind, t0, t1, t2, t3, cost


def _split_sinks(plan, tasks: np.ndarray, n_workers: int):
    """The tasks `tasks` of `plan`, with the problem-by-problem ones cut into sink ranges when
    there are fewer of them than workers (a call on one sample): (kind, t0, t1, t2, t3, cost) of
    the tasks to run. Every problem starts from zero flow, so the cut changes no value."""
    sub = [v[tasks] for v in plan[1:]]
    kind = sub[0]
    n_cold = int(np.count_nonzero(kind == 2))
    if n_cold == 0 or n_cold >= n_workers:
        return sub
    parts = -(-n_workers // n_cold)
    pieces = []  # a few tasks only (fewer than the workers): plain Python
    for k, a, b, lo, hi, c in zip(*(v.tolist() for v in sub), strict=True):
        if k != 2 or hi - lo < 2:
            pieces.append((k, a, b, lo, hi, c))
            continue
        cuts = [lo + (hi - lo) * i // min(parts, hi - lo) for i in range(min(parts, hi - lo) + 1)]
        pieces.extend((k, a, b, j0, j1, c * (j1 - j0) / (hi - lo)) for j0, j1 in itertools.pairwise(cuts))
    cols = list(zip(*pieces, strict=True))
    return [np.array(col, np.int64) for col in cols[:5]] + [np.array(cols[5], np.float64)]


def _assign(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The tasks longest first, each a job of its own (`run_tasks`' worker lists of one task): the
    pool's threads take the next job as they free up, so a task whose estimate is off holds up
    no thread's queue. (Until 2026-11-26 the tasks were dealt out beforehand, longest first onto
    the least loaded thread: on Table-1 CLS flow the threads then finished up to 10% apart.)"""
    worker_tasks = np.argsort(-cost, kind="stable").astype(np.int64)
    return np.arange(cost.size + 1, dtype=np.int64), worker_tasks


def _rounds(cost: np.ndarray, n_rounds: int) -> list[np.ndarray]:
    """Task ids in up to `n_rounds` rounds of about equal estimated work, each a mix of long and
    short tasks: longest first, each task to the round with the least work so far (each round's
    tasks longest first). Rounds cut from the longest-first order instead (the first rounds all
    long tasks, the last all short ones) made the explain@sst2 per-head call 4% slower."""
    order = np.argsort(-cost, kind="stable").tolist()
    heap = [(0.0, r) for r in range(max(1, min(n_rounds, len(order))))]
    members: list[list[int]] = [[] for _ in heap]
    for t in order:
        work, r = heapq.heappop(heap)
        members[r].append(t)
        heapq.heappush(heap, (work + float(cost[t]), r))
    return [np.array(m, np.int64) for m in members if m]
