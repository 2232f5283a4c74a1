"""The faithfulness loop forwards each distinct perturbed input once: same scores and curves as a
model called on every copy, with fewer rows through the model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from attnflow.attribution.faithfulness import faithfulness_samples

IDS = [[1, 5, 6, 7, 2], [1, 8, 9, 2], [1, 3, 4, 5, 6, 7, 2]]


class Counting(torch.nn.Module):
    """The wrapped model, counting the rows it is given; ``plain`` hides the model from the memo
    by splitting each call into one call per row (what every row costs without reuse)."""

    def __init__(self, model):
        super().__init__()
        self.model, self.rows = model, 0

    def forward(self, input_ids=None, attention_mask=None):
        self.rows += input_ids.shape[0]
        return self.model(input_ids=input_ids, attention_mask=attention_mask)


def _run(model, *, replace_id=None):
    rng = np.random.default_rng(0)
    rankings = {
        ("a", 1): [rng.random(len(r)) for r in IDS],
        ("a", 2): [np.arange(len(r), dtype=float) for r in IDS],  # ties nowhere, same top tokens as b
        ("b", None): [np.arange(len(r), dtype=float) for r in IDS],
    }
    return faithfulness_samples(
        model, IDS, rankings, sample_ids=[10, 11, 12], random_seed=0, pad_id=0, keep_positions=(0, -1),
        replace_id=replace_id, batch_size=4,
    )  # fmt: skip


def _every_copy(model, *, replace_id=None):
    """The reference: perturbation_curve called with the model itself (no reuse)."""
    import attnflow.attribution.faithfulness as faithfulness
    from attnflow.modes import eval_mode

    class NoReuse:  # the recording pass runs the model too; its results are not used
        recording = False

        def __init__(self, m):
            self.m = m

        def run_recorded(self, batch_size):
            pass

        def __call__(self, input_ids, attention_mask):
            with eval_mode(self.m), torch.no_grad():
                out = self.m(input_ids=input_ids, attention_mask=attention_mask)
            return out.logits if hasattr(out, "logits") else out

    saved = faithfulness._OnceModel
    faithfulness._OnceModel = NoReuse
    try:
        return _run(model, replace_id=replace_id)
    finally:
        faithfulness._OnceModel = saved


@pytest.mark.parametrize("replace_id", [None, 0, 3])
def test_reused_forwards_give_the_scores_and_curves_of_a_forward_per_copy(tiny_transformer, replace_id):
    reused, every = Counting(tiny_transformer()), Counting(tiny_transformer())
    scores, curves = _run(reused, replace_id=replace_id)
    ref_scores, ref_curves = _every_copy(every, replace_id=replace_id)
    tol = 1e-12  # float64 model: a row's logits do not depend on the other rows of its chunk
    pd.testing.assert_frame_equal(scores, ref_scores, atol=tol, rtol=0)
    pd.testing.assert_frame_equal(curves, ref_curves, atol=tol, rtol=0)
    # clean inputs recur in every protocol and ranking; identical rankings (a@2, b) share every copy
    assert reused.rows < every.rows / 2


def test_perturbed_copies_are_forwarded_by_real_length_without_padding(tiny_transformer):
    """Deleting tokens shortens a copy: after the clean batch, every call holds rows of one length
    and no padding (an all-ones mask)."""

    class Shapes(Counting):
        def __init__(self, model):
            super().__init__(model)
            self.calls = []

        def forward(self, input_ids=None, attention_mask=None):
            self.calls.append(attention_mask.clone())
            return super().forward(input_ids=input_ids, attention_mask=attention_mask)

    model = Shapes(tiny_transformer())
    _run(model)
    clean, *copies = model.calls
    assert not bool(clean.all())  # the clean batch: three lengths, padded
    assert copies and all(bool(m.all()) for m in copies)
    lengths = [m.shape[1] for m in copies]
    assert lengths == sorted(lengths) and len(set(lengths)) > 1  # shortest first, one length a call


def test_a_copy_masked_out_whole_is_forwarded_as_the_model_sees_it(tiny_transformer):
    """Replacing by PAD masks the replaced tokens; with no kept position, keeping the top 0 masks a
    copy out entirely: it is still forwarded (one masked position), as a copy per call would be."""
    rankings = {("a", 1): [np.arange(len(r), dtype=float) for r in IDS]}
    common = dict(
        sample_ids=[10, 11, 12], random_seed=None, pad_id=0, keep_positions=(), replace_id=0, batch_size=4
    )
    scores, _ = faithfulness_samples(Counting(tiny_transformer()), IDS, rankings, **common)

    class PerRow(torch.nn.Module):  # one row per call: the memo's grouping plays no part
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids=None, attention_mask=None):
            outs = [
                self.model(input_ids=i[None], attention_mask=m[None]).logits
                for i, m in zip(input_ids, attention_mask, strict=True)
            ]
            return torch.cat(outs)

    ref, _ = faithfulness_samples(PerRow(tiny_transformer()), IDS, rankings, **common)
    pd.testing.assert_frame_equal(scores, ref, atol=1e-12, rtol=0)
