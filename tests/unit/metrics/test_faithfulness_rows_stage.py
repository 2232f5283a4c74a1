"""What the faithfulness stage computes under both row rules, on a tiny agreement model: a task that
reads "max" also scores raw / rollout / flow at the CLS row (``<method>_at_cls``), exactly as a task
that reads "cls" scores them; a "cls" task gets nothing extra and never loads the attentions."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from attnflow.attribution.faithfulness_rows import faithfulness_both_rows
from attnflow.batches import pad_batch
from attnflow.bridge import forward
from attnflow.explain.samples import explain_samples
from attnflow.methods import resolve
from tests._tiny import tiny_agreement

pytest.importorskip("captum")  # the comparators' integrated gradients

WORDS = ["the", "dog", "dogs", "near", "cat", "cats", "big"]
METHODS = ["raw", "rollout", "flow"]


def _study():
    """A tiny agreement model, its encoder, 5 sentences and their captured (L, H, T_i, T_i) attentions."""
    model, encoder = tiny_agreement(16, WORDS)
    rng = random.Random(0)
    ids = encoder.encode_ids([" ".join(rng.choices(WORDS, k=rng.randint(3, 5))) for _ in range(5)])
    batch, mask = pad_batch([np.asarray(r) for r in ids], encoder.pad_id)
    attn = forward(model, {"input_ids": batch, "attention_mask": mask}).attentions.double().numpy()
    captured = [attn[b][..., : len(r), : len(r)] for b, r in enumerate(ids)]  # (L, H, T_i, T_i)
    return model, encoder, ids, captured


def _run(model, encoder, ids, captured, task_rows, load):
    maps = explain_samples(captured, methods=resolve(METHODS), rows=task_rows)  # the explain stage's maps
    importance = {"blank_out": [np.arange(len(r), 0, -1, dtype=float) for r in ids]}
    return faithfulness_both_rows(
        model, encoder, ids, maps, importance, methods=METHODS, task_rows=task_rows, load_attentions=load,
        importance_options={}, sample_ids=list(range(100, 100 + len(ids))), n_samples=3, keep_positions=(0,),
        n_boot=5, top_k=2, batch_size=64,
    )  # fmt: skip


def test_a_max_task_scores_its_task_row_methods_at_the_cls_row_too_as_a_cls_task_does():
    model, encoder, ids, captured = _study()
    loads = []
    result, cost = _run(model, encoder, ids, captured, "max", lambda: loads.append(1) or captured)
    assert loads == [1]  # the attentions are read once
    scores = result.scores.drop_duplicates("method").set_index("method")["rows"]
    assert scores[["raw", "rollout", "flow"]].tolist() == ["max"] * 3
    assert scores[["raw_at_cls", "rollout_at_cls", "flow_at_cls"]].tolist() == ["cls"] * 3
    assert (
        scores["blank_out"] == "output"
        and scores["input_x_gradient"] == "output"
        and scores["random"] == "none"
    )
    # every layer of each CLS-row reading is scored, as the task's own readings are
    per_layer = result.scores.dropna(subset=["layer"]).groupby("method")["layer"].nunique()
    assert per_layer["flow_at_cls"] == per_layer["flow"] == 2
    assert set(result.curves.loc[result.curves["method"] == "flow_at_cls", "rows"]) == {"cls"}
    pair = result.agreement[
        (result.agreement["method_a"] == "flow") & (result.agreement["method_b"] == "flow_at_cls")
    ]
    assert not pair.empty and set(pair["rows_a"]) == {"max"} and set(pair["rows_b"]) == {"cls"}
    timed = cost.set_index("method")
    assert timed.loc["flow_at_cls", "rows"] == "cls" and timed.loc["flow_at_cls", "seconds_per_sentence"] > 0
    assert timed.loc["flow", "rows"] == "max"

    # the same model, samples and seed with the task reading "cls": its raw / rollout / flow are the
    # _at_cls readings above, score for score; and nothing else is added, the attentions never loaded
    def refuse():
        raise AssertionError("a cls task needs no second reading")

    plain, plain_cost = _run(model, encoder, ids, captured, "cls", refuse)
    assert (
        not plain.scores["method"].str.endswith("_at_cls").any()
        and not plain_cost["method"].str.endswith("_at_cls").any()
    )
    assert set(plain.scores.loc[plain.scores["method"].isin(METHODS), "rows"]) == {"cls"}
    key = ["method", "layer", "metric"]
    ours = result.scores[result.scores["method"].str.endswith("_at_cls")].assign(
        method=lambda d: d["method"].str.removesuffix("_at_cls")
    )
    theirs = plain.scores[plain.scores["method"].isin(METHODS)]
    pd.testing.assert_frame_equal(
        ours.drop(columns="rows").sort_values(key).reset_index(drop=True),
        theirs.drop(columns="rows").sort_values(key).reset_index(drop=True),
    )
    # the task's own "max" readings differ from the CLS ones somewhere (else the test shows nothing)
    same = result.scores.set_index(key)["mean"]
    assert any(
        not np.isclose(same[(m, layer, "comprehensiveness")], same[(f"{m}_at_cls", layer, "comprehensiveness")])
        for m in METHODS for layer in (1, 2)
    )  # fmt: skip
