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
