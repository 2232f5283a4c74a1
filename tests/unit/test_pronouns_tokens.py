"""The pronoun test's minimal pairs under SmolLM2's own tokenizer: every name and noun is one token
(the rule of attnflow.pronouns.sentences), so a twin's tokens sit at its partner's positions with
the two antecedents swapped. Reads the tokenizer of the converted model in the cache (skipped when
it is not there); the last test runs the study on the real model (marked lm)."""

from __future__ import annotations

import numpy as np
import pytest

from attnflow.models.smollm2 import SMOLLM2_FOLDER, cache_dir
from attnflow.pronouns import FAMILIES, pronoun_sentences, token_span
from attnflow.pronouns.sentences import FEMALE_NAMES, GENDERED_NOUNS, MALE_NAMES

FOLDER = cache_dir() / SMOLLM2_FOLDER
BOS = "<|im_start|>"  # conf/pronouns: the prefix
needs_tokenizer = pytest.mark.skipif(
    not (FOLDER / "tokenizer.json").is_file(),
    reason=f"needs the converted SmolLM2-135M's tokenizer at {FOLDER} (made by load_model('smollm2') "
    "or `dvc repro convert_lm`); absent here",
)


@pytest.fixture(scope="module")
def tokenizer():
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(FOLDER))


def _n(tok, text):
    return len(tok(text, add_special_tokens=False)["input_ids"])


@needs_tokenizer
def test_every_name_and_noun_is_one_token_where_the_templates_put_it(tokenizer):
    # names open a sentence (right after BOS) or follow a space; nouns always follow "the "
    for name in (*MALE_NAMES, *FEMALE_NAMES):
        assert _n(tokenizer, BOS + name) == 2, name  # BOS + the name
        assert _n(tokenizer, " " + name) == 1, name
    for noun in (w for pair in GENDERED_NOUNS for w in pair):
        assert _n(tokenizer, " " + noun) == 1, noun


def _span(enc, item, which):
    """Token positions of the referent's / distractor's head word in `enc` (text = BOS + item.text)."""
    start, end = getattr(item, f"{which}_span")
    return token_span([tuple(o) for o in enc["offset_mapping"]], (start + len(BOS), end + len(BOS)))


@needs_tokenizer
def test_twins_have_the_same_tokens_with_the_antecedents_positions_swapped(tokenizer):
    items = pronoun_sentences(120, seed=0)
    for a, b in zip(items[0::2], items[1::2], strict=True):
        assert (a.pair, a.order, b.pair, b.order) == (b.pair, "mf", a.pair, "fm")
        enc_a, enc_b = (tokenizer(BOS + it.text, return_offsets_mapping=True) for it in (a, b))
        ids_a, ids_b = np.array(enc_a["input_ids"]), np.array(enc_b["input_ids"])
        assert len(ids_a) == len(ids_b), (a.text, b.text)
        ref, dis = _span(enc_a, a, "referent"), _span(enc_a, a, "distractor")
        # the referent keeps its slot, so its positions do; each antecedent is one token
        assert (ref, dis) == (_span(enc_b, b, "referent"), _span(enc_b, b, "distractor"))
        assert len(ref) == len(dis) == 1
        # the token ids differ exactly at the two antecedents, whose words trade places (a name at
        # the start of the text is another token than the same name after a space: compare words)
        assert np.flatnonzero(ids_a != ids_b).tolist() == sorted(ref + dis)
        words_a = [tokenizer.decode(ids_a[p].tolist()).strip() for p in (ref, dis)]
        words_b = [tokenizer.decode(ids_b[p].tolist()).strip() for p in (dis, ref)]
        assert words_a == words_b


@pytest.mark.lm
@needs_tokenizer
def test_the_study_on_smollm2_scores_both_variants_and_the_causal_reference():
    from attnflow.hf import load_model
    from attnflow.pronouns import pronoun_study

    model, tok = load_model(str(FOLDER))
    items = pronoun_sentences(2 * len(FAMILIES), seed=0)  # one pair per family
    study = pronoun_study(model, tok, items, methods=["raw", "rollout", "flow"], prefix=BOS)
    s = study.sentences
    assert study.blank == "<|im_end|>"  # SmolLM2's pad token (= its eos)
    twins = s.groupby("pair")
    for _, pair in twins:  # same positions in both sentences of a pair
        assert pair["referent_tokens"].iloc[0] == pair["referent_tokens"].iloc[1]
        assert len(pair["tokens"].iloc[0]) == len(pair["tokens"].iloc[1])
    assert np.isfinite(s[["margin", "effect_referent", "effect_distractor"]].to_numpy()).all()
    assert (s["margin"] >= -1e-3).all()  # the preferred pronoun's margin, up to the forwards' rounding
    assert set(study.scores["variant"]) == {"plain", "corrected"}
    # corrected rollout at the top layer: no token holds the whole row (plain puts >= 99 % on BOS)
    top = np.abs(study.maps[0]["rollout/corrected"][-1])
    assert top.max() / top.sum() < 0.9
