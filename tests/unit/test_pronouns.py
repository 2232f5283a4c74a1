"""The pronoun test (Figure 4 on a causal LM): templates, antecedent scoring, and the study on a tiny
random Llama (eager attention) with a word-level tokenizer that reports character offsets."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from attnflow.metrics.antecedents import antecedent_score, outranks, outranks_by_layer
from attnflow.pronouns.sentences import (
    FAMILIES,
    FEMALE_NAMES,
    GENDERED_NOUNS,
    MALE_NAMES,
    PRONOUNS,
    pronoun_sentences,
    token_span,
)

# --- templates ---------------------------------------------------------------------------------


def test_sentences_balance_families_genders_and_order():
    items = pronoun_sentences(120, seed=0)
    assert len({i.text for i in items}) == 120  # distinct
    for fam in FAMILIES:
        mine = [i for i in items if i.family == fam]
        assert len(mine) == 20
        assert sum(i.referent_gender == "m" for i in mine) == 10  # half male, half female referents
    # half the sentences put the referent first: a first-mentioned bias scores 1/2
    assert sum(i.referent_first for i in items) == 60


def test_sentences_are_deterministic_in_the_seed():
    assert pronoun_sentences(30, seed=3) == pronoun_sentences(30, seed=3)
    assert pronoun_sentences(30, seed=3) != pronoun_sentences(30, seed=4)


def test_spans_name_the_head_words_and_the_pronouns_match_gender_and_kind():
    male = set(MALE_NAMES) | {m for m, _ in GENDERED_NOUNS}
    female = set(FEMALE_NAMES) | {f for _, f in GENDERED_NOUNS}
    for it in pronoun_sentences(60, seed=1):
        ref, dis = it.text[slice(*it.referent_span)], it.text[slice(*it.distractor_span)]
        assert ref == it.referent.split()[-1] and dis == it.distractor.split()[-1]
        assert (ref in male) == (it.referent_gender == "m") and (dis in female) == (it.referent_gender == "m")
        kind = FAMILIES[it.family].kind
        assert it.right == PRONOUNS[kind][it.referent_gender == "f"] and {it.right, it.wrong} == set(
            PRONOUNS[kind]
        )
        # the referent comes first exactly when the family's referent is A
        assert (
            (it.referent_span[0] < it.distractor_span[0])
            == it.referent_first
            == (FAMILIES[it.family].referent == "A")
        )
        assert not it.text.endswith(" ") and it.text[0].isupper()


def test_sentences_come_in_minimal_pairs_with_the_antecedents_swapped():
    items = pronoun_sentences(24, seed=2)
    for a, b in zip(items[0::2], items[1::2], strict=True):
        assert (a.pair, b.pair, a.order, b.order) == (a.sentence_id // 2, a.sentence_id // 2, "mf", "fm")
        assert (a.family, a.template, a.referent_first) == (b.family, b.template, b.referent_first)
        # the same two antecedents, swapped: the referent keeps its slot and changes gender
        assert (a.referent, a.distractor) == (b.distractor, b.referent)
        assert {a.referent_gender, b.referent_gender} == {"m", "f"} and a.right == b.wrong
        # both names or both nouns, so the two slots hold the same number of words
        assert len(a.referent.split()) == len(a.distractor.split())
        # the male antecedent comes first in "mf"
        first_a = a.referent if a.referent_first else a.distractor
        assert (first_a == a.referent) == (a.referent_gender == "m")


def test_an_odd_number_of_sentences_is_refused():
    with pytest.raises(ValueError, match=r"must be even and >= 2 \(minimal pairs.*got n=7"):
        pronoun_sentences(7)
    with pytest.raises(ValueError, match="got n=0"):
        pronoun_sentences(0)


def test_unknown_family_is_refused_with_its_name():
    with pytest.raises(ValueError, match=r"unknown pronoun famil.*'nope'"):
        pronoun_sentences(4, families=["nope"])


def test_token_span_is_the_overlap_of_character_ranges():
    # "<s>The waitress": tokens <s> [0,3) special, "The" [3,6), " wait" [6,11), "ress" [11,15)
    offsets = [(0, 3), (3, 6), (6, 11), (11, 15)]
    assert token_span(offsets, (7, 15)) == [2, 3]  # "waitress" without its space: both pieces
    assert token_span(offsets, (3, 6)) == [1]
    assert token_span([(0, 0), (0, 4)], (0, 4)) == [1]  # an empty range (special token) never overlaps


# --- scoring: hand-derived ---------------------------------------------------------------------


def test_max_and_sum_disagree_on_a_two_token_antecedent():
    # referent tokens {1, 2} = 0.2 + 0.2 (sum 0.4, max 0.2); distractor {3} = 0.3
    s = np.array([0.3, 0.2, 0.2, 0.3])
    assert (
        antecedent_score(s, [1, 2], reduce="max") == 0.2 and antecedent_score(s, [1, 2], reduce="sum") == 0.4
    )
    assert outranks(s, [1, 2], [3], reduce="max") == 0.0  # 0.2 < 0.3
    assert outranks(s, [1, 2], [3], reduce="sum") == 1.0  # 0.4 > 0.3


def test_signed_scores_compare_signed_and_ties_give_one_half():
    s = np.array([5.0, -2.0, -1.0])  # relevance against the logit is evidence against: -1 beats -2
    assert outranks(s, [2], [1]) == 1.0 and outranks(s, [1], [2]) == 0.0
    assert outranks(np.array([0.0, 0.25, 0.25]), [1], [2]) == 0.5
    np.testing.assert_array_equal(
        outranks_by_layer(np.array([[0.5, 0.25], [0.25, 0.5]]), [0], [1]), [1.0, 0.0]
    )


def test_max_abs_compares_influence_either_way():
    # the referent pushes the logit down by 0.5, the distractor up by 0.3: signed, the distractor
    # supports it more (max: -0.5 < 0.3); by magnitude, the referent moves it more (0.5 > 0.3)
    s = np.array([0.0, -0.5, 0.3])
    assert outranks(s, [1], [2], reduce="max") == 0.0 and outranks(s, [1], [2], reduce="max_abs") == 1.0
    assert antecedent_score(s, [1, 2], reduce="max_abs") == 0.5
    attention = np.array([0.1, 0.6, 0.3])  # maps >= 0: max_abs is max
    assert (
        outranks(attention, [1], [2], reduce="max_abs") == outranks(attention, [1], [2], reduce="max") == 1.0
    )


def test_bad_spans_are_refused():
    with pytest.raises(ValueError, match="outside a map of 3 tokens"):
        outranks(np.zeros(3), [3], [0])
    with pytest.raises(ValueError, match="share tokens"):
        outranks(np.zeros(3), [0, 1], [1])
    with pytest.raises(ValueError, match="reduce must be one of max, sum, max_abs"):
        outranks(np.zeros(3), [0], [1], reduce="mean")


# --- the study on a tiny random Llama ----------------------------------------------------------

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")


def _word_tokenizer(items):
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = {w for it in items for w in re.findall(r"\w+|[^\w\s]+", it.text)}
    words |= {w.strip() for pair in PRONOUNS.values() for w in pair}
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "<s>", *sorted(words)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", bos_token="<s>"
    )


@pytest.fixture(scope="module")
def tiny_study():
    import torch

    from attnflow.pronouns import pronoun_study

    items = pronoun_sentences(6, seed=0)
    tok = _word_tokenizer(items)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(tok), hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=32, max_position_embeddings=64, bos_token_id=None, eos_token_id=None,
        pad_token_id=0, attn_implementation="eager",
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    return items, tok, model, pronoun_study(model, tok, items, prefix="<s>", ig_steps=8)


def test_study_scores_every_method_layer_and_reduction(tiny_study):
    items, _, _, study = tiny_study
    s = study.scores
    assert len(study.sentences) == len(items) == len(study.maps)
    per_sentence = s.groupby("sentence_id").size()
    # raw, rollout, flow: 2 layers each, plain and corrected; attnlrp and IG: one row; times 3 reductions
    assert (per_sentence == (3 * 2 * 2 + 2) * 3).all()
    for measure in ("referent", "model_choice", "causal", "first"):
        assert set(s[measure]) <= {0.0, 0.5, 1.0}
    model_level = s["method"].isin(["attnlrp", "integrated_gradients"])
    assert s.loc[model_level, "layer"].isna().all() and (s.loc[model_level, "variant"] == "plain").all()
    assert s.groupby("variant")["method"].unique().map(sorted).to_dict() == {
        "corrected": ["flow", "raw", "rollout"],
        "plain": ["attnlrp", "flow", "integrated_gradients", "raw", "rollout"],
    }


def test_study_spans_are_the_antecedents_tokens_and_skip_the_prefix(tiny_study):
    _, _, _, study = tiny_study
    for row in study.sentences.itertuples():
        assert row.tokens[0] == "<s>" and 0 not in row.referent_tokens
        assert [row.tokens[j] for j in row.referent_tokens] == [row.referent.split()[-1]]
        assert [row.tokens[j] for j in row.distractor_tokens] == [row.distractor.split()[-1]]


def test_study_logits_and_measures_agree_with_a_plain_forward(tiny_study):
    import torch

    items, tok, model, study = tiny_study
    for it, row in zip(items, study.sentences.itertuples(), strict=True):
        ids = tok("<s>" + it.text, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            z = model(ids).logits[0, -1]  # the next-token logits of the last position
        right, wrong = (
            tok.convert_tokens_to_ids(it.right.strip()),
            tok.convert_tokens_to_ids(it.wrong.strip()),
        )
        assert row.logit_right == pytest.approx(float(z[right]), abs=1e-5)
        assert row.correct == bool(z[right] > z[wrong])
    s = study.scores
    flipped = s.merge(study.sentences[["sentence_id", "correct", "referent_first"]], on="sentence_id")
    # model_choice = referent where the model is right, its complement where wrong; same for "first"
    np.testing.assert_array_equal(
        flipped["model_choice"], np.where(flipped["correct"], flipped["referent"], 1 - flipped["referent"])
    )
    np.testing.assert_array_equal(
        flipped["first"], np.where(flipped["referent_first"], flipped["referent"], 1 - flipped["referent"])
    )


def test_study_rows_are_the_rollout_of_the_last_position(tiny_study):
    from attnflow.explain import attention_rollout
    from attnflow.hf import forward_attentions

    items, tok, model, study = tiny_study
    enc = tok("<s>" + items[0].text, return_tensors="pt")
    attn = forward_attentions(model, dict(enc)).attentions[0].double().numpy()  # (L, H, T, T)
    expected = attention_rollout(attn, residual=0.5)[:, -1]  # (L, T): the row that predicts the pronoun
    np.testing.assert_allclose(study.maps[0]["rollout"], expected, atol=1e-6)


def test_summary_and_shares_carry_bootstrap_intervals(tiny_study):
    _, _, _, study = tiny_study
    summary = study.summary(n_boot=50)
    assert summary["n"] == 6 and 0.0 <= summary["accuracy"]["mean"] <= 1.0
    for method in ("raw", "rollout", "flow", "attnlrp", "integrated_gradients"):
        cell = summary["referent"][method]
        assert cell["ci_low"] <= cell["mean"] <= cell["ci_high"] and cell["n"] == 6
    for method in ("raw", "rollout", "flow"):  # the corrected variant: the attention maps only
        cell = summary["corrected"]["causal"][method]
        assert cell["ci_low"] <= cell["mean"] <= cell["ci_high"] and cell["n"] == 6
    assert set(summary["corrected"]["referent"]) == {"raw", "rollout", "flow"}
    assert summary["chance"] == 0.5 and summary["blank"] == "[PAD]" and summary["causal_referent"]["n"] == 6
    shares = study.shares(n_boot=20)
    assert set(shares["measure"]) == {"referent", "model_choice", "causal", "first"}
    assert (shares["chance"] == 0.5).all()
    # measures x (method, variant, layer) cells x reductions
    assert len(shares) == 4 * (3 * 2 * 2 + 2) * 3


def test_unknown_method_is_refused(tiny_study):
    from attnflow.pronouns import pronoun_study

    items, tok, model, _ = tiny_study
    with pytest.raises(ValueError, match="unknown pronoun-test method"):
        pronoun_study(model, tok, items, methods=["chefer"])


def test_each_sentence_is_explained_for_its_own_pronoun(tiny_study):
    # AttnLRP's input row for sentence k is the relevance of logit(right pronoun of k) at its last
    # position; sentences of different lengths and pronouns must not trade targets
    from attnflow.attnlrp import attnlrp

    items, tok, model, study = tiny_study
    assert len({len(t) for t in study.sentences["tokens"]}) > 1 and study.sentences["right"].nunique() > 1
    for it, maps in zip(items, study.maps, strict=True):
        ids = tok("<s>" + it.text, return_tensors="pt")["input_ids"]
        res = attnlrp(model, ids, target=tok.convert_tokens_to_ids(it.right.strip()))
        np.testing.assert_allclose(maps["attnlrp"][-1], res.input_relevance.double().numpy(), atol=1e-6)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("pronouns.reduce=mean", "pronouns.reduce='mean' is not one of max, sum"),
        ("pronouns.methods=[rollout,chefer]", "pronouns.methods='chefer' is not one of"),
        ("pronouns.n_sentences=0", "pronouns.n_sentences"),
    ],
)
def test_the_config_refuses_bad_pronoun_settings_at_start(override, message):
    from pipelines._config import ConfigError, compose

    with pytest.raises(ConfigError, match=re.escape(message)):
        compose([override])


def test_study_batches_give_each_sentence_its_own_maps(tiny_study):
    # the texts go through the model in length batches, each with its own target (the referent's
    # pronoun, for AttnLRP): one text per batch gives the same maps to float32 rounding
    from attnflow.pronouns import pronoun_study

    items, tok, model, study = tiny_study
    alone = pronoun_study(model, tok, items, prefix="<s>", ig_steps=8, batch_size=1, ig_batch_size=1)
    assert alone.sentences["tokens"].tolist() == study.sentences["tokens"].tolist()
    for a, b in zip(alone.maps, study.maps, strict=True):
        assert a.keys() == b.keys()
        for method in a:
            np.testing.assert_allclose(a[method], b[method], rtol=1e-4, atol=1e-6, err_msg=method)


def test_corrected_rows_are_the_sink_and_receptive_field_corrected_rollout(tiny_study):
    # the "corrected" variant: sinks handled ("auto") and receptive_field="uniform", as
    # attnflow.explain.causal_rollout computes them from the model's attentions
    from attnflow.explain import causal_rollout
    from attnflow.hf import forward_attentions

    items, tok, model, study = tiny_study
    for k in (0, 3):
        enc = tok("<s>" + items[k].text, return_tensors="pt")
        attn = forward_attentions(model, dict(enc)).attentions[0].double().numpy()  # (L, H, T, T)
        expected = causal_rollout(attn, residual=0.5, sinks="auto", receptive_field="uniform")[:, -1]
        np.testing.assert_allclose(study.maps[k]["rollout/corrected"], expected, atol=1e-6)
        assert not np.allclose(study.maps[k]["rollout/corrected"], study.maps[k]["rollout"])


def test_causal_measure_follows_the_causal_choice_and_the_margin_the_preferred_pronoun(tiny_study):
    _, _, _, study = tiny_study
    s = study.sentences
    assert {
        "pair",
        "order",
        "preferred",
        "margin",
        "effect_referent",
        "effect_distractor",
        "causal_choice",
    } <= set(s)
    np.testing.assert_array_equal(s["preferred"], np.where(s["correct"], s["right"], s["wrong"]))
    # the reference's own forward: margin = |logit right - logit wrong| of the explained forward
    np.testing.assert_allclose(s["margin"], (s["logit_right"] - s["logit_wrong"]).abs(), atol=1e-4)
    choice = np.where(s["effect_referent"] > s["effect_distractor"], "referent", "distractor")
    np.testing.assert_array_equal(s["causal_choice"], choice)
    t = study.scores.merge(s[["sentence_id", "causal_choice"]], on="sentence_id")
    expected = np.where(t["causal_choice"] == "referent", t["referent"], 1 - t["referent"])
    np.testing.assert_array_equal(t["causal"], expected)


def test_tables_score_each_variant_and_give_the_causal_measure_one_half_on_a_tie():
    from attnflow.pronouns import pronoun_tables

    sentences = pd.DataFrame([{"sentence_id": 0, "referent_tokens": [1], "distractor_tokens": [2], "correct": True,
                               "referent_first": False, "causal_choice": "tie"}])  # fmt: skip
    maps = [{"rollout": np.array([[0.2, 0.5, 0.3]]), "rollout/corrected": np.array([[0.2, 0.3, 0.5]])}]
    t = pronoun_tables(sentences, maps).query("reduce == 'max'").set_index("variant")
    measures = ["referent", "model_choice", "first", "causal"]
    # plain: the referent (0.5) beats the distractor (0.3): h = 1, the model agrees (correct), the
    # referent is second (first = 1 - h = 0), the causal reference has no side (1/2 either way)
    assert t.loc["plain", measures].tolist() == [1.0, 1.0, 0.0, 0.5]
    assert t.loc["corrected", measures].tolist() == [0.0, 0.0, 1.0, 0.5]  # h = 0: the other way round
