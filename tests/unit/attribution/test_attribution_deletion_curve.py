"""deletion_curve: cumulative blanking in score order, hand-computed on a bag model."""

from __future__ import annotations

import math

import numpy as np
import torch

from attnflow.attribution import blank_out, deletion_curve
from attnflow.metrics import aopc

F64 = torch.float64
LN3 = math.log(3.0)
# 1-D bag model, logits = [s, 0], s = sum of unmasked embeddings; e[4] = 2, e[5] = 1, e[6] = -1, e[cls] = 0.
EMB = torch.tensor([[0.0], [0.0], [0.0], [0.0], [2.0], [1.0], [-1.0]], dtype=F64)
HEAD = torch.tensor([[1.0], [0.0]], dtype=F64)
IDS = torch.tensor([[2, 4, 5, 6], [2, 5, 4, 0]])
MASK = (IDS != 0).long()


def test_logit_curve_deletes_tokens_in_score_order(bag_model):
    # Sample 0: s = 2 + 1 - 1 = 2. Scores rank positions 1 (e=2), 3 (e=-1), 2 (e=1):
    #   k=0: 2; k=1: drop 2 -> 0; k=2: drop -1 -> 1; k=3: drop 1 -> 0.
    # Sample 1: s = 3; scores [., .1, .2, .]: drop pos 2 (e=2) -> 1, then pos 1 (e=1) -> 0; then nan (2 tokens).
    scores = torch.tensor([[9.0, 0.9, 0.1, 0.5], [9.0, 0.1, 0.2, 0.0]])
    model = bag_model(EMB, HEAD)
    curve = deletion_curve(model, IDS, MASK, scores, score="logit")
    expected = torch.tensor([[2, 0, 1, 0], [3, 1, 0, torch.nan]], dtype=F64)
    torch.testing.assert_close(curve, expected, equal_nan=True)
    # Least important first: sample 0 drops pos 2 (1) -> 1, pos 3 (-1) -> 2, pos 1 (2) -> 0.
    lerf = deletion_curve(model, IDS, MASK, scores, score="logit", most_important_first=False)
    torch.testing.assert_close(lerf[0], torch.tensor([2, 1, 2, 0], dtype=F64))
    # max_steps cuts the curve; batch size does not change it.
    torch.testing.assert_close(
        deletion_curve(model, IDS, MASK, scores, score="logit", max_steps=1), expected[:, :2]
    )
    torch.testing.assert_close(
        deletion_curve(model, IDS, MASK, scores, score="logit", batch_size=1), expected, equal_nan=True
    )


def test_first_step_of_the_probability_curve_is_blank_out_of_the_top_token(
    bag_model, tiny_transformer, ragged_batch
):
    # One deletion = blank-out of the top-scored position: curve[:, 0] - curve[:, 1] = signed blank-out there.
    model = tiny_transformer()
    ids, mask = ragged_batch
    scores = torch.rand(ids.shape, generator=torch.Generator().manual_seed(0))
    scores[:, 0] = 10  # CLS is never deleted, whatever its score
    curve = deletion_curve(model, ids, mask, scores)
    bo = blank_out(model, ids, mask)
    top = torch.where(mask.bool() & (torch.arange(5) > 0), scores, -1.0).argmax(1)
    torch.testing.assert_close((curve[:, 0] - curve[:, 1]).abs(), bo[torch.arange(5), top].double())
    ids0 = ids.clone()
    a = aopc(curve.numpy())
    assert a.shape == (5,) and np.isfinite(a).all() and torch.equal(ids, ids0)
