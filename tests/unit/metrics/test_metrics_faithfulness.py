"""AOPC comprehensiveness / sufficiency (ferret's skipping rule) and the perturbation AUC, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from attnflow.metrics import aopc_comprehensiveness, aopc_sufficiency, perturbation_auc, summarize

# 3 removable tokens, ferret's fractions .1 .. 1.0, k = floor(q * 3) = 0,0,0,1,1,1,2,2,2,3.
# ferret leaves out k = 0 (empty rationale) and repeats of the previous k: only q = .4, .7, 1.0 count.
K3 = np.array([[0, 0, 0, 1, 1, 1, 2, 2, 2, 3]])
CLEAN = np.array([0.75])
# Removing the top 1, 2, 3 tokens: p = .5, .25, .5 (k = 0 columns: nothing removed, p = .75).
POSITIVE = np.array([[0.75] * 3 + [0.5] * 3 + [0.25] * 3 + [0.5]])
# Keeping only the top 0, 1, 2, 3 tokens: p = .5, .75, .9, .75.
SUFFICIENCY = np.array([[0.5] * 3 + [0.75] * 3 + [0.9] * 3 + [0.75]])


def test_comprehensiveness_by_hand_with_and_without_ferrets_skipping():
    # ferret: ((.75 - .5) + (.75 - .25) + (.75 - .5)) / 3 = 1 / 3.
    assert aopc_comprehensiveness(CLEAN, POSITIVE, K3)[0] == pytest.approx(1 / 3)
    # Every fraction (ERASER's scorer): drops 0,0,0,.25,.25,.25,.5,.5,.5,.25 -> 2.5 / 10 = .25.
    assert aopc_comprehensiveness(CLEAN, POSITIVE, K3, skip_repeats=False)[0] == pytest.approx(0.25)


def test_sufficiency_by_hand_never_scores_the_empty_rationale():
    # ferret: ((.75 - .75) + (.75 - .9) + (.75 - .75)) / 3 = -.05; the k = 0 columns (p = .5) are left out.
    assert aopc_sufficiency(CLEAN, SUFFICIENCY, K3)[0] == pytest.approx(-0.05)
    # Every fraction: 3 * .25 + 3 * 0 + 3 * (-.15) + 0 = .3 -> .03.
    assert aopc_sufficiency(CLEAN, SUFFICIENCY, K3, skip_repeats=False)[0] == pytest.approx(0.03)


def test_aopc_per_sample_nan_when_nothing_counts_and_summarize_skips_it():
    k = np.vstack([K3, np.zeros((1, 10), dtype=np.int64)])  # sample 2: no removable token
    out = aopc_comprehensiveness(np.array([0.75, 0.6]), np.vstack([POSITIVE, np.full((1, 10), 0.6)]), k)
    assert out[0] == pytest.approx(1 / 3) and np.isnan(out[1])
    assert summarize(out[:, None], n_boot=0)["n"][0] == 1


def test_aopc_rejects_bad_shapes_and_counts():
    with pytest.raises(ValueError, match="need"):
        aopc_comprehensiveness(CLEAN, POSITIVE, K3[:, :5])
    with pytest.raises(ValueError, match="decrease"):
        aopc_sufficiency(CLEAN, POSITIVE, K3[:, ::-1])
    with pytest.raises(ValueError, match="counts"):
        aopc_sufficiency(CLEAN, POSITIVE, K3 * 0.5)


def test_auc_is_the_trapezoid_over_the_uneven_fractions():
    q = np.array([0, 0.25, 0.5, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0])  # Chefer's steps
    v = np.array([[1.0, 0.5, 0.5, 0.25, 0.25, 0.0, 0.0, 0.0, 0.0], [1.0] * 9])
    # .25 * (1 + .5) / 2 + .25 * .5 + .25 * (.5 + .25) / 2 + .05 * .25 + .05 * .25 / 2
    # = .1875 + .125 + .09375 + .0125 + .00625 = .425; a constant 1 has area 1.
    np.testing.assert_allclose(perturbation_auc(v, q), [0.425, 1.0])
    np.testing.assert_allclose(perturbation_auc(v, q), np.trapezoid(v, q, axis=1))
    # Accuracy curves (bool) work as 0/1; nan propagates per row.
    assert perturbation_auc(np.array([[True, True, False]]), np.array([0.0, 0.5, 1.0]))[0] == 0.75
    assert np.isnan(perturbation_auc(np.array([[1.0, np.nan]]), np.array([0.0, 1.0]))[0])
    with pytest.raises(ValueError, match="increase"):
        perturbation_auc(v, q[::-1])
    with pytest.raises(ValueError, match="need"):
        perturbation_auc(v, q[:3])
