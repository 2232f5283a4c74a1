"""The claims ledger's per-sentence frames (attnflow.report.inputs.sentence_frames): the pronoun test's
rows of the reduction its stage reported, keyed by sentence and seed."""

from __future__ import annotations

import json

import pandas as pd

from attnflow.paths import StudyPaths
from attnflow.report.inputs import sentence_frames

PATHS = {k: k for k in ("raw", "prepared", "models", "capture", "explain", "attribute", "reports")}


def test_the_pronoun_frame_keeps_the_reported_reduction_only(tmp_path):
    paths = StudyPaths.from_config(PATHS, root=tmp_path)
    folder = paths.reports / "pronouns"
    folder.mkdir(parents=True)
    scores = pd.DataFrame({
        "sentence_id": [0, 0, 1, 1], "method": "flow", "layer": 2, "reduce": ["max", "sum", "max", "sum"],
        "variant": "plain", "referent": [1.0, 0.0, 1.0, 0.0], "model_choice": [1.0, 0.0, 0.0, 1.0],
    })  # fmt: skip
    scores.to_parquet(folder / "scores.parquet")
    (folder / "summary.json").write_text(json.dumps({"reduce": "sum"}))
    got = sentence_frames(paths, [], seed=3)["pronouns"]
    assert got["reduce"].tolist() == ["sum", "sum"]
    assert got["sentence"].tolist() == [0, 1] and set(got["seed"]) == {3}
    assert got["model_choice"].tolist() == [0.0, 1.0]
