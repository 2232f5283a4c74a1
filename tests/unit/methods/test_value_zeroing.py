"""Value zeroing (attnflow.methods.value_zeroing): the authors' procedure as the oracle (each layer
run again on the previous layer's original output with token t's value vector zeroed by a hook:
hmohebbi/ValueZeroing ``scoring/value_zeroing.py``, re-derived; their code patches a transformers
4.x BERT and cannot run here), a hand case, and the method in the API and the CLI."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnflow.methods import METHODS, MODEL_METHODS
from attnflow.methods.value_zeroing import value_zeroing_layers

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def bert():
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=16, max_position_embeddings=16)  # fmt: skip
    return transformers.BertForSequenceClassification(config).double().eval()


def _authors(model, ids):
    """C(l) by the authors' procedure: for each layer l and token t, layer l on the original h(l)
    with value t zeroed; cosine distance to the original h(l+1) per token; rows / their sums."""
    from attnflow.bridge.eager import eager_attention

    with torch.no_grad(), eager_attention(model):
        hs = model(ids, output_hidden_states=True).hidden_states
        n = ids.shape[1]
        scores = np.zeros((len(model.bert.encoder.layer), n, n))
        for k, layer in enumerate(model.bert.encoder.layer):
            for t in range(n):

                def zero(module, args, out, t=t):
                    out = out.clone()
                    out[:, t] = 0.0
                    return out

                handle = layer.attention.self.value.register_forward_hook(zero)
                y = layer(hs[k])
                handle.remove()
                y = (y[0] if isinstance(y, tuple) else y)[0].numpy()
                org = hs[k + 1][0].numpy()
                cos = (y * org).sum(-1) / np.linalg.norm(y, axis=-1) / np.linalg.norm(org, axis=-1)
                scores[k, :, t] = 1.0 - cos
    return scores / scores.sum(-1, keepdims=True)


def test_each_layer_equals_the_authors_procedure_and_padding_changes_nothing(bert):
    ids = torch.tensor([[2, 5, 6, 7, 3], [2, 8, 3, 0, 0]])
    mask = (ids != 0).long()
    got = value_zeroing_layers(bert, {"input_ids": ids, "attention_mask": mask}, mask.bool().numpy())
    np.testing.assert_allclose(got[0], _authors(bert, ids[:1]), atol=1e-10)
    np.testing.assert_allclose(got[1], _authors(bert, ids[1:, :3]), atol=1e-10)
    assert got[1].shape == (2, 3, 3)


def test_one_token_by_hand(bert):
    # a single token: zeroing its value changes its output, the only distance, so C = [[1]]
    got = value_zeroing_layers(bert, {"input_ids": torch.tensor([[2]])}, np.ones((1, 1), dtype=bool))
    np.testing.assert_allclose(got[0], np.ones((2, 1, 1)))


def test_the_record_makes_it_a_model_method_of_the_api_and_the_cli(tmp_path, capsys, bert):
    import json

    from attnflow.cli import main
    from attnflow.hf import explain_texts
    from tests._tiny import make_tiny_bert

    assert "value_zeroing" in MODEL_METHODS and METHODS["value_zeroing"].kind == "model"

    class Tok:
        pad_token, all_special_tokens, model_max_length = "[PAD]", ["[CLS]", "[SEP]"], 16

        def __call__(self, texts, **kw):
            ids = [[2, *(5 + len(w) for w in t.split()), 3] for t in texts]
            width = max(map(len, ids))
            return {"input_ids": torch.tensor([i + [0] * (width - len(i)) for i in ids]),
                    "attention_mask": torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i in ids])}  # fmt: skip

        def convert_ids_to_tokens(self, ids):
            return [{2: "[CLS]", 3: "[SEP]"}.get(i, f"w{i}") for i in ids]

    (e,) = explain_texts(bert, Tok(), ["a bb ccc"], methods=["value_zeroing"])
    c = _authors(bert, torch.tensor([[2, 6, 7, 8, 3]]))
    rolled = [c[0], c[1] @ c[0]]  # rollout without residual (compute_joint_attention(res=False))
    np.testing.assert_allclose(e.maps["value_zeroing"], np.stack(rolled)[:, 0], atol=1e-10)  # the [CLS] row
    model = make_tiny_bert(tmp_path / "bert")
    code = main(["explain", "--model", str(model), "--text", "good movie", "--method", "rollout,value_zeroing",
                 "--quiet", "--device", "cpu", "--out", str(tmp_path / "out"), "--format", "json"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    (saved,) = json.loads((tmp_path / "out" / "explain.json").read_text())["records"]
    assert np.asarray(saved["maps"]["value_zeroing"]).shape == (2, 4)
