"""DecompX (attnflow.methods.decompx): the bias share by hand, exactness (the shares of every
layer's head sum to that head's logits; at the last layer to the model's own logits), the
authors' own output on a tiny BERT (``tests/fixtures/decompx/fixture.json``, written by their
code: ``make_fixture.py``) through ``explain_texts`` to 1e-9, padding, and a clear refusal
for a model without a classification head."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from attnflow.methods import METHODS
from attnflow.methods.decompx import decompx_contributions, share_bias

transformers = pytest.importorskip("transformers")

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "decompx" / "fixture.json"
TOL = 1e-9  # float64 on both sides; the authors' code ran on transformers 4.30, ours on 5


class Tok:  # the fixture's ids as words: "w7" -> 7; [CLS] = 2, [SEP] = 3, padding 0
    pad_token, all_special_tokens, model_max_length = "[PAD]", ["[CLS]", "[SEP]"], 16

    def __call__(self, texts, **kw):
        ids = [[2, *(int(w[1:]) for w in t.split()), 3] for t in texts]
        width = max(map(len, ids))
        return {"input_ids": torch.tensor([i + [0] * (width - len(i)) for i in ids]),
                "attention_mask": torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i in ids])}  # fmt: skip

    def convert_ids_to_tokens(self, ids):
        return [{2: "[CLS]", 3: "[SEP]"}.get(i, f"w{i}") for i in ids]


@pytest.fixture(scope="module")
def reference():
    ref = json.loads(FIXTURE.read_text())
    model = transformers.BertForSequenceClassification(transformers.BertConfig(**ref["config"]))
    state = {k: torch.tensor(v, dtype=torch.float64) for k, v in ref["state_dict"].items()}
    missing, unexpected = model.double().load_state_dict(state, strict=False)
    assert not unexpected and all("position_ids" in k for k in missing), (missing, unexpected)
    return model.eval(), ref


def _texts(ref) -> list[str]:
    return [" ".join(f"w{i}" for i in ids[1:] if i not in (0, 3)) for ids in ref["input_ids"]]


def test_the_record():
    r = METHODS["decompx"]
    assert (r.kind, r.rows, r.signed, r.study) == ("model", "classification", True, False)


def test_a_bias_is_shared_by_the_absolute_dot_product():
    v = torch.tensor([[1.0, 0.0], [0.0, -3.0], [0.0, 0.0]])
    b = torch.tensor([2.0, 2.0])  # |v·b| = 2, 6, 0: shares 1/4, 3/4, 0
    torch.testing.assert_close(share_bias(v, b), torch.tensor([[1.5, 0.5], [1.5, -1.5], [0.0, 0.0]]))
    assert torch.allclose(share_bias(v, b).sum(0), v.sum(0) + b)  # the bias is shared out whole


def test_the_shares_sum_to_the_head_of_every_layer(reference):
    model, ref = reference
    from attnflow.bridge.eager import eager_attention

    ids = torch.tensor(ref["input_ids"][:1])
    with eager_attention(model), torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True, output_attentions=True)
    h = [s[0] for s in out.hidden_states]
    c = decompx_contributions(model, h[0], torch.stack(out.attentions, 1)[0])  # (L, T, C)
    for layer in range(len(h) - 1):  # the head applied to layer l's own [CLS] state
        with torch.no_grad():
            head = model.classifier(model.bert.pooler(out.hidden_states[layer + 1]))[0].numpy()
        np.testing.assert_allclose(c[layer].sum(0), head, atol=1e-9)
    np.testing.assert_allclose(c[-1].sum(0), out.logits[0].numpy(), atol=1e-9)


def test_the_api_gives_the_authors_output_on_a_tiny_bert(reference):
    from attnflow.hf import explain_texts

    model, ref = reference
    got = explain_texts(model, Tok(), _texts(ref), methods=["decompx"])  # right-padded, as theirs
    for b, e in enumerate(got):
        cls = int(np.argmax(ref["logits"][b]))
        real = np.asarray(ref["attention_mask"][b], bool)
        expected = np.asarray(ref["classifier"][b])[real, cls]  # their (tokens, classes) at the class
        np.testing.assert_allclose(e.maps["decompx"][-1], expected, rtol=TOL, atol=TOL)
        np.testing.assert_allclose(e.logits, ref["logits"][b], atol=1e-12)


def test_a_model_without_a_classification_head_is_refused():
    from attnflow.hf import explain_text

    torch.manual_seed(0)
    bare = transformers.BertModel(transformers.BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1,
                                                          num_attention_heads=2, intermediate_size=16))  # fmt: skip
    with pytest.raises(
        ValueError, match="decompx decomposes a BERT-type encoder with a pooler and a classification head"
    ):
        explain_text(bare.eval(), Tok(), "w5 w6", methods=["decompx"])
