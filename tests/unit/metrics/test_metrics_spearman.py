"""spearman: the authors' dense-rank shortcut vs average-rank Spearman, by hand and against scipy."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from attnflow.metrics import spearman


def test_tied_data_dense_formula_differs_from_average_rank_spearman():
    # a = [1, 2, 2, 3], b = [1, 2, 3, 4].
    # Average ranks: ra = [1, 2.5, 2.5, 4], rb = [1, 2, 3, 4], both with mean 2.5.
    #   deviations: [-1.5, 0, 0, 1.5] and [-1.5, -0.5, 0.5, 1.5]
    #   cov = 2.25 + 0 + 0 + 2.25 = 4.5, var_a = 4.5, var_b = 2.25 + .25 + .25 + 2.25 = 5
    #   rho = 4.5 / sqrt(4.5 * 5) = sqrt(0.9) = 0.948683...
    # Dense ranks (the authors): ra = [1, 2, 2, 3], rb = [1, 2, 3, 4], d = [0, 0, -1, -1], sum d^2 = 2,
    #   rho = 1 - 6 * 2 / (4 * 15) = 1 - 12/60 = 0.8.
    # (Average ranks in the no-ties formula would give 1 - 6 * 0.5 / 60 = 0.95: a third, also wrong, value.)
    a, b = [1, 2, 2, 3], [1, 2, 3, 4]
    assert spearman(a, b) == pytest.approx(math.sqrt(0.9), abs=1e-12)
    assert spearman(a, b, method="dense_noties") == pytest.approx(0.8, abs=1e-12)
    assert spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic, abs=1e-12)


def test_perfect_and_reversed_orders():
    assert spearman([0.1, 0.5, 0.9], [1, 2, 3]) == pytest.approx(1.0)
    assert spearman([0.1, 0.5, 0.9], [3, 2, 1], method="dense_noties") == pytest.approx(-1.0)


@pytest.mark.parametrize("method", ["average", "dense_noties"])
def test_undefined_is_nan(method):
    assert math.isnan(spearman([1.0, 1.0, 1.0], [1, 2, 3], method=method))  # constant a
    assert math.isnan(spearman([1, 2, 3], [0.0, 0.0, 0.0], method=method))  # constant b
    assert math.isnan(spearman([1.0], [2.0], method=method))  # n < 2
    with pytest.raises(ValueError, match="finite"):
        spearman([1.0, np.nan], [1, 2], method=method)


distinct = st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=2, max_size=20, unique=True)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_without_ties_dense_formula_equals_scipy(data):
    a = data.draw(distinct)
    b = data.draw(
        st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=len(a), max_size=len(a), unique=True)
    )
    ref = stats.spearmanr(a, b).statistic
    assert spearman(a, b) == pytest.approx(ref, abs=1e-9)
    assert spearman(a, b, method="dense_noties") == pytest.approx(ref, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_with_ties_average_rank_equals_scipy(data):
    n = data.draw(st.integers(2, 15))
    a = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    b = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns on constant input
        ref = stats.spearmanr(a, b).statistic
    got = spearman(a, b)
    assert (math.isnan(got) and math.isnan(ref)) or got == pytest.approx(ref, abs=1e-9)
