"""The report's pronoun section (Figure 4 on a causal LM) from hand-made stage outputs, no model.

Four sentences, two layers: rollout's last layer puts more on the referent than on the distractor
in every sentence (share 1.0), raw attention in none (0.0); the model is right in 3 of 4.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnflow.paths import StudyPaths
from attnflow.pronouns import PronounStudy, pronoun_tables, save_pronoun_study
from attnflow.report.context import Context
from attnflow.report.document import render_markdown
from attnflow.report.sections import SECTIONS
from attnflow.report.sections import pronouns as section

TOKENS = ["<s>", "John", "said", "that", "Mary", "had", "hurt"]


def _study() -> PronounStudy:
    rows, maps = [], []
    for k in range(4):
        first = k % 2 == 0  # referent John (1) first, or Mary (4) second
        ref, dis = ([1], [4]) if first else ([4], [1])
        rows.append({
            "sentence_id": k, "family": "reflexive_main" if first else "reflexive_local",
            "text": " ".join(TOKENS[1:]), "referent": "John" if first else "Mary",
            "distractor": "Mary" if first else "John", "referent_first": first, "referent_gender": "m" if first else "f",
            "right": " himself" if first else " herself", "wrong": " herself" if first else " himself",
            "referent_tokens": ref, "distractor_tokens": dis, "tokens": TOKENS,
            "logit_right": 2.0, "logit_wrong": 1.0 if k < 3 else 3.0, "p_right": 0.5, "correct": k < 3,
            "ig_delta": 1.0, "ig_difference": 2.0,
        })  # fmt: skip
        good = np.full((2, 7), 0.1)  # (L, T)
        good[:, ref[0]], good[:, dis[0]] = 0.3, 0.0  # rollout: referent above distractor
        bad = np.full((2, 7), 0.1)
        bad[:, ref[0]], bad[:, dis[0]] = 0.0, 0.3  # raw: the other way round
        maps.append({"raw": bad, "rollout": good, "attnlrp": good, "integrated_gradients": bad[-1:]})
    sentences = pd.DataFrame(rows)
    return PronounStudy(sentences, pronoun_tables(sentences, maps), maps)


@pytest.fixture
def ctx(tmp_path):
    paths = StudyPaths.from_config({k: str(tmp_path / k) for k in
                                    ("raw", "prepared", "models", "capture", "explain", "attribute", "reports")})  # fmt: skip
    save_pronoun_study(_study(), paths.pronouns, paths.pronoun_maps, reduce="max", n_boot=50, seed=0)
    config = {"pronouns": {"figure": ["reflexive_local", "reflexive_main", "nope"], "ig_steps": 8}}
    return Context(paths=paths, inputs={}, config=config, comparison=pd.DataFrame())


def test_the_section_is_registered_after_generation():
    names = [f.__module__.rsplit(".", 1)[-1] for f in SECTIONS]
    assert names.index("pronouns") == names.index("generation") + 1


def test_the_section_says_it_is_an_analogue_and_reports_the_shares(ctx):
    section.section(ctx)
    md = render_markdown(ctx.blocks)
    assert "analogue on a causal LM, not the paper's experiment" in md
    assert "prefers the right pronoun in 75.0% of the sentences" in md and "n = 4" in md
    table = next(line for line in md.splitlines() if line.startswith("| Rollout |"))
    assert "| 1.00 [1.00, 1.00] |" in table  # the referent outranks the distractor in all 4
    raw = next(line for line in md.splitlines() if line.startswith("| Raw attention |"))
    assert "| 0.00 [0.00, 0.00] |" in raw
    # first-mentioned: the referent is first in sentences 0 and 2, so rollout points first in half
    assert "| 0.50 [" in table
    assert "Above chance (interval above 0.5) in pointing to the referent: Rollout, AttnLRP." in md
    assert "Below chance: Raw attention, Integrated gradients." in md
    # per family: accuracy (sentences 0, 2 right; 1 right, 3 wrong), then raw, rollout, AttnLRP, IG
    assert any(line.startswith("| reflexive_main | first |") and line.endswith("| 2 | 1.00 | 0.00 | 1.00 | 1.00 | 0.00 |")
               for line in md.splitlines())  # fmt: skip
    assert any(line.startswith("| reflexive_local | second |") and line.endswith("| 0.50 | 0.00 | 1.00 | 1.00 | 0.00 |")
               for line in md.splitlines())  # fmt: skip
    # sentence 3 is the one the model gets wrong: AttnLRP still points to the referent there, IG does not
    assert (
        "On the 1 sentences where the model prefers the wrong pronoun, the referent share is AttnLRP 1.00, "
        in md
    )
    assert "Integrated gradients 0.00." in md
    names = sorted(p.name for p in ctx.figures)
    assert names == ["pronouns_layers.png", "pronouns_maps.png"] and all(p.is_file() for p in ctx.figures)


def test_the_section_is_absent_without_the_stage_outputs(tmp_path):
    paths = StudyPaths.from_config({k: str(tmp_path / k) for k in
                                    ("raw", "prepared", "models", "capture", "explain", "attribute", "reports")})  # fmt: skip
    ctx = Context(paths=paths, inputs={}, config={}, comparison=pd.DataFrame())
    section.section(ctx)
    assert ctx.blocks == [] and ctx.figures == []
