"""Attention norm, GlobEnc and ALTI (attnflow.methods): hand cases, oracles, and the reference
fixture: on a tiny float64 BERT, each method through `explain_text` (needs captured by their
records) equals the authors' definition re-derived token by token from the model's own weights
(mt-upc/transformer-contributions ``get_contributions``; mohsenfayyaz/GlobEnc ``BertNormOutput``
and the LN2 step of ``BertLayer``; Kobayashi et al.'s ``||Σ αf(x)||``), to 1e-9.

The authors' code itself cannot run here (it patches transformers 4.x modelling files; this
environment has transformers 5): the fixture re-derives their numbers from the same equations,
loops over tokens and heads, including their decomposition check (Σ_j T_i(x_j) + bias = LN1's
output, their ``assert torch.dist(resultant, real_resultant)``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnflow.methods import EXPLAINER_INPUTS, METHODS
from attnflow.methods.alti import alti_map
from attnflow.methods.attention_norm import attention_norm_map

transformers = pytest.importorskip("transformers")

TOL = 1e-9  # float64 end to end


class Tok:  # one id per word, [CLS] = 2, [SEP] = 3
    pad_token, all_special_tokens, model_max_length = "[PAD]", ["[CLS]", "[SEP]"], 16

    def __call__(self, texts, **kw):
        ids = [[2, *(5 + len(w) for w in t.split()), 3] for t in texts]
        if kw.get("return_tensors") == "pt":  # right-padded with 0
            width = max(map(len, ids))
            mask = [[1] * len(i) + [0] * (width - len(i)) for i in ids]
            return {"input_ids": torch.tensor([i + [0] * (width - len(i)) for i in ids]),
                    "attention_mask": torch.tensor(mask)}  # fmt: skip
        return {"input_ids": ids}

    def convert_ids_to_tokens(self, ids):
        return [{2: "[CLS]", 3: "[SEP]"}.get(i, f"w{i}") for i in ids]


@pytest.fixture(scope="module")
def bert():
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=3, num_attention_heads=2,
                                     intermediate_size=16, max_position_embeddings=16)  # fmt: skip
    return transformers.BertForSequenceClassification(config).double().eval()


def test_the_records_declare_their_needs():
    assert EXPLAINER_INPUTS["attention_norm"] == ("value_outputs",)
    assert set(EXPLAINER_INPUTS["alti"]) == {"value_outputs", "layer_inputs", "ln1_scale", "attn_output_bias"}
    assert set(EXPLAINER_INPUTS["globenc"]) == {"value_outputs", "layer_inputs", "ln1_scale", "ln2_scale"}
    assert METHODS["alti"].row_sums == "one" and METHODS["globenc"].row_sums == "nonnegative"


def test_attention_norm_two_heads_by_hand():
    a = np.array([[[[1.0, 0.0], [0.5, 0.5]], [[0.0, 1.0], [1.0, 0.0]]]])  # (L=1, H=2, 2, 2)
    f = np.array([[[[1.0, 0.0], [0.0, 2.0]], [[0.0, 3.0], [4.0, 0.0]]]])  # (L, H, T, D)
    # [0, 0]: 1·(1, 0) + 0 = (1, 0) -> 1; [0, 1]: 0 + 1·(4, 0) -> 4
    # [1, 0]: .5·(1, 0) + 1·(0, 3) -> |(.5, 3)|; [1, 1]: .5·(0, 2) + 0 -> 1
    np.testing.assert_allclose(
        attention_norm_map(a, value_outputs=f), [[[1.0, 4.0], [np.hypot(0.5, 3.0), 1.0]]]
    )
    # one head: α^h_ij ||f^h(x_j)||
    np.testing.assert_allclose(attention_norm_map(a, value_outputs=f, heads=1), [[[0.0, 4.0], [3.0, 0.0]]])


def test_alti_by_hand():
    # one layer, one head, two tokens; scale 1, no bias: T_i(x_j) = centre(α_ij f_j + δ_ij x_j)
    a = np.array([[[[1.0, 0.0], [0.5, 0.5]]]])
    f = np.array([[[[1.0, -1.0], [2.0, -2.0]]]])  # already centred
    x = np.array([[[0.0, 0.0], [-1.0, 1.0]]])
    out = alti_map(
        a, value_outputs=f, layer_inputs=x, ln1_scale=np.ones((1, 2, 2)), attn_output_bias=np.zeros((1, 2, 2))
    )
    # row 0: T = [(1, -1), 0]: y = (1, -1), ||y|| = 2; c = [2 - 0, 2 - 2] = [2, 0] -> [1, 0]
    # row 1: T_10 = (.5, -.5), T_11 = (1, -1) + (-1, 1) = 0; y = (.5, -.5), ||y|| = 1
    #        c = [1 - 0, 1 - 1] = [1, 0] -> [1, 0]
    np.testing.assert_allclose(out, [[[1.0, 0.0], [1.0, 0.0]]], atol=1e-12)


def _oracle(model, ids):
    """Per layer, by loops over tokens and heads in float64 from the model's weights: Kobayashi's
    N, GlobEnc's N-Enc, ALTI's C, and each layer's check of the decomposition."""
    from attnflow.bridge.eager import eager_attention

    with eager_attention(model):
        out = model(ids, output_hidden_states=True, output_attentions=True)
    saved = {}
    hooks = [layer.output.LayerNorm.register_forward_pre_hook(lambda m, a, i=i: saved.__setitem__(i, a[0].detach()))
             for i, layer in enumerate(model.bert.encoder.layer)]  # fmt: skip
    with torch.no_grad():
        model(ids)
    for h in hooks:
        h.remove()
    results = {"attention_norm": [], "globenc": [], "alti": []}
    heads = model.config.num_attention_heads
    for k, layer in enumerate(model.bert.encoder.layer):
        x = out.hidden_states[k][0].detach().numpy()
        alpha = out.attentions[k][0].detach().numpy()
        wv, bv = (
            layer.attention.self.value.weight.detach().numpy(),
            layer.attention.self.value.bias.detach().numpy(),
        )
        wo, bo = (
            layer.attention.output.dense.weight.detach().numpy(),
            layer.attention.output.dense.bias.detach().numpy(),
        )
        ln1, ln2 = layer.attention.output.LayerNorm, layer.output.LayerNorm
        g1, b1, g2 = ln1.weight.detach().numpy(), ln1.bias.detach().numpy(), ln2.weight.detach().numpy()
        t, d = x.shape
        dh = d // heads
        f = np.zeros((heads, t, d))
        for h in range(heads):
            for j in range(t):
                v = wv @ x[j] + bv
                f[h, j] = wo[:, h * dh : (h + 1) * dh] @ v[h * dh : (h + 1) * dh]
        z = np.zeros((t, t, d))
        for i in range(t):
            for j in range(t):
                z[i, j] = sum(alpha[h, i, j] * f[h, j] for h in range(heads)) + (x[j] if i == j else 0.0)
        pre1 = z.sum(1) + bo
        sd1 = np.sqrt(pre1.var(-1) + ln1.eps)
        tv = np.array([[g1 * (z[i, j] - z[i, j].mean()) / sd1[i] for j in range(t)] for i in range(t)])
        y = tv.sum(1) + g1 * (bo - bo.mean()) / sd1[:, None] + b1
        y_model = ln1(torch.from_numpy(pre1)).detach().numpy()
        np.testing.assert_allclose(y, y_model, atol=1e-10)  # the authors' check of the decomposition
        pre2 = saved[k][0].numpy()
        sd2 = np.sqrt(pre2.var(-1) + ln2.eps)
        results["attention_norm"].append(np.linalg.norm(z - np.eye(t)[..., None] * x[None], axis=-1))
        results["globenc"].append(np.array([[np.linalg.norm(g2 * (tv[i, j] - tv[i, j].mean()) / sd2[i])
                                             for j in range(t)] for i in range(t)]))  # fmt: skip
        c = np.array([[max(0.0, np.abs(y[i]).sum() - np.abs(y[i] - tv[i, j]).sum()) for j in range(t)]
                      for i in range(t)])  # fmt: skip
        results["alti"].append(c / c.sum(-1, keepdims=True))
    for name in ("globenc", "alti"):  # rollout: R(l) = M(l) R(l-1)
        maps = results[name]
        for k in range(1, len(maps)):
            maps[k] = maps[k] @ maps[k - 1]
    return {k: np.stack(v) for k, v in results.items()}


def test_the_api_matches_the_authors_definitions_on_a_tiny_bert(bert):
    from attnflow.hf import explain_text

    e = explain_text(bert, Tok(), "a bb ccc", methods=["attention_norm", "globenc", "alti"])
    ids = Tok()(["a bb ccc"], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        expected = _oracle(bert, ids)
    for name in ("attention_norm", "globenc", "alti"):
        np.testing.assert_allclose(e.maps[name], expected[name][:, 0, :], rtol=TOL, atol=TOL, err_msg=name)
    np.testing.assert_allclose(e.maps["alti"].sum(-1), 1.0, atol=1e-12)


def test_padding_in_a_batch_changes_nothing(bert):
    from attnflow.hf import explain_texts

    texts = ["a bb ccc dddd", "bb"]
    together = explain_texts(bert, Tok(), texts, methods=["attention_norm", "globenc", "alti"])
    for text, e in zip(texts, together, strict=True):
        (alone,) = explain_texts(bert, Tok(), [text], methods=["attention_norm", "globenc", "alti"])
        for name in ("attention_norm", "globenc", "alti"):
            np.testing.assert_allclose(e.maps[name], alone.maps[name], rtol=1e-9, atol=1e-9, err_msg=name)


def test_decoders_get_attention_norm_and_a_clear_refusal_for_the_encoder_methods():
    from attnflow.hf import explain_text

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=16, n_embd=8, n_layer=2, n_head=2,
                                                                 n_positions=32)).double().eval()  # fmt: skip

    class CharTok:
        pad_token, all_special_tokens, model_max_length = None, [], 32

        def __call__(self, texts, **kw):
            ids = [[ord(c) - 97 for c in t] for t in texts]
            return {
                "input_ids": torch.tensor(ids),
                "attention_mask": torch.ones(len(ids), len(ids[0]), dtype=torch.long),
            }

        def convert_ids_to_tokens(self, ids):
            return [chr(97 + i) for i in ids]

        def decode(self, ids):
            return "".join(chr(97 + i) for i in ids)

    from attnflow.bridge.eager import eager_attention

    e = explain_text(
        model, CharTok(), "abcd", methods=["attention_norm"], sinks="none"
    )  # the attention as it is
    ids = torch.tensor([[0, 1, 2, 3]])
    with eager_attention(model), torch.no_grad():
        out = model(ids, output_hidden_states=True, output_attentions=True)
    last = []
    for k, block in enumerate(model.transformer.h):  # ||Σ_h α^h_3j f^h(x_j)||, f from ln_1, c_attn, c_proj
        h_in = block.ln_1(out.hidden_states[k][0])
        v = (h_in @ block.attn.c_attn.weight + block.attn.c_attn.bias)[:, 16:]  # (T, D): value third
        a = out.attentions[k][0]
        w = block.attn.c_proj.weight
        vec = sum(a[h, 3][:, None] * (v[:, h * 4 : (h + 1) * 4] @ w[h * 4 : (h + 1) * 4]) for h in range(2))
        last.append(vec.norm(dim=-1).detach().numpy())
    np.testing.assert_allclose(e.maps["attention_norm"], np.stack(last), rtol=TOL, atol=TOL)
    with pytest.raises(ValueError, match=r"is not defined for GPT2LMHeadModel \(family .gpt2.\)"):
        explain_text(model, CharTok(), "abcd", methods=["alti"])


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_need_with_nan_or_inf_at_a_real_token_is_refused_and_at_padding_zeroed(bad):
    """The need check reduces the need to one sum: a NaN, an inf, or an inf beside a -inf (a NaN
    sum) at a real token is refused; the same value at a padded token is zeroed, not refused."""
    a = np.full((1, 1, 1, 3, 3), 1 / 3)
    a[0, :, :, :, 2] = 0.0
    a[0, :, :, 2, :] = 0.0
    a = a * 1.5  # the two real tokens' rows sum to 1 (the third is padding)
    f = np.ones((1, 1, 1, 3, 2))
    mask = np.array([[True, True, False]])
    f[0, 0, 0, 2, 0] = bad  # at the padded token
    got = attention_norm_map(a, value_outputs=f, mask=mask)
    assert np.isfinite(got).all() and (got[..., 2, :] == 0).all()
    f[0, 0, 0, 1, 0] = bad  # at a real token
    with pytest.raises(ValueError, match="value_outputs holds NaN or inf"):
        attention_norm_map(a, value_outputs=f, mask=mask)
    f = np.ones((1, 1, 1, 3, 2))
    f[0, 0, 0, 0, 0], f[0, 0, 0, 1, 1] = np.inf, -np.inf  # the sum is NaN, not inf
    with pytest.raises(ValueError, match="NaN or inf"):
        attention_norm_map(a, value_outputs=f, mask=mask)
