"""Which samples the study explains: seeded, in file order, with ids; too many asked is said."""

from __future__ import annotations

import pandas as pd
import pytest

from attnflow.capture import select_samples


def test_seeded_subset_keeps_file_order_and_ids():
    frame = pd.DataFrame({"text": [f"t{i}" for i in range(10)]})
    a, b, c = (select_samples(frame, 4, seed) for seed in (0, 0, 1))
    assert a.equals(b) and not a.equals(c)
    assert list(a["sample_id"]) == sorted(a["sample_id"]) and a["text"].tolist() == [
        f"t{i}" for i in a["sample_id"]
    ]


def test_asking_more_samples_than_the_split_holds_warns_with_both_numbers():
    frame = pd.DataFrame({"text": ["a", "b"]})
    with pytest.warns(UserWarning, match="5 samples asked for, the split has only 2"):
        out = select_samples(frame, 5, 0)
    assert out["sample_id"].tolist() == [0, 1]
