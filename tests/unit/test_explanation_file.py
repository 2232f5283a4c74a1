"""One file format for explanations (attnflow.explanation_file): the API's, generation's and the
study's files carry the same versioned header; older files load; newer or foreign ones are refused
naming the file."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from attnflow.explanation_file import FORMAT, VERSION, load_study_maps, read_tensor_records, save_study_maps
from attnflow.generate.result import GenerationExplanation, load_generations, save_generations
from attnflow.hf.explanation import Explanation, load_explanations, save_explanations
from attnflow.io import ArtifactError


def _explanation(seed: int = 0) -> Explanation:
    rng = np.random.default_rng(seed)
    maps = {"rollout": rng.random((2, 3)), "flow": rng.random((2, 3))}
    return Explanation(
        tokens=["[CLS]", "good", "[SEP]"], maps=maps, layer=1, row=0, prediction=1, text="good"
    )


def _generation() -> GenerationExplanation:
    n, cols, layers = 2, 4, 3
    rng = np.random.default_rng(1)
    return GenerationExplanation(
        prompt="a b", completion=" c d", prompt_tokens=["a", "b"], generated_tokens=["c", "d"],
        columns=["a", "b", "c", "d"], maps={"rollout": rng.random((n, cols, layers)).astype(np.float32)},
        first_token_share={"rollout": rng.random(n)}, coverage={"rollout": rng.random((n, layers)).astype(np.float32)},
        logprobs=np.array([-1.0, -2.0]), rows=[1, 2], prompt_ids=[5, 6], generated_ids=[7, 8],
        sinks=np.zeros((layers, 2, cols), bool), head_sinks=np.zeros((layers, 2, cols), bool),
        options={"sinks": "none", "receptive_field": "none", "over": "all"},
    )  # fmt: skip


def _header(path):
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        return json.loads(f.metadata()["attnflow"])


@pytest.mark.parametrize("suffix", [".json", ".safetensors"])
def test_text_explanations_round_trip_with_the_versioned_header(tmp_path, suffix):
    path = save_explanations([_explanation(0), _explanation(1)], tmp_path / f"e{suffix}")
    head = json.loads(path.read_text()) if suffix == ".json" else _header(path)
    assert (head["format"], head["version"], head["kind"]) == (FORMAT, VERSION, "text")
    back = load_explanations(path)
    for ours, ref in zip(back, [_explanation(0), _explanation(1)], strict=True):
        assert ours.tokens == ref.tokens and ours.layer == ref.layer and ours.prediction == ref.prediction
        for m in ref.maps:
            np.testing.assert_allclose(ours.maps[m], ref.maps[m], rtol=1e-6 if suffix != ".json" else 0)


@pytest.mark.parametrize("suffix", [".json", ".safetensors"])
def test_generation_explanations_round_trip_with_the_versioned_header(tmp_path, suffix):
    path = save_generations([_generation()], tmp_path / f"g{suffix}")
    head = json.loads(path.read_text()) if suffix == ".json" else _header(path)
    assert (head["version"], head["kind"]) == (VERSION, "generation")
    (back,) = load_generations(path)
    np.testing.assert_allclose(back.maps["rollout"], _generation().maps["rollout"], rtol=1e-6)
    assert back.generated_ids == [7, 8] and back.options["over"] == "all"


def test_version_1_files_still_load(tmp_path):
    # what attnflow wrote before the header: a bare JSON list, or the records under "explanations"
    e = _explanation()
    old_json = tmp_path / "old.json"
    old_json.write_text(json.dumps([e.to_dict()]))
    assert load_explanations(old_json)[0].tokens == e.tokens
    record = {k: v for k, v in e.to_dict().items() if k != "maps"} | {"methods": list(e.maps)}
    old = tmp_path / "old.safetensors"
    save_file({f"0/{m}": v.astype(np.float32) for m, v in e.maps.items()}, str(old),
              metadata={"explanations": json.dumps([record])})  # fmt: skip
    np.testing.assert_allclose(load_explanations(old)[0].maps["flow"], e.maps["flow"], rtol=1e-6)
    maps = tmp_path / "maps.safetensors"  # a study maps file without a header (version 1)
    from attnflow.io import save_ragged

    save_ragged(maps, {"rollout": [np.ones((2, 3)), np.zeros((2, 4))]}, ids=[7, 9])
    got = load_study_maps(maps, [9, 7], against="samples")
    assert [a.shape for a in got["rollout"]] == [(2, 4), (2, 3)]


def test_a_newer_version_is_refused_naming_the_file_and_versions(tmp_path):
    path = save_explanations([_explanation()], tmp_path / "e.json")
    data = json.loads(path.read_text())
    path.write_text(json.dumps(data | {"version": VERSION + 1}))
    with pytest.raises(
        ArtifactError, match=rf"e\.json: explanation file version {VERSION + 1} .*versions 1-{VERSION}"
    ):
        load_explanations(path)
    st = save_explanations([_explanation()], tmp_path / "e.safetensors")
    head = _header(st) | {"version": VERSION + 1}
    save_file({"0/rollout": np.zeros((2, 3), np.float32)}, str(st), metadata={"attnflow": json.dumps(head)})
    with pytest.raises(ArtifactError, match=rf"e\.safetensors: explanation file version {VERSION + 1}"):
        load_explanations(st)


def test_one_kind_is_not_read_as_another(tmp_path):
    path = save_generations([_generation()], tmp_path / "g.safetensors")
    with pytest.raises(ArtifactError, match=r"g\.safetensors: holds 'generation' explanations .* not 'text'"):
        load_explanations(path)
    maps = tmp_path / "maps.safetensors"
    save_study_maps(maps, {"rollout": [np.ones((2, 3))]}, [0])
    with pytest.raises(ArtifactError, match="holds 'study' explanations"):
        read_tensor_records(maps, "generation")
    assert load_study_maps(maps, [0], against="samples")["rollout"][0].shape == (2, 3)


def test_a_file_without_header_or_records_is_refused_in_one_line(tmp_path):
    path = tmp_path / "x.safetensors"
    save_file({"a": np.zeros(2)}, str(path))
    with pytest.raises(
        ArtifactError,
        match=r"x\.safetensors: not an explanations file: no 'attnflow' header nor 'explanations'",
    ):
        load_explanations(path)
    broken = tmp_path / "y.json"
    broken.write_text("{")
    with pytest.raises(ArtifactError, match=r"y\.json: not an explanations file: invalid JSON at line 1"):
        load_explanations(broken)


def test_a_record_that_cannot_be_read_is_one_error_naming_the_file(tmp_path):
    # a header whose records lack fields: one ArtifactError naming the file, not a bare KeyError
    from attnflow.explanation_file import write_json_records

    path = write_json_records(tmp_path / "g.json", "generation", [{"prompt": "a"}])
    with pytest.raises(ArtifactError, match=r"g\.json: not a generation explanations file \(KeyError"):
        load_generations(path)
