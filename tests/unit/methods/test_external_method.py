"""A method written outside attnflow, with a need of its own, runs through `explain_text` and the
CLI without editing the package: its module registers a NeedRecord and a MethodRecord
(`attnflow.needs.register_need`, `attnflow.methods.register`) and is named in ATTNFLOW_PLUGINS."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
import torch

from attnflow import methods
from attnflow.needs import NEEDS

PLUGIN = '''
"""Attention weighted by the norm of each key's layer input: a user's method and its need."""
import torch

from attnflow.explain.kit import attention_method
from attnflow.methods import MethodRecord, register
from attnflow.needs import NeedRecord, register_need


def capture_input_norms(model, inputs):
    with torch.no_grad():
        out = model(**inputs, output_hidden_states=True)
    return {"input_norms": torch.stack([h.norm(dim=-1) for h in out.hidden_states[:-1]], dim=1)}  # (B, L, T)


register_need(NeedRecord(
    "input_norms", "||x_j||, the norm of each layer's input", ("layer", "token"),
    {"encoder": "hidden_states[l] of output_hidden_states, its norm"},
    sample=lambda rng, attn: rng.uniform(0.5, 2.0, attn.shape[:-3] + attn.shape[-1:]),
    capturer=capture_input_norms,
), replace=True)


@attention_method(needs=("input_norms",))
def norm_weighted_map(batch, *, heads, input_norms):
    return batch.aggregate(batch.heads(), heads) * input_norms[:, :, None, :]  # α_ij ||x_j||: (B, L, T, T)


register(MethodRecord("norm_weighted", "Norm-weighted", norm_weighted_map, row_sums="nonnegative",
                      study=False, generation=False, summary="attention times the key's input norm"),
         replace=True)
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    (tmp_path / "my_attn_plugin.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(methods.PLUGINS_ENV, "my_attn_plugin")
    assert methods.load_plugins() == ["my_attn_plugin"]  # what `import attnflow.methods` does at start
    yield
    methods.unregister("norm_weighted")
    NEEDS.pop("input_norms")


def test_a_method_and_its_need_from_outside_run_in_explain_text_and_the_cli(plugin, tmp_path, capsys):
    from attnflow.cli import main
    from attnflow.hf import explain_text, load_model
    from tests._tiny import make_tiny_bert

    assert methods.EXPLAINER_INPUTS["norm_weighted"] == ("input_norms",)
    path = make_tiny_bert(tmp_path / "bert")
    model, tok = load_model(str(path), device="cpu")
    e = explain_text(model, tok, "good movie", methods=["rollout", "norm_weighted"])
    enc = tok(["good movie"], return_tensors="pt")
    from attnflow.bridge.eager import eager_attention

    with torch.no_grad(), eager_attention(model):
        out = model(**enc, output_hidden_states=True, output_attentions=True, return_dict=True)
    expected = [a[0].double().mean(0)[0] * h[0].double().norm(dim=-1)
                for a, h in zip(out.attentions, out.hidden_states[:-1], strict=True)]  # fmt: skip
    np.testing.assert_allclose(e.maps["norm_weighted"], torch.stack(expected).numpy(), rtol=1e-5)
    code = main(["explain", "--model", str(path), "--text", "good movie", "--method", "norm_weighted",
                 "--quiet", "--device", "cpu", "--out", str(tmp_path / "out"), "--format", "json"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    (saved,) = json.loads((tmp_path / "out" / "explain.json").read_text())["records"]
    assert np.asarray(saved["maps"]["norm_weighted"]).shape == (2, 4)


def test_a_need_nobody_declared_is_refused_at_registration():
    from attnflow.explain.kit import attention_method

    fn = attention_method(needs=("no_such_need",))(lambda batch, *, heads, no_such_need: None)
    with pytest.raises(ValueError, match=r"no_such_need.*register_need"):
        methods.register(methods.MethodRecord("needless", "x", fn, row_sums="nonnegative"))
    assert "needless" not in methods.METHODS


def test_a_plugin_that_cannot_be_imported_is_named():
    with pytest.raises(ImportError, match=r"ATTNFLOW_PLUGINS.*no_such_module_xyz"):
        methods.load_plugins("no_such_module_xyz")
