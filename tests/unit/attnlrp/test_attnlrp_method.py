"""attnlrp as a method of the library and CLI: its [layer x token] map, batched like the others."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnflow.attnlrp import attnlrp
from attnflow.attnlrp.maps import attnlrp_map
from attnflow.hf import MODEL_METHODS, explain_batch
from attnflow.method_inputs import MODEL_METHODS as MODEL_METHOD_NAMES
from tests.unit.attnlrp._attnlrp_models import tiny


def test_the_map_is_hidden_relevance_from_the_top_down_ending_in_the_input_relevance():
    model = tiny("bert")
    ids = torch.tensor([2, 7, 9, 11, 3])
    res = attnlrp(model, ids, target=1)
    m = attnlrp_map(model, ids, target=1)
    assert m.shape == (2, 5)  # (L, T)
    np.testing.assert_allclose(
        m[0], res.hidden_relevance[1].numpy(), atol=1e-12
    )  # R(h_1): below the top layer
    np.testing.assert_allclose(m[1], res.input_relevance.numpy(), atol=1e-12)  # lxt's input relevance


@pytest.mark.parametrize("arch", ["bert", "gpt2_cls", "llama"])
def test_a_padded_batch_gives_each_sample_the_map_of_its_own_unpadded_sequence(arch):
    model = tiny(arch)
    model.config.pad_token_id = 0  # a decoder classifier pools the last token that is not padding
    ids = torch.tensor([[2, 7, 9, 11, 5, 3], [2, 8, 13, 3, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    out, per_sample = explain_batch(
        model, {"input_ids": ids, "attention_mask": mask}, methods=["attnlrp", "rollout"], layer=-1, rows="auto",
        residual=0.5, heads="mean", target="predicted", extra_inputs=None,
    )  # fmt: skip
    for b, n in enumerate((6, 4)):
        target = int(out.target[b])
        alone = attnlrp_map(model, ids[b, :n], target=target)
        np.testing.assert_allclose(per_sample[b]["maps"]["attnlrp"], alone, atol=1e-9)
        assert per_sample[b]["maps"]["rollout"].shape == alone.shape


def test_the_cli_and_the_library_offer_the_same_model_methods():
    assert tuple(MODEL_METHODS) == MODEL_METHOD_NAMES


def test_a_model_method_alone_needs_the_target_ids_but_no_attention_gradient_pass():
    # attnlrp runs its own forward and backward: the attention forward only picks the class
    model = tiny("bert")
    ids = torch.tensor([[2, 7, 9, 11, 5, 3]])
    out, (res,) = explain_batch(
        model, {"input_ids": ids}, methods=["attnlrp"], layer=-1, rows="auto", residual=0.5, heads="mean",
        target="predicted", extra_inputs=None,
    )  # fmt: skip
    assert out.attention_grads is None
    assert int(out.target[0]) == int(model(input_ids=ids).logits[0].argmax())
    np.testing.assert_allclose(res["maps"]["attnlrp"], attnlrp_map(model, ids[0], target=int(out.target[0])))
    out, _ = explain_batch(
        model, {"input_ids": ids}, methods=["attnlrp", "chefer"], layer=-1, rows="auto", residual=0.5,
        heads="mean", target="predicted", extra_inputs=None,
    )  # fmt: skip
    assert out.attention_grads is not None  # chefer needs them


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_generation_maps_batch_the_prefixes_and_equal_one_pass_per_generated_token(arch):
    from types import SimpleNamespace

    from attnflow.attnlrp.maps import generation_maps

    model = tiny(arch)
    run = SimpleNamespace(prompt_ids=[2, 7, 9], generated_ids=[11, 5, 3, 8, 4], attn=np.zeros((2, 1)))
    maps = generation_maps(model, run, chunk=2)  # 3 chunks, the last one short
    seq = run.prompt_ids + run.generated_ids[:-1]
    for t, token in enumerate(run.generated_ids):
        alone = attnlrp_map(model, torch.tensor(seq[: 3 + t]), target=token)
        np.testing.assert_allclose(maps[t, :, : 3 + t], alone, rtol=1e-9, atol=1e-11)
        assert not maps[t, :, 3 + t :].any()
