"""Long attention-flow calls show progress with a time estimate (issue: reliability, case 5: every
row at T = 2048 ran 65 s without a word). The bar changes the order the solver's tasks run in,
never a value; the threshold is lowered here so a small call counts as long."""

from __future__ import annotations

import numpy as np
import pytest

from attnflow.explain import _maxflow
from attnflow.explain.flow import attention_flow


def _attn(layers: int = 5, tokens: int = 12, batch: int = 2) -> np.ndarray:
    """Random row-stochastic attention, (B, L, H, T, T): 5 layers, so rows are swept and solved."""
    a = np.random.default_rng(0).random((batch, layers, 2, tokens, tokens))
    return a / a.sum(-1, keepdims=True)


@pytest.mark.parametrize("serial_work", [_maxflow.SERIAL_WORK, 0.0])  # one thread, and the pool's threads
def test_an_all_rows_call_estimated_long_shows_progress_and_the_same_values(capsys, monkeypatch, serial_work):
    attn = _attn()
    quiet = attention_flow(attn, progress=False)
    assert "attention flow" not in capsys.readouterr().err
    monkeypatch.setattr(_maxflow, "PROGRESS_WORK", 0.0)  # every call is "long"
    monkeypatch.setattr(_maxflow, "SERIAL_WORK", serial_work)
    monkeypatch.setenv("ATTNFLOW_THREADS", "2")  # threads even on a busy machine
    monkeypatch.setattr(_maxflow, "PROGRESS_ROUNDS", 7)
    shown = attention_flow(attn, lengths=[12, 12])  # progress=None: decided by the estimate
    err = capsys.readouterr().err
    assert "attention flow" in err and "%|" in err  # the bar, with its percentage and time left
    np.testing.assert_array_equal(shown, quiet)  # bit-identical: same tasks, other order


def test_a_call_estimated_short_stays_quiet_unless_asked(capsys):
    attn = _attn(layers=3, tokens=6, batch=1)
    attention_flow(attn)
    assert capsys.readouterr().err == ""
    attention_flow(attn, progress=True)
    assert "attention flow" in capsys.readouterr().err


def test_rounds_cover_every_task_once_with_similar_work():
    cost = np.array([5.0, 1.0, 1.0, 1.0, 1.0, 1.0, 10.0, 0.5])
    rounds = _maxflow._rounds(cost, 4)
    assert sorted(np.concatenate(rounds).tolist()) == list(range(cost.size))
    # longest first, each to the round with least work: 10 | 5 | 1 1 1 | 1 1 0.5
    assert [r.tolist() for r in rounds] == [[6], [0], [1, 3, 5], [2, 4, 7]]


def test_rounds_mix_long_and_short_tasks_in_equal_work():
    cost = np.random.default_rng(0).pareto(1.5, 4000) + 0.01
    rounds = _maxflow._rounds(cost, 50)
    assert len(rounds) == 50 and sorted(np.concatenate(rounds).tolist()) == list(range(cost.size))
    work = np.array([cost[r].sum() for r in rounds])
    assert work.max() - work.min() <= cost.max()  # LPT: rounds differ by at most one task
    longest, shortest = np.argsort(-cost)[:50], np.argsort(cost)[:50]
    # every round holds one of the 50 longest tasks and shares the shortest ones
    assert sorted(int(np.isin(r, longest).sum()) for r in rounds) == [1] * 50
    assert sum(bool(np.isin(r, shortest).any()) for r in rounds) > 10
