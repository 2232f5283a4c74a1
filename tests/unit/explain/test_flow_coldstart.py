"""Cold start and batching paths: the plain-Python twins of the kernels give the compiled kernels'
values exactly (and the networkx maxima); a small call that finds no compiled kernel runs them and
starts one background compile, a large one waits; the kernels' cache is keyed on all their
sources; batched relevance equals per-sample relevance."""

import hashlib
from pathlib import Path

import numpy as np
import pytest

from attnflow.explain import _maxflow, attention_flow, chefer_generic, chefer_lrp, head_flow
from attnflow.explain import relevance as relevance_module
from attnflow.explain._maxflow import _jit, _twin, layered_max_flow
from attnflow.explain._reference import reference_flow

TIGHT = 1e-10


def stochastic(rng, shape, sharpness=3.0):
    w = np.exp(rng.standard_normal(shape) * sharpness)
    return w / w.sum(-1, keepdims=True)


def every_kind_of_task(rng):
    """A padded batch whose plan has closed forms, cold rows and sweeps (6 layers, every row)."""
    lengths = np.array([7, 4, 6])
    attn = np.zeros((3, 6, 2, 7, 7))
    for b, n in enumerate(lengths):
        attn[b, ..., :n, :n] = stochastic(rng, (6, 2, n, n))
    return attn, lengths


def test_the_twins_give_the_compiled_values_exactly(monkeypatch):
    attn, lengths = every_kind_of_task(np.random.default_rng(0))
    compiled = attention_flow(attn, lengths=lengths, normalize=False)
    heads = head_flow(attn, lengths=lengths, sources=[0, 2], normalize=False)
    monkeypatch.setenv("ATTNFLOW_JIT", "python")
    np.testing.assert_array_equal(attention_flow(attn, lengths=lengths, normalize=False), compiled)
    np.testing.assert_array_equal(head_flow(attn, lengths=lengths, sources=[0, 2], normalize=False), heads)


def test_the_twins_give_the_networkx_maxima(monkeypatch):
    monkeypatch.setenv("ATTNFLOW_JIT", "python")
    rng = np.random.default_rng(1)
    for layers, tokens in ((3, 5), (5, 4), (6, 6)):
        attn = stochastic(rng, (layers, 2, tokens, tokens))
        caps = 0.5 * attn.mean(1) + 0.5 * np.eye(tokens)
        caps /= caps.sum(-1, keepdims=True)
        np.testing.assert_allclose(
            attention_flow(attn, normalize=False), reference_flow(caps, normalize=False), atol=TIGHT
        )


def test_a_small_call_without_compiled_kernels_runs_the_twins_and_starts_one_compile(monkeypatch):
    attn, lengths = every_kind_of_task(np.random.default_rng(2))
    expected = attention_flow(attn, lengths=lengths, sources=[0], normalize=False)
    started, waited = [], []
    monkeypatch.setenv("ATTNFLOW_JIT", "auto")
    monkeypatch.setattr(_twin, "_in_memory", lambda disp: False)
    monkeypatch.setattr(_twin, "_cached", lambda disp: False)
    monkeypatch.setattr(_twin, "loaded", lambda disp, args: False)
    monkeypatch.setattr(_twin, "start_background_compile", lambda: started.append(1))
    monkeypatch.setattr(_twin, "wait_for_background_compile", lambda: waited.append(1))
    np.testing.assert_array_equal(
        attention_flow(attn, lengths=lengths, sources=[0], normalize=False), expected
    )
    assert started and not waited
    # a call above TWIN_WORK waits for the compile instead (then runs the compiled kernel)
    monkeypatch.setattr(_twin, "TWIN_WORK", 0.0)
    np.testing.assert_array_equal(
        attention_flow(attn, lengths=lengths, sources=[0], normalize=False), expected
    )
    assert waited


def test_with_the_kernels_cached_small_calls_run_the_twins_until_a_load_would_have_paid(monkeypatch):
    # a load of the cache costs about LOAD_WORK of twin work: the twins answer until then
    attn, lengths = every_kind_of_task(np.random.default_rng(3))
    expected = attention_flow(attn, lengths=lengths, sources=[0], normalize=False)
    loads, twin_runs = [], []
    twins = dict(_twin.twins())
    monkeypatch.setenv("ATTNFLOW_JIT", "auto")
    monkeypatch.setattr(_twin, "_in_memory", lambda disp: bool(loads))
    monkeypatch.setattr(_twin, "_cached", lambda disp: True)
    monkeypatch.setattr(_twin, "loaded", lambda disp, args: loads.append(disp) or True)
    monkeypatch.setattr(_twin, "start_background_compile", lambda: pytest.fail("the cache is there"))
    monkeypatch.setattr(
        _twin, "twins", lambda: {k: (lambda *a, f=f: twin_runs.append(1) or f(*a)) for k, f in twins.items()}
    )
    monkeypatch.setitem(_twin._state, "twin_work", 0.0)
    monkeypatch.setattr(_twin, "LOAD_WORK", 1.0)  # the first call's work exceeds it: loads at once
    np.testing.assert_array_equal(
        attention_flow(attn, lengths=lengths, sources=[0], normalize=False), expected
    )
    assert loads and not twin_runs
    loads.clear()
    monkeypatch.setattr(_twin, "LOAD_WORK", 1e12)  # twins all the way, nothing loaded
    for _ in range(2):
        np.testing.assert_array_equal(
            attention_flow(attn, lengths=lengths, sources=[0], normalize=False), expected
        )
    assert len(twin_runs) == 2 and not loads and _twin._state["twin_work"] > 0


def test_the_compiled_entry_kernels_are_found_in_memory_or_in_the_cache():
    _maxflow.warm_up()
    for entry in (_maxflow._run_serial, _maxflow._run_parallel, _maxflow._run_rows):
        assert _twin._in_memory(entry) and _twin._cached(entry)
        assert not _twin.use_twins(entry, (), 1.0)  # in memory: even a tiny call runs compiled


def test_a_wrong_jit_mode_is_named(monkeypatch):
    monkeypatch.setenv("ATTNFLOW_JIT", "fast")
    with pytest.raises(ValueError, match="ATTNFLOW_JIT must be one of"):
        _twin.jit_mode()


def test_every_kernel_is_cached_under_one_stamp_of_all_kernel_sources():
    sources = b"".join(Path(m.__file__).read_bytes() for m in _twin._KERNEL_MODULES)
    digest = hashlib.sha256(sources).hexdigest()
    stamps = {
        value._cache._cache_file._source_stamp
        for mod in _twin._KERNEL_MODULES
        for value in vars(mod).values()
        if hasattr(value, "py_func")
    }
    assert stamps == {digest}


def test_twins_cover_every_kernel():
    twins = _twin.twins()
    kernels = {
        name for mod in _twin._KERNEL_MODULES for name, v in vars(mod).items() if hasattr(v, "py_func")
    }
    assert kernels <= set(twins)
    assert twins["_tz"](np.uint64(8)) == 3 == _jit._tz_py(8)


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
