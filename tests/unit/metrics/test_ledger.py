"""The claims ledger (attnflow.metrics.ledger): the rule, the two-level bootstrap, pairing, and the
paper's claims read from per-sentence tables built by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnflow.metrics.ledger import (
    LEDGER_COLUMNS,
    PAPER_CLAIMS,
    entropy_values,
    ledger,
    two_level_bootstrap,
    verdict,
)


def _values(per_seed: dict[int, list[float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [{"seed": s, "sentence": i, "value": v} for s, vs in per_seed.items() for i, v in enumerate(vs)]
    )


def test_the_rule_reads_the_interval_against_the_null():
    assert verdict(0.001, 0.3) == "holds"
    assert verdict(-0.3, 0.0) == "fails"  # at the null: no support
    assert verdict(-0.01, 0.01) == "inconclusive"
    assert verdict(0.55, 0.7, null=0.5) == "holds" and verdict(0.2, 0.3, null=0.5) == "fails"
    assert verdict(float("nan"), 0.3) == "inconclusive"


def test_one_constant_seed_gives_a_point_interval():
    est, lo, hi = two_level_bootstrap(_values({0: [0.25] * 7}), n_boot=200)
    assert est == lo == hi == 0.25


def test_seeds_that_disagree_widen_the_interval_beyond_the_sentence_spread():
    """Each seed constant (no sentence spread): every replicate is a mean of drawn seed values, so the
    interval lies within [min, max] of the seed values and is not a point."""
    est, lo, hi = two_level_bootstrap(_values({0: [0.0] * 20, 1: [1.0] * 20, 2: [0.5] * 20}), n_boot=400)
    assert est == pytest.approx(0.5)
    assert 0.0 <= lo < 0.5 < hi <= 1.0
    # the same 60 values as one seed: only the (zero-free) sentence spread, a narrower interval
    _, lo1, hi1 = two_level_bootstrap(_values({0: [0.0] * 20 + [1.0] * 20 + [0.5] * 20}), n_boot=400)
    assert hi1 - lo1 < hi - lo


def test_the_bootstrap_matches_an_independent_replicate_count():
    """Oracle: with two seeds of one sentence each, a replicate's mean is one of 0, 0.5, 1 with
    probabilities 1/4, 1/2, 1/4: the 95% interval is [0, 1] and about half the draws are 0.5."""
    est, lo, hi = two_level_bootstrap(_values({0: [0.0], 1: [1.0]}), n_boot=4000, ci=0.95)
    assert (est, lo, hi) == (0.5, 0.0, 1.0)
    _, lo50, hi50 = two_level_bootstrap(_values({0: [0.0], 1: [1.0]}), n_boot=4000, ci=0.4)
    assert lo50 == hi50 == 0.5  # the middle 40% of the replicates are all 0.5


def test_entropy_of_hand_rows():
    out = entropy_values([np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])])
    assert out[0, 0] == pytest.approx(1.0) and out[0, 1] == 0.0 and np.isnan(out[0, 2])


def _correlations(rng, n=60, seeds=(0, 1, 2)) -> pd.DataFrame:
    """rho per (seed, sentence, importance, method, layer): a sentence effect shared by every method
    (large), flow = rollout + 0.05 exactly, raw high at L1 and 0 above, SST-2 flat at 0.1."""
    rows = []
    for s in seeds:
        for i in range(n):
            base = rng.normal(0, 0.3)  # the sentence's own level, shared by all methods
            for imp in ("blank_out", "input_gradients"):
                for layer in range(1, 7):
                    rollout = 0.3 + 0.05 * layer + base
                    cells = {
                        "raw": (0.7 if layer == 1 else 0.0) + base,
                        "rollout": rollout,
                        "flow": rollout + 0.05,
                    }
                    for method, rho in cells.items():
                        rows.append(("agreement", s, i, imp, method, layer, rho))
                    rows.append(("sst2", s, i, imp, "raw", layer, 0.1 + base))
                    rows.append(("sst2", s, i, imp, "rollout", layer, 0.1 + base))  # equal to raw
                    rows.append(("sst2", s, i, imp, "flow", layer, 0.1 + base + 0.02))
    return pd.DataFrame(rows, columns=["task", "seed", "sentence", "importance", "method", "layer", "rho"])


def test_the_papers_claims_on_hand_built_tables():
    table = ledger({"correlations": _correlations(np.random.default_rng(0))}, n_boot=300)
    assert list(table.columns) == list(LEDGER_COLUMNS)
    got = dict(
        zip(
            table["claim"],
            zip(table["estimate"], table["ci_low"], table["ci_high"], table["verdict"], strict=True),
            strict=True,
        )
    )
    est, lo, hi, v = got["flow_above_rollout/blank_out"]
    # paired: the difference is exactly 0.05 on every sentence, so the interval is a point although
    # the sentences' own levels spread by 0.3 (an unpaired interval would straddle 0)
    assert (round(est, 12), round(lo, 12), round(hi, 12), v) == (0.05, 0.05, 0.05, "holds")
    assert got["table3_rollout_above_raw"][3] == "fails"  # exactly equal: a point at the null, no support
    assert got["table3_rollout_above_raw"][0] == 0.0
    assert got["table3_flow_above_raw"][3] == "holds"
    assert got["raw_focus_L1/input_gradients"][0] == pytest.approx(0.7)
    assert got["rollout_above_raw/blank_out"][3] == "holds"
    # no frame for entropy or pronouns: those claims are left out, not guessed
    assert not table["claim"].str.startswith(("raw_uniform", "figure4")).any()
    assert set(table["n_seeds"]) == {3}


def test_figure4_reads_the_last_layer_against_chance():
    rows = []
    for i in range(40):
        for layer in (1, 2):
            # flow agrees with the model at the last layer in 30 of 40 sentences; at layer 1 never
            rows.append((0, i, "flow", layer, "corrected", float(layer == 2 and i < 30), 1.0))
            rows.append((0, i, "rollout", layer, "corrected", float(layer == 2 and i < 12), 1.0))
    frame = pd.DataFrame(
        rows, columns=["seed", "sentence", "method", "layer", "variant", "model_choice", "referent"]
    )
    table = ledger({"pronouns": frame}, n_boot=500).set_index("claim")
    assert table.loc["figure4_flow_consistent/corrected", "estimate"] == 0.75
    assert table.loc["figure4_flow_consistent/corrected", "verdict"] == "holds"
    assert table.loc["figure4_rollout_consistent/corrected", "verdict"] == "fails"  # 0.30, below chance
    assert "figure4_flow_consistent/plain" not in table.index  # not computed: not a verdict


def test_every_claim_names_its_source_and_quote_once():
    keys = [c.key for c in PAPER_CLAIMS]
    assert len(keys) == len(set(keys))
    assert all(
        c.quote and c.source and c.reads in ("correlations", "entropy", "pronouns") for c in PAPER_CLAIMS
    )


def test_figure4_causal_reference_and_rollout_flow_agreement():
    rows = []
    for i in range(40):
        # last layer: flow picks the referent in every sentence, rollout in the first 20 only; the causal
        # reference agrees with flow's choice in 10 of 40 sentences (flow: 0.25, below chance)
        rows.append((0, i, "flow", 2, "plain", 1.0, float(i < 10)))
        rows.append((0, i, "rollout", 2, "plain", float(i < 20), float(i < 5)))
        rows.append((0, i, "flow", 1, "plain", 0.0, 1.0))  # a lower layer: never read
        rows.append((0, i, "rollout", 1, "plain", 1.0, 1.0))
    frame = pd.DataFrame(
        rows, columns=["seed", "sentence", "method", "layer", "variant", "referent", "causal"]
    )
    table = ledger({"pronouns": frame}, n_boot=500).set_index("claim")
    assert table.loc["figure4_flow_causal/plain", "estimate"] == 0.25
    assert table.loc["figure4_flow_causal/plain", "verdict"] == "fails"
    assert table.loc["figure4_rollout_flow_agree/plain", "estimate"] == 0.5  # same choice in 20 of 40
    assert "figure4_flow_consistent/plain" not in table.index  # no model_choice column: not measured
    assert "figure4_rollout_flow_agree/corrected" not in table.index
