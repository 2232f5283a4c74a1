"""Grad-SAM (attnflow.methods.grad_sam): hand cases, an oracle, and the method in the library,
the CLI and generation through its record alone (the study's stages read the same record)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnflow.methods import EXPLAINERS, METHODS
from attnflow.methods.grad_sam import grad_sam_map


def _oracle(attn: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """G[l, i, j] = 1/H Σ_h max(∇A[l, h, i, j], 0) · A[l, h, i, j], by loops."""
    layers, heads, t, _ = attn.shape
    out = np.zeros((layers, t, t))
    for k in range(layers):
        for i in range(t):
            for j in range(t):
                out[k, i, j] = (
                    sum(max(grad[k, h, i, j], 0.0) * attn[k, h, i, j] for h in range(heads)) / heads
                )
    return out


def test_two_heads_by_hand():
    a = np.array([[[[0.5, 0.5], [0.2, 0.8]], [[1.0, 0.0], [0.4, 0.6]]]])  # (L=1, H=2, 2, 2)
    g = np.array([[[[1.0, -1.0], [0.5, 2.0]], [[2.0, 3.0], [-1.0, 1.0]]]])
    # head 0: [[.5, 0], [.1, 1.6]]; head 1: [[2, 0], [0, .6]]; mean: [[1.25, 0], [.05, 1.1]]
    np.testing.assert_allclose(grad_sam_map(a, attn_grad=g), [[[1.25, 0.0], [0.05, 1.1]]])
    np.testing.assert_allclose(grad_sam_map(a, attn_grad=g, heads="max"), [[[2.0, 0.0], [0.1, 1.6]]])
    np.testing.assert_allclose(grad_sam_map(a, attn_grad=g, rows=[1]), [[[0.05, 1.1]]])


def test_random_inputs_match_the_oracle_and_padding_is_zero():
    rng = np.random.default_rng(0)
    attn = rng.dirichlet(np.ones(5), size=(3, 2, 5))  # (L, H, T, T)
    grad = rng.standard_normal(attn.shape)
    np.testing.assert_allclose(grad_sam_map(attn, attn_grad=grad), _oracle(attn, grad), atol=1e-12)
    padded = np.zeros((1, 3, 2, 7, 7))
    padded[0, :, :, :5, :5] = attn
    pgrad = np.zeros_like(padded)
    pgrad[0, :, :, :5, :5] = grad
    out = grad_sam_map(padded, attn_grad=pgrad, lengths=[5])
    np.testing.assert_allclose(out[0, :, :5, :5], _oracle(attn, grad), atol=1e-12)
    assert not out[0, :, 5:].any() and not out[0, :, :, 5:].any()


def test_the_record_makes_it_a_method_of_the_library_and_both_cli_verbs(tmp_path, capsys):
    import json

    from attnflow.cli import main
    from attnflow.cli.generate import GENERATE_METHODS
    from attnflow.explain.apply import RowSpec
    from attnflow.method_inputs import EXPLAINER_INPUTS
    from tests._tiny import make_tiny_bert

    record = METHODS["grad_sam"]
    assert EXPLAINERS["grad_sam"] is grad_sam_map and EXPLAINER_INPUTS["grad_sam"] == ("attn_grad",)
    assert (
        RowSpec("max", task=True).for_record(record).rows == "cls"
    )  # the classification row, whatever the task's
    assert record.study and "grad_sam" in GENERATE_METHODS
    model = make_tiny_bert(tmp_path / "bert")
    code = main(["explain", "--model", str(model), "--text", "good movie", "--method", "rollout,grad_sam",
                 "--quiet", "--device", "cpu", "--out", str(tmp_path / "out"), "--format", "json"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    (saved,) = json.loads((tmp_path / "out" / "explain.json").read_text())["records"]
    assert np.asarray(saved["maps"]["grad_sam"]).shape == (2, 4)  # (layer, token): [CLS] good movie [SEP]


def test_explain_text_gives_the_classification_row_of_each_layer_from_the_models_own_gradients():
    transformers = pytest.importorskip("transformers")
    from attnflow.hf import explain_text, forward_attentions

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=16, max_position_embeddings=16)  # fmt: skip
    model = transformers.BertForSequenceClassification(config).eval()

    class Tok:  # one id per word, [CLS] = 2, [SEP] = 3
        pad_token, all_special_tokens, model_max_length = "[PAD]", ["[CLS]", "[SEP]"], 16

        def __call__(self, texts, **kw):
            ids = [[2, *(5 + len(w) for w in t.split()), 3] for t in texts]
            if kw.get("return_tensors") == "pt":
                return {
                    "input_ids": torch.tensor(ids),
                    "attention_mask": torch.ones(len(ids), len(ids[0]), dtype=torch.long),
                }
            return {"input_ids": ids}

        def convert_ids_to_tokens(self, ids):
            return [{2: "[CLS]", 3: "[SEP]"}.get(i, f"w{i}") for i in ids]

    e = explain_text(model, Tok(), "a bb ccc", methods=["grad_sam"])
    out = forward_attentions(model, Tok()(["a bb ccc"], return_tensors="pt"), target="predicted")
    a, g = out.attentions[0].double().numpy(), out.attention_grads[0].double().numpy()  # (L, H, T, T)
    np.testing.assert_allclose(e.maps["grad_sam"], _oracle(a, g)[:, 0, :], atol=1e-6)  # the [CLS] row


def test_generation_explains_each_generated_token_by_its_logit():
    transformers = pytest.importorskip("transformers")
    from attnflow.generate import explain_generation
    from attnflow.hf import forward_attentions

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=16, n_embd=8, n_layer=2, n_head=2,
                                                                 n_positions=32, eos_token_id=None)).eval()  # fmt: skip

    class Tok:  # one token per character "a".."p"
        def __call__(self, text, return_tensors=None):
            return {"input_ids": torch.tensor([[ord(c) - 97 for c in text]])}

        def convert_ids_to_tokens(self, ids):
            return [chr(97 + i) for i in ids]

        def decode(self, ids):
            return "".join(chr(97 + i) for i in ids)

    e = explain_generation(model, Tok(), "abcd", max_new_tokens=2, methods=["grad_sam"], sinks="none",
                           normalize=False)  # fmt: skip
    seq = torch.tensor([e.prompt_ids + e.generated_ids[:-1]])
    for t, token in enumerate(e.generated_ids):
        row = 3 + t
        out = forward_attentions(model, {"input_ids": seq}, target=lambda z, r=row, k=token: z[:, r, k])
        a, g = out.attentions[0].double().numpy(), out.attention_grads[0].double().numpy()
        np.testing.assert_allclose(
            e.maps["grad_sam"][t].T, _oracle(a, g)[:, row, :4], atol=1e-6
        )  # prompt columns
