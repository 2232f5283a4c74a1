"""The one bridge (attnflow.bridge.forward): the study's classifiers and Hugging Face models give
the same tensors as their own forward and LRP pass, and nothing else in src/ runs a model for
attentions."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from attnflow.bridge import Captured, forward
from attnflow.lrp import lrp_relevance
from attnflow.models import AgreementConfig, AgreementTransformer

transformers = pytest.importorskip("transformers")

SRC = Path(__file__).resolve().parents[2] / "src" / "attnflow"


def _agreement() -> AgreementTransformer:
    torch.manual_seed(0)
    return AgreementTransformer(AgreementConfig(vocab_size=12, n_layer=2, n_head=2, n_embd=8)).eval()


def _bert():
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=20, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16,
        max_position_embeddings=16, num_labels=3, attn_implementation="eager",
    )  # fmt: skip
    return transformers.BertForSequenceClassification(config).eval()


IDS = torch.tensor([[2, 5, 6, 7, 3], [2, 8, 3, 0, 0]])
MASK = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])


def test_a_study_classifier_gives_its_own_attentions_and_lrp_pass():
    model = _agreement()
    got = forward(
        model, {"input_ids": IDS, "attention_mask": MASK}, ("attentions", "attn_grad", "attn_relevance")
    )
    assert isinstance(got, Captured)
    with torch.no_grad():
        own = model(IDS, MASK, output_attentions=True)
    real = MASK.bool()
    keep = real[:, None, None, :, None] & real[:, None, None, None, :]
    assert torch.equal(
        got.attentions[keep.expand_as(got.attentions)], own.attentions[keep.expand_as(own.attentions)]
    )
    assert not got.attentions[~keep.expand_as(got.attentions)].any()  # padding rows and columns 0
    ref = lrp_relevance(model, IDS, MASK, target=None)
    assert torch.equal(got.need("attn_grad"), ref.attn_grad)
    assert torch.equal(got.need("attn_relevance"), ref.attn_relevance)
    assert torch.equal(got.target, ref.target)


def test_a_hugging_face_model_gives_attentions_gradients_and_lrp_of_the_same_target():
    model = _bert()
    batch = {"input_ids": IDS, "attention_mask": MASK}
    got = forward(model, batch, ("attentions", "attn_grad", "attn_relevance"), target=1)
    out = model(**batch, output_attentions=True)
    own = torch.stack(out.attentions, dim=1)
    assert torch.allclose(got.attentions[0], own[0].detach(), atol=0)
    grads = torch.autograd.grad(out.logits[:, 1].sum(), out.attentions)
    assert torch.allclose(got.need("attn_grad")[0], torch.stack(grads, dim=1)[0], atol=1e-7)
    ref = lrp_relevance(model, IDS, MASK, target=torch.tensor([1, 1]))
    assert torch.equal(got.need("attn_relevance"), ref.attn_relevance)
    assert got.target.tolist() == [1, 1]


def test_only_the_asked_needs_are_made():
    got = forward(_bert(), {"input_ids": IDS, "attention_mask": MASK})
    assert got.attention_grads is None and got.inputs == {}
    with pytest.raises(KeyError, match="'attn_grad' was not asked"):
        got.need("attn_grad")
    with pytest.raises(ValueError, match=r"\['attn_grad'\] explain a class: pass a target"):
        forward(_bert(), {"input_ids": IDS}, ("attentions", "attn_grad"), target=None)
    with pytest.raises(ValueError, match=r"unknown need\(s\) \['values'\]"):
        forward(_bert(), {"input_ids": IDS}, ("attentions", "values"))
    with pytest.raises(ValueError, match=r"\(LRP\) explains a class"):
        forward(
            _agreement(),
            {"input_ids": IDS, "attention_mask": MASK},
            ("attn_relevance",),
            target=lambda z: z[:, 0],
        )


def _attention_calls(source: str) -> list[int]:
    """Lines of calls that run a model for attentions: f(..., output_attentions=True) or
    forward_attentions(...)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", getattr(node.func, "attr", ""))
        asks = any(
            k.arg == "output_attentions" and getattr(k.value, "value", None) is True for k in node.keywords
        )
        if asks or name == "forward_attentions":
            lines.append(node.lineno)
    return lines


def test_nothing_else_in_src_runs_a_model_for_its_attentions():
    # the bridge and the transformers forward it calls are the only callers; models define it
    allowed = {"bridge/__init__.py", "bridge/hf.py"}
    callers = [
        f"{path.relative_to(SRC).as_posix()}:{n}"
        for path in sorted(SRC.rglob("*.py"))
        if path.relative_to(SRC).as_posix() not in allowed
        and path.relative_to(SRC).parts[0] not in ("models", "lrp")
        for n in _attention_calls(path.read_text(encoding="utf-8"))
    ]
    assert callers == []
    assert _attention_calls("out = model(ids, mask, output_attentions=True)") == [1]  # the check sees one
