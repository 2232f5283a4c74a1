"""The compiled max-flow kernels: the former numba kernels' values bit for bit, nothing compiled,
cached or locked at run time (no temp path of the old compile machinery is touched), threads that
follow ATTNFLOW_THREADS and the free CPUs; batched relevance equals per-sample relevance."""

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnflow.explain import _maxflow, attention_flow, chefer_generic, chefer_lrp, head_flow
from attnflow.explain import relevance as relevance_module
from attnflow.explain._maxflow import _threads, layered_max_flow
from attnflow.explain._reference import reference_flow

TIGHT = 1e-10
# Inputs and the values the numba solver (the last commit with it) gave for them: every row of a
# padded batch (closed forms, cold rows, sweeps), head rows, and CLS rows of 8 layers x 24 tokens.
REFERENCE = Path(__file__).parent / "data" / "flow_numba_reference.npz"
PLAN = importlib.import_module("attnflow.explain._maxflow._plan")


def stochastic(rng, shape, sharpness=3.0):
    w = np.exp(rng.standard_normal(shape) * sharpness)
    return w / w.sum(-1, keepdims=True)


@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_the_values_are_the_numba_kernels_values_bit_for_bit(monkeypatch, threads):
    # same float64 operations in the same order as the numba kernels: not close, equal (24 tokens:
    # every (sample, layer) of 4+ rows at layer 4+ is swept, as the numba solver did)
    monkeypatch.setenv("ATTNFLOW_THREADS", threads)
    monkeypatch.setattr(_threads, "cpu_limit", lambda: 8)  # 3 threads even on a 2-CPU machine
    monkeypatch.setattr(_maxflow, "SERIAL_WORK", 0.0)  # the threaded paths too
    ref = np.load(REFERENCE)
    attn, lengths = ref["attn"], ref["lengths"]
    np.testing.assert_array_equal(attention_flow(attn, lengths=lengths, normalize=False), ref["every_row"])
    np.testing.assert_array_equal(
        head_flow(attn, lengths=lengths, sources=[0, 2], normalize=False), ref["head_rows"]
    )
    np.testing.assert_array_equal(
        attention_flow(ref["cls_attn"], sources=0, normalize=False), ref["cls_rows"]
    )


def test_rows_of_distinct_sources_solved_one_by_one_stay_within_1e12_of_the_numba_values(monkeypatch):
    # the plan for 64+ tokens, forced here: every row of the all-heads map solved problem by
    # problem, not swept -- the same maxima reached along other pushes, so the last bits may
    # differ; head rows (sources [0, 2], heads alike) are still swept, bit for bit
    monkeypatch.setattr(PLAN, "SWEEP_ALIKE_FROM_N", 0)
    monkeypatch.setattr(_maxflow, "SERIAL_WORK", 0.0)
    ref = np.load(REFERENCE)
    attn, lengths = ref["attn"], ref["lengths"]
    every_row = attention_flow(attn, lengths=lengths, normalize=False)
    np.testing.assert_allclose(every_row, ref["every_row"], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(
        head_flow(attn, lengths=lengths, sources=[0, 2], normalize=False), ref["head_rows"]
    )


def test_layer_two_rows_in_blocks_equal_networkx():
    # more layer-2 rows than one block (CLOSED_BLOCK) of one sample, and a second sample
    rng = np.random.default_rng(3)
    caps = np.stack([stochastic(rng, (2, 11, 11)) for _ in range(2)])
    row_b = np.repeat([0, 1], 11)
    row_L = np.full(22, 2)
    supply = caps[row_b, 1, np.tile(np.arange(11), 2)]
    values = layered_max_flow(caps, np.array([11, 11]), row_b, row_L, supply)
    for b in range(2):
        expected = reference_flow(caps[b], layers=[1], normalize=False)[0]
        np.testing.assert_allclose(values[row_b == b], expected, atol=TIGHT)


# Every temp path the old compile machinery used: the lock of its background compile (a fixed
# name in the shared temp folder). Its kernel cache lived next to the sources or in NUMBA_CACHE_DIR.
_OLD_TEMP_NAMES = ["attnflow-numba-compile-{uid}.lock"]

_CHILD = """
import json, sys
import numpy as np
from attnflow.explain import attention_flow
rng = np.random.default_rng(0)
attn = rng.random((6, 2, 9, 9)); attn /= attn.sum(-1, keepdims=True)
flow = attention_flow(attn, sources=0)            # small call (no plan)
every = attention_flow(attn[:, :, :7, :7], renormalize=True)  # planned: closed forms, cold rows, sweeps
print(json.dumps({"numba": "numba" in sys.modules, "llvmlite": "llvmlite" in sys.modules,
                  "ok": bool(np.isfinite(flow).all() and np.isfinite(every).all())}))
"""


@pytest.mark.parametrize("planted", ["folder", "symlink"])
def test_flow_touches_no_temp_path_of_the_old_compile_machinery(tmp_path, planted):
    # issue 34: a folder at the lock path crashed every cold call; a symlink there made attnflow
    # create its target. Now a fresh process computes flow with both planted and touches neither,
    # writes nothing to the temp folder or the numba cache folder, and never imports numba.
    temp, cache, elsewhere = tmp_path / "tmp", tmp_path / "numba-cache", tmp_path / "elsewhere"
    temp.mkdir()
    cache.mkdir()
    (cache / "attnflow_kernels.nbi").write_bytes(b"\x80\x04truncated")  # a corrupt cache entry
    uid = os.getuid() if hasattr(os, "getuid") else 0
    for name in _OLD_TEMP_NAMES:
        path = temp / name.format(uid=uid)
        if planted == "folder":
            path.mkdir()
        else:
            path.symlink_to(elsewhere / path.name)
    before = sorted((p.relative_to(tmp_path), p.is_symlink(), p.is_dir()) for p in tmp_path.rglob("*"))
    env = dict(os.environ, TMPDIR=str(temp), NUMBA_CACHE_DIR=str(cache))
    run = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {"numba": False, "llvmlite": False, "ok": True}
    after = sorted((p.relative_to(tmp_path), p.is_symlink(), p.is_dir()) for p in tmp_path.rglob("*"))
    assert after == before  # nothing created, removed or replaced
    assert not elsewhere.exists()  # the symlink's target was not created
    assert (cache / "attnflow_kernels.nbi").read_bytes() == b"\x80\x04truncated"


def test_attnflow_threads_fixes_the_count_and_a_bad_value_is_named(monkeypatch):
    monkeypatch.setenv("ATTNFLOW_THREADS", "3")
    monkeypatch.setattr(_threads, "cpu_limit", lambda: 8)  # 3 is within the machine's CPUs
    assert _threads.flow_threads() == 3
    assert _threads.flow_threads(2) == 2  # the argument wins
    for bad in ("0", "two", "-1", "1.5"):
        monkeypatch.setenv("ATTNFLOW_THREADS", bad)
        with pytest.raises(ValueError, match="ATTNFLOW_THREADS must be a whole number >= 1"):
            _threads.flow_threads()
    with pytest.raises(ValueError, match="threads must be a whole number >= 1"):
        _threads.flow_threads(0)


def test_free_cpus_counts_the_affinity_mask_less_the_other_runnable_threads(monkeypatch):
    monkeypatch.setattr(_threads, "_cache", {"at": -1.0, "free": 1})
    monkeypatch.setattr(_threads, "REFRESH_S", 0.0)
    monkeypatch.setattr(_threads, "_affinity", lambda: 4)
    monkeypatch.setattr(_threads.os, "cpu_count", lambda: 4)
    for others, free in ((0.0, 4), (1.0, 3), (2.0, 2), (3.0, 1), (9.0, 1)):
        monkeypatch.setattr(_threads, "_runnable_others", lambda o=others: o)
        assert _threads.free_cpus() == free


def test_a_cgroup_cpu_quota_caps_the_affinity_mask(monkeypatch):
    # a container started with --cpus=2 on an 8-CPU machine: 2 CPUs, not 8
    monkeypatch.setattr(_threads.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr(_threads, "_cgroup_quota", lambda: 2)
    assert _threads._affinity() == 2
    monkeypatch.setattr(_threads, "_cgroup_quota", lambda: None)
    assert _threads._affinity() == 8


def test_a_small_call_on_a_busy_machine_runs_on_the_calling_thread(monkeypatch):
    # two busy loops on two cores: no free CPU, so the kernels get one thread (the caller)
    seen = []
    real = _maxflow._kernels.run_rows
    real_full = _maxflow._kernels.mean_flow_direct
    monkeypatch.delenv("ATTNFLOW_THREADS", raising=False)
    monkeypatch.setattr(_threads, "free_cpus", lambda: 1)
    monkeypatch.setattr(_maxflow, "flow_threads", _threads.flow_threads)
    monkeypatch.setattr(_maxflow._kernels, "run_rows", lambda *a: seen.append(a[6]) or real(*a))
    # the one-step small call of unpadded float64 attention: limits[3] = the free CPUs it may use
    # (the work of this call is far above SERIAL_WORK, so it uses min(limits[3], tokens) threads)
    monkeypatch.setattr(
        _maxflow._kernels, "mean_flow_direct", lambda *a: seen.append(int(a[7][3])) or real_full(*a)
    )
    attn = stochastic(np.random.default_rng(5), (6, 2, 40, 40))
    busy = attention_flow(attn, sources=0)
    monkeypatch.setattr(_threads, "free_cpus", lambda: 2)
    idle = attention_flow(attn, sources=0)
    assert seen == [1, 2]
    np.testing.assert_array_equal(busy, idle)


def test_the_kernels_reject_rows_outside_the_arrays():
    caps = np.ones((1, 2, 3, 3)) / 3
    out = np.zeros((1, 3))
    with pytest.raises(ValueError, match="row_L out of range"):
        _maxflow._kernels.run_rows(
            caps, np.array([3]), np.array([0]), np.array([5]), np.ones((1, 3)), 1, 1, out
        )
    with pytest.raises(ValueError, match="lengths must lie in"):
        _maxflow._kernels.run_rows(
            caps, np.array([4]), np.array([0]), np.array([1]), np.ones((1, 3)), 1, 1, out
        )


@pytest.mark.parametrize("method", [chefer_generic, chefer_lrp])
def test_batched_relevance_in_slices_equals_one_sample_at_a_time(method, monkeypatch):
    monkeypatch.setattr(relevance_module, "CHUNK_BYTES", 1)  # one sample per slice
    rng = np.random.default_rng(4)
    lengths = np.array([5, 3, 4])
    attn = np.zeros((3, 2, 2, 5, 5))
    for b, n in enumerate(lengths):
        attn[b, ..., :n, :n] = stochastic(rng, (2, 2, n, n))
    grad = rng.standard_normal(attn.shape)
    batched = method(attn, grad, lengths=lengths)
    monkeypatch.setattr(relevance_module, "CHUNK_BYTES", 1 << 30)  # the whole batch at once
    np.testing.assert_array_equal(method(attn, grad, lengths=lengths), batched)
    for b, n in enumerate(lengths):
        one = method(attn[b, ..., :n, :n], grad[b, ..., :n, :n])
        np.testing.assert_allclose(batched[b, :, :n, :n], one, atol=1e-12)


@pytest.mark.parametrize(
    "shape, options",
    [
        ((6, 8, 20, 20), {"sources": [0], "normalize": False}),  # Table 1's one-sample CLS call
        ((4, 6, 3, 9, 9), {}),  # every row of a batch: the planned path
        ((5, 33, 3, 3), {"sources": 2, "layers": [4, 1], "residual": 0.3}),  # layers out of order
    ],
)
def test_the_common_call_gives_the_general_paths_values_bit_for_bit(monkeypatch, shape, options):
    # float64 numpy without padding, mean heads: the fused capacities (head mean and residual in
    # one C++ pass) and the one-step small call give what prepare / aggregate_heads / mix_residual
    # / flow_rows give, to the bit
    from attnflow.explain import flow

    attn = stochastic(np.random.default_rng(11), shape)
    fast = attention_flow(attn, **options)
    monkeypatch.setattr(flow, "_fast_direct", lambda *args: None)
    two_steps = attention_flow(attn, **options)  # `_fast_caps` + `_fast_flow`
    monkeypatch.setattr(flow, "_fast_caps", lambda *args: None)
    general = attention_flow(attn, **options)
    assert np.array_equal(fast.view(np.uint64), two_steps.view(np.uint64))
    assert fast.dtype == general.dtype and fast.shape == general.shape
    assert np.array_equal(fast.view(np.uint64), general.view(np.uint64))


def test_the_common_call_leaves_a_borderline_row_to_the_general_check():
    # a row summing to 1 + 1e-3 exactly (the float64 tolerance) passes prepare; the fused check
    # keeps a margin and hands it on, so the call gives the general path's result, not an error
    from attnflow.explain import flow

    attn = np.full((2, 2, 3, 3), 1 / 3)
    attn[1, 1, 2, 2] += 1e-3
    assert flow._fast_caps(attn, 0.5, "mean", None, None, False) is None
    assert np.isfinite(attention_flow(attn)).all()
    attn[1, 1, 2, 2] += 1e-4
    with pytest.raises(ValueError, match="must sum to 1"):
        attention_flow(attn)
