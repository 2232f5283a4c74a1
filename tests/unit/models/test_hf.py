"""HFClassifier: the attnflow interface over a transformers classifier, and the pretrained resolver."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from attnflow.models import HFClassifier, HFEncoder, resolve_pretrained
from attnflow.models.hf import load_pretrained_tokenizer

ATOL = 1e-6


@pytest.fixture(scope="module")
def tiny(tiny_bert_dir: Path) -> tuple[HFClassifier, HFEncoder]:
    return HFClassifier.from_pretrained(str(tiny_bert_dir)).eval(), HFEncoder(
        load_pretrained_tokenizer(str(tiny_bert_dir))
    )


def test_attentions_are_stacked_to_canonical_shape_rows_sum_to_one(tiny):
    model, enc = tiny
    batch = enc.encode(["the good movie", "bad"])
    out = model(batch["input_ids"], batch["attention_mask"], output_attentions=True)
    B, T = batch["input_ids"].shape
    assert out.logits.shape == (B, 2)
    assert out.attentions.shape == (B, 2, 2, T, T)  # (B, L, H, T, T)
    rows = out.attentions.sum(-1)
    real = batch["attention_mask"].bool()[:, None, None, :].expand_as(rows)
    torch.testing.assert_close(rows[real], torch.ones_like(rows[real]))
    # "[CLS] bad [SEP]" + 2 pads: keys 3, 4 are padding and get exactly 0
    assert torch.equal(out.attentions[1, ..., 3:], torch.zeros_like(out.attentions[1, ..., 3:]))


def test_padding_does_not_change_cls_logits(tiny):
    model, enc = tiny
    alone = enc.encode(["bad"])
    batched = enc.encode(["bad", "the very very good movie"])
    a = model(alone["input_ids"], alone["attention_mask"]).logits
    b = model(batched["input_ids"], batched["attention_mask"]).logits
    torch.testing.assert_close(a[0], b[0], atol=ATOL, rtol=0)


def test_encoder_is_bidirectional(tiny):
    model, enc = tiny
    a, b = enc.encode(["the good movie"]), enc.encode(["the good bad"])
    assert not torch.allclose(model(**_ids(a)).logits, model(**_ids(b)).logits)


def test_inputs_embeds_path_matches_input_ids(tiny):
    model, enc = tiny
    batch = enc.encode(["the good movie", "bad"])
    embeds = model.get_input_embeddings()(batch["input_ids"])
    a = model(batch["input_ids"], batch["attention_mask"]).logits
    b = model(inputs_embeds=embeds, attention_mask=batch["attention_mask"]).logits
    torch.testing.assert_close(a, b)


def test_interface_attributes_and_finetuned_flag(tiny):
    model, _ = tiny
    assert (model.num_layers, model.num_heads) == (2, 2)
    assert model.finetuned  # saved as a complete 2-label BertForSequenceClassification
    assert model.hf.config._attn_implementation == "eager"


def test_minilm_resolves_to_the_packaged_model_and_is_not_finetuned():
    path = Path(resolve_pretrained("minilm"))
    assert (path / "config.json").is_file()
    model = HFClassifier.from_pretrained("minilm")
    assert not model.finetuned  # a BertModel checkpoint: the classifier head is new
    assert (model.num_layers, model.num_heads) == (6, 12)
    enc = HFEncoder(load_pretrained_tokenizer("minilm"))
    batch = enc.encode(["a gripping film"])
    assert batch["tokens"][0][0] == "[CLS]" and batch["tokens"][0][-1] == "[SEP]"
    out = model.eval()(batch["input_ids"], batch["attention_mask"], output_attentions=True)
    assert out.attentions.shape == (1, 6, 12, batch["input_ids"].shape[1], batch["input_ids"].shape[1])


def test_missing_local_path_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        resolve_pretrained(str(tmp_path / "nope"))


def test_unreachable_hub_name_fails_fast_with_advice(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    with pytest.raises(OSError, match="minilm"):
        HFClassifier.from_pretrained("someone/not-a-cached-model")
    assert time.perf_counter() - t0 < 30


def _ids(batch):
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
