"""The report's pronoun section (Figure 4 on a causal LM) from hand-made stage outputs, no model.

Four sentences (two minimal pairs), two layers: plain rollout's last layer puts more on the referent
than on the distractor in every sentence (share 1.0), plain raw attention in none (0.0); the
corrected variant the other way round. The model is right in 3 of 4, and the causal reference
names the referent in the same 3.
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
            "sentence_id": k, "pair": k // 2, "order": "mf", "family": "reflexive_main" if first else "reflexive_local",
            "text": " ".join(TOKENS[1:]), "referent": "John" if first else "Mary",
            "distractor": "Mary" if first else "John", "referent_first": first, "referent_gender": "m" if first else "f",
            "right": " himself" if first else " herself", "wrong": " herself" if first else " himself",
            "referent_tokens": ref, "distractor_tokens": dis, "tokens": TOKENS,
            "logit_right": 2.0, "logit_wrong": 1.0 if k < 3 else 3.0, "p_right": 0.5, "correct": k < 3,
            "ig_delta": 1.0, "ig_difference": 2.0,
            # the causal reference: blanking the referent costs more in sentences 0-2, the distractor in 3
            "margin": 1.0, "effect_referent": 2.0 if k < 3 else 0.5, "effect_distractor": 1.0 if k < 3 else 1.5,
            "causal_choice": "referent" if k < 3 else "distractor",
        })  # fmt: skip
        good = np.full((2, 7), 0.1)  # (L, T)
        good[:, ref[0]], good[:, dis[0]] = 0.3, 0.0  # the referent above the distractor
        bad = np.full((2, 7), 0.1)
        bad[:, ref[0]], bad[:, dis[0]] = 0.0, 0.3  # the other way round
        maps.append({"raw": bad, "rollout": good, "attnlrp": good, "integrated_gradients": bad[-1:],
                     "raw/corrected": good, "rollout/corrected": bad})  # fmt: skip
    sentences = pd.DataFrame(rows)
    return PronounStudy(sentences, pronoun_tables(sentences, maps), maps, blank="<|im_end|>")


@pytest.fixture
def ctx(tmp_path):
    paths = StudyPaths.from_config({k: str(tmp_path / k) for k in
                                    ("raw", "prepared", "models", "capture", "explain", "attribute", "reports")})  # fmt: skip
    save_pronoun_study(_study(), paths.pronouns, paths.pronoun_maps, reduce="max", n_boot=50, seed=0)
    config = {"pronouns": {"figure": ["reflexive_local", "reflexive_main", "nope"], "ig_steps": 8}}
    return Context(paths=paths, inputs={}, config=config, comparison=pd.DataFrame())


def _line(md: str, start: str) -> str:
    return next(line for line in md.splitlines() if line.startswith(start))


def test_the_section_is_registered_after_generation():
    names = [f.__module__.rsplit(".", 1)[-1] for f in SECTIONS]
    assert names.index("pronouns") == names.index("generation") + 1


def test_the_section_says_it_is_an_analogue_and_reports_the_shares(ctx):
    section.section(ctx)
    md = render_markdown(ctx.blocks)
    assert "analogue on a causal LM, not the paper's experiment" in md
    assert "(a masked LM on the masked pronoun) was not run: no masked LM is available offline" in md
    assert "prefers the right pronoun in 75.0% of the sentences" in md and "n = 4" in md
    # per (method, variant): referent, model's choice, causal reference, first-mentioned, chance.
    # plain rollout: the referent in all 4; the model is right in 0-2 (0.75), the causal reference
    # names the referent in 0-2 (0.75); the referent is first in sentences 0 and 2 (0.50)
    rollout = _line(md, "| Rollout | plain | L2 |")
    assert "| 1.00 [1.00, 1.00] | 0.75 [" in rollout and "| 0.50 [" in rollout and "| 0.50 |" in rollout
    raw = _line(md, "| Raw attention | plain | L2 |")
    assert "| 0.00 [0.00, 0.00] | 0.25 [" in raw
    assert "| 1.00 [1.00, 1.00] | 0.75 [" in _line(md, "| Raw attention | corrected | L2 |")
    assert _line(md, "| AttnLRP | plain | input |")
    assert not any(line.startswith("| AttnLRP | corrected") for line in md.splitlines())  # no correction
    assert "chance = 0.50 for every measure" in md
    assert "Above chance (interval above 0.5) in pointing to the referent: Rollout, AttnLRP." in md
    assert "Below chance: Raw attention, Integrated gradients." in md
    # what the corrections change, from the shares: raw 0 -> 1, rollout 1 -> 0 on the referent
    assert (
        "Raw attention: referent outranks distractor 0.00 → 1.00, consistent with the model's choice 0.25 → 0.75"
        in md
    )
    assert "Rollout: referent outranks distractor 1.00 → 0.00" in md
    assert "Raw attention above on 'referent outranks distractor' (1.00 [1.00, 1.00])" in md
    assert "Rollout below on 'referent outranks distractor' (0.00 [0.00, 0.00])" in md
    # the causal reference: the referent in 3 of 4, median effects 2.0 and 1.0, the blank named
    assert "`<|im_end|>`" in md and "It is the referent in 75.0% of the sentences" in md
    assert "median effect of blanking the referent 2.00, the distractor 1.00" in md
    # per family: accuracy, causal = referent, then raw, rollout, AttnLRP, IG (plain), raw, rollout (corrected)
    assert _line(md, "| reflexive_main | first |").endswith(
        "| 2 | 1.00 | 1.00 | 0.00 | 1.00 | 1.00 | 0.00 | 1.00 | 0.00 |"
    )
    assert _line(md, "| reflexive_local | second |").endswith(
        "| 0.50 | 0.50 | 0.00 | 1.00 | 1.00 | 0.00 | 1.00 | 0.00 |"
    )
    # sentence 3 is the one the model gets wrong: AttnLRP still points to the referent there, IG does not
    assert (
        "On the 1 sentences where the model prefers the wrong pronoun, the referent share is AttnLRP 1.00, "
        in md
    )
    assert "Integrated gradients 0.00." in md
    names = sorted(p.name for p in ctx.figures)
    assert names == ["pronouns_layers.png", "pronouns_maps.png"] and all(p.is_file() for p in ctx.figures)


def test_the_shares_table_states_the_chance_level(ctx):
    from attnflow.io import read_parquet

    shares = read_parquet(ctx.paths.pronouns / "shares.parquet")
    assert set(shares["measure"]) == {"referent", "model_choice", "causal", "first"}
    assert (shares["chance"] == 0.5).all() and set(shares["variant"]) == {"plain", "corrected"}


def test_the_layer_figure_draws_a_chance_line_in_every_measure_panel():
    shares = _study().shares(n_boot=0)
    fig = section.plot_share_by_layer(shares, "max", accuracy=0.75, chance=0.5)
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == list(section.MEASURES.values())
    for ax in panels:
        chance = [ln for ln in ax.get_lines() if ln.get_label() == "chance (0.5)"]
        assert len(chance) == 1 and list(chance[0].get_ydata()) == [0.5, 0.5]
        # plain and corrected raw / rollout: a line each
        assert {ln.get_label() for ln in ax.get_lines()} >= {"Rollout", "Rollout (corrected)"}


def test_the_section_reads_a_table_from_before_the_corrections(ctx):
    # the old layout: no variant column, no causal measure; the section still draws and says so
    folder = ctx.paths.pronouns
    for name in ("scores", "shares"):
        table = pd.read_parquet(folder / f"{name}.parquet")
        table = table[table["variant"] == "plain"].drop(columns="variant")
        if name == "shares":
            table = table[table["measure"] != "causal"]
        table.to_parquet(folder / f"{name}.parquet")
    section.section(ctx)
    md = render_markdown(ctx.blocks)
    assert "The corrected variant was not computed" in md and _line(md, "| Rollout | plain | L2 |")


def test_the_section_is_absent_without_the_stage_outputs(tmp_path):
    paths = StudyPaths.from_config({k: str(tmp_path / k) for k in
                                    ("raw", "prepared", "models", "capture", "explain", "attribute", "reports")})  # fmt: skip
    ctx = Context(paths=paths, inputs={}, config={}, comparison=pd.DataFrame())
    section.section(ctx)
    assert ctx.blocks == [] and ctx.figures == []
