"""attnflow.models.lora: a wrapped layer starts as its base, computes W x + b + (alpha/r) B A x, and
the delta it writes merges (apply_delta) into an unwrapped model that computes what the adapted one
did: the producer and the consumer of the packaged classifier's file agree."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from transformers import BertConfig, BertForSequenceClassification

from attnflow.models.lora import ENCODER_LINEARS, LoRALinear, add_lora, delta_tensors
from attnflow.models.minilm_sst2 import apply_delta


def test_a_wrapped_layer_adds_the_scaled_low_rank_product():
    torch.manual_seed(0)
    base = nn.Linear(3, 2)
    lora = LoRALinear(base, rank=1, alpha=4.0)  # scale 4
    x = torch.tensor([[1.0, 2.0, 3.0]])
    torch.testing.assert_close(lora(x), base(x))  # B = 0 at the start
    with torch.no_grad():
        lora.lora_A.copy_(torch.tensor([[1.0, 0.0, 1.0]]))  # A x = 4
        lora.lora_B.copy_(torch.tensor([[0.5], [-1.0]]))  # 4 · B A x = [8, -16]
    torch.testing.assert_close(lora(x), base(x) + torch.tensor([[8.0, -16.0]]))
    assert not lora.base.weight.requires_grad


def test_rank_below_one_is_refused():
    with pytest.raises(ValueError, match="rank must be >= 1, got 0"):
        LoRALinear(nn.Linear(3, 2), rank=0, alpha=1.0)


def _bert() -> BertForSequenceClassification:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32, num_labels=2)  # fmt: skip
    return BertForSequenceClassification(config).eval()


def test_every_encoder_linear_is_wrapped_and_nothing_else():
    model = _bert()
    wrapped = add_lora(model, rank=2, alpha=4.0)
    assert len(wrapped) == 2 * len(ENCODER_LINEARS)  # 2 layers
    assert all(".encoder.layer." in name for name in wrapped)
    assert not any(
        isinstance(m, LoRALinear) for n, m in model.named_modules() if "pooler" in n or "classifier" in n
    )


def test_the_written_delta_merges_into_the_plain_model_that_computes_the_same_logits():
    plain = _bert()
    adapted = copy.deepcopy(plain)
    for p in adapted.parameters():
        p.requires_grad_(False)
    wrapped = add_lora(adapted, rank=2, alpha=4.0)
    adapted.classifier.bias.requires_grad_(True)
    with torch.no_grad():  # "trained": non-zero B everywhere, a moved head bias
        for lora in wrapped.values():
            lora.lora_B.normal_(0, 0.1)
        adapted.classifier.bias.add_(torch.tensor([0.3, -0.2]))
    delta = delta_tensors(adapted, wrapped)
    assert set(delta) == {f"{n}.lora_{x}" for n in wrapped for x in "AB"} | {"classifier.bias"}
    ids = torch.randint(0, 50, (3, 7))
    apply_delta(plain, delta)
    torch.testing.assert_close(
        plain(input_ids=ids).logits, adapted(input_ids=ids).logits, atol=1e-5, rtol=1e-5
    )
