"""One test per architecture family on tiny random models: which row `rows="auto"` explains.

Encoders read [CLS] (row 0); decoder-only sequence classifiers (GPT-2, Llama) read the token their
head pools, the last non-padding one, with either padding side; causal LMs the last token; masked
LMs a chosen position; encoder-decoders are refused in one line. The maps are checked against an
independent computation from an eager model's own attentions on the unpadded text.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers as t

from attnflow.hf import AttentionUnavailableError, explain_batch, explain_text, explain_texts

WORDS = ["<pad>", "<unk>", "<cls>", "the", "movie", "was", "very", "good", "bad", "not", "<mask>"]
TEXTS = ["<cls> the movie was very good", "<cls> not bad", "<cls> the movie was bad"]
SMALL = {"num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 32}


def _tokenizer(padding_side: str = "right") -> t.PreTrainedTokenizerFast:
    """A word-level fast tokenizer over WORDS, built offline (no special tokens added)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return t.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
        padding_side=padding_side,
    )


def _classifier(arch: str) -> torch.nn.Module:
    torch.manual_seed(0)
    common = {"vocab_size": len(WORDS), "num_labels": 2, "pad_token_id": 0}
    if arch == "gpt2":
        config = t.GPT2Config(n_embd=16, n_layer=2, n_head=2, n_positions=32, **common)
        return t.GPT2ForSequenceClassification(config).eval()
    if arch == "llama":  # grouped-query attention
        config = t.LlamaConfig(
            hidden_size=16, num_key_value_heads=1, max_position_embeddings=32, **SMALL, **common
        )
        return t.LlamaForSequenceClassification(config).eval()
    if arch == "bert":
        config = t.BertConfig(hidden_size=16, max_position_embeddings=32, **SMALL, **common)
        return t.BertForSequenceClassification(config).eval()
    raise ValueError(arch)


def _reference(model: torch.nn.Module, text: str, row: str | int) -> dict[str, np.ndarray]:
    """raw and rollout maps (L, T) of one unpadded text, from an eager twin's own attentions.

    raw_l = mean_h A_l[row];  rollout_l = (Ã_l ... Ã_1)[row] with Ã = (mean_h A + I) / 2.
    """
    twin = type(model)._from_config(model.config, attn_implementation="eager").eval()
    twin.load_state_dict(model.state_dict())
    ids = torch.tensor([[WORDS.index(w) for w in text.split()]])
    with torch.no_grad():
        out = twin(input_ids=ids, output_attentions=True)
    attn = np.stack([a[0].double().numpy().mean(0) for a in out.attentions])  # (L, T, T)
    r = row if isinstance(row, int) else 0 if row == "cls" else attn.shape[-1] - 1
    mixed = 0.5 * attn + 0.5 * np.eye(attn.shape[-1])
    joint, roll = np.eye(attn.shape[-1]), []
    for m in mixed:
        joint = m @ joint
        roll.append(joint[r])
    return {"raw": attn[:, r], "rollout": np.stack(roll), "logits": out.logits[0].double().numpy()}


@pytest.mark.parametrize(("arch", "row"), [("gpt2", "last"), ("llama", "last"), ("bert", "cls")])
def test_sequence_classifiers_explain_the_row_their_head_pools(arch, row):
    model = _classifier(arch)
    got = explain_texts(model, _tokenizer(), TEXTS, methods=["raw", "rollout"], batch_size=3)
    for text, e in zip(TEXTS, got, strict=True):
        ref = _reference(model, text, row)
        assert e.row == (0 if row == "cls" else len(text.split()) - 1)
        np.testing.assert_allclose(e.maps["raw"], ref["raw"], atol=1e-6)
        np.testing.assert_allclose(e.maps["rollout"], ref["rollout"], atol=1e-6)
        np.testing.assert_allclose(e.logits, ref["logits"], atol=1e-5)
        if row == "last":  # a causal row 0 would be one-hot; the pooled row spreads over its prefix
            assert (e.maps["raw"][:, :-1] > 0).all()


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_left_padding_gives_the_maps_of_right_padding(arch):
    model = _classifier(arch)
    maps = {}
    for side in ("left", "right"):
        enc = dict(_tokenizer(side)(TEXTS, padding=True, return_tensors="pt"))
        # positions count real tokens only (the model's default counts the left padding too)
        enc["position_ids"] = (enc["attention_mask"].cumsum(-1) - 1).clamp(min=0)
        _, per_sample = explain_batch(
            model, enc, methods=["raw", "rollout"], layer=-1, rows="auto", residual=0.5, heads="mean",
            target="predicted", extra_inputs=None,
        )  # fmt: skip
        maps[side] = per_sample
    for left, right, text in zip(maps["left"], maps["right"], TEXTS, strict=True):
        assert left["row"] == right["row"] == len(text.split()) - 1
        for m in ("raw", "rollout"):
            np.testing.assert_allclose(left["maps"][m], right["maps"][m], atol=1e-6)
        np.testing.assert_allclose(left["logits"], right["logits"], atol=1e-5)


def test_a_masked_lm_explains_the_chosen_position():
    torch.manual_seed(0)
    model = t.BertForMaskedLM(
        t.BertConfig(vocab_size=len(WORDS), hidden_size=16, max_position_embeddings=32, **SMALL)
    )
    text = "<cls> the movie was <mask> good"
    e = explain_text(model.eval(), _tokenizer(), text, methods=["raw", "rollout"], rows=4)
    ref = _reference(model, text, 4)
    assert e.row == 4
    np.testing.assert_allclose(e.maps["raw"], ref["raw"], atol=1e-6)
    np.testing.assert_allclose(e.maps["rollout"], ref["rollout"], atol=1e-6)
    np.testing.assert_allclose(e.logits, ref["logits"][4], atol=1e-5)  # the masked position's vocabulary


def test_an_encoder_decoder_is_refused_in_one_line():
    torch.manual_seed(0)
    model = t.T5ForConditionalGeneration(
        t.T5Config(vocab_size=len(WORDS), d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2)
    ).eval()
    with pytest.raises(
        AttentionUnavailableError, match="encoder-decoder model: attnflow explains encoder-only"
    ):
        explain_text(model, _tokenizer(), "<cls> the movie", methods=["raw"])


def test_a_masked_lm_explains_its_mask_token_by_default_and_refuses_a_text_without_one():
    torch.manual_seed(0)
    model = t.BertForMaskedLM(
        t.BertConfig(vocab_size=len(WORDS), hidden_size=16, max_position_embeddings=32, **SMALL)
    )
    texts = ["<cls> the movie was <mask> good", "<cls> <mask> bad"]
    got = explain_texts(model.eval(), _tokenizer(), texts, methods=["raw"])
    assert [e.row for e in got] == [4, 1]
    for text, e in zip(texts, got, strict=True):
        np.testing.assert_allclose(e.maps["raw"], _reference(model, text, e.row)["raw"], atol=1e-6)
    with pytest.raises(ValueError, match="text 0 has no mask token"):
        explain_text(model, _tokenizer(), "<cls> the movie", methods=["raw"])


def test_a_decoder_classifier_without_a_pad_token_id_is_explained_one_text_at_a_time():
    model = _classifier("gpt2")
    model.config.pad_token_id = None  # transformers refuses padded batches of such a model
    got = explain_texts(model, _tokenizer(), TEXTS, methods=["raw"], batch_size=3)
    for text, e in zip(TEXTS, got, strict=True):
        np.testing.assert_allclose(e.maps["raw"], _reference(model, text, "last")["raw"], atol=1e-6)
