"""blank_out: hand-computed probability drops, what the blank token and its masking change, batching."""

from __future__ import annotations

import math

import pytest
import torch

from attnflow.attribution import ATTRIBUTIONS, PAD_ID, blank_out

LN3 = math.log(3.0)
PAD, UNK, CLS, MASK = 0, 1, 2, 3

# 1-D embeddings: e[pad] = -ln3, e[unk] = 2 ln3, e[cls] = 0, e[mask] = 0, e[4] = e[5] = ln3, e[6] = -3 ln3.
# Head: logits = [s, 0] with s = sum of the embeddings of the unmasked tokens, so p0 = sigmoid(s):
# s = ln k  =>  p0 = k / (k + 1).
EMB = torch.tensor([[-LN3], [2 * LN3], [0.0], [0.0], [LN3], [LN3], [-3 * LN3]], dtype=torch.float64)
HEAD = torch.tensor([[1.0], [0.0]], dtype=torch.float64)

# Sample A: [CLS, 4, 5, PAD]: s = 2 ln3 = ln 9, p0 = 9/10, predicted class 0.
# Sample B: [CLS, 6, 4, 5]:   s = -ln3,        p0 = 1/4,  predicted class 1 (p1 = 3/4).
IDS = torch.tensor([[CLS, 4, 5, PAD], [CLS, 6, 4, 5]])
MASK_ = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])


def test_pad_blank_masked_deletes_the_token_and_matches_hand_computed_drops(bag_model):
    # Masked PAD = token removed from the bag.
    # A, blank pos 1 or 2: s = ln3 -> p0 = 3/4, |9/10 - 3/4| = 3/20.
    # B, blank pos 1 (the -3 ln3): s = 2 ln3 -> p1 = 1/10, |3/4 - 1/10| = 13/20.
    # B, blank pos 2 or 3 (a +ln3): s = -2 ln3 -> p1 = 9/10, |3/4 - 9/10| = 3/20.
    # CLS (skipped) and the pad of A: 0.
    out = blank_out(bag_model(EMB, HEAD), IDS, MASK_, blank_id=PAD)  # mask_blank defaults to True for PAD
    expected = torch.tensor([[0, 3 / 20, 3 / 20, 0], [0, 13 / 20, 3 / 20, 3 / 20]], dtype=torch.float64)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


def test_pad_blank_unmasked_sees_the_pad_embedding(bag_model):
    # mask_blank=False: the PAD embedding -ln3 replaces the token inside the bag.
    # A, pos 1 or 2: s = -ln3 + ln3 = 0 -> p0 = 1/2, |9/10 - 1/2| = 2/5.
    # B, pos 1: s = -ln3 + 2 ln3 = ln3 -> p1 = 1/4, |3/4 - 1/4| = 1/2.
    # B, pos 2 or 3: s = -3 ln3 - ln3 + ln3 = -3 ln3 -> p1 = 27/28, |3/4 - 27/28| = 6/28 = 3/14.
    out = blank_out(bag_model(EMB, HEAD), IDS, MASK_, blank_id=PAD, mask_blank=False)
    expected = torch.tensor([[0, 2 / 5, 2 / 5, 0], [0, 1 / 2, 3 / 14, 3 / 14]], dtype=torch.float64)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


def test_unk_blank_is_not_masked_by_default_and_substitutes_its_embedding(bag_model):
    # e[unk] = 2 ln3 replaces the token: A, pos 1 or 2: s = 3 ln3 -> p0 = 27/28, |9/10 - 27/28| = 9/140.
    # B, pos 1: s = 2 ln3 + 2 ln3 = 4 ln3 -> p1 = 1/82, |3/4 - 1/82| = 121/164.
    # B, pos 2 or 3: s = -3 ln3 + 2 ln3 + ln3 = 0 -> p1 = 1/2, |3/4 - 1/2| = 1/4.
    out = blank_out(bag_model(EMB, HEAD), IDS, MASK_, blank_id=UNK)
    expected = torch.tensor([[0, 9 / 140, 9 / 140, 0], [0, 121 / 164, 1 / 4, 1 / 4]], dtype=torch.float64)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    masked = blank_out(bag_model(EMB, HEAD), IDS, MASK_, blank_id=UNK, mask_blank=True)
    torch.testing.assert_close(masked, blank_out(bag_model(EMB, HEAD), IDS, MASK_, blank_id=PAD))


def test_logit_score_and_gold_target_pick_the_class(bag_model):
    # 3 classes, logits = [s, 0, -s]. A predicts class 0; masked PAD blank of a ln3 token moves s by ln3.
    head = torch.tensor([[1.0], [0.0], [-1.0]])
    model = bag_model(EMB, head)
    ids, mask = IDS[:1], MASK_[:1]
    pred = blank_out(model, ids, mask, score="logit")
    torch.testing.assert_close(pred, torch.tensor([[0, LN3, LN3, 0]], dtype=torch.float64))
    # Gold class 1 has the constant logit 0: nothing moves it.
    gold1 = blank_out(model, ids, mask, score="logit", target="gold", labels=torch.tensor([1]))
    torch.testing.assert_close(gold1, torch.zeros(1, 4, dtype=torch.float64))
    gold2 = blank_out(model, ids, mask, score="logit", target="gold", labels=torch.tensor([2]))
    torch.testing.assert_close(gold2, pred)
    with pytest.raises(ValueError, match="labels"):
        blank_out(model, ids, mask, target="gold")


def test_model_reading_only_position_two_gets_importance_only_there(bag_model, ragged_batch):
    torch.manual_seed(0)
    emb = torch.randn(12, 3)
    model = bag_model(emb, torch.randn(2, 3), readout=2)
    ids, mask = ragged_batch
    for blank in (PAD, UNK, MASK):
        out = blank_out(model, ids, mask, blank_id=blank)
        others = torch.ones_like(out, dtype=torch.bool)
        others[:, 2] = False
        assert (out[others] == 0).all()
        real2 = mask[:, 2].bool()  # sample 3 has length 2: position 2 is a pad there
        assert (out[real2, 2] > 0).all() and (out[~real2, 2] == 0).all()


def test_skip_positions_controls_whether_cls_is_scored(bag_model):
    # Blank CLS (e = 0) with an unmasked UNK (e = 2 ln3): A goes to s = 4 ln3 -> p0 = 81/82.
    model = bag_model(EMB, HEAD)
    out = blank_out(model, IDS[:1], MASK_[:1], blank_id=UNK, skip_positions=())
    assert out[0, 0].item() == pytest.approx(81 / 82 - 9 / 10, abs=1e-12)
    assert blank_out(model, IDS[:1], MASK_[:1], blank_id=UNK)[0, 0] == 0


def test_batching_does_not_change_scores(tiny_transformer, ragged_batch):
    model = tiny_transformer()
    ids, mask = ragged_batch
    ref = blank_out(model, ids, mask, batch_size=256)
    for bs in (1, 3):
        torch.testing.assert_close(blank_out(model, ids, mask, batch_size=bs), ref, rtol=0, atol=1e-10)
    # Sample order is a permutation of the output rows.
    perm = torch.tensor([3, 0, 4, 1, 2])
    torch.testing.assert_close(blank_out(model, ids[perm], mask[perm]), ref[perm], rtol=0, atol=1e-10)
    assert (ref[mask == 0] == 0).all() and (ref[:, 0] == 0).all()


def test_inputs_model_flags_and_gradients_are_left_alone(tiny_transformer, ragged_batch):
    model = tiny_transformer()
    model.train()
    model.head.eval()  # a caller's mixed state must come back as it was
    flags = {name: m.training for name, m in model.named_modules()}
    ids, mask = ragged_batch
    ids0, mask0 = ids.clone(), mask.clone()
    out = blank_out(model, ids, mask)
    assert torch.equal(ids, ids0) and torch.equal(mask, mask0)
    assert flags == {name: m.training for name, m in model.named_modules()}
    assert all(p.grad is None for p in model.parameters())
    # Dropout 0.5 is active in train mode; blank_out ran in eval mode, so a second call agrees.
    torch.testing.assert_close(blank_out(model, ids, mask), out)


def test_registry_and_pad_id_match_the_project_vocabulary():
    from attnflow.data.vocab import Vocab

    assert ATTRIBUTIONS["blank_out"] is blank_out
    assert PAD_ID == Vocab.pad_id


def test_negative_skip_counts_back_from_each_samples_last_real_token(bag_model):
    # skip_positions=(-1,): the end marker of each sample, whatever its length: A's position 2
    # (before its pad), B's position 3. CLS (position 0) is blanked too (no 0 in the skips).
    # A, blank CLS (e = 0) with a masked PAD: the bag loses nothing -> 0; pos 1: 3/20 as above.
    # B, blank CLS: 0; pos 1: 13/20; pos 2: 3/20; pos 3 skipped -> 0.
    out = blank_out(bag_model(EMB, HEAD), IDS, MASK_, blank_id=PAD, skip_positions=(-1,))
    expected = torch.tensor([[0, 3 / 20, 0, 0], [0, 13 / 20, 3 / 20, 0]], dtype=torch.float64)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


def test_cls_is_blanked_when_not_skipped(bag_model):
    # An UNK blank, unmasked, at CLS (e = 0) adds 2 ln3 to the bag: A: s = ln 81 -> p0 = 81/82,
    # |9/10 - 81/82| = 36/410; B: s = ln3 -> p1 = 1/4, |3/4 - 1/4| = 1/2.
    out = blank_out(bag_model(EMB, HEAD), IDS, MASK_, blank_id=UNK, mask_blank=False, skip_positions=())
    torch.testing.assert_close(
        out[:, 0], torch.tensor([36 / 410, 1 / 2], dtype=torch.float64), rtol=0, atol=1e-12
    )
