"""attnflow.hf on tiny random Hugging Face models built offline, with their default (SDPA) attention.

The reference for every check is an independent eager model: the same weights loaded into a model
created with attn_implementation="eager", run with output_attentions=True, differentiated with
torch.autograd.grad on its own attention tensors.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from attnflow import methods as records  # noqa: E402
from attnflow.hf import (  # noqa: E402
    AttentionUnavailableError,
    Explanation,
    eager_attention,
    explain_image,
    explain_text,
    explain_texts,
    forward_attentions,
    load_explanations,
    merge_scores,
    merge_words,
    save_explanations,
    word_groups,
)

# float32 eager vs float32 eager on the same weights: only summation order differs.
ATOL = 1e-6
VOCAB = 40


def _tiny(arch: str) -> torch.nn.Module:
    """A random 2-layer model of `arch` with the library's default attention (SDPA)."""
    torch.manual_seed(0)
    t = transformers
    small = {"num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 32}
    if arch == "bert":
        model = t.BertForSequenceClassification(
            t.BertConfig(vocab_size=VOCAB, hidden_size=16, max_position_embeddings=32, num_labels=3, **small)
        )
    elif arch == "distilbert":
        model = t.DistilBertForSequenceClassification(
            t.DistilBertConfig(
                vocab_size=VOCAB, dim=16, n_layers=2, n_heads=2, hidden_dim=32, max_position_embeddings=32
            )
        )
    elif arch == "gpt2":
        model = t.GPT2LMHeadModel(
            t.GPT2Config(
                vocab_size=VOCAB,
                n_embd=16,
                n_layer=2,
                n_head=2,
                n_positions=32,
                bos_token_id=0,
                eos_token_id=0,
            )
        )
    elif arch == "llama":  # grouped-query attention: 4 query heads share 2 key/value heads
        model = t.LlamaForCausalLM(
            t.LlamaConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, intermediate_size=32, max_position_embeddings=32)
        )  # fmt: skip
    elif arch == "vit":
        model = t.ViTForImageClassification(
            t.ViTConfig(image_size=8, patch_size=4, hidden_size=16, num_channels=3, num_labels=3, **small)
        )
    else:
        raise ValueError(arch)
    return model.eval()


def _eager_twin(model: torch.nn.Module) -> torch.nn.Module:
    """The same weights in a model created eager (independent of set_attn_implementation)."""
    config = copy.deepcopy(model.config)  # _from_config would set the model's own config to eager
    twin = type(model)._from_config(config, attn_implementation="eager")
    twin.load_state_dict(model.state_dict())
    return twin.eval()


def _batch(arch: str, *, padding: str = "right") -> dict[str, torch.Tensor]:
    """Two samples, the second with 2 padding positions (none for ViT)."""
    if arch == "vit":
        torch.manual_seed(1)
        return {"pixel_values": torch.randn(2, 3, 8, 8)}
    ids = torch.tensor([[2, 7, 9, 11, 5, 3], [2, 8, 13, 3, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    if padding == "left":
        ids[1] = torch.tensor([0, 0, 2, 8, 13, 3])
        mask[1] = torch.tensor([0, 0, 1, 1, 1, 1])
    return {"input_ids": ids, "attention_mask": mask}


def _valid(batch: dict[str, torch.Tensor]) -> torch.Tensor | None:
    mask = batch.get("attention_mask")
    return None if mask is None else mask.bool()


def _zero_pad(x: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    if valid is None:
        return x
    keep = valid[:, None, None, :, None] & valid[:, None, None, None, :]
    return x * keep


ARCHS = ["bert", "distilbert", "gpt2", "llama", "vit"]


@pytest.fixture(scope="module")
def models() -> dict[str, torch.nn.Module]:
    return {arch: _tiny(arch) for arch in ARCHS}


@pytest.mark.parametrize("arch", ARCHS)
def test_attentions_equal_an_eager_models_and_logits_are_unchanged(models, arch):
    model = models[arch]
    assert model.config._attn_implementation == "sdpa"
    batch = _batch(arch)
    with torch.no_grad():
        sdpa_logits = model(**batch).logits
        ref = _eager_twin(model)(**batch, output_attentions=True)
    out = forward_attentions(model, batch)
    expected = _zero_pad(torch.stack(ref.attentions, dim=1), _valid(batch))  # (B, L, H, T, T)
    assert out.attentions.shape == expected.shape
    torch.testing.assert_close(out.attentions, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(out.logits, ref.logits, atol=ATOL, rtol=0)
    torch.testing.assert_close(out.logits, sdpa_logits, atol=1e-5, rtol=0)  # SDPA vs eager: same model
    assert out.attention_grads is None
    assert model.config._attn_implementation == "sdpa"  # restored


@pytest.mark.parametrize(("arch", "padding"), [("bert", "right"), ("gpt2", "right"), ("llama", "left")])
def test_padding_rows_and_columns_are_exactly_zero_and_real_rows_sum_to_one(models, arch, padding):
    batch = _batch(arch, padding=padding)
    out = forward_attentions(models[arch], batch, target="predicted")
    pad = ~batch["attention_mask"].bool()  # (B, T)
    for x in (out.attentions, out.attention_grads):
        assert (x[1][:, :, pad[1]] == 0).all() and (x[1][:, :, :, pad[1]] == 0).all()
    sums = out.attentions[1][:, :, ~pad[1]].sum(-1)  # (L, H, real queries)
    torch.testing.assert_close(sums, torch.ones_like(sums), atol=1e-5, rtol=0)


def _reference_grads(model, batch, score_fn):
    """d score / d attentions by torch.autograd.grad on an eager twin's own attention tensors."""
    twin = _eager_twin(model)
    out = twin(**batch, output_attentions=True)
    scores = score_fn(out.logits)  # (B,)
    grads = torch.autograd.grad(scores.sum(), out.attentions, allow_unused=True)
    grads = [torch.zeros_like(a) if g is None else g for a, g in zip(out.attentions, grads, strict=True)]
    return scores.detach(), _zero_pad(torch.stack(grads, dim=1), _valid(batch))


@pytest.mark.parametrize("arch", ["bert", "distilbert", "vit"])
def test_gradients_of_the_predicted_class_match_autograd_on_the_attentions(models, arch):
    model = models[arch]
    batch = _batch(arch)
    out = forward_attentions(model, batch, target="predicted")
    pred = out.logits.argmax(-1)
    assert torch.equal(out.target, pred)
    scores, expected = _reference_grads(model, batch, lambda z: z.gather(1, pred[:, None])[:, 0])
    torch.testing.assert_close(out.scores, scores, atol=ATOL, rtol=0)
    torch.testing.assert_close(out.attention_grads, expected, atol=1e-6, rtol=1e-4)
    assert out.attention_grads.abs().sum() > 0
    assert not model.training and all(not p.grad for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_gradients_for_a_callable_target_on_a_causal_lm_match_autograd(models, arch):
    model = models[arch]
    batch = _batch(arch)

    def target(z):  # the logit of token 7 at position 2 (real in both samples)
        return z[:, 2, 7]

    out = forward_attentions(model, batch, target=target)
    assert out.logits.shape == (2, 6, VOCAB) and out.target is None
    _, expected = _reference_grads(model, batch, target)
    torch.testing.assert_close(out.attention_grads, expected, atol=1e-6, rtol=1e-4)
    # causal: position 2's logit cannot depend on later queries
    assert (out.attention_grads[:, :, :, 3:] == 0).all()


def test_class_targets_on_a_causal_lm_score_the_next_token_after_the_last_real_one(models):
    model = models["gpt2"]
    batch = _batch("gpt2")
    out = forward_attentions(model, batch, target=[5, 6])
    assert out.positions.tolist() == [5, 3]  # last real token of each sample
    _, expected = _reference_grads(model, batch, lambda z: torch.stack([z[0, 5, 5], z[1, 3, 6]]))
    torch.testing.assert_close(out.attention_grads, expected, atol=1e-6, rtol=1e-4)


def test_int_and_per_sample_targets_pick_those_classes(models):
    model, batch = models["bert"], _batch("bert")
    one = forward_attentions(model, batch, target=2)
    each = forward_attentions(model, batch, target=torch.tensor([0, 2]))
    assert one.target.tolist() == [2, 2] and each.target.tolist() == [0, 2]
    torch.testing.assert_close(one.attention_grads[1], each.attention_grads[1])
    assert not torch.allclose(one.attention_grads[0], each.attention_grads[0])


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (3, "out of range"),
        ([0], "2 integer class indices"),
        ("best", "'predicted'"),
        (lambda z: z, "shape \\(2,\\)"),
    ],
)
def test_bad_targets_raise_a_clear_error(models, target, message):
    with pytest.raises(ValueError, match=message):
        forward_attentions(models["bert"], _batch("bert"), target=target)


def test_the_original_attention_implementation_is_restored_also_after_an_error(models):
    model = models["bert"]
    assert model.config._attn_implementation == "sdpa"
    with pytest.raises(RuntimeError, match="boom"), eager_attention(model):
        assert all(m.config._attn_implementation == "eager" for m in model.modules() if hasattr(m, "config"))
        raise RuntimeError("boom")
    assert model.config._attn_implementation == "sdpa"


def test_sub_configs_switch_to_eager_and_each_gets_its_own_implementation_back():
    t = transformers
    text = {"vocab_size": VOCAB, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
            "num_attention_heads": 2, "max_position_embeddings": 16}  # fmt: skip
    vision = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
              "image_size": 8, "patch_size": 4}  # fmt: skip
    model = t.CLIPModel(t.CLIPConfig(text_config=text, vision_config=vision, projection_dim=8))
    model.config.text_config._attn_implementation_internal = "eager"  # a mixed set-up to restore
    before = {k: getattr(model.config, k)._attn_implementation for k in model.config.sub_configs}
    assert before == {"text_config": "eager", "vision_config": "sdpa"}
    with eager_attention(model):
        assert {getattr(model.config, k)._attn_implementation for k in model.config.sub_configs} == {"eager"}
        assert model.config._attn_implementation == "eager"
    assert {k: getattr(model.config, k)._attn_implementation for k in model.config.sub_configs} == before
    assert model.config._attn_implementation == "sdpa"


def test_a_model_that_cannot_switch_raises_and_keeps_its_implementation(models, monkeypatch):
    model = models["bert"]
    monkeypatch.setattr(type(model), "_can_set_attn_implementation", classmethod(lambda cls: False))
    with pytest.raises(AttentionUnavailableError, match="did not switch to eager"):
        forward_attentions(model, _batch("bert"))
    assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("empty", [(), None, (None, None)])
def test_empty_or_missing_attentions_raise_instead_of_passing(models, monkeypatch, empty):
    from transformers.modeling_outputs import SequenceClassifierOutput

    model = models["bert"]
    monkeypatch.setattr(
        model, "forward", lambda **kw: SequenceClassifierOutput(logits=torch.zeros(2, 3), attentions=empty)
    )
    with pytest.raises(AttentionUnavailableError, match="attentions"):
        forward_attentions(model, _batch("bert"))


def test_a_model_without_attention_layers_raises():
    t = transformers
    model = t.MambaForCausalLM(
        t.MambaConfig(
            vocab_size=VOCAB, hidden_size=8, num_hidden_layers=1, state_size=4, expand=2, conv_kernel=2
        )
    )
    with pytest.raises(AttentionUnavailableError, match="no attention layers"):
        forward_attentions(model, {"input_ids": torch.tensor([[1, 2, 3]])})


def test_a_plain_module_is_not_a_transformers_model():
    with pytest.raises(AttentionUnavailableError, match="not a Hugging Face transformers model"):
        forward_attentions(torch.nn.Linear(2, 2), {"input_ids": torch.zeros(1, 2, dtype=torch.long)})


# ---------------------------------------------------------------------------------------------
# tokens for display
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tokens", "words", "groups"),
    [
        (["[CLS]", "un", "##believ", "##able", "film", "[SEP]"], ["[CLS]", "unbelievable", "film", "[SEP]"],
         [[0], [1, 2, 3], [4], [5]]),
        (["A", "Ġgre", "at", "Ġfilm", "."], ["A", "great", "film."], [[0], [1, 2], [3, 4]]),
        (["<s>", "▁un", "bel", "iev", "able", "▁film"], ["<s>", "unbelievable", "film"], [[0], [1, 2, 3, 4], [5]]),
        (["<|endoftext|>", "Ġgood"], ["<|endoftext|>", "good"], [[0], [1]]),
    ],
)  # fmt: skip
def test_word_pieces_merge_into_words_for_each_tokenizer_scheme(tokens, words, groups):
    special = ["[CLS]", "[SEP]", "<s>", "<|endoftext|>"]
    assert word_groups(tokens, special=special) == groups
    assert merge_words(tokens, special=special)[0] == words


def test_merged_scores_are_sums_over_the_pieces_on_every_layer():
    scores = np.arange(12, dtype=float).reshape(2, 6)  # (layer, token)
    merged = merge_scores(scores, [[0], [1, 2, 3], [4], [5]])
    assert merged.tolist() == [[0, 6, 4, 5], [6, 24, 10, 11]]
    np.testing.assert_allclose(merged.sum(-1), scores.sum(-1))


# ---------------------------------------------------------------------------------------------
# explain_text / explain_image
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bert_tokenizer(tmp_path_factory):
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "movie", "un", "##believ", "##able", "the"]
    return transformers.BertTokenizer(vocab={w: i for i, w in enumerate(words)}, model_max_length=12)


def test_explain_text_gives_every_method_at_every_layer_for_the_cls_row(models, bert_tokenizer):
    e = explain_text(
        models["bert"], bert_tokenizer, "the unbelievable movie", methods=["raw", "rollout", "flow"]
    )
    assert e.tokens == ["[CLS]", "the", "un", "##believ", "##able", "movie", "[SEP]"]
    assert set(e.maps) == {"raw", "rollout", "flow"} and e.maps["flow"].shape == (2, 7)
    assert e.layer == 1 and e.row == 0 and e.prediction in (0, 1, 2)
    np.testing.assert_allclose(e.maps["rollout"].sum(-1), 1.0, atol=1e-9)  # a rollout row is a distribution
    np.testing.assert_allclose(e.maps["flow"].sum(-1), 1.0, atol=1e-9)  # normalised flow rows too
    # the maps are the registry's explainers on the model's attentions
    enc = bert_tokenizer(["the unbelievable movie"], return_tensors="pt")
    attn = forward_attentions(models["bert"], enc).attentions[0].double().numpy()
    np.testing.assert_allclose(e.maps["flow"], records.EXPLAINERS["flow"](attn, rows=[0])[:, 0], atol=1e-12)
    assert e.meta["special"] == [0, 6]


def test_merging_words_sums_the_explanation_consistently(models, bert_tokenizer):
    pieces = explain_text(models["bert"], bert_tokenizer, "the unbelievable movie", methods="rollout")
    words = explain_text(
        models["bert"], bert_tokenizer, "the unbelievable movie", methods="rollout", merge=True
    )
    assert words.tokens == ["[CLS]", "the", "unbelievable", "movie", "[SEP]"]
    np.testing.assert_allclose(words.maps["rollout"][:, 2], pieces.maps["rollout"][:, 2:5].sum(-1))
    np.testing.assert_allclose(words.maps["rollout"].sum(-1), pieces.maps["rollout"].sum(-1))


@pytest.mark.parametrize("rows", ["cls", "max", 1])
def test_batched_texts_give_the_same_maps_as_one_at_a_time(models, bert_tokenizer, rows):
    texts = ["good movie", "the unbelievable movie", "good"]
    methods = [m for m in ("rollout", "flow", "chefer") if m in records.EXPLAINERS]
    batched = explain_texts(models["bert"], bert_tokenizer, texts, methods=methods, rows=rows, batch_size=3)
    for text, e in zip(texts, batched, strict=True):
        single = explain_text(models["bert"], bert_tokenizer, text, methods=methods, rows=rows)
        assert e.text == text and e.tokens == single.tokens
        for m in e.maps:
            np.testing.assert_allclose(e.maps[m], single.maps[m], atol=1e-5)


def test_a_per_text_target_follows_its_text_through_the_length_batches(models, bert_tokenizer):
    """Texts are sorted into batches by length; each keeps its own class (it once got another's)."""
    texts = ["good movie", "the unbelievable movie", "good", "movie"]
    targets = [0, 2, 1, 2]
    batched = explain_texts(
        models["bert"], bert_tokenizer, texts, methods="chefer", target=targets, batch_size=2
    )
    for text, target, e in zip(texts, targets, batched, strict=True):
        single = explain_text(models["bert"], bert_tokenizer, text, methods="chefer", target=target)
        np.testing.assert_allclose(e.maps["chefer"], single.maps["chefer"], atol=1e-5)
    with pytest.raises(ValueError, match="one class per text"):
        explain_texts(models["bert"], bert_tokenizer, texts, methods="chefer", target=[0, 1])


def test_causal_lms_explain_the_last_token_by_default(models):
    class Tok:  # a minimal byte-level tokenizer stand-in: one token per word, no padding token
        pad_token = None
        all_special_tokens = ()
        model_max_length = 10**30

        def __call__(self, texts, **kw):
            ids = [[5 + len(w) for w in t.split()] for t in texts]
            if kw.get("return_tensors") == "pt":
                return {
                    "input_ids": torch.tensor(ids),
                    "attention_mask": torch.ones(len(ids), len(ids[0]), dtype=torch.long),
                }
            return {"input_ids": ids}

        def convert_ids_to_tokens(self, ids):
            return [f"Ġw{i}" for i in ids]

        def decode(self, ids):
            return f"w{ids[0]}"

    e = explain_text(models["gpt2"], Tok(), "a bb ccc", methods=["raw", "rollout"])
    assert e.row == 2 and e.tokens == ["w6", "w7", "w8"]
    assert e.logits.shape == (VOCAB,) and e.label == f"w{e.prediction}"
    np.testing.assert_allclose(e.maps["rollout"].sum(-1), 1.0, atol=1e-9)


def test_a_method_needing_attention_gradients_gets_them_for_the_predicted_class(
    models, bert_tokenizer, monkeypatch
):
    from attnflow.explain.kit import attention_method

    seen = {}

    @attention_method(needs=("attn_grad",))  # the kit: needs declared once, fetched by name
    def grad_times_attn(batch, *, heads, attn_grad):
        seen["grad"] = attn_grad  # batch, layer, head, query, key
        return batch.aggregate((batch.heads() * attn_grad).clip(min=0), heads)  # heads averaged: [B, L, T, T]

    monkeypatch.setitem(records.EXPLAINERS, "gradx", grad_times_attn)
    e = explain_text(models["bert"], bert_tokenizer, "good movie", methods=["rollout", "gradx"])
    enc = bert_tokenizer(["good movie"], return_tensors="pt")
    ref = forward_attentions(models["bert"], enc, target="predicted")
    np.testing.assert_allclose(
        seen["grad"].reshape(ref.attention_grads.shape), ref.attention_grads.double(), atol=1e-12
    )
    assert e.maps["gradx"].shape == (2, 4)
    # an input nobody can provide is named
    monkeypatch.setitem(
        records.EXPLAINERS, "lrp", attention_method(needs=("relevance",))(lambda batch, **kw: None)
    )
    with pytest.raises(ValueError, match="relevance"):
        explain_text(models["bert"], bert_tokenizer, "good", methods="lrp")


@pytest.mark.parametrize("method", ["chefer", "chefer_lrp"])
def test_chefer_methods_get_gradients_and_lrp_relevance_of_the_predicted_class(
    models, bert_tokenizer, method
):
    model = models["bert"]
    e = explain_text(model, bert_tokenizer, "the unbelievable movie", methods=method)
    enc = bert_tokenizer(["the unbelievable movie"], return_tensors="pt")
    ref = forward_attentions(model, enc, target="predicted")
    extra = {"attn_grad": ref.attention_grads[0].double().numpy()}
    if method == "chefer_lrp":
        from attnflow.lrp import lrp_relevance

        lrp = lrp_relevance(model, enc["input_ids"], enc["attention_mask"], target=ref.target)
        extra["attn_relevance"] = lrp.attn_relevance[0].double().numpy()
    expected = records.EXPLAINERS[method](ref.attentions[0].double().numpy(), rows=[0], **extra)[:, 0]
    np.testing.assert_allclose(e.maps[method], expected, atol=1e-9)
    assert e.maps[method].shape == (2, 7) and np.isfinite(e.maps[method]).all()


def test_bad_method_and_too_long_text_and_bad_layer_say_what_is_wrong(models, bert_tokenizer):
    with pytest.raises(ValueError, match=r"unknown method 'nope'; choose from .*flow.*raw.*rollout"):
        explain_text(models["bert"], bert_tokenizer, "good", methods="nope")
    with pytest.raises(ValueError, match="14 tokens, the model takes at most 12"):
        explain_text(models["bert"], bert_tokenizer, " ".join(["good"] * 12))
    cut = explain_text(models["bert"], bert_tokenizer, " ".join(["good"] * 12), truncate=True, methods="raw")
    assert len(cut.tokens) == 12
    with pytest.raises(ValueError, match="layer must be an index in \\[-2, 1\\]"):
        explain_text(models["bert"], bert_tokenizer, "good", layer=5)


def test_the_entry_points_are_exported_lazily_from_the_package():
    import attnflow
    import attnflow.hf

    assert attnflow.explain_text is attnflow.hf.explain_text
    assert attnflow.explain_image is attnflow.hf.explain_image
    assert {"explain_text", "explain_image"} <= set(dir(attnflow))


def test_explain_image_covers_cls_and_every_patch(models):
    torch.manual_seed(2)
    e = explain_image(models["vit"], torch.randn(3, 8, 8), methods=["rollout", "flow"], layer=0)
    assert e.kind == "image" and e.tokens == ["[CLS]", "(0,0)", "(0,1)", "(1,0)", "(1,1)"]
    assert e.meta["grid"] == [2, 2] and e.maps["flow"].shape == (2, 5) and e.layer == 0
    assert e.scores("flow")[1:].reshape(e.meta["grid"]).shape == (2, 2)


@pytest.mark.parametrize("suffix", [".json", ".safetensors"])
def test_explanations_round_trip_through_json_and_safetensors(tmp_path, suffix):
    e = Explanation(
        tokens=["[CLS]", "good", "</script>"], maps={"flow": np.array([[0.5, 0.25, 0.25]])}, layer=0, row=0,
        logits=np.array([0.1, 0.9]), prediction=1, label="POSITIVE", text="good", groups=[[0], [1], [2]],
    )  # fmt: skip
    path = save_explanations([e, e], tmp_path / f"x{suffix}")
    back = load_explanations(path)
    assert len(back) == 2 and back[1].tokens == e.tokens and back[1].label == "POSITIVE"
    np.testing.assert_allclose(back[0].maps["flow"], e.maps["flow"])
    if suffix == ".json":
        assert json.loads(path.read_text())["records"][0]["logits"] == [0.1, 0.9]
