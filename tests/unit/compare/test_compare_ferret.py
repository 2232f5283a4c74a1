"""attnflow.compare.ferret judged by ferret itself: its Benchmark explains with our explainer and
its evaluators score comprehensiveness and sufficiency of the result."""

from __future__ import annotations

import math

import numpy as np
import pytest

import attnflow.compare.ferret as compare_ferret
from attnflow.compare.ferret import AttnflowExplainer
from attnflow.hf import explain_text

ferret = pytest.importorskip("ferret", reason='ferret-xai is not installed: pip install "attnflow[compare]"')

# float64 maps of float32 attentions, computed on the same tokens.
ATOL = 1e-6
TEXT = "the movie is not very good"


def test_explanation_is_attnflow_rollout_row_on_ferret_tokens(bert):
    model, tokenizer = bert
    explainer = AttnflowExplainer(model, tokenizer, "rollout", layer=0)
    e = explainer(TEXT, target=1)
    from ferret.explainers.explanation import Explanation

    assert isinstance(e, Explanation) and e.explainer == "attnflow rollout (layer 0)" and e.target == 1
    assert e.tokens == explainer.get_tokens(TEXT)  # ferret's own tokens, [CLS] ... [SEP]
    expected = explain_text(model, tokenizer, TEXT, methods=["rollout"]).maps["rollout"][0]
    np.testing.assert_allclose(e.scores, expected, atol=ATOL)


def test_call_arguments_override_the_layer_and_unknown_ones_are_refused(bert):
    model, tokenizer = bert
    explainer = AttnflowExplainer(model, tokenizer, "raw")
    last, first = explainer(TEXT, 1), explainer(TEXT, 1, layer=0)
    assert (last.explainer, first.explainer) == ("attnflow raw", "attnflow raw (layer 0)")
    last, first = last.scores, first.scores
    expected = explain_text(model, tokenizer, TEXT, methods=["raw"]).maps["raw"]
    np.testing.assert_allclose(np.stack([first, last]), expected, atol=ATOL)
    with pytest.raises(TypeError, match="unknown explainer arguments"):
        explainer(TEXT, 1, n_steps=10)


def test_ferret_benchmark_scores_comprehensiveness_and_sufficiency(bert):
    # ferret's AOPC comprehensiveness / sufficiency (DeYoung et al. 2020): the mean drop of p(target)
    # when the top 10%, 20%, ... of the tokens are removed / kept; next to ferret's own explainer
    model, tokenizer = bert
    explainers = [AttnflowExplainer(model, tokenizer, m) for m in ("rollout", "flow", "chefer", "attnlrp")]
    bench = ferret.Benchmark(
        model, tokenizer, explainers=[*explainers, ferret.GradientExplainer(model, tokenizer)]
    )
    explanations = bench.explain(TEXT, target=1, show_progress=False)
    assert [e.explainer for e in explanations][:4] == [e.NAME for e in explainers]
    evaluations = bench.evaluate_explanations(explanations, target=1, show_progress=False)
    assert len(evaluations) == len(explanations)
    for evaluation in evaluations:
        scores = {s.name: float(s.score) for s in evaluation.evaluation_scores}
        assert {"aopc_compr", "aopc_suff"} <= set(scores), evaluation.explanation.explainer
        # a probability drop: within [-1, 1]
        assert all(math.isfinite(scores[k]) and abs(scores[k]) <= 1 for k in ("aopc_compr", "aopc_suff"))
    # the tables of ferret's show_table / show_evaluation_table, built without ferret's styling helpers
    table = compare_ferret.explanation_table(explanations)
    assert list(table.index) == [e.explainer for e in explanations]
    assert table.shape[1] == len(explanations[0].tokens) - 2  # [CLS] and [SEP] left out
    scores = compare_ferret.evaluation_table(evaluations)
    assert list(scores.index) == [e.explainer for e in explanations]
    assert {"aopc_compr", "aopc_suff"} <= set(scores.columns)


def test_missing_ferret_names_the_extra_not_a_file_outside_the_wheel(monkeypatch):
    monkeypatch.setattr(compare_ferret, "_BaseExplainer", object)
    monkeypatch.setattr(
        compare_ferret, "_IMPORT_ERROR", ModuleNotFoundError("No module named 'ferret'", name="ferret")
    )
    monkeypatch.setattr(compare_ferret, "_installed_version", lambda: None)
    with pytest.raises(ImportError, match=r"not installed: pip install \"attnflow\[compare\]\"") as info:
        compare_ferret.require_ferret()
    assert "requirements" not in str(info.value)


def test_a_ferret_without_base_explainer_is_named_with_its_version(monkeypatch):
    # ferret-xai 0.4.1 has no top-level BaseExplainer: the adapter imports ferret.explainers'; a
    # version without even that is named, not reported as missing
    monkeypatch.setattr(compare_ferret, "_BaseExplainer", object)
    monkeypatch.setattr(
        compare_ferret,
        "_IMPORT_ERROR",
        ImportError("cannot import name 'BaseExplainer' from 'ferret.explainers'"),
    )
    monkeypatch.setattr(compare_ferret, "_installed_version", lambda: "0.3.0")
    with pytest.raises(
        ImportError, match=r"ferret-xai 0\.3\.0 has no ferret\.explainers\.BaseExplainer.*>=0\.4\.1,<0\.5"
    ):
        compare_ferret.require_ferret()


def test_a_ferret_that_fails_to_import_says_why(monkeypatch):
    monkeypatch.setattr(compare_ferret, "_BaseExplainer", object)
    monkeypatch.setattr(
        compare_ferret, "_IMPORT_ERROR", ModuleNotFoundError("No module named 'spacy'", name="spacy")
    )
    monkeypatch.setattr(compare_ferret, "_installed_version", lambda: "0.4.1")
    with pytest.raises(
        ImportError,
        match=r"ferret-xai 0\.4\.1 is installed but importing it failed: ModuleNotFoundError: No module named 'spacy'",
    ):
        compare_ferret.require_ferret()


def test_the_adapter_extends_the_base_class_that_ferret_0_4_1_has():
    from ferret.explainers import BaseExplainer  # 0.4.1 defines it here (and not at the top level)

    assert issubclass(AttnflowExplainer, BaseExplainer)
