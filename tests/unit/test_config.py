"""conf/ is the source of truth: params.yaml matches it, and bad configs fail at start by key."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipelines import _config, compose

ROOT = Path(__file__).resolve().parents[2]


def test_committed_params_yaml_matches_conf():
    assert compose.run([], check=True, path=ROOT / "params.yaml"), (
        "params.yaml drifted from conf/: run `python -m pipelines.compose`"
    )


def test_override_lands_in_params_and_stage_reads_it(tmp_path):
    compose.run(["attribution.blank_token=unk", "seed=3"], path=tmp_path / "params.yaml")
    cfg = _config.load(tmp_path / "params.yaml")
    assert (cfg.attribution.blank_token, cfg.seed) == ("unk", 3)
    assert not compose.run([], check=True, path=tmp_path / "params.yaml")


def test_unknown_key_in_params_names_the_key(tmp_path):
    cfg = OmegaConf.to_container(_config.compose())
    cfg["explain"]["residul"] = 0.3
    (tmp_path / "params.yaml").write_text(OmegaConf.to_yaml(cfg))
    with pytest.raises(_config.ConfigError, match=r"params.yaml.*residul"):
        _config.load(tmp_path / "params.yaml")


def test_wrong_type_names_the_key():
    with pytest.raises(_config.ConfigError, match="residual"):
        _config.compose(["explain.residual=half"])


def test_mandatory_value_left_missing_fails_at_start():
    with pytest.raises(_config.ConfigError, match=r"mandatory value\(s\) not set: tracking.experiment"):
        _config.compose(["tracking.experiment=???"])


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("attribution.blank_token=blank", "attribution.blank_token='blank'"),
        ("explain.rows.sst2=first", "explain.rows.sst2='first'"),
        ("correlate.spearman=pearson", "correlate.spearman='pearson'"),
        ("attribution.gradient_class.sst2=positive", "attribution.gradient_class.sst2='positive'"),
    ],
)
def test_value_outside_its_choices_is_named(override, key):
    with pytest.raises(_config.ConfigError, match=key.replace(".", r"\.")):
        _config.compose([override])


def test_missing_params_file_says_how_to_make_it(tmp_path):
    with pytest.raises(_config.ConfigError, match=r"pipelines\.compose"):
        _config.load(tmp_path / "absent.yaml")
