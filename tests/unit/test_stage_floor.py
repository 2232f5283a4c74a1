"""benchmarks/stage_floor.py counts the products of a forward (and of an input gradient) exactly as
torch's own FLOP counter does on models of the two families (the oracle), for several lengths."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[2]
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def floor():
    spec = importlib.util.spec_from_file_location("stage_floor", ROOT / "benchmarks" / "stage_floor.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _counted(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize("tokens", [1, 3, 8])
def test_an_encoder_forward_counts_as_torch_counts_it(floor, tokens):
    cfg = transformers.BertConfig(
        hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2, vocab_size=50,
        attn_implementation="eager",
    )  # fmt: skip
    model = transformers.BertModel(cfg, add_pooling_layer=False).eval()
    ids = torch.ones(1, tokens, dtype=torch.long)
    with torch.no_grad():
        counted = _counted(lambda: model(input_ids=ids))
    assert floor.encoder_forward_flops(tokens, 16, 24, 2) == counted


@pytest.fixture(scope="module")
def llama():
    cfg = transformers.LlamaConfig(
        hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=4, vocab_size=50, attn_implementation="eager",
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(cfg).eval()
    for p in model.parameters():
        p.requires_grad_(False)  # the gradient to the inputs only, as integrated gradients takes it
    return model, cfg.to_dict()


@pytest.mark.parametrize("tokens", [1, 3, 8])
def test_a_decoder_forward_and_input_gradient_count_as_torch_counts_them(floor, llama, tokens):
    model, cfg = llama
    with torch.no_grad():
        forward = _counted(lambda: model(input_ids=torch.ones(1, tokens, dtype=torch.long), logits_to_keep=1))
    assert floor.llama_forward_flops(tokens, cfg) == forward
    embeds = torch.randn(1, tokens, 16, requires_grad=True)
    both = _counted(lambda: model(inputs_embeds=embeds, logits_to_keep=1).logits[0, -1, 0].backward())
    assert floor.llama_input_gradient_flops(tokens, cfg) == both
    assert embeds.grad is not None and embeds.grad.abs().sum() > 0


def test_lengths_are_read_from_a_ragged_file(floor, tmp_path):
    from attnflow.io import save_ragged

    path = tmp_path / "maps.safetensors"
    save_ragged(path, {"blank_out": [np.zeros(3), np.zeros(5)]})
    assert floor.ragged_lengths(path, "blank_out").tolist() == [3, 5]


def test_a_missing_stage_output_is_named_in_one_line(floor, tmp_path):
    with pytest.raises(SystemExit, match=r"absent\.safetensors is missing: run the study first"):
        floor.ragged_lengths(tmp_path / "absent.safetensors", "blank_out")


def test_a_missing_array_is_named_with_the_keys_there(floor, tmp_path):
    from attnflow.io import save_ragged

    path = tmp_path / "maps.safetensors"
    save_ragged(path, {"flow": [np.zeros(3)]})
    with pytest.raises(SystemExit, match=r"no array 'blank_out' \(keys: flow\.data, flow\.shapes"):
        floor.ragged_lengths(path, "blank_out")
