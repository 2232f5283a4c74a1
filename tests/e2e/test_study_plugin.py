"""A method written outside attnflow, with a model quantity of its own, runs through the study
without editing the package: its plugin module (named in ATTNFLOW_PLUGINS) registers the need and
the method (``study=True``); the composed config then lists it in ``explain.methods``; the capture
stage captures the need with the record's capturer on the classifier's Hugging Face model, the
explain stage pads it by the record's axes and computes the maps, the correlate stage scores them."""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
import pytest
import torch

from attnflow import methods
from attnflow.io import load_ragged
from attnflow.needs import NEEDS
from attnflow.paths import StudyPaths
from tests.unit.methods.test_external_method import PLUGIN


@pytest.fixture
def study_plugin(tmp_path_factory, monkeypatch):
    """The API test's plugin, marked as a study method; loaded before the study's config is composed."""
    folder = tmp_path_factory.mktemp("plugin")
    (folder / "my_study_plugin.py").write_text(textwrap.dedent(PLUGIN).replace("study=False", "study=True"))
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv(methods.PLUGINS_ENV, "my_study_plugin")
    assert methods.load_plugins() == ["my_study_plugin"]
    yield
    methods.unregister("norm_weighted")
    NEEDS.pop("input_norms")


def test_an_outside_method_with_its_own_need_runs_through_capture_explain_and_correlate(
    study_plugin, tiny_study
):
    from attnflow.bridge.eager import eager_attention
    from attnflow.models import load_classifier
    from pipelines import attribute, capture, correlate, download, explain, prepare, train

    root, cfg = tiny_study
    assert "norm_weighted" in cfg.explain.methods  # ${methods:study}: no config edit
    paths = StudyPaths.from_config(cfg.paths, root=root)
    for stage in (download, prepare, train, capture, explain, attribute, correlate):
        stage.run(cfg, "sst2")
    samples = pd.read_parquet(paths.samples("sst2"))
    norms = load_ragged(paths.relevance("sst2"))["input_norms"]  # captured by the plugin's capturer
    maps = load_ragged(paths.maps("sst2"))["norm_weighted"]
    model, _ = load_classifier(paths.model("sst2"))
    for ids, n, m in zip(samples["input_ids"], norms, maps, strict=True):
        with torch.no_grad(), eager_attention(model.hf):
            out = model.hf(
                input_ids=torch.tensor([list(ids)]), output_hidden_states=True, output_attentions=True
            )
        want_norms = torch.stack([h[0].norm(dim=-1) for h in out.hidden_states[:-1]]).numpy()  # (L, T)
        np.testing.assert_allclose(n, want_norms, rtol=1e-5)
        # SST-2's rows rule is max: the largest entry of each key's column over the query rows
        rows = torch.stack([a[0].double().mean(0).max(0).values for a in out.attentions]).numpy()
        np.testing.assert_allclose(m, rows * want_norms, rtol=2e-3)  # the study keeps attentions in float16
    table = pd.read_parquet(paths.correlations("sst2"))  # the maps reach the study's tables
    assert {1, 2} <= set(table[table["method"] == "norm_weighted"]["layer"])
