"""correlate_samples and correlation_table: excluded positions, undefined correlations, shapes."""

from __future__ import annotations

import numpy as np
import pytest

from attnflow.metrics import AUTHORS_EXCLUDE, correlate_samples, correlation_table, spearman


def test_excluding_cls_changes_the_correlation_as_computed_by_hand():
    # Map [0.9, 0.1, 0.2, 0.3] vs importance [0, 1, 2, 3]:
    #   all positions: ranks [4, 1, 2, 3] vs [1, 2, 3, 4] -> d = [3, -1, -1, -1], sum d^2 = 12,
    #   rho = 1 - 6 * 12 / 60 = -0.2 (no ties, so the formula is exact);
    #   without CLS: [0.1, 0.2, 0.3] vs [1, 2, 3] -> rho = 1.
    maps = [np.array([[0.9, 0.1, 0.2, 0.3]])]
    imp = [np.array([0.0, 1.0, 2.0, 3.0])]
    assert correlate_samples(maps, imp, exclude=())["values"][0, 0] == pytest.approx(-0.2)
    assert correlate_samples(maps, imp, exclude=(0,))["values"][0, 0] == pytest.approx(1.0)
    assert AUTHORS_EXCLUDE == {"blank_out": (0,), "input_gradients": ()}


def test_ragged_samples_give_one_value_per_sample_and_layer():
    rng = np.random.default_rng(0)
    lengths = [5, 3, 7]
    maps = [rng.random((6, t)) for t in lengths]
    imp = [rng.random(t) for t in lengths]
    maps0 = [m.copy() for m in maps]
    out = correlate_samples(maps, imp, exclude=(0,))
    assert out["values"].shape == (3, 6) and out["n_undefined"].shape == (6,)
    for i in range(len(lengths)):
        for layer in range(6):
            ref = spearman(maps[i][layer, 1:], imp[i][1:])
            assert out["values"][i, layer] == pytest.approx(ref)
    assert all(np.array_equal(a, b) for a, b in zip(maps, maps0, strict=True))  # inputs untouched
    # A negative index counts from each sample's own end.
    last = correlate_samples(maps, imp, exclude=(-1,))["values"]
    assert last[1, 0] == pytest.approx(spearman(maps[1][0, :2], imp[1][:2]))


@pytest.mark.parametrize("method", ["average", "dense_noties"])
def test_undefined_correlations_are_counted_and_zeroed_or_kept_nan(method):
    # Sample 0: an all-zero blank-out (model insensitive) -> undefined at every layer.
    # Sample 1: layer 1 map constant outside CLS -> undefined at layer 1 only.
    maps = [np.array([[0.5, 0.2, 0.3], [0.4, 0.3, 0.3]]), np.array([[0.4, 0.1, 0.5], [0.4, 0.3, 0.3]])]
    imp = [np.zeros(3), np.array([0.0, 1.0, 2.0])]
    zero = correlate_samples(maps, imp, method=method, undefined="zero")
    nan = correlate_samples(maps, imp, method=method, undefined="nan")
    np.testing.assert_array_equal(zero["n_undefined"], [1, 2])
    np.testing.assert_array_equal(nan["n_undefined"], [1, 2])
    np.testing.assert_array_equal(zero["values"], [[0.0, 0.0], [1.0, 0.0]])
    np.testing.assert_array_equal(nan["values"], [[np.nan, np.nan], [1.0, np.nan]])
    np.testing.assert_array_equal(zero["undefined"], [[True, True], [False, True]])


def test_mismatched_inputs_are_rejected():
    with pytest.raises(ValueError, match="importance"):
        correlate_samples([np.zeros((2, 3))], [np.zeros(4)])
    with pytest.raises(ValueError, match="layers"):
        correlate_samples([np.zeros((2, 3)), np.zeros((3, 3))], [np.arange(3.0), np.arange(3.0)])
    with pytest.raises(ValueError, match="undefined"):
        correlate_samples([np.zeros((2, 3))], [np.zeros(3)], undefined="drop")


def test_correlation_table_has_one_row_per_explainer_importance_layer_and_uses_authors_exclude():
    maps = {
        "raw": [np.array([[0.9, 0.1, 0.2, 0.3], [0.1, 0.2, 0.3, 0.4]])],
        "rollout": [np.array([[0.9, 0.3, 0.2, 0.1], [0.4, 0.3, 0.2, 0.1]])],
    }
    imp = {"blank_out": [np.array([0.0, 1.0, 2.0, 3.0])], "input_gradients": [np.array([0.0, 1.0, 2.0, 3.0])]}
    rows = correlation_table(maps, imp, n_boot=10)
    assert len(rows) == 2 * 2 * 2
    by_key = {(r["explainer"], r["importance"], r["layer"]): r for r in rows}
    assert by_key["raw", "blank_out", 1]["mean"] == pytest.approx(1.0)  # CLS out
    assert by_key["raw", "input_gradients", 1]["mean"] == pytest.approx(-0.2)  # CLS in (see above)
    assert by_key["rollout", "input_gradients", 2]["mean"] == pytest.approx(-1.0)
    assert set(rows[0]) == {
        "explainer",
        "importance",
        "layer",
        "mean",
        "std",
        "ci_low",
        "ci_high",
        "n",
        "n_undefined",
        "n_samples",
    }
