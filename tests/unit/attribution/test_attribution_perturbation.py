"""perturbation_curve and random_scores: what the model receives, the counts, the ranking floor."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnflow.attribution import (
    CHEFER_FRACTIONS,
    FERRET_FRACTIONS,
    perturbation_curve,
    random_scores,
)
from attnflow.metrics import aopc_comprehensiveness, aopc_sufficiency, perturbation_auc

F64 = torch.float64
PAD, UNK, CLS, MASK, SEP = 0, 1, 2, 3, 9


class Recorder:
    """Returns zero logits and records the (ids, mask) of every call."""

    def __init__(self):
        self.calls: list[tuple[list[list[int]], list[list[int]]]] = []

    def __call__(self, input_ids, attention_mask):
        self.calls.append((input_ids.tolist(), attention_mask.tolist()))
        return torch.zeros(input_ids.shape[0], 2)


# Sample 0: CLS 10 11 12 13 SEP; sample 1: CLS 20 21 SEP + 2 pads. Scores (CLS / SEP ignored):
#   sample 0: 10 -> .1, 11 -> .9, 12 -> .5, 13 -> .3   most-first 11 12 13 10, least-first 10 13 12 11
#   sample 1: 20 -> .2, 21 -> .2 (a tie: the earlier position, 20, goes first in both directions)
IDS = torch.tensor([[CLS, 10, 11, 12, 13, SEP], [CLS, 20, 21, SEP, PAD, PAD]])
MASK_ = (IDS != PAD).long()
SCORES = torch.tensor([[5.0, 0.1, 0.9, 0.5, 0.3, 7.0], [5.0, 0.2, 0.2, 7.0, 0.0, 0.0]])


def _perturbed_calls(mode, **kw):
    rec = Recorder()
    out = perturbation_curve(
        rec, IDS, MASK_, SCORES, mode=mode, fractions=(0.5, 1.0), keep_positions=(0, -1), **kw
    )
    return rec.calls[1:], out  # calls[0] is the clean pass


def test_deletion_keeps_cls_and_sep_and_the_order_of_the_rest():
    ids0, mask0, scores0 = IDS.clone(), MASK_.clone(), SCORES.clone()
    calls, out = _perturbed_calls("positive")
    # n = 4 and 2 removable; k = floor(q n): [2, 4] and [1, 2]. Rows (sample, fraction) in order.
    assert calls == [
        (
            [[CLS, 10, 13, SEP], [CLS, SEP, PAD, PAD], [CLS, 21, SEP, PAD], [CLS, SEP, PAD, PAD]],
            [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 0, 0]],
        )
    ]
    np.testing.assert_array_equal(out["k"], [[2, 4], [1, 2]])
    np.testing.assert_array_equal(out["n_removable"], [4, 2])
    assert torch.equal(IDS, ids0) and torch.equal(MASK_, mask0) and torch.equal(SCORES, scores0)

    calls, _ = _perturbed_calls("negative")
    assert calls[0][0] == [
        [CLS, 11, 12, SEP],
        [CLS, SEP, PAD, PAD],
        [CLS, 21, SEP, PAD],
        [CLS, SEP, PAD, PAD],
    ]
    # Sufficiency keeps the k top-ranked (in their original order) and deletes the rest.
    calls, out = _perturbed_calls("sufficiency")
    assert calls[0][0] == [
        [CLS, 11, 12, SEP, PAD, PAD],
        [CLS, 10, 11, 12, 13, SEP],
        [CLS, 20, SEP, PAD, PAD, PAD],
        [CLS, 20, 21, SEP, PAD, PAD],
    ]
    np.testing.assert_array_equal(out["k"], [[2, 4], [1, 2]])  # tokens kept


def test_deletion_chunks_are_repadded_to_their_own_width():
    calls, _ = _perturbed_calls("positive", batch_size=3)
    assert [len(ids[0]) for ids, _ in calls] == [4, 2]  # chunk 2 is the one row [CLS, SEP]
    assert calls[1] == ([[CLS, SEP]], [[1, 1]])


def test_replacement_ids_are_honoured_and_only_pad_is_masked():
    calls, _ = _perturbed_calls("positive", replace_id=PAD)
    ids, mask = calls[0]
    assert ids[0] == [CLS, 10, PAD, PAD, 13, SEP] and mask[0] == [1, 1, 0, 0, 1, 1]
    assert ids[2] == [CLS, PAD, 21, SEP, PAD, PAD] and mask[2] == [1, 0, 1, 1, 0, 0]
    for token in (UNK, MASK):
        (ids, mask), *_ = _perturbed_calls("positive", replace_id=token)[0]
        assert ids[0] == [CLS, 10, token, token, 13, SEP] and mask[0] == [1] * 6
    (ids, mask), *_ = _perturbed_calls("positive", replace_id=UNK, mask_replaced=True)[0]
    assert mask[0] == [1, 1, 0, 0, 1, 1]


def _counts(n, fractions, rounding):
    ids = torch.full((1, n + 1), 5)
    out = perturbation_curve(
        Recorder(), ids, None, torch.zeros(1, n + 1), fractions=fractions, rounding=rounding
    )
    return out["k"][0].tolist()


def test_counts_floor_like_ferret_and_ceil_like_chefer_without_float_slips():
    # ferret: int(q * n). n = 3: .3 * 3 = 0.8999... -> 0, .7 * 3 = 2.0999... -> 2, so k = 0,0,0,1,1,1,2,2,2,3.
    assert _counts(3, FERRET_FRACTIONS, "floor") == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]
    # Chefer keeps int((1 - q) n), i.e. removes ceil(q n). n = 5: q n = 0, 1.25, 2.5, 3.75, 4, 4.25, ...
    # (their float (1 - .8) * 5 = 0.99999... would keep 0 and remove 5 at q = .8; we remove 4).
    assert _counts(5, CHEFER_FRACTIONS, "ceil") == [0, 2, 3, 4, 4, 5, 5, 5, 5]
    assert _counts(5, CHEFER_FRACTIONS, "floor") == [0, 1, 2, 3, 4, 4, 4, 4, 5]
    # q n exact in decimals but not in floats: .3 * 10 = 3.0000000000000004 must ceil to 3.
    assert _counts(10, (0.3, 0.7), "ceil") == [3, 7]
    assert _counts(10, (0.30000000000000004, 0.7000000000000001), "floor") == [3, 7]  # np.arange's


LN3 = math.log(3.0)


def test_hand_computed_curves_and_aopc_on_three_tokens(bag_model):
    # Bag model, logits [s, 0], s = sum of the token weights: CLS 0, a = ln 3, b = ln 3, c = -ln 3.
    # p(class 0) = sigmoid(s): s = ln 3 -> 3/4, 0 -> 1/2, -ln 3 -> 1/4, 2 ln 3 -> 9/10. Ranking a > b > c.
    emb = torch.tensor([[0.0], [0.0], [0.0], [0.0], [LN3], [LN3], [-LN3]], dtype=F64)
    model = bag_model(emb, torch.tensor([[1.0], [0.0]], dtype=F64))
    ids, scores = torch.tensor([[CLS, 4, 5, 6]]), torch.tensor([[0.0, 3.0, 2.0, 1.0]])
    pos = perturbation_curve(model, ids, None, scores)  # ferret fractions: k = 0,0,0,1,1,1,2,2,2,3
    # Remove a -> s = 0 (1/2); a, b -> -ln 3 (1/4); all -> 0 (1/2).
    np.testing.assert_allclose(pos["prob"][0], [0.75] * 3 + [0.5] * 3 + [0.25] * 3 + [0.5])
    suf = perturbation_curve(model, ids, None, scores, mode="sufficiency")
    # Keep nothing -> 1/2; keep a -> 3/4; a, b -> 9/10; all -> 3/4.
    np.testing.assert_allclose(suf["prob"][0], [0.5] * 3 + [0.75] * 3 + [0.9] * 3 + [0.75])
    # comp = ((.75 - .5) + (.75 - .25) + (.75 - .5)) / 3 = 1/3; suff = (0 + (.75 - .9) + 0) / 3 = -.05
    assert aopc_comprehensiveness(pos["clean_prob"], pos["prob"], pos["k"])[0] == pytest.approx(1 / 3)
    assert aopc_sufficiency(suf["clean_prob"], suf["prob"], suf["k"])[0] == pytest.approx(-0.05)
    np.testing.assert_array_equal(pos["target"], [0])
    # Still predicted as class 0 while p >= 1/2 (p = 1/2 is a tie: argmax takes class 0).
    np.testing.assert_array_equal(pos["correct"][0], [True] * 6 + [False] * 3 + [True])
    assert pos["clean_prob"][0] == pytest.approx(0.75)


def test_true_ranking_beats_random_and_reversed_is_worst(bag_model):
    # Bag-of-words linear classifier: logits [s, 0], s = sum_t w[token_t]; deleting a token subtracts
    # its weight, so ranking by w (sign-flipped when class 1 is predicted) is the optimal ranking.
    gen = torch.Generator().manual_seed(0)
    vocab, n, t = 40, 48, 12
    w = torch.randn(vocab, 1, generator=gen, dtype=F64)
    w[:4] = 0.0  # specials
    model = bag_model(w, torch.tensor([[1.0], [0.0]], dtype=F64))
    ids = torch.randint(4, vocab, (n, t), generator=gen)
    ids[:, 0] = CLS
    lengths = torch.randint(4, t + 1, (n,), generator=gen)
    mask = (torch.arange(t) < lengths[:, None]).long()
    ids = torch.where(mask.bool(), ids, PAD)
    sign = torch.where((w[ids, 0] * mask).sum(1) > 0, 1.0, -1.0).double()  # predicted class 0 <=> s > 0
    true = w[ids, 0] * sign[:, None]
    rankings = {"true": true, "random": random_scores(mask, seed=0), "reversed": -true}

    res = {}
    for name, scores in rankings.items():
        pos = perturbation_curve(model, ids, mask, scores)
        suf = perturbation_curve(model, ids, mask, scores, mode="sufficiency")
        chefer = {"fractions": CHEFER_FRACTIONS, "rounding": "ceil"}
        pos_c = perturbation_curve(model, ids, mask, scores, mode="positive", **chefer)
        neg_c = perturbation_curve(model, ids, mask, scores, mode="negative", **chefer)
        res[name] = {
            "comp": aopc_comprehensiveness(pos["clean_prob"], pos["prob"], pos["k"]).mean(),
            # Sufficiency and the positive AUCs are lower-is-better: flipped so that higher is better.
            "suff": -aopc_sufficiency(suf["clean_prob"], suf["prob"], suf["k"]).mean(),
            "auc_pos": -perturbation_auc(pos_c["prob"], pos_c["fractions"]).mean(),
            "auc_neg": perturbation_auc(neg_c["prob"], neg_c["fractions"]).mean(),
            "acc_pos": -perturbation_auc(pos_c["correct"], pos_c["fractions"]).mean(),
        }
    for metric in res["true"]:
        assert res["true"][metric] > res["random"][metric] > res["reversed"][metric], metric


def test_random_scores_are_seeded_and_independent_of_batching(ragged_batch):
    ids, mask = ragged_batch  # real lengths 5, 3, 4, 2, 5
    a = random_scores(mask, seed=7)
    assert torch.equal(a, random_scores(mask, seed=7))
    assert not torch.equal(a, random_scores(mask, seed=8))
    for i in range(5):  # each sample alone, extra padding, its global index: the same scores
        n = int(mask[i].sum())
        alone = random_scores(torch.tensor([[1] * n + [0] * 3]), seed=7, sample_index=[i])
        assert torch.equal(alone[0, :n], a[i, :n])
        assert sorted(alone[0, :n].tolist()) == list(range(n)) and (alone[0, n:] == 0).all()
    # Batch size changes nothing downstream either.
    out1 = perturbation_curve(_linear_model(), ids, mask, a, batch_size=1)
    out2 = perturbation_curve(_linear_model(), ids, mask, a, batch_size=256)
    for key in ("prob", "k", "correct"):
        np.testing.assert_array_equal(out1[key], out2[key])


def _linear_model():
    def model(input_ids, attention_mask):  # logit 0 = sum of (id - 7) over real tokens
        s = ((input_ids.double() - 7.0) * attention_mask).sum(-1)
        return torch.stack([s, torch.zeros_like(s)], dim=-1)

    return model


def test_eval_mode_restored_and_unperturbed_column_equals_the_clean_output(tiny_transformer, ragged_batch):
    model = tiny_transformer()
    model.train()
    ids, mask = ragged_batch
    scores = torch.rand(ids.shape, generator=torch.Generator().manual_seed(1))
    for kw in ({}, {"replace_id": PAD}, {"replace_id": UNK}):
        out = perturbation_curve(model, ids, mask, scores, fractions=CHEFER_FRACTIONS, **kw)
        assert model.training and model.layer.dropout.training
        assert (out["k"][:, 0] == 0).all()
        np.testing.assert_allclose(out["prob"][:, 0], out["clean_prob"], rtol=1e-12)
        assert out["prob"].shape == (5, 9) and np.isfinite(out["prob"]).all()


def test_bad_arguments_raise():
    ids = torch.tensor([[CLS, 5, 6]])
    scores = torch.zeros(1, 3)
    rec = Recorder()
    with pytest.raises(ValueError, match="mode"):
        perturbation_curve(rec, ids, None, scores, mode="both")
    with pytest.raises(ValueError, match="fractions"):
        perturbation_curve(rec, ids, None, scores, fractions=(0.5, 0.2))
    with pytest.raises(ValueError, match="fractions"):
        perturbation_curve(rec, ids, None, scores, fractions=(0.5, 1.5))
    with pytest.raises(ValueError, match="shape"):
        perturbation_curve(rec, ids, None, scores[:, :2])
    with pytest.raises(ValueError, match="nan"):
        perturbation_curve(rec, ids, None, torch.tensor([[0.0, float("nan"), 1.0]]))
    with pytest.raises(ValueError, match="empty"):
        perturbation_curve(rec, ids, None, scores, keep_positions=())
    with pytest.raises(ValueError, match="seed"):
        random_scores(torch.ones(1, 3), seed=-1)
