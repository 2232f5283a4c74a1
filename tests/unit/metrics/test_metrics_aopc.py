"""aopc: mean drop from the clean output along a deletion curve, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from attnflow.metrics import aopc


def test_aopc_hand_example_with_ragged_curves():
    # Sample 0: drops 0, .4, .6, .9 -> 1.9 / 4 = 0.475. Sample 1: drops 0, .2 (then nan) -> 0.1.
    curves = np.array([[1.0, 0.6, 0.4, 0.1], [0.5, 0.3, np.nan, np.nan], [np.nan] * 4])
    out = aopc(curves)
    np.testing.assert_allclose(out[:2], [0.475, 0.1])
    assert np.isnan(out[2])
    # max_steps=1 keeps k = 0, 1: sample 0 -> (0 + .4) / 2.
    assert aopc(curves, max_steps=1)[0] == pytest.approx(0.2)
    with pytest.raises(ValueError):
        aopc(np.zeros(3))
