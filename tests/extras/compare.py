"""[compare]: captum's Integrated Gradients and ferret's Benchmark next to attnflow's explainers, with
ferret's explanation and evaluation tables (built by attnflow: ferret's show_table needs pandas < 3)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from _tiny import TEXT, tiny_bert
    from ferret import Benchmark, GradientExplainer

    from attnflow import load_model
    from attnflow.compare.captum import integrated_gradients
    from attnflow.compare.ferret import AttnflowExplainer, evaluation_table, explanation_table

    with tempfile.TemporaryDirectory() as tmp:
        model, tokenizer = load_model(str(tiny_bert(Path(tmp) / "bert")))
    (ig,) = integrated_gradients(model, tokenizer, [TEXT], n_steps=8)
    explainers = [AttnflowExplainer(model, tokenizer, m) for m in ("rollout", "flow")]
    bench = Benchmark(model, tokenizer, explainers=[*explainers, GradientExplainer(model, tokenizer)])
    explanations = bench.explain(TEXT, target=1, show_progress=False)
    evaluations = bench.evaluate_explanations(explanations, target=1, show_progress=False)
    table, scores = explanation_table(explanations), evaluation_table(evaluations)
    assert table.shape == (3, len(ig.tokens) - 2), table
    assert {"aopc_compr", "aopc_suff"} <= set(scores.columns), scores
    print(table.round(3).to_string(), scores.round(3).to_string(), sep="\n\n")
    print("[compare] ok")


if __name__ == "__main__":
    main()
