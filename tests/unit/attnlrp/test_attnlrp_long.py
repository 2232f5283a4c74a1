"""AttnLRP without the (H, T, T) probabilities: torch's fused attention ("sdpa") or the eager one
recomputed in the backward ("checkpoint") give the eager path's relevances.

Why the values agree: the rules only scale the gradients at q, k, v, so the attention's backward
is the plain one whichever kernel computes it; and the softmax bookkeeping needs Σ A ⊙ ∂A only,
which is Σ O ⊙ ∂O of the attention output O = A·V (∂A = ∂O Vᵀ, so Σ_j A_ij ∂A_ij = ∂O_i · O_i).
"""

from __future__ import annotations

import json

import pytest
import torch

from attnflow.attnlrp import attnlrp, attnlrp_batch
from attnflow.attnlrp.maps import MAP_ATTENTION, attnlrp_map
from tests.unit.attnlrp._attnlrp_models import FIXTURES, VOCAB, tiny, transformers

# Relative to the largest |value|. BERT and GPT-2 run in float64 throughout (≈1e-15), and so does
# the checkpointed attention (the eager one, recomputed). Llama's eager attention takes its softmax
# (and so its backward) in float32 whatever the model dtype, the fused kernel in float64: the two
# differ by that rounding (≈1e-7 of the logit, up to 2e-6 on the sums of what the rules absorb).
REL_TOL = 1e-6
LLAMA_SDPA_TOL = 1e-5
FIELDS = ("logits", "input_relevance", "hidden_relevance", "softmax_absorbed", "residual", "bias_absorbed")
TOKENS = 11  # differs from every width and head count of the tiny models, so a (T, T) block is recognisable


def _batch(name: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (2, TOKENS))
    if name.endswith("_cls"):  # a decoder classifier pools its last token: one sample, no padding
        return ids[:1], None
    mask = torch.ones(2, TOKENS, dtype=torch.long)
    mask[1, 7:] = 0  # right padding: sample 1 has 7 real tokens
    return ids, mask


def _close(a: torch.Tensor, b: torch.Tensor, scale: float = 0.0) -> float:
    """max |a - b| over max(|b|, scale): the sums of what the rules absorb (near 0 for a bias-free
    Llama) are compared on the scale of the explained logit they are a part of."""
    return float((a - b).abs().max() / max(float(b.abs().max()), scale, 1e-300))


@pytest.mark.parametrize("attention", ["sdpa", "checkpoint"])
@pytest.mark.parametrize("name", ["bert", "gpt2", "llama", "llama_cls"])
def test_lean_attention_gives_the_eager_relevances(name, attention):
    model = tiny(name)
    ids, mask = _batch(name)
    eager = attnlrp_batch(model, ids, mask)
    lean = attnlrp_batch(model, ids, mask, attention=attention)
    tol = LLAMA_SDPA_TOL if name.startswith("llama") and attention == "sdpa" else REL_TOL
    for ref, got in zip(eager, lean, strict=True):
        assert got.target == ref.target
        for field in FIELDS:
            assert _close(getattr(got, field), getattr(ref, field), abs(float(ref.logit))) < tol, field
        if ref.position_relevance is not None:
            assert _close(got.position_relevance, ref.position_relevance) < tol
        assert ref.attn_relevance is not None and got.attn_relevance is None  # R(A) needs the probabilities


@pytest.mark.parametrize("attention", ["eager", "sdpa", "checkpoint"])
def test_only_eager_attention_keeps_probabilities_for_the_backward(attention):
    # every tensor autograd saves in the forward (outside checkpointed regions, whose own are dropped
    # and recomputed): the eager path saves each layer's (B, H, T, T); the lean paths none
    model = tiny("llama")
    heads = model.config.num_attention_heads
    ids, _ = _batch("llama")
    saved = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        attnlrp_batch(model, ids, attention=attention)
    probabilities = [s for s in saved if len(s) == 4 and s[1] == heads and s[-2:] == (TOKENS, TOKENS)]
    assert bool(probabilities) == (attention == "eager")


def test_lean_attention_runs_on_a_model_loaded_without_eager_and_restores_it():
    model = tiny("llama")
    ids, _ = _batch("llama")
    ref = attnlrp(model, ids[0]).input_relevance  # eager, as loaded
    model.set_attn_implementation("sdpa")
    with pytest.raises(ValueError, match="needs eager attention"):
        attnlrp(model, ids[0])
    got = attnlrp(model, ids[0], attention="sdpa").input_relevance
    assert model.config._attn_implementation == "sdpa"  # given back as it was
    assert _close(got, ref) < LLAMA_SDPA_TOL
    with pytest.raises(ValueError, match="attention must be one of eager, sdpa, checkpoint, got 'flash'"):
        attnlrp(model, ids[0], attention="flash")


def test_the_maps_run_the_fused_attention_with_the_eager_values():
    # the maps (explain_text, the study) need no R(A): they run MAP_ATTENTION, equal to eager's
    assert MAP_ATTENTION == "sdpa"
    model = tiny("gpt2")
    ids, _ = _batch("gpt2")
    got = attnlrp_map(model, ids[0])
    ref = attnlrp_map(model, ids[0], attention="eager")
    assert got.shape == (model.config.n_layer, TOKENS)
    assert abs(got - ref).max() / abs(ref).max() < REL_TOL


def test_language_model_logits_are_formed_at_the_explained_position_only():
    # logits_to_keep: the (T, vocabulary) logits are never formed; the row equals the full forward's
    model = tiny("llama")
    ids, _ = _batch("llama")
    shapes = []
    handle = model.lm_head.register_forward_hook(lambda m, a, out: shapes.append(tuple(out.shape)))
    try:
        res = attnlrp(model, ids[0], position=4, attention="sdpa")
    finally:
        handle.remove()
    assert shapes == [(1, 1, VOCAB)]
    with torch.no_grad():
        full = model(ids[:1]).logits[0, 4]
    assert torch.allclose(res.logits, full, rtol=0, atol=1e-6)


pytestmark_fixture = pytest.mark.skipif(FIXTURES is None, reason="shared/fixtures/attnlrp not available")
CLASSES = {"bert": "BertForSequenceClassification", "gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}


@pytestmark_fixture
@pytest.mark.parametrize("attention", ["sdpa", "checkpoint"])
@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_lean_attention_matches_the_lxt_fixture(name, attention):
    # the authors' numbers (tests/unit/attnlrp/test_attnlrp_fixture.py: the same tolerances)
    tol = 1e-5 if name == "llama" else 1e-6
    model = getattr(transformers, CLASSES[name]).from_pretrained(
        FIXTURES / name, dtype=torch.float64, attn_implementation="eager"
    )
    reference = json.loads((FIXTURES / name / "reference.json").read_text())
    n = 0
    for case in reference["cases"]:
        for ref in case["explanations"]:
            out = attnlrp(
                model, torch.tensor(case["input_ids"]), torch.tensor(case["attention_mask"]),
                target=ref["target"], attention=attention,
            )  # fmt: skip
            theirs = torch.tensor(ref["input_relevance"], dtype=torch.float64)
            assert out.target == ref["target"]
            assert float((out.input_relevance - theirs).abs().max() / theirs.abs().max()) < tol
            hidden = torch.tensor(ref["hidden_relevance"], dtype=torch.float64)
            assert float((out.hidden_relevance - hidden).abs().max() / hidden.abs().max()) < tol
            assert abs(float(out.residual) - ref["residual"]) < tol * max(1.0, abs(ref["residual"]))
            n += 1
    assert n == (6 if name == "bert" else 3)
