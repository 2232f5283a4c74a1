"""The agreement transformer: attention is a distribution over real keys, padding is inert,
the encoder is bidirectional and the classifier reads <cls> only."""

from __future__ import annotations

import pytest
import torch

from attnflow.models import AgreementConfig, AgreementTransformer, ClassifierOutput

ATOL = 1e-6  # float32 round-off on a 2-layer, width-16 model


def _batch(vocab, texts):
    from attnflow.models import WordEncoder

    enc = WordEncoder(vocab).encode(texts)
    return enc["input_ids"], enc["attention_mask"]


def test_attentions_have_canonical_shape_and_rows_sum_to_one(tiny_agreement, vocab):
    ids, mask = _batch(vocab, ["the dog near the cats", "the dogs"])
    out = tiny_agreement(ids, mask, output_attentions=True)
    assert isinstance(out, ClassifierOutput)
    B, T = ids.shape
    assert out.logits.shape == (B, 2)
    assert out.attentions.shape == (B, 2, 2, T, T)  # (B, L, H, T, T)
    rows = out.attentions.sum(-1)  # (B, L, H, T)
    real_rows = mask.bool()[:, None, None, :].expand_as(rows)
    torch.testing.assert_close(rows[real_rows], torch.ones_like(rows[real_rows]))
    assert (out.attentions >= 0).all()


def test_padded_keys_get_exactly_zero_attention(tiny_agreement, vocab):
    ids, mask = _batch(vocab, ["the dog near the cats", "the dogs"])
    att = tiny_agreement(ids, mask, output_attentions=True).attentions
    # second sentence: <cls> the dogs + 3 pads; keys 3..5 are padding
    assert torch.equal(att[1, :, :, :, 3:], torch.zeros_like(att[1, :, :, :, 3:]))


def test_no_attention_is_returned_unless_asked(tiny_agreement, vocab):
    ids, mask = _batch(vocab, ["the dog"])
    assert tiny_agreement(ids, mask).attentions is None


def test_padding_never_reaches_real_positions(tiny_agreement, vocab):
    # the same sentence, padded to 3 and to 8 extra positions, with junk token ids in the padding
    ids, mask = _batch(vocab, ["the dog near the cats"])
    T = ids.shape[1]
    long_ids = torch.cat([ids, torch.randint(4, len(vocab), (1, 8))], dim=1)
    long_mask = torch.cat([mask, torch.zeros(1, 8, dtype=mask.dtype)], dim=1)
    a = tiny_agreement(ids, mask, output_attentions=True)
    b = tiny_agreement(long_ids, long_mask, output_attentions=True)
    torch.testing.assert_close(a.logits, b.logits, atol=ATOL, rtol=0)
    torch.testing.assert_close(a.attentions, b.attentions[..., :T, :T], atol=ATOL, rtol=0)


def test_cls_classifier_ignores_padded_positions_in_a_batch(tiny_agreement, vocab):
    # a short sentence alone vs batched with a long one (so it gets padded): same logits
    alone = tiny_agreement(*_batch(vocab, ["the dogs"])).logits
    batched = tiny_agreement(*_batch(vocab, ["the dogs", "the big dog near the big cats of the dog"])).logits
    torch.testing.assert_close(alone[0], batched[0], atol=ATOL, rtol=0)


def test_encoder_is_bidirectional_last_token_changes_cls_output(tiny_agreement, vocab):
    # with a causal mask <cls> (position 0) could not see the last word; here it must
    a = tiny_agreement(*_batch(vocab, ["the dog near the cats"])).logits
    b = tiny_agreement(*_batch(vocab, ["the dog near the cat"])).logits
    assert not torch.allclose(a, b)


def test_inputs_embeds_replace_token_embeddings(tiny_agreement, vocab):
    ids, mask = _batch(vocab, ["the dog near the cats", "the dogs"])
    embeds = tiny_agreement.get_input_embeddings()(ids)
    a = tiny_agreement(ids, mask, output_attentions=True)
    b = tiny_agreement(inputs_embeds=embeds, attention_mask=mask, output_attentions=True)
    torch.testing.assert_close(a.logits, b.logits)
    torch.testing.assert_close(a.attentions, b.attentions)


def test_missing_mask_is_derived_from_pad_ids(tiny_agreement, vocab):
    ids, mask = _batch(vocab, ["the dog near the cats", "the dogs"])
    torch.testing.assert_close(tiny_agreement(ids).logits, tiny_agreement(ids, mask).logits)


def test_gradients_reach_inputs_embeds(tiny_agreement, vocab):
    ids, mask = _batch(vocab, ["the dog near the cats"])
    embeds = tiny_agreement.get_input_embeddings()(ids).detach().requires_grad_(True)
    p = tiny_agreement(inputs_embeds=embeds, attention_mask=mask).logits.softmax(-1)
    (p[0, 0] - p[0, 1]).backward()
    assert embeds.grad is not None and embeds.grad.abs().sum() > 0


def test_interface_attributes(tiny_agreement):
    assert tiny_agreement.num_layers == 2 and tiny_agreement.num_heads == 2
    assert isinstance(tiny_agreement.get_input_embeddings(), torch.nn.Embedding)


def test_invalid_inputs_raise():
    model = AgreementTransformer(AgreementConfig(vocab_size=8, block_size=4, n_layer=1, n_head=2, n_embd=8))
    with pytest.raises(ValueError, match="exactly one"):
        model()
    with pytest.raises(ValueError, match="block_size"):
        model(torch.ones(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="divisible"):
        AgreementTransformer(AgreementConfig(vocab_size=8, n_head=3, n_embd=8))


def test_default_config_is_the_papers_model():
    config = AgreementConfig()
    model = AgreementTransformer(config)
    assert (model.num_layers, model.num_heads, config.n_embd) == (6, 8, 128)
