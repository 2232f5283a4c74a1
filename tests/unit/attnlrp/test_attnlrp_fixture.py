"""Agreement with the authors' implementation: the relevances lxt 2.1 computes (efficient API,
transformers 4.52.4) for three tiny float64 models, recomputed here under transformers 5."""

from __future__ import annotations

import json

import pytest
import torch

from attnflow.attnlrp import attnlrp
from tests.unit.attnlrp._attnlrp_models import FIXTURES, transformers

pytestmark = pytest.mark.skipif(FIXTURES is None, reason="shared/fixtures/attnlrp not available")

# BERT and GPT-2 run in float64 end to end: only summation order differs from lxt's run.
ABS_TOL = {"bert": 1e-6, "gpt2": 1e-6}
# Llama's RMSNorm, softmax and RoPE run in float32 inside transformers whatever the model dtype,
# so its numbers carry float32 rounding: compared relative to the largest magnitude.
REL_TOL = {"llama": 1e-5}
CLASSES = {"bert": "BertForSequenceClassification", "gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}
# lxt's GPT-2 / Llama patch applies the uniform rule's halves at q, k (÷4) and v (÷2), so the
# gradient reaching the attention probabilities is not halved and its A ⊙ ∂A is twice the share
# that A·V's uniform rule gives A (lxt's BERT module halves ∂context, so there it is the share).
# We report the share (½ A ⊙ ∂A, so that R(A) + R(v) = R(context)) for every model; the factor is
# exact (the two differ only in where one constant multiplies a linear backward).
LXT_ATTN_FACTOR = {"bert": 1.0, "gpt2": 2.0, "llama": 2.0}


def _cases(name: str):
    model = getattr(transformers, CLASSES[name]).from_pretrained(
        FIXTURES / name, dtype=torch.float64, attn_implementation="eager"
    )
    reference = json.loads((FIXTURES / name / "reference.json").read_text())
    for case in reference["cases"]:
        for explanation in case["explanations"]:
            yield model, case, explanation


def _error(ours: torch.Tensor, theirs: list, name: str) -> float:
    theirs = torch.tensor(theirs, dtype=torch.float64)
    assert ours.shape == theirs.shape
    diff = (ours - theirs).abs().max()
    return float(diff / theirs.abs().max()) if name in REL_TOL else float(diff)


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_attnlrp_matches_lxt_fixture(name):
    # the same rules, the same weights and inputs: every reported relevance equals lxt's
    tol = ABS_TOL.get(name, REL_TOL.get(name))
    n = 0
    for model, case, ref in _cases(name):
        out = attnlrp(
            model, torch.tensor(case["input_ids"]), torch.tensor(case["attention_mask"]), target=ref["target"]
        )
        assert out.target == ref["target"]
        assert abs(float(out.logit) - ref["logit"]) < tol
        assert _error(out.input_relevance, ref["input_relevance"], name) < tol
        assert _error(out.hidden_relevance, ref["hidden_relevance"], name) < tol
        assert _error(LXT_ATTN_FACTOR[name] * out.attn_relevance, ref["attn_prob_relevance"], name) < tol
        assert abs(float(out.residual) - ref["residual"]) < tol
        for key in ("position_relevance", "token_type_relevance"):
            if key in ref:
                assert _error(getattr(out, key), ref[key], name) < tol
                assert abs(float(out.embedding_residual) - ref["all_embeddings_residual"]) < tol
            else:
                assert getattr(out, key) is None
        n += 1
    assert n == (6 if name == "bert" else 3)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_attnlrp_default_target_is_the_argmax_at_the_last_position(name):
    # the LM fixtures explain the largest logit at the last position: target=None must pick it
    for model, case, ref in _cases(name):
        out = attnlrp(model, torch.tensor(case["input_ids"]))
        assert out.target == ref["target"]
        assert torch.allclose(out.logits, torch.tensor(case["logits"], dtype=torch.float64), atol=1e-5)
