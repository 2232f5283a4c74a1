"""Chefer and Grad-SAM on the stream with each layer's attention recomputed in the backward
(`stream_gradient_maps(..., recompute=True)`, the default): the same maps as with autograd saving
every layer's probabilities, and no (B, H, T, T) block saved between the forward and the backward."""

from __future__ import annotations

import pytest
import torch

from attnflow.stream import stream_gradient_maps
from tests.unit.attnlrp._attnlrp_models import VOCAB, tiny

TOKENS = 11  # differs from every width and head count of the tiny models


def _batch() -> dict[str, torch.Tensor]:
    torch.manual_seed(2)
    ids = torch.randint(0, VOCAB, (2, TOKENS))
    mask = torch.ones(2, TOKENS, dtype=torch.long)
    mask[1, 8:] = 0  # right padding: sample 1 has 8 real tokens
    return {"input_ids": ids, "attention_mask": mask}


@pytest.mark.parametrize("block_bytes", [2**24, 600])  # one block per layer; a few query rows per block
@pytest.mark.parametrize("name", ["llama", "bert"])
def test_recomputed_attention_gives_the_saved_attentions_maps(name, block_bytes):
    model = tiny(name)
    rows = [[0], [0]] if name == "bert" else [[TOKENS - 1], [7]]
    kwargs = dict(dtype=torch.float64, block_bytes=block_bytes)
    saved = stream_gradient_maps(model, _batch(), rows, recompute=False, **kwargs)
    again = stream_gradient_maps(model, _batch(), rows, **kwargs)
    for method in ("chefer", "grad_sam"):
        assert torch.allclose(again[method], saved[method], rtol=0, atol=1e-12), method
    assert torch.equal(again["target"], saved["target"])


@pytest.mark.parametrize("recompute", [True, False])
def test_only_the_saving_path_keeps_probabilities_for_the_backward(recompute):
    # tensors autograd saves outside checkpointed regions (whose own are dropped and recomputed)
    model = tiny("llama")
    heads = model.config.num_attention_heads
    shapes = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        shapes.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        stream_gradient_maps(model, _batch(), [[TOKENS - 1], [7]], recompute=recompute)
    probabilities = [s for s in shapes if len(s) == 4 and s[1] == heads and s[-1] == TOKENS and s[-2] > 1]
    assert bool(probabilities) != recompute
