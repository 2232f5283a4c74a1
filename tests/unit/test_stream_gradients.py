"""The gradient stream (attnflow.stream.stream_gradient_maps): ∇A reduced over heads as the backward
produces each layer, so what it keeps is flat in the head count, with the numbers of the classic
capture (every head of every layer) run through the device-native methods."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertForSequenceClassification, LlamaConfig, LlamaForCausalLM

from attnflow.bridge import forward
from attnflow.explain import chefer_generic
from attnflow.methods import METHODS
from attnflow.stream import GRAD_STREAM_METHODS, StreamState, stream_gradient_maps

# float32 stream against the float64 classic maps, relative to the map's scale: the stream's
# products are float32 (three layers)
F32_TOL = 1e-5
LAYERS = 3


def _model(family: str, heads: int) -> torch.nn.Module:
    torch.manual_seed(0)
    if family == "llama":
        config = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=LAYERS,
                             num_attention_heads=heads, num_key_value_heads=heads)  # fmt: skip
        return LlamaForCausalLM(config).eval()
    config = BertConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=LAYERS,
                        num_attention_heads=heads, num_labels=3)  # fmt: skip
    return BertForSequenceClassification(config).eval()


def _batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 50, (2, 9), generator=g)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0  # the second sample is padded (right)
    return {"input_ids": ids, "attention_mask": mask}


ROWS = torch.tensor([[0, 8], [0, 5]])  # per sample: the first token and the last real one


def _classic(model, batch, dtype):
    """Both gradient methods on the classic capture (B, L, H, T, T) in `dtype`, at ROWS: (B, L, R, T)."""
    cap = forward(model, batch, ("attentions", "attn_grad"), target="predicted")
    attn, grad = cap.attentions.to(dtype), cap.attention_grads.to(dtype)
    mask = batch["attention_mask"].bool()
    take = ROWS[:, None, :, None].expand(-1, attn.shape[1], -1, attn.shape[-1])
    return {
        "chefer": chefer_generic(attn, grad, mask=mask).gather(2, take),
        "grad_sam": METHODS["grad_sam"].function(attn, attn_grad=grad, mask=mask).gather(2, take),
    }


@pytest.mark.parametrize("family", ["llama", "bert classifier"])
def test_the_float32_stream_equals_the_classic_capture_on_every_gradient_method(family):
    model, batch = _model(family, 4), _batch()
    got = stream_gradient_maps(model, batch, ROWS)  # float32 by default
    want64 = _classic(model, batch, torch.float64)
    want32 = _classic(model, batch, torch.float32)  # the device-native methods in float32
    for method in GRAD_STREAM_METHODS:
        assert got[method].dtype == torch.float32, method
        scale = max(1.0, float(want64[method].abs().max()))
        for want in (want64[method], want32[method]):
            np.testing.assert_allclose(got[method].double(), want.double(), rtol=F32_TOL, atol=F32_TOL * scale,
                                       err_msg=method)  # fmt: skip


@pytest.mark.parametrize("family", ["llama", "bert classifier"])
def test_each_layer_is_reduced_over_heads_as_the_backward_produces_it(family, monkeypatch):
    """observe_grad sees each layer's (B, H, q, T) block once, top layer first (the backward's
    order), and the state keeps no head axis: its tensors are the same size for 2 and 8 heads."""
    kept, real = {}, StreamState.observe_grad
    for heads in (2, 8):
        seen, states = [], []

        def spy(self, layer, queries, weights, grad, seen=seen, states=states):
            seen.append((layer, tuple(grad.shape)))
            states.append(self)
            return real(self, layer, queries, weights, grad)

        monkeypatch.setattr(StreamState, "observe_grad", spy)
        stream_gradient_maps(_model(family, heads), _batch(), ROWS)
        monkeypatch.undo()
        assert [layer for layer, _ in seen] == list(range(LAYERS - 1, -1, -1))  # L-1 .. 0, one block each
        assert all(shape == (2, heads, 9, 9) for _, shape in seen)  # (B, H, q, T): one layer's heads
        state = states[0]
        kept[heads] = {"abar": tuple(state.abar.shape), "grad_sam": tuple(state.grad_sam.shape)}
    assert kept[2] == kept[8] == {"abar": (2, LAYERS, 9, 9), "grad_sam": (2, LAYERS, 2, 9)}
