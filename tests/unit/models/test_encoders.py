"""Encoders: CLS first, right padding, mask = 1 on real tokens, truncation keeps CLS."""

from __future__ import annotations

from attnflow.models import HFEncoder, WordEncoder
from attnflow.models.hf import load_pretrained_tokenizer


def test_word_encoder_prepends_cls_and_pads_right(vocab):
    out = WordEncoder(vocab).encode(["the dog near", "cats"])
    ids, mask = out["input_ids"], out["attention_mask"]
    assert ids.shape == mask.shape == (2, 4)
    assert ids[:, 0].tolist() == [vocab.cls_id] * 2
    assert mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert ids[1, 2:].tolist() == [vocab.pad_id] * 2
    assert out["tokens"] == [["<cls>", "the", "dog", "near"], ["<cls>", "cats"]]


def test_word_encoder_maps_unknown_words_to_unk_and_truncates(vocab):
    out = WordEncoder(vocab).encode(["the zebra near the dog"], max_length=3)
    assert out["input_ids"].tolist() == [[vocab.cls_id, vocab.stoi["the"], vocab.unk_id]]


def test_hf_encoder_wraps_cls_sep_and_truncates(tiny_bert_dir):
    enc = HFEncoder(load_pretrained_tokenizer(str(tiny_bert_dir)))
    out = enc.encode(["the very good movie", "bad"], max_length=4)
    assert out["tokens"] == [["[CLS]", "the", "very", "[SEP]"], ["[CLS]", "bad", "[SEP]"]]
    assert out["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert out["input_ids"][1, 3].item() == enc.pad_id
