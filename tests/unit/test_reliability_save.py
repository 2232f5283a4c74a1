"""Reliability round 5 (issue 57): saving refuses what loading would refuse; suffixes in any case.

Maps holding NaN were saved and then refused on load (a file written that no attnflow reads);
``save("x.JSON")`` was refused while ``.HTML`` was accepted. Now saving runs the loader's checks
first (one line naming the file, the explanation, the method and the first bad entry, nothing
written), also for a score that only overflows once stored as float32 (safetensors), and every
format's suffix is read in any case, by saving and loading alike.
"""

from __future__ import annotations

import numpy as np
import pytest

from attnflow.explanation_file import check_finite, file_format
from attnflow.generate.result import GenerationExplanation, load_generations, save_generations
from attnflow.hf.explanation import Explanation, load_explanations, save_explanations
from attnflow.io import ArtifactError

SUFFIXES = [".json", ".safetensors"]


def _explanation(**maps) -> Explanation:
    maps = maps or {"flow": np.array([[0.5, 0.25, 0.25], [0.25, 0.5, 0.25]])}  # 2 layers
    return Explanation(tokens=["[CLS]", "good", "[SEP]"], maps=maps, layer=1, row=0, text="good")


def _generation(value: float = 0.5) -> GenerationExplanation:
    n, cols, layers = 2, 3, 2
    maps = np.full((n, cols, layers), 0.25)
    maps[1, 2, 1] = value  # generated token 1, column 2, layer 2
    return GenerationExplanation(
        prompt="a b", completion=" c d", prompt_tokens=["a", "b"], generated_tokens=["c", "d"],
        columns=["a", "b", "c"], maps={"rollout": maps}, first_token_share={"rollout": np.ones(n)},
        coverage={"rollout": np.ones((n, layers))}, logprobs=np.array([-1.0, -2.0]), rows=[1, 2],
        prompt_ids=[5, 6], generated_ids=[7, 8], sinks=np.zeros((layers, 2, cols), bool),
        head_sinks=np.zeros((layers, 2, cols), bool), options={},
    )  # fmt: skip


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("suffix", SUFFIXES)
def test_saving_a_map_with_nan_or_inf_is_refused_naming_method_and_layer(tmp_path, bad, suffix):
    flow = np.array([[0.5, 0.25, 0.25], [0.25, bad, 0.25]])
    path = tmp_path / f"x{suffix}"
    with pytest.raises(ValueError) as info:
        save_explanations([_explanation(), _explanation(flow=flow)], path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"cannot save {path}: explanation 1: map 'flow'")
    assert "not finite" in message and "the first at layer 2, token 1" in message
    assert not list(tmp_path.iterdir())  # nothing written, not even a temporary file


def test_a_score_beyond_float32_is_refused_for_safetensors_and_kept_in_json(tmp_path):
    """1e39 is finite in float64 (JSON keeps it) but inf once stored as float32: refused there."""
    e = _explanation(flow=np.array([[0.5, 0.25, 0.25], [1e39, 0.5, 0.25]]))
    (back,) = load_explanations(save_explanations([e], tmp_path / "x.json"))
    assert back.maps["flow"][1, 0] == 1e39
    with pytest.raises(ValueError, match=r"\(as float32\): map 'flow' .* the first at layer 2, token 0"):
        save_explanations([e], tmp_path / "x.safetensors")
    assert not (tmp_path / "x.safetensors").exists()


def test_saving_a_layer_outside_the_maps_is_refused_as_loading_refuses_it(tmp_path):
    e = _explanation()
    e.layer = 99
    with pytest.raises(ValueError, match=r"^cannot save .*x\.json: explanation 0: layer 99 is outside"):
        save_explanations([e], tmp_path / "x.json")


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_a_generation_map_with_nan_is_refused_when_saving(tmp_path, suffix):
    path = tmp_path / f"g{suffix}"
    with pytest.raises(ValueError) as info:
        save_generations([_generation(np.nan)], path)
    message = str(info.value)
    assert message.startswith(f"cannot save {path}: explanation 0: map 'rollout'")
    assert "the first at generated token 1, column 2, layer 2" in message
    assert not path.exists()


@pytest.mark.parametrize("suffix", [".JSON", ".Json", ".SAFETENSORS", ".SafeTensors"])
def test_suffixes_in_any_case_save_and_load(tmp_path, suffix):
    path = tmp_path / f"x{suffix}"
    assert _explanation().save(path) == path
    (back,) = load_explanations(path)
    np.testing.assert_allclose(back.maps["flow"], _explanation().maps["flow"], rtol=1e-6)
    (gen,) = load_generations(save_generations([_generation()], tmp_path / f"g{suffix}"))
    assert gen.generated_tokens == ["c", "d"]


@pytest.mark.parametrize("suffix", [".HTML", ".PNG"])
def test_pages_and_pictures_take_any_case_too(tmp_path, suffix):
    path = _explanation().save(tmp_path / f"x{suffix}")
    assert path.is_file() and path.stat().st_size > 0


def test_an_unknown_suffix_is_one_line_naming_the_file():
    with pytest.raises(ValueError, match=r"x\.txt: unknown explanation file type '\.txt': use \.json, "):
        file_format("x.txt")
    with pytest.raises(ValueError, match="'\\(no suffix\\)'"):
        load_explanations("x")


def test_check_finite_names_the_first_bad_entry():
    """Layers counted from 1 (L1 = the first, as in every table), tokens from 0."""
    maps = {"raw": np.zeros((3, 4)), "rollout": np.zeros((3, 4))}
    maps["rollout"][2, 3] = maps["rollout"][2, 1] = np.nan
    with pytest.raises(ArtifactError, match=r"^here: map 'rollout' holds 2 value.*at layer 3, token 1;"):
        check_finite(maps, "here")
    check_finite({"raw": np.zeros((3, 4))}, "here")  # all finite: nothing said
