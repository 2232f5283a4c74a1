"""switch_frame: each correlation switch flipped alone, and blank-out recomputed under each
attribution switch, correlated the configured way."""

from __future__ import annotations

import numpy as np
import pytest

from attnflow.metrics.tables import CorrelationSettings, switch_frame

# One sample, one layer, 4 positions (CLS first). Map [0.4, 0.3, 0.2, 0.1];
# blank-out [0.0, 0.1, 0.2, 0.3] (CLS blanked and scoring 0: lowest); gradients [4, 3, 2, 1].
MAPS = {"raw": [np.array([[0.4, 0.3, 0.2, 0.1]])]}
IMPORTANCE = {"blank_out": [np.array([0.0, 0.1, 0.2, 0.3])], "input_gradients": [np.array([4.0, 3, 2, 1])]}
SETTINGS = CorrelationSettings("average", "zero", {"blank_out": True, "input_gradients": True})


def _cell(frame, variant, importance):
    row = frame[(frame["variant"] == variant) & (frame["importance"] == importance)]
    assert len(row) == 1, (variant, importance, frame["variant"].unique())
    return float(row["mean"].iloc[0])


def test_flipping_cls_out_of_the_blank_out_correlation():
    frame = switch_frame(MAPS, IMPORTANCE, task="t", settings=SETTINGS)
    # All 4 positions: ranks reversed -> -1. Without CLS: [0.3, 0.2, 0.1] vs [0.1, 0.2, 0.3] -> -1 too;
    # the gradient correlation is +1 either way.
    assert _cell(frame, "correlate.include_cls.blank_out=false", "blank_out") == pytest.approx(-1.0)
    assert _cell(frame, "correlate.include_cls.input_gradients=false", "input_gradients") == pytest.approx(
        1.0
    )
    assert set(frame["variant"]) == {
        "correlate.spearman=dense_noties",
        "correlate.undefined=nan",
        "correlate.include_cls.blank_out=false",
        "correlate.include_cls.input_gradients=false",
    }


def test_cls_is_never_ranked_against_blank_out_when_it_was_not_blanked():
    settings = CorrelationSettings("average", "zero", {"blank_out": False, "input_gradients": True})
    frame = switch_frame(MAPS, IMPORTANCE, task="t", settings=settings, cls_blanked=False)
    assert "correlate.include_cls.blank_out=true" not in set(frame["variant"])


def test_switched_importance_is_correlated_without_cls_where_cls_was_not_blanked():
    # Blank-out recomputed with CLS skipped: CLS scores 0 but must not be ranked. On positions 1-3,
    # map [0.3, 0.2, 0.1] vs [0.3, 0.2, 0.1] -> +1 (with CLS ranked it would be 0.4 -> 0: rho = 0.2).
    switched = {
        "attribution.blank_positions=skip_cls": ("blank_out", [np.array([0.0, 0.3, 0.2, 0.1])], False)
    }
    frame = switch_frame(MAPS, IMPORTANCE, task="t", settings=SETTINGS, switched_importance=switched)
    assert _cell(frame, "attribution.blank_positions=skip_cls", "blank_out") == pytest.approx(1.0)


def test_switches_of_a_subset_are_correlated_on_it_against_its_own_configured_cells():
    # Three samples; blank-out recomputed for samples 2 and 0 only (in that order). Sample 2's
    # recomputed scores are its configured ones, sample 0's are reversed.
    maps = {"raw": [np.array([[0.4, 0.3, 0.2, 0.1]])] * 3}
    configured = [np.array([0.0, 0.1, 0.2, 0.3]), np.array([4.0, 3, 2, 1]), np.array([1.0, 2, 3, 4])]
    switched = {"attribution.x=1": ("blank_out", [configured[2], configured[0][::-1]], True)}
    frame = switch_frame(
        maps, {"blank_out": configured}, task="t", settings=SETTINGS, switched_importance=switched,
        switch_samples=[2, 0],
    )  # fmt: skip
    # Configured: samples 2 and 0 both rank the map reversed (-1); all three: (-1 + 1 - 1) / 3.
    assert _cell(frame, "configured@switch_samples", "blank_out") == pytest.approx(-1.0)
    assert _cell(frame, "attribution.x=1", "blank_out") == pytest.approx(0.0)  # (-1 + 1) / 2
    assert _cell(frame, "correlate.spearman=dense_noties", "blank_out") == pytest.approx(
        -1 / 3
    )  # all samples
    assert frame.loc[frame["variant"] == "configured@switch_samples", "n"].tolist() == [2]


def test_switches_of_every_sample_in_order_add_no_reference():
    switched = {"attribution.x=1": ("blank_out", IMPORTANCE["blank_out"], True)}
    frame = switch_frame(
        MAPS, IMPORTANCE, task="t", settings=SETTINGS, switched_importance=switched, switch_samples=[0]
    )
    assert "configured@switch_samples" not in set(frame["variant"])
    assert _cell(frame, "attribution.x=1", "blank_out") == pytest.approx(-1.0)
