"""The study's blank-out settings: which positions are blanked, the end marker's convention, and
each switch flipped alone."""

from __future__ import annotations

import numpy as np
import torch

from attnflow.attribution.samples import attribute_samples, blank_switches, method_options
from attnflow.data.vocab import Vocab
from attnflow.models.encoders import WordEncoder

VOCAB = Vocab.build([["the", "dog", "dogs"]])


class CountModel(torch.nn.Module):
    """logit 0 = number of real "dog" tokens (+0.5 per <eos>, +0.25 per <cls>), logit 1 = 0."""

    def forward(self, input_ids=None, attention_mask=None, **_):
        real = attention_mask.bool()
        dog = ((input_ids == VOCAB.stoi["dog"]) & real).sum(-1).float()
        eos = ((input_ids == VOCAB.eos_id) & real).sum(-1).float()
        cls = ((input_ids == VOCAB.cls_id) & real).sum(-1).float()
        s = dog + 0.5 * eos + 0.25 * cls
        return torch.stack([s, torch.zeros_like(s)], dim=-1)


def _blank_out(encoder, **settings):
    ids = encoder.encode_ids(["the dog"])
    options = method_options(["blank_out"], encoder, **{**SETTINGS, **settings})
    options["blank_out"]["score"] = "logit"
    return attribute_samples(CountModel(), ids, [0], options=options, pad_id=encoder.pad_id)["blank_out"][0]


SETTINGS = dict(blank_positions="all", blank_token="unk", mask_blank=False, blank_target="gold")


def test_authors_input_ends_with_eos_which_is_never_blanked_and_scores_zero():
    encoder = WordEncoder(VOCAB, append_eos=True)
    assert encoder.vocab.decode(encoder.encode_ids(["the dog"])[0]) == ["<cls>", "the", "dog", "<eos>"]
    # <cls> the dog <eos>: CLS blanked with UNK loses its 0.25; "dog" loses 1; <eos> is kept (0).
    np.testing.assert_allclose(_blank_out(encoder), [0.25, 0.0, 1.0, 0.0])


def test_skip_cls_leaves_cls_unblanked():
    encoder = WordEncoder(VOCAB, append_eos=True)
    np.testing.assert_allclose(_blank_out(encoder, blank_positions="skip_cls"), [0.0, 0.0, 1.0, 0.0])


def test_without_eos_the_last_word_is_blanked_like_any_other():
    encoder = WordEncoder(VOCAB, append_eos=False)
    np.testing.assert_allclose(_blank_out(encoder), [0.25, 0.0, 1.0])


def test_truncation_keeps_cls_and_eos():
    encoder = WordEncoder(VOCAB, max_length=3, append_eos=True)
    assert encoder.vocab.decode(encoder.encode_ids(["the dog dogs"])[0]) == ["<cls>", "the", "<eos>"]


def test_a_vocabulary_without_eos_cannot_append_it():
    old = Vocab(("<pad>", "<unk>", "<cls>", "<mask>", "the"))  # a vocabulary built before <eos>
    assert old.eos_id is None
    try:
        WordEncoder(old, append_eos=True)
    except ValueError as exc:
        assert "<eos>" in str(exc)
    else:
        raise AssertionError("append_eos on a vocabulary without <eos> was accepted")


def test_each_switch_is_flipped_alone():
    flips = blank_switches({**SETTINGS, "blank_score": "prob", "batch_size": 8})
    assert set(flips) == {"blank_positions=skip_cls", "blank_token=pad", "mask_blank=true"}
    for name, settings in flips.items():
        key = name.split("=")[0]
        changed = {
            k for k in settings if settings[k] != {**SETTINGS, "blank_score": "prob", "batch_size": 8}[k]
        }
        assert changed == {key}
