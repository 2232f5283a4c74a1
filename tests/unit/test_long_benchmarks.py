"""benchmarks/long_inputs.py's gradients section and benchmarks/model_scale.py run, and say what
they measured against what (the input gradient of the same run)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
transformers = pytest.importorskip("transformers")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def long_inputs():
    return _load("long_inputs")


def _tiny_llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config).eval()


def test_every_gradient_path_runs_and_the_attnlrp_paths_agree(long_inputs):
    model = _tiny_llama()
    ids = torch.randint(0, 64, (1, 13))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    relevance = {}
    for path in long_inputs.GRAD_PATHS:
        model.set_attn_implementation("eager" if path == "attnlrp-eager" else "sdpa")
        got = long_inputs.run_gradient(model, batch, path)
        if path.startswith("attnlrp"):
            relevance[path] = got["input_relevance"]
        elif path in ("chefer", "grad-sam"):
            key = "chefer" if path == "chefer" else "grad_sam"
            assert got[key].shape == (1, 2, 1, 13)
    ref = relevance["attnlrp-eager"]
    for path in ("attnlrp", "attnlrp-checkpoint"):  # float32: the eager path's values to rounding
        assert float((relevance[path] - ref).abs().max() / ref.abs().max()) < 1e-5, path


def test_the_gradient_table_divides_by_the_input_gradient_of_the_same_length(long_inputs):
    rows = [
        {"kind": "gradients", "size": 512, "path": "input-grad", "seconds": 2.0, "ru_maxrss_bytes": 2**30},
        {"kind": "gradients", "size": 512, "path": "attnlrp", "seconds": 3.0, "ru_maxrss_bytes": 2**31,
         "input_relevance": [1.0, 2.0]},
        {"kind": "gradients", "size": 512, "path": "attnlrp-eager", "seconds": 4.0, "ru_maxrss_bytes": 2**31,
         "input_relevance": [1.0, 2.0 + 2e-6]},
        {"kind": "gradients", "size": 4096, "path": "chefer", "over_cap_gb": 8.0},
    ]  # fmt: skip
    meta = {"cpu": "a CPU, 2 CPUs", "device": "cpu", "load_before": (1.0, 2.0, 3.0), "load_after": (1, 1, 1)}
    text = long_inputs.gradient_table(rows, meta)
    assert "a CPU, 2 CPUs" in text and "load average 1.00 2.00 3.00 before" in text
    assert "| attnlrp | 512 | 3.0 | 1.50 | 2.00 GB | 1.0e-06 |" in text  # 3 s / 2 s; |2e-6| / 2
    assert "| chefer | 4,096 | | | over 8 GB | |" in text


@pytest.mark.slow
def test_model_scale_runs_at_a_tiny_size(tmp_path):
    model_scale = _load("model_scale")
    out = tmp_path / "scale.json"
    result = model_scale.main(["--shape", "tiny", "--device", "cpu", "--lengths", "32", "--out", str(out)])
    assert [r["method"] for r in result["rows"]] == ["rollout", "attnlrp"]
    assert all(r["finite"] and r["seconds"] > 0 for r in result["rows"])
    assert json.loads(out.read_text())["meta"]["shape"] == "tiny"


def test_a_worker_writing_more_than_a_pipe_holds_is_read_whole(long_inputs):
    # a 4,096-token worker's JSON (its input relevance) passes the pipe's 64 KiB: read while it runs
    import sys

    out, status, peak, over = long_inputs.watch([sys.executable, "-c", "print('x' * 200_000)"], cap_gb=8.0)
    assert (len(out.strip()), status, over) == (200_000, 0, False) and peak > 0
