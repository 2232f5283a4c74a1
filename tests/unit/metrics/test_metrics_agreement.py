"""Kendall tau-b and top-k overlap between two rankings; the pairwise agreement table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import kendalltau

from attnflow.metrics import agreement_samples, agreement_table, kendall_tau, top_k_overlap


def test_identical_rankings_give_one_and_reversed_minus_one():
    a = np.array([0.3, 0.1, 0.9, 0.5])
    assert kendall_tau(a, 10 * a + 1) == 1.0 and kendall_tau(a, -a) == -1.0
    assert top_k_overlap(a, 10 * a, k=2) == 1.0 and top_k_overlap(a, -a, k=2) == 0.0
    assert np.isnan(kendall_tau(a, np.ones(4)))  # constant: tau undefined
    assert np.isnan(kendall_tau(a[:1], a[:1]))  # no pair


def test_kendall_tau_b_counts_ties_as_scipy():
    # a = 1 2 2 3, b = 1 1 2 3: pair products 0 1 1 0 1 1 -> 4; untied pairs 5 and 5 -> 4 / 5.
    assert kendall_tau(np.array([1, 2, 2, 3]), np.array([1, 1, 2, 3])) == pytest.approx(0.8)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=2, max_size=9))
def test_kendall_tau_matches_scipy_on_small_tied_vectors(pairs):
    a, b = np.array(pairs, dtype=float).T
    expected = kendalltau(a, b, variant="b").statistic
    np.testing.assert_allclose(kendall_tau(a, b), expected, equal_nan=True)


def test_top_k_overlap_arithmetic_and_ties():
    a = np.array([0.9, 0.8, 0.7, 0.1, 0.0])  # top 3: {0, 1, 2}
    b = np.array([0.9, 0.1, 0.8, 0.0, 0.7])  # top 3: {0, 2, 4}
    assert top_k_overlap(a, b, k=3) == pytest.approx(2 / 3)  # |{0, 2}| / 3
    assert top_k_overlap(a, b, k=1) == 1.0 and top_k_overlap(a, b, k=5) == 1.0
    assert top_k_overlap(a, b, k=50) == 1.0  # k' = min(k, T) = 5
    # Ties go to the earlier position: top 2 of [1, 1, 1, 0] is {0, 1}.
    assert top_k_overlap(np.array([1.0, 1.0, 1.0, 0.0]), np.array([0.9, 0.8, 0.0, 0.0]), k=2) == 1.0
    with pytest.raises(ValueError, match="k must"):
        top_k_overlap(a, b, k=0)


def test_excluded_positions_are_left_out_per_sample():
    # CLS (position 0) and the last token disagree wildly; the rest agree.
    a = [np.array([100.0, 1.0, 2.0, 3.0, -100.0]), np.array([5.0, 1.0, 2.0])]
    b = [np.array([-100.0, 1.0, 2.0, 3.0, 100.0]), np.array([-5.0, 2.0, 1.0])]
    np.testing.assert_allclose(agreement_samples(a, b, exclude=(0, -1)), [[1.0], [np.nan]])  # 1 token left
    np.testing.assert_allclose(agreement_samples(a, b, exclude=(0,)), [[0.0], [-1.0]])  # tau over 1..4: 3 - 3
    # top-1 over positions 1..: {3} vs {4} in sample 1 -> 0; {2} vs {1} in sample 2 -> 0.
    np.testing.assert_allclose(agreement_samples(a, b, metric="top_k_overlap", k=1), [[0.0], [0.0]])


def test_layers_broadcast_against_a_single_score_vector():
    layered = [np.array([[0.0, 1.0, 2.0, 3.0], [0.0, 3.0, 2.0, 1.0], [0.0, 1.0, 1.0, 1.0]])]  # (3, 4)
    flat = [np.array([9.0, 1.0, 2.0, 3.0])]
    np.testing.assert_allclose(agreement_samples(layered, flat), [[1.0, -1.0, np.nan]])
    np.testing.assert_allclose(agreement_samples(layered, layered), [[1.0, 1.0, np.nan]])
    with pytest.raises(ValueError, match="layers"):
        agreement_samples(layered, [np.zeros((2, 4))])
    with pytest.raises(ValueError, match="length"):
        agreement_samples(layered, [np.zeros(3)])


def test_agreement_table_is_long_and_tidy():
    flat_a = [np.array([0.0, 1.0, 2.0, 3.0]), np.array([0.0, 2.0, 1.0])]
    flat_b = [np.array([0.0, 3.0, 2.0, 1.0]), np.array([0.0, 2.0, 1.0])]
    layered = [np.stack([x, -x]) for x in flat_a]  # layer 1 = a, layer 2 = reversed a
    table = agreement_table({"a": flat_a, "b": flat_b, "rollout": layered}, k=1, n_boot=50)
    assert list(table.columns) == [
        "method_a", "method_b", "layer", "metric", "k", "mean", "std", "ci_low", "ci_high", "n", "n_undefined",
    ]  # fmt: skip
    assert str(table["layer"].dtype) == "Int64" and str(table["k"].dtype) == "Int64"
    # a-b: no layers; tau = -1 (sample 1) and 1 (sample 2) -> mean 0, std 1.
    ab = table[(table.method_a == "a") & (table.method_b == "b") & (table.metric == "kendall_tau")]
    assert len(ab) == 1 and ab["layer"].isna().all() and ab["k"].isna().all()
    assert ab["mean"].item() == 0.0 and ab["std"].item() == 1.0 and ab["n"].item() == 2
    # a-rollout: layers 1 and 2, tau 1 and -1 in both samples.
    ar = table[(table.method_a == "a") & (table.method_b == "rollout") & (table.metric == "kendall_tau")]
    assert ar["layer"].tolist() == [1, 2] and ar["mean"].tolist() == [1.0, -1.0]
    top = table[(table.method_a == "a") & (table.method_b == "rollout") & (table.metric == "top_k_overlap")]
    assert top["k"].tolist() == [1, 1] and top["mean"].tolist() == [1.0, 0.0]
    assert len(table) == 1 * 2 + 2 * (2 * 2)  # (a, b): 1 row x 2 metrics; (a | b, rollout): 2 layers x 2
    assert isinstance(table, pd.DataFrame) and (table["n_undefined"] == 0).all()
    with pytest.raises(ValueError, match="metric"):
        agreement_table({"a": flat_a, "b": flat_b}, metrics=("spearman",))
