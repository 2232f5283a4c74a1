"""Library inputs that once failed badly: bfloat16 attentions held to float32's row-sum tolerance,
meta-device tensors ending in torch's NotImplementedError, malformed explanation files raising
TypeError / KeyError without the file's name, and pickled or tokenizer-less model folders."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from attnflow.explain import _common
from attnflow.explain._common import ROW_SUM_TOL, prepare
from attnflow.methods import EXPLAINERS
from tests._tiny import make_tiny_bert

# -- row-sum tolerance follows the dtype -----------------------------------------------------------


def _bf16_softmax(tokens: int = 64, seed: int = 0) -> torch.Tensor:
    """A real softmax (float32) rounded to bfloat16, as a bf16 model returns it: (1, 2, 2, T, T)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(1, 2, 2, tokens, tokens, generator=g)
    return torch.softmax(logits, dim=-1).to(torch.bfloat16)


def test_bfloat16_rounding_alone_exceeds_the_float32_tolerance():
    """The case: rows of a bf16 softmax are off by more than 1e-3 (8 significant bits)."""
    attn = _bf16_softmax()
    worst = (attn.double().sum(-1) - 1).abs().max().item()
    assert ROW_SUM_TOL < worst <= _common.ROW_SUM_TOLS["bfloat16"]


@pytest.mark.parametrize("method", ["raw", "rollout", "flow"])
def test_explainers_accept_bfloat16_attentions_from_a_real_softmax(method):
    attn = _bf16_softmax(tokens=16 if method == "flow" else 64)
    out = EXPLAINERS[method](attn)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()


def test_the_tolerance_is_named_per_dtype_and_still_refuses_bad_rows():
    assert _common.ROW_SUM_TOLS["float32"] == _common.ROW_SUM_TOLS["float64"] == ROW_SUM_TOL
    assert ROW_SUM_TOL < _common.ROW_SUM_TOLS["float16"] < _common.ROW_SUM_TOLS["bfloat16"]
    bad = torch.full((1, 1, 4, 4), 0.25 * 1.1, dtype=torch.bfloat16)  # rows sum to 1.1
    with pytest.raises(ValueError, match=r"tolerance 0\.016 for bfloat16"):
        prepare(bad)
    rounded = _bf16_softmax().double()  # the same values in float64 are held to float64's tolerance
    with pytest.raises(ValueError, match="for float64"):
        prepare(rounded)


def test_explain_text_of_a_bfloat16_model(tmp_path):
    """Uniform attention over 48 tokens in bf16: 1/48 rounds to 0.020874 (8 significant bits), so
    every row sums to 48 * 0.020874 = 1.00195, off by 2e-3, twice float32's tolerance."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from attnflow.hf import explain_text

    folder = make_tiny_bert(tmp_path / "bert")
    model = AutoModelForSequenceClassification.from_pretrained(folder)
    with torch.no_grad():  # zero queries and keys: every score 0, every attention row uniform
        for layer in model.bert.encoder.layer:
            for proj in (layer.attention.self.query, layer.attention.self.key):
                proj.weight.zero_()
                proj.bias.zero_()
    model = model.to(torch.bfloat16).eval()
    text = " ".join(["good", "movie"] * 23)  # [CLS] + 46 words + [SEP] = 48 tokens
    e = explain_text(model, AutoTokenizer.from_pretrained(folder), text, methods=["raw", "rollout"])
    assert len(e.tokens) == 48
    np.testing.assert_allclose(e.maps["raw"][0, 1:], 1 / 48, atol=1e-9)  # rows rescaled to sum 1
    np.testing.assert_allclose(e.maps["rollout"].sum(axis=1), 1.0, atol=1e-9)


# -- meta tensors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["raw", "rollout", "flow"])
def test_a_meta_tensor_is_refused_in_one_line(method):
    attn = torch.empty(2, 2, 4, 4, device="meta")
    with pytest.raises(ValueError, match="attn is on the 'meta' device"):
        EXPLAINERS[method](attn)


def test_a_meta_mask_is_refused():
    attn = torch.full((1, 1, 1, 2, 2), 0.5)
    with pytest.raises(ValueError, match="mask is on the 'meta' device"):
        EXPLAINERS["rollout"](attn, mask=torch.ones(1, 2, dtype=torch.bool, device="meta"))


def test_a_model_on_the_meta_device_is_refused(tmp_path):
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from attnflow.hf import explain_text

    folder = make_tiny_bert(tmp_path / "bert")
    with torch.device("meta"):
        model = BertForSequenceClassification(BertConfig.from_pretrained(folder))
    with pytest.raises(ValueError, match="'meta' device"):
        explain_text(model, AutoTokenizer.from_pretrained(folder), "good movie")


# -- malformed explanation files -------------------------------------------------------------------


def _safetensors(path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None) -> Path:
    from safetensors.numpy import save_file

    save_file(tensors, str(path), metadata=metadata)
    return path


GOOD = {"tokens": ["a", "b"], "maps": {"flow": [[0.5, 0.5]]}, "layer": 0, "row": 0}
BAD_JSON = {
    "not json": (b"{oops", "invalid JSON at line 1"),
    "not utf-8": (b'[{"tokens": "\xff"}]', "not UTF-8"),
    "an object without the header": (b'{"tokens": []}', "no 'attnflow.explanations' header"),
    "a header without records": (
        json.dumps({"format": "attnflow.explanations", "version": 2, "kind": "text", "records": {}}).encode(),
        "expected a list of explanations, found a dict",
    ),
    "a list of lists": (b"[[1, 2]]", "explanation 0 is a list"),
    "no maps": (json.dumps([{"tokens": ["a"], "layer": 0, "row": 0}]).encode(), "explanation 0 lacks maps"),
    "tokens not strings": (
        json.dumps([{**GOOD, "tokens": [1, 2]}]).encode(),
        "tokens must be a list of strings",
    ),
    "map of the wrong width": (
        json.dumps([{**GOOD, "maps": {"flow": [[1.0, 0.0, 0.0]]}}]).encode(),
        r"map 'flow' has shape \(1, 3\), expected \(layers, 2\)",
    ),
    "map not numbers": (json.dumps([{**GOOD, "maps": {"flow": [["x", "y"]]}}]).encode(), "not a numeric"),
    "layer not an int": (json.dumps([{**GOOD, "layer": "top"}]).encode(), "layer must be an integer"),
    "logits not numbers": (
        json.dumps([{**GOOD, "logits": ["high", "low"]}]).encode(),
        "logits must be numbers",
    ),
    "ragged logits": (
        json.dumps([{**GOOD, "logits": [[1.0], [1.0, 2.0]]}]).encode(),
        "logits must be numbers",
    ),
    "meta not an object": (json.dumps([{**GOOD, "meta": "x"}]).encode(), "meta must be an object"),
}


@pytest.mark.parametrize("case", sorted(BAD_JSON))
def test_a_malformed_json_explanation_file_is_one_value_error_naming_it(tmp_path, case):
    from attnflow.hf import load_explanations

    data, what = BAD_JSON[case]
    path = tmp_path / "explain.json"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=what) as info:
        load_explanations(path)
    assert str(info.value).startswith(f"{path}: not an explanations file")


@pytest.mark.parametrize(
    ("case", "what"),
    [
        ("garbage", "not a readable safetensors file"),
        ("no metadata", "no 'attnflow' header nor 'explanations' entry in its metadata"),
        ("metadata not json", "'explanations' metadata is not valid JSON"),
        ("missing tensor", "tensor\\(s\\) 0/flow missing"),
        ("no methods", "explanation 0 has no list of methods"),
    ],
)
def test_a_malformed_safetensors_explanation_file_is_one_value_error_naming_it(tmp_path, case, what):
    from attnflow.hf import load_explanations

    path = tmp_path / "explain.safetensors"
    meta = json.dumps([{"tokens": ["a", "b"], "layer": 0, "row": 0, "methods": ["flow"]}])
    x = {"other": np.zeros(2, dtype=np.float32)}
    if case == "garbage":
        path.write_bytes(os.urandom(64))
    elif case == "no metadata":
        _safetensors(path, x, None)
    elif case == "metadata not json":
        _safetensors(path, x, {"explanations": "[{"})
    elif case == "missing tensor":
        _safetensors(path, x, {"explanations": meta})
    else:
        _safetensors(path, x, {"explanations": json.dumps([{"tokens": ["a"]}])})
    with pytest.raises(ValueError, match=what) as info:
        load_explanations(path)
    assert str(info.value).startswith(f"{path}: not an explanations file")


def test_a_good_file_still_loads_and_a_missing_one_is_named(tmp_path):
    from attnflow.hf import load_explanations

    path = tmp_path / "e.json"
    path.write_text(json.dumps([GOOD]), encoding="utf-8")
    (e,) = load_explanations(path)
    assert e.tokens == ["a", "b"] and e.maps["flow"].shape == (1, 2)
    with pytest.raises(FileNotFoundError, match="no such explanations file"):
        load_explanations(tmp_path / "none.json")


# -- model folders ---------------------------------------------------------------------------------


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _pickled(folder: Path, marker: Path) -> Path:
    make_tiny_bert(folder)
    (folder / "model.safetensors").unlink()
    torch.save({"bert.pooler.dense.bias": _Payload(marker)}, folder / "pytorch_model.bin")
    return folder


def test_load_model_refuses_a_pickled_checkpoint_naming_it(tmp_path):
    from attnflow.hf import UnsafeCheckpointError, load_model

    folder = _pickled(tmp_path / "evil", tmp_path / "ran")
    with pytest.raises(UnsafeCheckpointError) as info:
        load_model(str(folder))
    msg = str(info.value)
    assert msg.startswith(f"{folder / 'pytorch_model.bin'}: refused as unsafe") and "safetensors" in msg
    assert "weights_only" not in msg and not (tmp_path / "ran").exists()


def test_load_classifier_refuses_a_pickled_checkpoint_naming_it(tmp_path):
    from attnflow.hf import UnsafeCheckpointError
    from attnflow.models.io import MANIFEST, load_classifier

    folder = _pickled(tmp_path / "exported", tmp_path / "ran")
    (folder / MANIFEST).write_text(
        json.dumps({"format": "attnflow-classifier", "version": 1, "kind": "hf"}), encoding="utf-8"
    )
    with pytest.raises(UnsafeCheckpointError, match=r"pytorch_model\.bin: refused as unsafe") as info:
        load_classifier(folder)
    assert "weights_only" not in str(info.value) and not (tmp_path / "ran").exists()


def test_explain_text_refuses_a_tokenizer_that_knows_only_special_tokens(tmp_path):
    from attnflow.hf import explain_text, load_model

    folder = make_tiny_bert(tmp_path / "bert", with_tokenizer=False)
    model, tok = load_model(str(folder))
    with pytest.raises(ValueError, match=f"unknown token '\\[UNK\\]'.*{folder} has no tokenizer files"):
        explain_text(model, tok, "good movie")


@pytest.mark.parametrize("method", ["raw", "rollout", "flow"])
def test_a_masked_array_is_refused_not_silently_unmasked(method):
    # np.asarray drops the mask: the hidden values behind masked entries would be used as attention.
    from attnflow.methods import EXPLAINERS

    attn = np.full((2, 1, 3, 3), 1 / 3)
    masked = np.ma.masked_array(attn, mask=np.zeros_like(attn, dtype=bool))
    masked.mask[..., 2] = True
    with pytest.raises(ValueError, match="masked array"):
        EXPLAINERS[method](masked)


def test_long_double_attention_is_refused_in_one_line():
    from attnflow.explain import attention_rollout

    with pytest.raises(ValueError, match=r"float128.*float64 or narrower|longdouble.*float64 or narrower"):
        attention_rollout(np.full((1, 1, 2, 2), 0.5, dtype=np.longdouble))
