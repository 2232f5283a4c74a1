"""The max-flow solver's fast paths give the maxima networkx gives, and agree with each other.

Paths (see attnflow.explain._maxflow): closed forms for 1-2 layers; problems solved one at a
time from a greedy first preflow (few rows per layer, or 3 layers); warm-started sweeps that keep
the sink column and vary the source row (many rows in runs of alike rows, such as the heads of one
source, 4+ layers); the serial small-call path and the threaded one. Random graphs are residual-mixed attention, with exact zeros, ties and repeated rows.
"""

import importlib

import numpy as np
import pytest

from attnflow.explain import _maxflow, attention_flow, head_flow
from attnflow.explain._maxflow import (
    RESIDUAL_EPS,
    _assign,
    _kernels,
    _plan,
    _small,
    _split_sinks,
    layered_max_flow,
)
from attnflow.explain._maxflow._plan import SMALL_ROWS
from attnflow.explain._reference import reference_flow

PLAN = importlib.import_module("attnflow.explain._maxflow._plan")
TIGHT = 1e-10  # what the solver reaches on these sizes (the issue asks for 1e-6 vs networkx)


def residual_mixed(rng, layers, tokens, sharpness=3.0, heads=4, zeros=0.0):
    """Mean of softmax heads, + I, rows re-normalised; `zeros`: share of attention weights set to 0."""
    logits = rng.standard_normal((layers, heads, tokens, tokens)) * sharpness
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w[rng.random(w.shape) < zeros] = 0.0
    w = w / np.maximum(w.sum(-1, keepdims=True), 1e-300)
    a = 0.5 * w.mean(1) + 0.5 * np.eye(tokens)
    return a / a.sum(-1, keepdims=True)


def stochastic(rng, shape, ties=False):
    """Row-stochastic attention; with ties, weights drawn from a few binary-exact values."""
    w = rng.choice([0.0, 0.25, 0.5, 1.0], size=shape) if ties else rng.random(shape) ** 4
    w[..., 0] += 1e-3  # no empty row
    return w / w.sum(-1, keepdims=True)


def test_plan_sweeps_many_rows_and_solves_few_rows_on_their_own():
    # (sample 0, layer 6): 30 rows -> sweeps over every sink; (sample 0, layer 3): cold, as with
    # one middle layer the greedy start leaves push-relabel almost nothing; (sample 1, layer 6):
    # 2 rows -> cold; layer 2 -> closed form
    n = 9
    row_b = np.array([0] * 30 + [0] * 30 + [1] * 2 + [1] * 3)
    row_L = np.array([3] * 30 + [6] * 30 + [6] * 2 + [2] * 3)
    order_idx = np.lexsort((row_L, row_b))
    row_b, row_L = row_b[order_idx], row_L[order_idx]
    supply = np.random.default_rng(0).random((row_b.size, n))
    order, kind, t0, t1, t2, t3, cost = _plan(row_b, row_L, np.array([n, n]), supply)
    assert sorted(order.tolist()) == list(range(row_b.size))  # a permutation of the rows
    rows_of = {
        k: np.concatenate([order[t0[q] : t1[q]] for q in np.flatnonzero(kind == k)]) for k in (0, 1, 2)
    }
    assert set(row_L[rows_of[0]]) == {2}
    assert sorted({(int(row_b[r]), int(row_L[r])) for r in rows_of[2]}) == [(0, 3), (1, 6)]
    assert np.array_equal(np.sort(rows_of[2]), rows_of[2])  # still sorted by (sample, layer)
    sweeps = np.flatnonzero(kind == 1)
    assert {(int(row_b[r]), int(row_L[r])) for r in rows_of[1]} == {(0, 6)}
    assert sorted(j for q in sweeps for j in range(t2[q], t3[q])) == list(range(n))  # every sink once
    swept = order[t0[sweeps[0]] : t1[sweeps[0]]]
    assert sorted(swept.tolist()) == np.flatnonzero(row_L == 6)[:30].tolist()
    assert np.all(np.diff(np.argmax(supply[swept], axis=1)) >= 0)  # grouped by largest entry
    assert np.all(cost > 0)


@pytest.mark.parametrize("alike_from_n", [8, 9])
def test_plan_sweeps_runs_of_alike_rows_and_solves_rows_of_distinct_sources_on_their_own(
    monkeypatch, alike_from_n
):
    # layer 6 of one sample, 8 tokens: every source once (its largest entry on itself, as in a
    # residual-mixed map) -> problem by problem from SWEEP_ALIKE_FROM_N tokens, swept below;
    # three heads of each source -> swept
    monkeypatch.setattr(PLAN, "SWEEP_ALIKE_FROM_N", alike_from_n)
    n = 8
    rng = np.random.default_rng(3)
    own = 0.5 * np.eye(n) + 0.5 * stochastic(rng, (n, n))
    heads = np.concatenate([0.5 * np.eye(n) + 0.5 * stochastic(rng, (n, n)) for _ in range(3)])
    for supply, swept in ((own, n < alike_from_n), (heads, True)):
        rows = supply.shape[0]
        kind = _plan(np.zeros(rows, np.int64), np.full(rows, 6), np.array([n]), supply)[1]
        assert (1 in kind) == swept and (2 in kind) == (not swept)


@pytest.mark.parametrize("sweep_every_row", [False, True])
@pytest.mark.parametrize("zeros, ties", [(0.0, False), (0.4, False), (0.0, True)])
def test_every_row_of_every_layer_equals_networkx(monkeypatch, zeros, ties, sweep_every_row):
    # 5 layers x 6 tokens, all rows: layers 4-5 swept or (as from SWEEP_ALIKE_FROM_N tokens, forced
    # here) solved problem by problem; layer 3 solved on its own, 1-2 closed
    if not sweep_every_row:
        monkeypatch.setattr(PLAN, "SWEEP_ALIKE_FROM_N", 0)
    rng = np.random.default_rng(1)
    if ties:
        caps = stochastic(rng, (5, 6, 6), ties=True)
    else:
        caps = residual_mixed(rng, 5, 6, zeros=zeros)
    ours = attention_flow(caps[:, None], residual=0.0, normalize=False)
    np.testing.assert_allclose(ours, reference_flow(caps, normalize=False), atol=TIGHT, rtol=0)


def test_head_flow_sweeps_equal_networkx_with_the_head_on_top():
    # 3 heads x 5 sources = 15 rows per layer: swept at layers 4 and 5
    rng = np.random.default_rng(2)
    w = stochastic(rng, (5, 3, 5, 5))
    ours = head_flow(w, residual=0.5, normalize=False)  # (layer, head, source, sink)
    mixed = lambda x: (lambda a: a / a.sum(-1, keepdims=True))(0.5 * x.mean(1) + 0.5 * np.eye(5))  # noqa: E731
    below = mixed(w)
    for layer in range(5):
        for head in range(3):
            caps = below[: layer + 1].copy()
            caps[layer] = mixed(w[layer : layer + 1, head : head + 1])[0]
            theirs = reference_flow(caps, layers=[layer], normalize=False)[0]
            np.testing.assert_allclose(ours[layer, head], theirs, atol=TIGHT, rtol=0)


def test_a_long_warm_started_sweep_equals_cold_solves():
    # 400 rows in a row -- repeated rows, all-zero rows, rows of ties, sharp and flat rows -- swept
    # over one sink column: every value equals the problem solved from zero flow (no drift)
    rng = np.random.default_rng(3)
    caps = residual_mixed(rng, 6, 10, sharpness=6.0)
    K, n = 5, 10
    C = _kernels.network(caps[None], 0, 6, n, True)  # reversed network: the rows are sink capacities
    rows = stochastic(rng, (400, n))
    rows[50:60] = rows[49]  # repeats
    rows[100:105] = 0.0  # nothing to deliver
    rows[200:260] = stochastic(rng, (60, n), ties=True)
    rows[300:] *= rng.random((100, 1)) * 3  # not normalised: sums in [0, 3]
    bcol = caps[0][:, 4].copy()
    swept = _kernels.sweep(C, bcol, rows, _kernels.Workspace(K, n))
    ws = _kernels.Workspace(K, n)
    _kernels.reset(C, ws, -1)
    cold = np.array([_kernels.solve(C, bcol, rows[r], ws) for r in range(400)])
    np.testing.assert_allclose(swept, cold, atol=1e-12, rtol=0)
    assert np.all(swept[100:105] == 0.0)


def test_greedy_start_is_a_preflow_below_the_maximum():
    # capacities respected, inflow >= outflow at every node (the difference is its excess), and
    # the value it reaches is at most the max flow (equal only when it hits the trivial bound)
    rng = np.random.default_rng(4)
    for _ in range(30):
        layers, n = rng.integers(3, 7), rng.integers(1, 9)
        caps = residual_mixed(rng, layers, n, sharpness=rng.choice([1.0, 4.0]), zeros=0.2)
        K = layers - 1
        C = _kernels.network(caps[None], 0, layers, n, False)
        ws = _kernels.Workspace(K, n)
        _kernels.reset(C, ws, -1)
        a, bcol = caps[layers - 1, 0].copy(), caps[0][:, n - 1].copy()
        value, _, bound = _kernels.greedy(C, a, bcol, ws)
        F, e, g = ws.F[: K - 1, :n, :n], ws.e[: K * n], ws.g[:n]
        assert np.all(F >= 0) and np.all(F <= C[: K - 1] + 1e-15) and np.all(g <= bcol + 1e-15)
        inflow = np.zeros((K, n))
        inflow[K - 1] = a
        inflow[: K - 1] += F.sum(axis=1)  # arcs (t+2, i) -> (t+1, k) arrive at layer t+1
        outflow = np.zeros((K, n))
        outflow[1:] += F.sum(axis=2)
        outflow[0] += g
        np.testing.assert_allclose(inflow - outflow, e.reshape(K, n), atol=1e-14)
        assert np.all(e >= -1e-15)
        best = reference_flow(caps, sources=[0], layers=[layers - 1], normalize=False)[0, 0, n - 1]
        assert value <= best + 1e-12
        assert bound >= best - 1e-12  # sum_k min(a_k, rho_k) is a cut bound


@pytest.mark.parametrize("threads", [2, 3, 5])
def test_serial_and_threaded_paths_give_identical_values(monkeypatch, threads):
    # the same tasks, each with its own workspace: run on the calling thread or on the pool's threads
    rng = np.random.default_rng(5)
    lengths = np.array([9, 4, 9, 7])
    caps = np.zeros((4, 5, 9, 9))
    for b, n in enumerate(lengths):
        caps[b, :, :n, :n] = residual_mixed(rng, 5, n)
    row_b = np.repeat(np.arange(4), 5 * 9)
    row_L = np.tile(np.repeat(np.arange(1, 6), 9), 4)
    row_s = np.tile(np.arange(9), 20) % lengths[row_b]
    supply = caps[row_b, row_L - 1, row_s]
    monkeypatch.setattr(_maxflow._threads, "cpu_limit", lambda: 8)  # 5 threads even on a 2-CPU machine
    monkeypatch.setattr(_maxflow, "SERIAL_WORK", np.inf)
    serial = layered_max_flow(caps, lengths, row_b, row_L, supply, threads=threads)
    monkeypatch.setattr(_maxflow, "SERIAL_WORK", 0.0)
    threaded = layered_max_flow(caps, lengths, row_b, row_L, supply, threads=threads)
    np.testing.assert_array_equal(serial, threaded)
    one = layered_max_flow(caps, lengths, row_b, row_L, supply, threads=1)
    np.testing.assert_array_equal(one, threaded)


def test_padded_batch_with_deep_stacks_equals_each_sample_alone():
    # lengths 3, 7 and 5 in one batch of 6 layers: sweeps and cold solves on packed positions;
    # padded positions get exactly 0
    rng = np.random.default_rng(6)
    lengths = np.array([3, 7, 5])
    w = np.zeros((3, 6, 2, 7, 7))
    for b, n in enumerate(lengths):
        w[b, ..., :n, :n] = stochastic(rng, (6, 2, n, n))
        w[b, ..., n:, :] = 1.0 / 7  # padded query rows hold something; it must not matter
    flow = attention_flow(w, lengths=lengths, normalize=False)
    heads = head_flow(w, lengths=lengths, normalize=False)
    for b, n in enumerate(lengths):
        np.testing.assert_allclose(
            flow[b, :, :n, :n], attention_flow(w[b, ..., :n, :n], normalize=False), atol=TIGHT
        )
        np.testing.assert_allclose(
            heads[b, ..., :n, :n], head_flow(w[b, ..., :n, :n], normalize=False), atol=TIGHT
        )
        assert np.all(flow[b, :, n:] == 0) and np.all(flow[b, ..., n:] == 0)
        assert np.all(heads[b, ..., n:, :] == 0) and np.all(heads[b, ..., n:] == 0)


def test_the_order_of_the_rows_does_not_change_their_values():
    rng = np.random.default_rng(7)
    caps = residual_mixed(rng, 5, 8)
    supply = stochastic(rng, (40, 8))
    row_b, row_L = np.zeros(40, int), np.full(40, 5)
    values = layered_max_flow(caps[None], np.array([8]), row_b, row_L, supply)
    perm = rng.permutation(40)
    np.testing.assert_allclose(
        layered_max_flow(caps[None], np.array([8]), row_b, row_L, supply[perm]), values[perm], atol=TIGHT
    )


def test_zero_rows_and_zero_sink_columns_flow_nothing():
    rng = np.random.default_rng(8)
    caps = residual_mixed(rng, 5, 6)
    caps[0][:, 2] = 0.0  # nothing enters input 2
    supply = stochastic(rng, (12, 6))
    supply[3] = 0.0
    values = layered_max_flow(caps[None], np.array([6]), np.zeros(12, int), np.full(12, 5), supply)
    assert np.all(values[:, 2] == 0.0) and np.all(values[3] == 0.0)
    assert np.all(values[np.arange(12) != 3][:, [0, 1, 3, 4, 5]] > RESIDUAL_EPS)


def cls_rows(rng, lengths, layers):
    """Padded (B, layers, N, N) capacities and one CLS row per (sample, layer), sorted."""
    caps = np.zeros((len(lengths), layers, max(lengths), max(lengths)))
    for b, n in enumerate(lengths):
        caps[b, :, :n, :n] = residual_mixed(rng, layers, n)
    row_b = np.repeat(np.arange(len(lengths)), layers)
    row_L = np.tile(np.arange(1, layers + 1), len(lengths))
    return caps, np.array(lengths), row_b, row_L, caps[row_b, row_L - 1, 0]


def test_a_small_call_runs_without_a_plan_and_gives_the_planned_values_exactly(monkeypatch):
    # one sample from CLS, 6 layers x 20 tokens: one kernel, its sinks cut over the threads
    caps, lengths, row_b, row_L, supply = cls_rows(np.random.default_rng(9), [20], 6)
    assert _small(row_b, row_L, lengths) is not None
    monkeypatch.setenv("ATTNFLOW_THREADS", "2")  # sink ranges on two threads, busy machine or not
    calls = []
    monkeypatch.setattr(_maxflow, "_plan", lambda *a: calls.append(a) or _plan(*a))
    small = layered_max_flow(caps, lengths, row_b, row_L, supply)
    assert not calls  # no plan
    planned = np.zeros_like(small)
    plan = _plan(row_b, row_L, lengths, supply)
    _maxflow._execute(caps, lengths, row_b, row_L, supply, plan, np.arange(plan[1].size), planned, 2)
    np.testing.assert_array_equal(small, planned)
    monkeypatch.setattr(_maxflow, "SERIAL_WORK", np.inf)  # one range, on the calling thread
    np.testing.assert_array_equal(layered_max_flow(caps, lengths, row_b, row_L, supply), planned)


def test_a_call_with_rows_to_sweep_or_many_rows_is_planned():
    lengths = np.array([8])
    four = np.full(4, 4)  # four rows of one (sample, layer) at layer 4: swept
    assert _small(np.zeros(4, np.int64), four, lengths) is None
    assert _small(np.zeros(4, np.int64), np.full(4, 3), lengths) is not None  # layer 3: never swept
    assert _small(np.zeros(3, np.int64), four[:3], lengths) is not None  # three rows: solved alone
    many = SMALL_ROWS + 1
    assert _small(np.arange(many), np.full(many, 5), np.full(many, 8)) is None


@pytest.mark.parametrize("workers", [2, 3, 8])
def test_cutting_tasks_into_sink_ranges_changes_no_value(workers):
    # a padded batch of two samples: two problem-by-problem tasks, fewer than the workers
    caps, lengths, row_b, row_L, supply = cls_rows(np.random.default_rng(4), [11, 7], 5)
    plan = _plan(row_b, row_L, lengths, supply)
    tasks = np.arange(plan[1].size)
    kind, t0, t1, t2, t3, cost = _split_sinks(plan, tasks, workers)
    cold = kind == 2
    assert cold.sum() == workers  # every worker gets a share
    for q in np.flatnonzero(plan[1] == 2):  # the ranges of a task cover its sinks once
        pieces = np.flatnonzero(cold & (t0 == plan[2][q]))
        assert sorted(j for p in pieces for j in range(t2[p], t3[p])) == list(range(plan[4][q], plan[5][q]))
        assert cost[pieces].sum() == pytest.approx(plan[6][q])
    whole = np.zeros((row_b.size, caps.shape[-1]))
    one_worker, in_order = np.array([0, tasks.size]), tasks
    _kernels.run_tasks(
        caps, lengths, row_b, row_L, supply, plan[0], *plan[1:6], one_worker, in_order, 1, whole
    )
    cut = np.zeros_like(whole)
    worker_ptr, worker_tasks = _assign(cost)
    _kernels.run_tasks(
        caps,
        lengths,
        row_b,
        row_L,
        supply,
        plan[0],
        kind,
        t0,
        t1,
        t2,
        t3,
        worker_ptr,
        worker_tasks,
        workers,
        cut,
    )
    np.testing.assert_array_equal(cut, whole)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_head_mean_on_several_threads_is_the_one_thread_mean_bit_for_bit(threads):
    rng = np.random.default_rng(11)
    attn = stochastic(rng, (5, 3, 4, 9, 9))  # 15 (sample, layer) matrices: uneven parts
    one = _kernels.mix_heads(attn, 0.5, 1e-6, 1)
    np.testing.assert_array_equal(_kernels.mix_heads(attn, 0.5, 1e-6, threads), one)
    mean = 0.5 * attn.mean(axis=2) + 0.5 * np.eye(9)  # numpy's order: heads added, then / H
    np.testing.assert_array_equal(one, mean)
    bad = attn.copy()
    bad[4, 2, 1, 3, 0] = -0.1  # the last part's check fails: no capacities at all
    assert _kernels.mix_heads(bad, 0.5, 1e-6, threads) is None


def test_tasks_are_jobs_of_their_own_longest_first():
    cost = np.array([3.0, 9.0, 1.0, 9.0, 5.0])
    worker_ptr, worker_tasks = _assign(cost)
    assert worker_ptr.tolist() == [0, 1, 2, 3, 4, 5]
    assert worker_tasks.tolist() == [1, 3, 4, 0, 2]  # ties in task order
