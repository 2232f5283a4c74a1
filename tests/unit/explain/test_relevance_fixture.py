"""Our LRP pass and Chefer rules reproduce the authors' own numbers on a tiny BERT.

shared/fixtures/chefer_tiny_bert holds a random 3-layer BERT classifier, one input, and what
hila-chefer/Transformer-Explainability (BERT_explainability, relprop(one_hot, alpha=1)) computes
for the predicted class (see shared/fixtures/README.md). shared/ lies beside the repository
(CI clones it to ../shared); without it these tests fail, they do not skip.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from attnflow.explain import chefer_generic, chefer_lrp
from attnflow.lrp import lrp_relevance
from attnflow.methods import EXPLAINERS

FIXTURE = Path(__file__).parents[3] / ".." / "shared" / "fixtures" / "chefer_tiny_bert"
TOL = 1e-4  # the fixture's stated tolerance (float32)


@pytest.fixture(scope="module")
def case():
    assert FIXTURE.is_dir(), f"fixture missing: {FIXTURE.resolve()} (shared/ must sit beside the repository)"
    return load_file(FIXTURE / "case.safetensors"), json.loads((FIXTURE / "case.json").read_text())


@pytest.fixture(scope="module")
def ours(case):
    from transformers import BertForSequenceClassification

    arrays, _ = case
    model = BertForSequenceClassification.from_pretrained(
        FIXTURE / "model", attn_implementation="eager"
    ).eval()
    ids = torch.from_numpy(arrays["input_ids"])
    return lrp_relevance(
        model, ids, torch.from_numpy(arrays["attention_mask"])
    )  # predicted class, one sample


def test_the_explained_class_and_logits_are_theirs(case, ours):
    _, meta = case
    assert int(ours.target) == meta["target"]
    np.testing.assert_allclose(ours.logits.numpy(), meta["logits"], atol=TOL)


@pytest.mark.parametrize(
    ("key", "field"),
    [
        ("attn", "attn"),
        ("attn_grad", "attn_grad"),
        ("attn_lrp", "attn_relevance"),
        ("input_relevance", "input_relevance"),
    ],
)
def test_the_lrp_pass_reproduces_their_arrays(case, ours, key, field):
    arrays, _ = case
    np.testing.assert_allclose(getattr(ours, field).double().numpy(), arrays[key], atol=TOL, rtol=0)


def test_input_relevance_is_conserved_like_theirs(case, ours):
    _, meta = case
    assert float(ours.input_relevance.sum()) == pytest.approx(1.0, abs=TOL)
    assert meta["input_relevance_sum"] == pytest.approx(1.0, abs=TOL)


def test_the_rules_on_their_arrays_give_their_maps(case):
    arrays, _ = case
    generic = chefer_generic(arrays["attn"], arrays["attn_grad"])  # (L, T, T)
    lrp = chefer_lrp(arrays["attn_lrp"], arrays["attn_grad"])
    np.testing.assert_allclose(generic[-1], arrays["generic"], atol=TOL, rtol=0)
    np.testing.assert_allclose(lrp[-1], arrays["lrp_rollout"], atol=TOL, rtol=0)


def test_the_rules_on_our_arrays_give_their_maps(case, ours):
    arrays, _ = case
    attn, grad, rel = (x.double().numpy() for x in (ours.attn, ours.attn_grad, ours.attn_relevance))
    np.testing.assert_allclose(
        EXPLAINERS["chefer"](attn, attn_grad=grad)[-1], arrays["generic"], atol=TOL, rtol=0
    )
    np.testing.assert_allclose(
        EXPLAINERS["chefer_lrp"](attn, attn_grad=grad, attn_relevance=rel)[-1],
        arrays["lrp_rollout"],
        atol=TOL,
        rtol=0,
    )


def test_their_cls_row_is_the_min_option(case):
    # generate_LRP: rollout[:, 0, 0] = rollout[:, 0].min(); return rollout[:, 0]
    arrays, _ = case
    expected = arrays["lrp_rollout"][0].copy()
    expected[0] = expected.min()
    out = chefer_lrp(arrays["attn_lrp"], arrays["attn_grad"], cls_self="min")[-1, 0]
    np.testing.assert_allclose(out, expected, atol=TOL, rtol=0)
