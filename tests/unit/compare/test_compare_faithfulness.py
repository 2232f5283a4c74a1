"""attnflow.compare.faithfulness_table: every method, comparator and the random floor scored on the
same texts, one row per (method, metric) with its interval and its seconds per text; the
comprehensiveness of a ranking is the one `faithfulness_samples` gives it (no second scorer)."""

from __future__ import annotations

import numpy as np
import pytest

from attnflow.attribution.faithfulness import faithfulness_samples
from attnflow.compare.faithfulness import faithfulness_table
from attnflow.compare.scores import token_attributions
from attnflow.metrics.faithfulness import RANDOM


def test_one_row_per_method_and_metric_with_its_time(bert, texts):
    model, tokenizer = bert
    table = faithfulness_table(model, tokenizer, texts, ["rollout", "decompx"], comparators=("input_x_gradient",),
                               n_boot=200)  # fmt: skip
    assert sorted(map(tuple, table[["method", "metric"]].values)) == sorted(
        (m, k)
        for m in ("rollout", "decompx", "input_x_gradient", RANDOM)
        for k in ("comprehensiveness", "sufficiency")
    )
    assert (table["n"] == len(texts)).all()
    assert (table["ci_low"] <= table["mean"]).all() and (table["mean"] <= table["ci_high"]).all()
    timed = table[table["method"] != RANDOM]["seconds_per_text"]
    assert (timed > 0).all() and table[table["method"] == RANDOM]["seconds_per_text"].isna().all()


def test_a_methods_score_is_the_perturbation_tests_own(bert, texts):
    import torch

    model, tokenizer = bert
    table = faithfulness_table(model, tokenizer, texts[:2], ["decompx"], comparators=(), n_boot=0)
    ids = [np.asarray(tokenizer(t)["input_ids"]) for t in texts[:2]]
    ranking = [token_attributions(model, torch.as_tensor(r)[None], method="decompx")[0].numpy() for r in ids]
    per_sample, _ = faithfulness_samples(model, ids, {("decompx", None): ranking}, sample_ids=[0, 1],
                                         random_seed=None, pad_id=tokenizer.pad_token_id, keep_positions=(0, -1))  # fmt: skip
    direct = per_sample[(per_sample["metric"] == "comprehensiveness")]["value"].mean()
    got = table[(table["method"] == "decompx") & (table["metric"] == "comprehensiveness")]["mean"].item()
    assert got == pytest.approx(
        direct, abs=1e-6
    )  # float32 model: batches of other shapes differ in the last bits


def test_no_texts_is_refused(bert):
    model, tokenizer = bert
    with pytest.raises(ValueError, match="no texts to score"):
        faithfulness_table(model, tokenizer, [], ["rollout"])
