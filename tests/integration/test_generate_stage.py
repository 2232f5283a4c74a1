"""The generate stage and its report section on a tiny random GPT-2 in place of the converted LM."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from attnflow.paths import StudyPaths
from pipelines import _config
from pipelines import generate as generate_stage
from tests.integration.test_generate_cli import _tiny_gpt2

pytest.importorskip("transformers")


def test_generate_stage_writes_tidy_tables_metrics_and_a_report_section(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = _config.compose([
        "generate.max_new_tokens=3", "generate.methods=[rollout,chefer]", "generate.sinks=[none,diagonal]",
        "generate.receptive_fields=[none]", "generate.ks=[1]", "generate.n_random=2",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
    ])  # fmt: skip
    cfg.generate.prompts = {"long": "the tower is in the city of", "paris": "the old river"}
    paths = StudyPaths.from_config(cfg.paths, root=tmp_path)
    _tiny_gpt2(paths.language_model)
    generate_stage.run(cfg)

    shares = pd.read_parquet(paths.generation / "shares.parquet")
    assert set(shares["prompt_name"]) == {"long", "paris"} and set(shares["method"]) == {"rollout", "chefer"}
    assert len(shares) == 2 * 2 * 2 * 3  # prompts x methods x sink options x generated tokens
    assert shares["first_token_share"].between(0, 1).all()
    drops = pd.read_parquet(paths.generation / "faithfulness.parquet")
    assert {"random", "rollout", "chefer"} == set(drops["method"]) and set(drops["k"]) == {1}
    summary = json.loads((paths.generation / "summary.json").read_text())
    assert (
        set(summary["first_token_share"]["rollout"]) == {"none", "diagonal"}
        and "k1" in summary["drop"]["random"]
    )
    assert (paths.generations / "long.safetensors").is_file()

    from attnflow.report import build_report

    report = build_report(tasks=[], paths=paths, config=_config.to_dict(cfg))
    assert "## Generation: rollout over generated tokens" in report.markdown
    assert "figures/generation_long.png" in report.markdown
