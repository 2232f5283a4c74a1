"""Where AttnLRP's rules conserve relevance, the reported numbers do; what they lose is reported.

Linear maps without bias, the detached-normaliser norms, the identity rule and the uniform rule
all conserve (Σ R(input) = Σ R(output)); the softmax rule and the biases do not. So, layer by layer:
Σ R(h_l) + softmax_absorbed[l] = Σ R(h_{l+1}) in a model without biases."""

from __future__ import annotations

import pytest
import torch

from attnflow.attnlrp import attnlrp
from tests.unit.attnlrp._attnlrp_models import IDS, tiny

CONSERVED = 1e-9  # relative; float64, plus the identity rule's 1e-10 stabiliser in f(x)/(x + 1e-10)
CONSERVED_F32 = 1e-6  # relative; Llama normalises (RMSNorm, softmax) in float32 inside transformers


def _embedding_total(out) -> torch.Tensor:
    parts = [out.input_relevance, out.position_relevance, out.token_type_relevance]
    return sum(p.sum() for p in parts if p is not None)


@pytest.mark.parametrize("name", ["gpt2", "gpt2_cls", "llama", "llama_cls"])
def test_last_hidden_state_relevance_is_the_logit_under_a_bias_free_head(name):
    # logit = w · h_last (LM head / score head have no bias): gradient x input conserves exactly
    out = attnlrp(tiny(name), IDS)
    assert torch.isclose(out.hidden_relevance[-1].sum(), out.logit, rtol=CONSERVED, atol=0)


def test_bert_last_hidden_relevance_is_the_logit_minus_the_head_biases_share():
    # logit = W_c[t]·tanh(z) + b_c[t], z = W_p h_CLS + b_p; tanh by the identity rule:
    # ∂z = W_c[t] ⊙ tanh(z)/(z + 1e-10), so Σ R(h_CLS) = Σ (z − b_p) ⊙ ∂z: logit less b_c[t] and b_p's share
    model = tiny("bert")
    out = attnlrp(model, IDS, target=2)
    with torch.no_grad():
        h = model.bert(IDS[None]).last_hidden_state[0, 0]  # (C,) the CLS token's last hidden state
        z = model.bert.pooler.dense(h)
        dz = model.classifier.weight[2] * torch.tanh(z) / (z + 1e-10)
        expected = ((z - model.bert.pooler.dense.bias) * dz).sum()
    assert torch.isclose(out.hidden_relevance[-1].sum(), expected, rtol=CONSERVED, atol=0)
    assert out.hidden_relevance[-1, 1:].abs().max() == 0  # only the pooled token reaches the classifier


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_layers_conserve_up_to_the_reported_softmax_loss_without_biases(name):
    # bias-free: every step but the softmax conserves, so each layer's loss is its softmax_absorbed
    out = attnlrp(tiny(name, zero_bias=True), IDS)
    tol = CONSERVED_F32 if name == "llama" else CONSERVED
    h = out.hidden_relevance.sum(1)  # (L + 1,)
    scale = out.logit.abs()
    assert torch.allclose(h[:-1] + out.softmax_absorbed, h[1:], rtol=0, atol=tol * scale)
    assert torch.isclose(_embedding_total(out), h[0], rtol=0, atol=tol * scale)  # embeddings (+ norm)
    assert torch.isclose(h[-1], out.logit, rtol=0, atol=tol * scale)
    assert abs(out.bias_absorbed) < tol * scale  # nothing left for biases to absorb
    assert out.softmax_absorbed.abs().max() > 1e-4 * scale  # while the softmax rule does lose some


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_reported_parts_add_up_to_the_logit(name):
    # with biases: logit = Σ embeddings + Σ softmax_absorbed + bias_absorbed; residual = logit − Σ input
    out = attnlrp(tiny(name), IDS)
    total = _embedding_total(out) + out.softmax_absorbed.sum() + out.bias_absorbed
    assert torch.isclose(total, out.logit, rtol=CONSERVED, atol=0)
    assert torch.isclose(out.residual, out.logit - out.input_relevance.sum(), rtol=CONSERVED, atol=0)
    assert torch.isclose(out.embedding_residual, out.logit - _embedding_total(out), rtol=CONSERVED, atol=0)
