"""Reliability of the computations (issue 57, part B): overflowing rows, non-finite input, fast paths
that check their assumption on every layer, thread counts, and long flow calls that stop on Ctrl-C."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnflow import stream
from attnflow.explain import attention_flow, attention_rollout, raw_attention

# --- rows whose sum overflows: renormalised, not zeros or an identity ---------------------------


def _overflow_attn() -> np.ndarray:
    """(2 layers, 1 head, 3, 3): layer 1's row 0 is [1e308, 1e308, 0.5e308] (sum overflows to inf;
    renormalised: [0.4, 0.4, 0.2]); every other row is uniform."""
    attn = np.full((2, 1, 3, 3), 1 / 3)
    attn[0, 0, 0] = [1e308, 1e308, 0.5e308]
    return attn


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_raw_renormalises_a_row_whose_sum_overflows(kind):
    attn = _overflow_attn()
    x = torch.tensor(attn) if kind == "torch" else attn
    row = np.asarray(raw_attention(x, renormalize=True))[0, 0]
    np.testing.assert_allclose(row, [0.4, 0.4, 0.2], rtol=1e-15)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("method", ["rollout", "flow"])
def test_rollout_and_flow_renormalise_a_row_whose_sum_overflows(kind, method):
    # A(1)[0] = 0.5 [0.4, 0.4, 0.2] + 0.5 [1, 0, 0] = [0.7, 0.2, 0.1]: layer 1's row of rollout and of
    # flow (one edge per path) alike
    attn = _overflow_attn()
    x = torch.tensor(attn) if kind == "torch" else attn
    if method == "rollout":
        row = np.asarray(attention_rollout(x, renormalize=True))[0, 0]
    else:
        row = np.asarray(attention_flow(x, renormalize=True, layers=0, sources=0))[0, 0]
    np.testing.assert_allclose(row, [0.7, 0.2, 0.1], rtol=1e-12)


def test_float32_torch_row_near_its_largest_value_is_renormalised():
    attn = torch.full((1, 1, 2, 2), 0.5)
    attn[0, 0, 0] = torch.tensor([3e38, 1e38])  # the float32 sum overflows
    row = raw_attention(attn, renormalize=True)[0, 0]
    torch.testing.assert_close(row, torch.tensor([0.75, 0.25]))


@pytest.mark.parametrize("method", [raw_attention, attention_rollout, attention_flow])
def test_an_overflowing_row_without_renormalize_is_refused_in_one_line(method):
    with pytest.raises(ValueError, match="sums to inf; pass renormalize=True") as err:
        method(_overflow_attn())
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("method", [raw_attention, attention_rollout, attention_flow])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_attention_is_refused_in_one_line(kind, method, bad):
    attn = np.full((2, 1, 3, 3), 1 / 3)
    attn[1, 0, 2, 1] = bad
    x = torch.tensor(attn) if kind == "torch" else attn
    for renormalize in (False, True):
        with pytest.raises(ValueError, match="attn contains NaN or inf"):
            method(x, renormalize=renormalize)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_chefer_relevance_whose_products_overflow_is_refused_in_one_line(kind):
    # finite inputs near 1e308: (∇A ⊙ R(A)) overflows to inf, and the map used to come back as NaN
    from attnflow.explain import chefer_generic, chefer_lrp

    attn = np.full((3, 2, 3, 3), 1 / 3)
    big = np.ones_like(attn)
    big[:, :, 0, :] = 1e308
    as_kind = (lambda x: torch.tensor(x)) if kind == "torch" else (lambda x: x)
    with pytest.raises(ValueError, match="chefer_lrp: the relevance overflows float64") as err:
        chefer_lrp(as_kind(big), as_kind(big))
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="chefer_generic: the relevance overflows float64"):
        chefer_generic(as_kind(attn), as_kind(big))  # R(l) = R(l-1) + Ā R(l-1) grows past 1e308


# --- the streaming rollout checks causality on every layer ----------------------------------------


def test_stream_rollout_checks_every_layer_for_causality():
    # layer 1 causal (lower triangular), layer 2 not: the stream used to take layer 1's causality
    # for the whole model and multiply only the lower triangles (blocks of TRIL_BLOCK rows), which
    # drops layer 2's entries above the diagonal. Now it warns and takes full products.
    tokens = stream.TRIL_BLOCK + 8  # more than one block, so the triangular product is used
    gen = torch.Generator().manual_seed(0)
    causal = torch.rand(1, tokens, tokens, generator=gen, dtype=torch.float64).tril()
    dense = torch.rand(1, tokens, tokens, generator=gen, dtype=torch.float64)
    layers = [causal / causal.sum(-1, keepdim=True), dense / dense.sum(-1, keepdim=True)]
    rows = torch.tensor([[0, tokens // 2, tokens - 1]])
    state = stream.StreamState(
        rows, torch.ones(1, tokens, dtype=torch.bool), ("rollout",), 2, dtype=torch.float64
    )
    state.observe(layers[0])
    with pytest.warns(RuntimeWarning, match="layer 2 attends to later positions"):
        state.observe(layers[1])
    got = torch.stack(state.rollout, dim=1)[0].numpy()  # (L, R, T)
    want = attention_rollout(torch.stack(layers, dim=1)[0][:, None].numpy())  # (L, T, T)
    np.testing.assert_allclose(got, want[:, rows[0].numpy()], atol=1e-12)


# --- thread counts: checked on every call and bounded by the machine -----------------------------


def _short_attn() -> np.ndarray:
    """(4 layers, 2 heads, 6, 6) attention: a call far too small to use threads."""
    return np.random.default_rng(0).dirichlet(np.ones(6), size=(4, 2, 6))


@pytest.mark.parametrize("bad", ["0", "-3", "two", "1.5"])
@pytest.mark.parametrize("path", ["numpy", "torch", "renormalize"])
def test_a_bad_attnflow_threads_is_refused_on_a_short_call_too(monkeypatch, bad, path):
    # the general path (torch, renormalize) used to read ATTNFLOW_THREADS only for calls large
    # enough to use threads: "0" passed short inputs and failed the first long one
    monkeypatch.setenv("ATTNFLOW_THREADS", bad)
    attn = _short_attn()
    x = torch.tensor(attn) if path == "torch" else attn
    with pytest.raises(ValueError, match=f"ATTNFLOW_THREADS must be a whole number >= 1, got '{bad}'") as err:
        attention_flow(x, sources=0, renormalize=path == "renormalize")
    assert "\n" not in str(err.value)


def test_a_thread_count_above_the_cpus_is_clamped_with_a_warning(monkeypatch):
    from attnflow.explain._maxflow import _threads, layered_max_flow

    monkeypatch.setattr(_threads, "cpu_limit", lambda: 2)
    monkeypatch.setattr(_threads, "_warned", set())
    monkeypatch.setenv("ATTNFLOW_THREADS", "100000")
    with pytest.warns(RuntimeWarning, match="ATTNFLOW_THREADS=100000 is more than the 2 CPUs"):
        assert _threads.flow_threads() == 2
    with pytest.warns(RuntimeWarning, match="threads=64 is more than the 2 CPUs"):
        assert _threads.flow_threads(64) == 2
    # the kernels are handed the bounded count: a sample of 40 tokens cut into sink ranges per thread
    import attnflow.explain._maxflow as maxflow

    monkeypatch.setattr(maxflow, "SERIAL_WORK", 0.0)  # threads for any call
    seen = []
    real = _threads_kernels().run_rows
    monkeypatch.setattr(_threads_kernels(), "run_rows", lambda *a: seen.append(a[6]) or real(*a))
    caps = np.full((1, 4, 40, 40), 1 / 40)
    layered_max_flow(caps, [40], [0], [4], caps[0, 3, :1], threads=64)
    assert seen == [2]


def _threads_kernels():
    from attnflow.explain._maxflow import _kernels

    return _kernels


# --- long flow calls: Ctrl-C stops them within a second, and they show progress -------------------

# CLS flow from the last of 6 layers over 1,024 tokens: ~20 s on one thread of a busy 2-core
# machine (0.3 s at 256 tokens, x64 at 1,024), so a call still running after a second was not
# allowed to finish.
LONG_LAYERS, LONG_TOKENS = 6, 1024
# From SIGINT to the KeyboardInterrupt: the kernels poll every 50 ms, one problem here takes ~20 ms
# (measured: 0.05-0.5 s with a load average of 13 on the 2 cores; ~0.1 s on an idle machine).
STOP_WITHIN_S = 1.5


def _long_attn(tokens: int = LONG_TOKENS, layers: int = LONG_LAYERS, batch: int | None = None) -> np.ndarray:
    """Peaked random attention (layers, 1 head, tokens, tokens), float64 (with a batch axis if asked)."""
    rng = np.random.default_rng(0)
    shape = (layers, 1, tokens, tokens) if batch is None else (batch, layers, 1, tokens, tokens)
    w = np.exp(rng.standard_normal(shape) * 3.0)
    return w / w.sum(-1, keepdims=True)


def _interrupted_after(call, delay: float = 0.3) -> float:
    """Run call() with a SIGINT sent to this process `delay` s in; the seconds from the signal to the
    KeyboardInterrupt (which must come; the call must not finish)."""
    import os
    import signal
    import threading
    import time

    sent = []
    timer = threading.Timer(
        delay, lambda: (sent.append(time.monotonic()), os.kill(os.getpid(), signal.SIGINT))
    )
    # Python's own Ctrl-C handler, also where this process inherited SIGINT ignored (a shell's
    # background job: `pytest &` without job control)
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            call()
            pytest.fail("the call finished before the signal: size it up")  # pragma: no cover
        return time.monotonic() - sent[0]
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, handler)


def _flow_paths():
    from attnflow.explain.flow import flow_rows_packed, pack_lower

    attn = _long_attn()
    last = LONG_LAYERS - 1
    return {
        # float64 numpy, no bar: the one-step kernel (mean_flow_direct)
        "direct": lambda: attention_flow(attn, sources=0, layers=last, progress=False),
        # the same call estimated long: the bar, fed by the kernel (run_rows)
        "bar": lambda: attention_flow(attn, sources=0, layers=last),
        # torch: the general path (prepare, flow_rows, layered_max_flow)
        "torch": lambda: attention_flow(torch.from_numpy(attn), sources=0, layers=last, progress=False),
        # more rows than SMALL_ROWS: the planned tasks (run_tasks)
        "planned": lambda: attention_flow(attn, sources=list(range(80)), layers=last, progress=False),
        # a causal graph's packed lower triangles (run_lower_rows)
        "packed": lambda: flow_rows_packed(
            pack_lower(np.tril(attn[:, 0]) + np.eye(LONG_TOKENS)), LONG_TOKENS, [last], [LONG_TOKENS - 1]
        ),
    }


@pytest.mark.parametrize("path", ["direct", "bar", "torch", "planned", "packed"])
def test_a_long_flow_call_stops_on_ctrl_c_within_a_second(path):
    # until issue 57 the kernels ran to the end whatever the signal: 179 s for CLS flow of 10 layers
    # x 2,048 tokens
    call = _flow_paths()[path]
    assert _interrupted_after(call) < STOP_WITHIN_S
    # the solver is usable again, with the same values
    small = _long_attn(tokens=24, layers=5)
    np.testing.assert_array_equal(
        attention_flow(small, sources=0), attention_flow(torch.from_numpy(small), sources=0).numpy()
    )


def test_a_batch_flow_call_stops_on_ctrl_c_within_a_second():
    # many samples, none of their rows swept: the batch kernel (mixes and solves sample by sample)
    attn = _long_attn(tokens=256, batch=24)  # ~7 s on one thread
    call = lambda: attention_flow(attn, sources=0, layers=LONG_LAYERS - 1, progress=False)  # noqa: E731
    assert _interrupted_after(call) < STOP_WITHIN_S


def test_a_ctrl_c_in_a_subprocess_ends_a_long_flow_call_with_keyboardinterrupt(tmp_path):
    # the user's case: a script running a long flow call, Ctrl-C (SIGINT) -> KeyboardInterrupt at once
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "long_flow.py"
    script.write_text(
        "import numpy as np\n"
        "from attnflow.explain import attention_flow\n"
        f"w = np.exp(np.random.default_rng(0).standard_normal(({LONG_LAYERS}, 1, {LONG_TOKENS}, {LONG_TOKENS})) * 3)\n"
        "w /= w.sum(-1, keepdims=True)\n"
        "print('started', flush=True)\n"
        f"attention_flow(w, sources=0, layers={LONG_LAYERS - 1}, progress=False)\n"
        "print('finished', flush=True)\n"
    )
    child = subprocess.Popen(  # SIGINT at its default, so Python installs its handler (see _interrupted_after)
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        assert child.stdout.readline().strip() == "started"
        time.sleep(0.3)
        assert child.poll() is None
        child.send_signal(signal.SIGINT)
        sent = time.monotonic()
        out, err = child.communicate(timeout=30)
        elapsed = time.monotonic() - sent
    finally:
        if child.poll() is None:
            child.kill()
    assert "KeyboardInterrupt" in err and "finished" not in out
    assert child.returncode != 0
    assert elapsed < 2.0  # the signal handled and the interpreter gone


def test_a_small_call_estimated_long_shows_progress_and_the_same_values(capsys, monkeypatch):
    # one sample's CLS rows: the one-step kernels used to take it whatever its size, without a bar
    import attnflow.explain._maxflow as maxflow

    attn = _long_attn(tokens=40)
    quiet = attention_flow(attn, sources=0, progress=False)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(maxflow, "PROGRESS_WORK", 0.0)  # every call is "long"
    shown = attention_flow(attn, sources=0)
    assert "attention flow" in capsys.readouterr().err
    np.testing.assert_array_equal(shown, quiet)


def test_the_kernels_report_progress_as_they_go_and_stop_when_the_callback_raises():
    # 512 tokens: about 1 s of solving (17 reports every 50 ms on an idle EPYC); 256 took 0.09 s,
    # too short for three reports on a fast machine
    from attnflow.explain._maxflow import _kernels

    attn = _long_attn(tokens=512)
    from attnflow.explain._common import mix_residual

    caps = mix_residual(attn[None, :, 0], np.ones((1, 512), bool), 0.5)  # (1, L, T, T)
    supply = caps[:, LONG_LAYERS - 1, 0]  # (1, T)
    seen = []

    def progress(done):
        seen.append(done)
        if len(seen) == 3:
            raise RuntimeError("stop here")

    out = np.zeros((1, 512))
    with pytest.raises(RuntimeError, match="stop here"):
        _kernels.run_rows(
            caps, np.array([512]), np.array([0]), np.array([LONG_LAYERS]), supply, 1, 1, out, progress
        )
    assert len(seen) == 3 and 0 < seen[0] <= seen[1] <= seen[2]
