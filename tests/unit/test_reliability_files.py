"""Reliability round 4 (issue 34), explanation files: values checked by meaning, tensors read lazily.

Found by a campaign: files with NaN / inf maps or ``layer: 99`` in a 2-layer record loaded without a
word; a JSON file nested 200,000 levels deep raised a bare RecursionError naming no file; and
`load_explanations` read every tensor of a safetensors file, referenced or not (a 1-token file with
an unreferenced 2 GiB tensor cost 4 GB of memory). Each is now refused (or skipped) naming the file.
"""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

from attnflow.generate.result import load_generations
from attnflow.hf import Explanation, load_explanations, save_explanations
from attnflow.io import ArtifactError


def _one(**changes) -> Explanation:
    e = Explanation(
        tokens=["[CLS]", "good", "[SEP]"],
        maps={"flow": np.array([[0.5, 0.25, 0.25], [0.25, 0.5, 0.25]])},  # 2 layers
        layer=1,
        row=0,
        text="good",
    )
    for k, v in changes.items():
        setattr(e, k, v)
    return e


def _write_unchecked(e: Explanation, path):
    """`e` as save_explanations would lay it out, without its checks (what another tool writes);
    save_explanations itself refuses what loading refuses (round 5, test_reliability_save.py)."""
    from attnflow.explanation_file import write_json_records, write_tensor_records

    record = e.to_dict()
    if path.suffix == ".json":
        return write_json_records(path, "text", [record])
    maps = record.pop("maps")
    record["methods"] = list(maps)
    return write_tensor_records(
        path, "text", [record], {f"0/{m}": np.asarray(v, np.float32) for m, v in maps.items()}
    )


# -- values by meaning ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("suffix", [".json", ".safetensors"])
def test_a_map_with_nan_or_inf_is_refused_naming_the_file(tmp_path, bad, suffix):
    maps = {"flow": np.array([[0.5, bad, 0.25], [0.25, 0.5, 0.25]])}
    path = tmp_path / f"x{suffix}"
    if suffix == ".json":  # what another tool (or a hand) writes: Python's json reads NaN / Infinity
        record = _one().to_dict() | {"maps": {"flow": maps["flow"].tolist()}}
        path.write_text(
            json.dumps({"format": "attnflow.explanations", "version": 2, "kind": "text", "records": [record]})
        )
    else:
        _write_unchecked(_one(maps=maps), path)
    with pytest.raises(ArtifactError) as info:
        load_explanations(path)
    assert str(path) in str(info.value) and "flow" in str(info.value) and "finite" in str(info.value)


@pytest.mark.parametrize("layer", [2, 99, -1])
@pytest.mark.parametrize("suffix", [".json", ".safetensors"])
def test_a_layer_outside_the_maps_is_refused_naming_the_file(tmp_path, layer, suffix):
    path = _write_unchecked(_one(layer=layer), tmp_path / f"x{suffix}")
    with pytest.raises(ArtifactError) as info:
        load_explanations(path)
    assert str(path) in str(info.value) and f"layer {layer}" in str(info.value)
    assert "2 layers" in str(info.value)


@pytest.mark.parametrize("load", [load_explanations, load_generations])
def test_json_nested_too_deeply_is_one_error_naming_the_file(tmp_path, load):
    path = tmp_path / "deep.json"
    depth = 200_000
    path.write_text("[" * depth + "]" * depth)
    with pytest.raises(ArtifactError) as info:
        load(path)
    assert str(path) in str(info.value) and "nested" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_safetensors_header_nested_too_deeply_is_one_error_naming_the_file(tmp_path):
    from safetensors.numpy import save

    path = tmp_path / "deep.safetensors"
    path.write_bytes(
        save({"0/flow": np.zeros((2, 3), np.float32)}, metadata={"attnflow": "[" * 100_000 + "]" * 100_000})
    )
    with pytest.raises(ArtifactError) as info:
        load_explanations(path)
    assert str(path) in str(info.value) and "nested" in str(info.value)


def test_good_files_still_load(tmp_path):
    for suffix in (".json", ".safetensors"):
        (got,) = load_explanations(save_explanations([_one()], tmp_path / f"x{suffix}"))
        assert got.layer == 1 and got.tokens == ["[CLS]", "good", "[SEP]"]
        np.testing.assert_allclose(got.maps["flow"], _one().maps["flow"], atol=1e-7)


# -- only what the records reference is read ----------------------------------------------------------

UNREFERENCED_MB = 64


def _with_unreferenced(tmp_path, extra: dict[str, np.ndarray]):
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    path = save_explanations([_one()], tmp_path / "x.safetensors")
    with safe_open(str(path), framework="numpy") as f:
        metadata = f.metadata()
    tensors = {**load_file(path), **extra}
    save_file(tensors, path, metadata=metadata)
    return path


def test_an_unreferenced_tensor_is_never_read(tmp_path):
    """A 1-token-ish file carrying a 64 MiB tensor no record names: loading it allocates a few KB."""
    big = np.ones(UNREFERENCED_MB * 2**20 // 4, dtype=np.float32)
    path = _with_unreferenced(tmp_path, {"junk": big})
    del big
    tracemalloc.start()
    try:
        (got,) = load_explanations(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got.maps["flow"].shape == (2, 3)
    assert peak < 8 * 2**20, f"loading read {peak / 2**20:.0f} MiB"


def test_a_referenced_tensor_out_of_proportion_to_its_record_is_refused_before_reading(tmp_path):
    """The record has 3 tokens and 2 layers; its tensor declares 4,000,000 layers: refused by its
    declared shape, naming the file, without reading 48 MB."""
    path = _with_unreferenced(tmp_path, {"0/flow": np.zeros((4_000_000, 3), dtype=np.float32)})
    tracemalloc.start()
    try:
        with pytest.raises(ArtifactError) as info:
            load_explanations(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(path) in str(info.value) and "0/flow" in str(info.value)
    assert peak < 8 * 2**20, f"refusing read {peak / 2**20:.0f} MiB"


@pytest.mark.parametrize("suffix", [".json", ".safetensors"])
def test_a_generation_map_with_nan_is_refused_naming_the_file(tmp_path, suffix, monkeypatch):
    from attnflow.generate import result
    from tests.unit.test_explanation_file import _generation

    g = _generation()
    g.maps["rollout"] = g.maps["rollout"].copy()
    g.maps["rollout"].flat[0] = np.nan
    with monkeypatch.context() as m:  # as another tool writes it: saving refuses it (test_reliability_save)
        m.setattr(result, "_finite", lambda e, *args, **kwargs: e)
        path = result.save_generations([g], tmp_path / f"g{suffix}")
    with pytest.raises(ArtifactError) as info:
        load_generations(path)
    assert str(path) in str(info.value) and "rollout" in str(info.value) and "finite" in str(info.value)


def test_a_stage_json_nested_too_deeply_is_one_clear_error_naming_the_file(tmp_path):
    from attnflow.io import read_json

    path = tmp_path / "metrics.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ArtifactError) as info:
        read_json(path)
    message = str(info.value)
    assert message.startswith(str(path)) and "nested too deeply" in message and "\n" not in message
