"""Reliability round 4 (issue 34), config values checked by what they mean, not only by type.

A campaign found values that passed every check but meant nothing: ``explain.methods=[raw,raw,rollout]``,
``tasks=[agreement,agreement]``, ``data.timeout_s=inf``, an empty generation prompt. Each is refused
at compose, naming the key (`attnflow.schema.problems`).
"""

from __future__ import annotations

import pytest

pytest.importorskip("hydra")

from pipelines._config import ConfigError, compose


@pytest.mark.parametrize(
    ("override", "key", "why"),
    [
        ("explain.methods=[raw,raw,rollout]", "explain.methods", "'raw' twice"),
        ("tasks=[agreement,agreement]", "tasks", "'agreement' twice"),
        ("attribution.methods=[blank_out,blank_out]", "attribution.methods", "'blank_out' twice"),
        ("faithfulness.layers=[1,1]", "faithfulness.layers", "1 twice"),
        ("generate.ks=[1,3,3]", "generate.ks", "3 twice"),
        ("data.timeout_s=inf", "data.timeout_s", "finite"),
        ("data.timeout_s=nan", "data.timeout_s", ""),
        ("explain.residual=nan", "explain.residual", ""),
        ("generate.prompts.names=''", "generate.prompts.names", "empty"),
        ("generate.prompts.names='   '", "generate.prompts.names", "empty"),
    ],
)
def test_a_value_that_means_nothing_is_refused_naming_the_key(override, key, why):
    with pytest.raises(ConfigError) as info:
        compose([override])
    message = str(info.value)
    assert f"{key}=" in message and why in message, message


def test_the_study_config_still_composes():
    compose([])


def test_the_cli_rule_refuses_a_float_that_is_not_finite():
    from attnflow.schema import value_problem

    assert value_problem("data.timeout_s", float("inf")) and "finite" in value_problem(
        "data.timeout_s", float("inf")
    )
    assert value_problem("data.timeout_s", 5.0) is None


# -- checked against the model, as soon as the stage knows it -----------------------------------------


def _tiny_classifier(n_layer: int = 2):
    """A random 2-class agreement transformer of `n_layer` layers and a word encoder for it."""
    import torch

    from attnflow.data.vocab import Vocab
    from attnflow.models.agreement import AgreementConfig, AgreementTransformer
    from attnflow.models.encoders import WordEncoder

    vocab = Vocab.build([["the", "dog", "dogs", "cat"]], min_count=1)
    torch.manual_seed(0)
    model = AgreementTransformer(AgreementConfig(vocab_size=len(vocab), n_layer=n_layer, n_head=2, n_embd=8))
    return model, WordEncoder(vocab)


@pytest.mark.parametrize("needs", [(), ("attn_grad",)])
def test_capture_target_beyond_the_models_classes_is_refused_naming_the_key(needs):
    """capture.target=99 on a 2-class task: refused before any sample is run, with or without a
    class-specific method to use it."""
    import pandas as pd

    from attnflow.capture import capture_study

    model, encoder = _tiny_classifier()
    frame = pd.DataFrame({"text": ["the dog", "the cat"], "label": [0, 1]})
    with pytest.raises(ValueError) as info:
        capture_study(model, encoder, frame, n_samples=2, seed=0, needs=needs, target=99)
    message = str(info.value)
    assert "capture.target" in message and "99" in message and "2 classes" in message
    got = capture_study(model, encoder, frame, n_samples=2, seed=0, needs=needs, target=1)  # a class it has
    assert len(got.samples) == 2


def test_faithfulness_layers_beyond_the_models_layers_are_refused_naming_the_key_before_any_work(monkeypatch):
    """faithfulness.layers=[1,99] on a 6-layer model: refused before the comparators and the
    agreement table are computed, naming the key."""
    import numpy as np

    from attnflow.attribution import faithfulness as f

    model, encoder = _tiny_classifier(n_layer=6)
    ids = [[2, 5, 6], [2, 6]]
    maps = {"flow": [np.full((6, 3), 1 / 3), np.full((6, 2), 0.5)]}
    importance = {"blank_out": [np.ones(3), np.ones(2)]}

    def no_work(*args, **kwargs):
        raise AssertionError("work was done before the layers were checked")

    monkeypatch.setattr("attnflow.attribution.comparators.compare_on_subset", no_work)
    monkeypatch.setattr("attnflow.metrics.agreement.agreement_table", no_work)
    with pytest.raises(ValueError) as info:
        f.faithfulness_with_comparators(
            model, encoder, ids, maps, importance, methods=["flow"], task_rows="cls", importance_options={},
            sample_ids=[0, 1], n_samples=2, layers=[1, 99],
        )  # fmt: skip
    message = str(info.value)
    assert "faithfulness.layers" in message and "99" in message and "6 layers" in message


# -- round 5 (issue 57): what the config itself tells, checked at compose -----------------------------


@pytest.mark.parametrize(
    ("overrides", "start", "why"),
    [
        (["capture.target=99"], "capture.target='99'", "task agreement has 2 classes"),
        (["capture.target=2"], "capture.target='2'", "a class index below 2"),
        (["task.sst2.gradient_class=5"], "task.sst2.gradient_class='5'", "task sst2 has 2 classes"),
        (
            ["faithfulness.layers=[1,99]"],
            "faithfulness.layers=[1, 99]",
            "task agreement's model has 6 layers",
        ),
        (
            ["task.agreement.model.n_layer=3", "faithfulness.layers=[4]"],
            "faithfulness.layers=[4]",
            "3 layers",
        ),
        (["tasks=[sst2]", "faithfulness.layers=[7]"], "faithfulness.layers=[7]", "(model.pretrained=minilm)"),
    ],
)
def test_a_class_or_layer_the_task_does_not_have_is_refused_at_compose(overrides, start, why):
    """The classes (the TaskSpec's labels) and the layers (model.n_layer, the packaged MiniLM's
    config) are known before any stage runs: one line naming the key and value."""
    with pytest.raises(ConfigError) as info:
        compose(overrides)
    message = str(info.value)
    assert "\n" not in message and f": {start}: " in message and why in message, message


@pytest.mark.parametrize(
    "overrides",
    [
        ["capture.target=1", "task.sst2.gradient_class=0"],
        ["faithfulness.layers=[1,6]"],
        ["tasks=[sst2]", "task.sst2.model.pretrained=distilbert-base-uncased", "faithfulness.layers=[12]"],
    ],
)
def test_classes_and_layers_the_task_has_or_that_only_the_model_knows_pass(overrides):
    """A hub model's layers are known once it loads: the stage checks them then (tests above)."""
    compose(overrides)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("'a\nb'", "'a\\nb'"),
        ("'a\tb'", "'a\\tb'"),
        ("a/b", "'a/b'"),
        ("'a\\b'", "'a\\\\b'"),
        ("'x y'", "'x y'"),
        ("'.hidden'", "'.hidden'"),
        ("'-rf'", "'-rf'"),
    ],
)
def test_a_study_name_that_cannot_be_a_folder_name_is_refused_naming_it(value, shown):
    with pytest.raises(ConfigError) as info:
        compose([f"study={value}"])
    message = str(info.value)
    assert "\n" not in message
    assert message.split(": ", 1)[1].startswith(f"study={shown}: must be a name of letters"), message


def test_a_control_character_in_the_experiment_name_is_refused():
    with pytest.raises(ConfigError, match=r"tracking\.experiment='x\\ty': must be printable text"):
        compose(["tracking.experiment='x\ty'"])
    compose(["study=abnar2020-seeds.v2", "tracking.experiment='Abnar and Zuidema (2020)'"])
