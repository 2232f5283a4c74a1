"""ferret's result tables built by attnflow (ferret's own show_table needs a pandas internal that pandas 3
removed): the tables need pandas and ferret's result objects, not ferret itself."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from attnflow.compare.ferret import evaluation_table, explanation_table

pytest.importorskip("pandas")

TOKENS = ["[CLS]", "the", "film", "the", "end", "[SEP]"]


def _explanation(name: str, scores: list[float], tokens: list[str] = TOKENS) -> SimpleNamespace:
    # ferret.explainers.explanation.Explanation's fields that the table reads
    return SimpleNamespace(explainer=name, tokens=tokens, scores=np.array(scores))


def test_explanation_table_is_one_row_per_explainer_with_repeated_tokens_made_unique():
    # a repeated token ("the" twice) is what made ferret's show_table reach for the pandas internal
    a = _explanation("attnflow rollout", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    b = _explanation("Partition SHAP", [-0.1, -0.2, -0.3, -0.4, -0.5, -0.6])
    table = explanation_table([a, b])
    assert list(table.index) == ["attnflow rollout", "Partition SHAP"]
    assert list(table.columns) == ["the", "film", "the.1", "end"]  # [CLS] and [SEP] left out, as ferret does
    assert table.loc["attnflow rollout", "the.1"] == pytest.approx(0.4)
    full = explanation_table([a], drop_special=False)
    assert list(full.columns) == ["[CLS]", "the", "film", "the.1", "end", "[SEP]"]
    assert full.to_numpy().tolist() == [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6]]


def test_explanation_table_refuses_explanations_on_different_tokens():
    a = _explanation("a", [0.0] * 6)
    b = _explanation("b", [0.0] * 3, tokens=["[CLS]", "film", "[SEP]"])
    with pytest.raises(ValueError, match="explainer 'b' has 3 scores"):
        explanation_table([a, b])
    with pytest.raises(ValueError, match="no explanations"):
        explanation_table([])


def test_evaluation_table_is_one_row_per_explainer_one_column_per_measure():
    def evaluation(name: str, compr: float, suff: float) -> SimpleNamespace:
        scores = [
            SimpleNamespace(name="aopc_compr", score=compr),
            SimpleNamespace(name="aopc_suff", score=suff),
        ]
        return SimpleNamespace(explanation=SimpleNamespace(explainer=name), evaluation_scores=scores)

    table = evaluation_table([evaluation("attnflow flow", 0.25, 0.5), evaluation("Gradient", 0.125, 0.75)])
    assert table.to_dict("index") == {
        "attnflow flow": {"aopc_compr": 0.25, "aopc_suff": 0.5},
        "Gradient": {"aopc_compr": 0.125, "aopc_suff": 0.75},
    }
    with pytest.raises(ValueError, match="no evaluations"):
        evaluation_table([])
