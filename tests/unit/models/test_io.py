"""Export / reload: pickle-free files, identical outputs, clear errors naming the path."""

from __future__ import annotations

import json
import re

import pytest
import torch

from attnflow.models import HFClassifier, HFEncoder, WordEncoder, load_classifier, save_classifier
from attnflow.models.hf import load_pretrained_tokenizer

PICKLE_SUFFIXES = {".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt"}


def test_agreement_roundtrip_gives_identical_outputs(tiny_agreement, vocab, tmp_path):
    save_classifier(tiny_agreement, WordEncoder(vocab), tmp_path / "model")
    model, encoder = load_classifier(tmp_path / "model")
    assert {p.suffix for p in (tmp_path / "model").iterdir()}.isdisjoint(PICKLE_SUFFIXES)
    batch = encoder.encode(["the dog near the cats", "the dogs"])
    assert batch["tokens"][1] == ["<cls>", "the", "dogs"]
    assert (encoder.pad_id, encoder.unk_id, encoder.cls_id, encoder.mask_id) == (0, 1, 2, 3)
    a = tiny_agreement(batch["input_ids"], batch["attention_mask"], output_attentions=True)
    b = model(batch["input_ids"], batch["attention_mask"], output_attentions=True)
    assert torch.equal(a.logits, b.logits) and torch.equal(a.attentions, b.attentions)
    assert not model.training


def test_hf_roundtrip_gives_identical_outputs(tiny_bert_dir, tmp_path):
    src = HFClassifier.from_pretrained(str(tiny_bert_dir)).eval()
    save_classifier(src, HFEncoder(load_pretrained_tokenizer(str(tiny_bert_dir))), tmp_path / "model")
    assert {p.suffix for p in (tmp_path / "model").iterdir()}.isdisjoint(PICKLE_SUFFIXES)
    model, encoder = load_classifier(tmp_path / "model")
    batch = encoder.encode(["the good movie", "bad"])
    assert batch["tokens"][0] == ["[CLS]", "the", "good", "movie", "[SEP]"]
    assert (encoder.pad_id, encoder.cls_id, encoder.mask_id, encoder.unk_id) == (0, 2, 4, 1)
    ids = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    assert torch.equal(src(**ids).logits, model(**ids).logits)


def test_export_replaces_an_existing_folder(tiny_agreement, vocab, tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "stale.txt").write_text("x")
    save_classifier(tiny_agreement, WordEncoder(vocab), tmp_path / "model")
    assert not (tmp_path / "model" / "stale.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temporary folders left


def test_missing_folder_error_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "absent"))):
        load_classifier(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"attnflow_model\.json"):
        load_classifier(tmp_path / "empty")


def test_mismatched_weights_error_names_the_path(tiny_agreement, vocab, tmp_path):
    save_classifier(tiny_agreement, WordEncoder(vocab), tmp_path / "model")
    manifest = tmp_path / "model" / "attnflow_model.json"
    payload = json.loads(manifest.read_text())
    payload["config"]["n_embd"] = 32  # the weights are width 16
    manifest.write_text(json.dumps(payload))
    with pytest.raises(ValueError, match=r"model\.safetensors.*do not match"):
        load_classifier(tmp_path / "model")


def test_vocab_size_mismatch_is_reported(tiny_agreement, vocab, tmp_path):
    save_classifier(tiny_agreement, WordEncoder(vocab), tmp_path / "model")
    (tmp_path / "model" / "vocab.json").write_text(json.dumps({"itos": list(vocab.itos[:6])}))
    with pytest.raises(ValueError, match=r"vocab\.json"):
        load_classifier(tmp_path / "model")


def test_hf_folder_with_missing_weights_is_rejected(tiny_bert_dir, tmp_path):
    src = HFClassifier.from_pretrained(str(tiny_bert_dir))
    save_classifier(src, HFEncoder(load_pretrained_tokenizer(str(tiny_bert_dir))), tmp_path / "model")
    config = tmp_path / "model" / "config.json"
    payload = json.loads(config.read_text())
    payload["num_hidden_layers"] = 3  # layer 2 has no weights in the file
    config.write_text(json.dumps(payload))
    with pytest.raises(ValueError, match="do not match"):
        load_classifier(tmp_path / "model")


def test_exported_model_folder_gets_umask_modes(tiny_agreement, vocab, tmp_path):
    import os
    import stat

    from attnflow.models import WordEncoder

    old = os.umask(0o022)
    try:
        out = save_classifier(tiny_agreement, WordEncoder(vocab), tmp_path / "model")
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o755  # mkdtemp alone would leave 0700
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {0o644}
