"""Attention sinks on the stream: the sink scores and the per-head sink handling of
attnflow.explain.causal, computed layer by layer inside the forward (no (L, H, T, T) held)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from attnflow.bridge import forward
from attnflow.explain import attention_flow, attention_rollout, raw_attention
from attnflow.explain.causal import find_sinks, remove_sinks, sink_scores, sinks_from_scores
from attnflow.stream import handle_sinks, stream_maps, stream_sink_scores

TOL = 1e-12  # float64: the same operations up to the order of a few sums


def _models():
    torch.manual_seed(0)
    return {
        "llama": LlamaForCausalLM(
            LlamaConfig(vocab_size=50, num_hidden_layers=3, hidden_size=32, intermediate_size=64,
                        num_attention_heads=4, num_key_value_heads=2)
        ).eval(),
        "gpt2": GPT2LMHeadModel(
            GPT2Config(n_embd=32, n_layer=3, n_head=4, vocab_size=50, bos_token_id=0, eos_token_id=0)
        ).eval(),
    }  # fmt: skip


MODELS = _models()


def _batch():
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 50, (2, 12), generator=g)
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 9:] = 0  # the second sample is padded (right)
    return {"input_ids": ids, "attention_mask": mask}


def _attn(model, batch):
    return forward(model, batch, ("attentions",), target=None).attentions.double().numpy()  # (B, L, H, T, T)


@pytest.mark.parametrize("family", sorted(MODELS))
def test_streamed_sink_scores_are_the_captured_attentions_scores(family):
    model, batch = MODELS[family], _batch()
    mask = batch["attention_mask"].bool().numpy()
    attn = _attn(model, batch)
    scores, seen, causal = stream_sink_scores(model, batch)
    assert causal
    np.testing.assert_allclose(scores, sink_scores(attn, mask=mask), atol=TOL, rtol=0)
    assert seen.tolist()[1][8:] == [0, 0, 0, 0]  # the last real row and the padding: seen by no other row
    rows_of_one, _, _ = stream_sink_scores(model, batch, block_bytes=1)  # one query row per block
    np.testing.assert_allclose(rows_of_one, scores, atol=1e-7, rtol=0)  # the model's float32 blocks differ
    for threshold, scope in [(0.2, "head"), (0.2, "position"), (0.5, "position")]:
        want = find_sinks(attn, threshold=threshold, scope=scope, mask=mask)
        got = sinks_from_scores(scores, seen, threshold=threshold, scope=scope)
        np.testing.assert_array_equal(got, want)


def _sink_mask(attn_shape, seed):
    b, layers, h, _, t = attn_shape
    rng = np.random.default_rng(seed)
    keys = rng.random((b, layers, h, t)) < 0.3
    keys[:, :, :, 0] = True  # token 0 a sink of every head
    keys[1, :, :, 9:] = False  # padding is never a sink
    return keys


@pytest.mark.parametrize("family", sorted(MODELS))
@pytest.mark.parametrize("mode", ["diagonal", "drop"])
def test_streamed_sink_handling_gives_the_classic_maps(family, mode):
    model, batch = MODELS[family], _batch()
    mask = batch["attention_mask"].bool().numpy()
    attn = _attn(model, batch)
    keys = _sink_mask(attn.shape, 7)
    handled = remove_sinks(attn, mode=mode, sinks=keys, mask=mask)
    rows = torch.tensor([[2, 11], [0, 8]])
    got = stream_maps(model, batch, rows, dtype=torch.float64, sinks=keys, sink_mode=mode, flow_layers=[2])
    take = rows.numpy()[:, None, :, None]
    want_raw = np.take_along_axis(raw_attention(handled, mask=mask), take, axis=2)
    want_rollout = np.take_along_axis(attention_rollout(handled, mask=mask), take, axis=2)
    np.testing.assert_allclose(got["raw"].numpy(), want_raw, atol=TOL, rtol=0)
    np.testing.assert_allclose(got["rollout"].numpy(), want_rollout, atol=TOL, rtol=0)
    for b in range(2):
        flow = attention_flow(handled[b : b + 1], sources=rows[b].tolist(), layers=[2], mask=mask[b : b + 1])[
            0
        ]
        np.testing.assert_allclose(got["flow"][b].numpy(), flow, atol=1e-9, rtol=0)
    plain = stream_maps(model, batch, rows, dtype=torch.float64, sinks=keys, sink_mode="none")
    assert not torch.allclose(plain["rollout"], got["rollout"])  # the handling did something


def test_handle_sinks_by_hand():
    # remove_sinks' own example, row by row: token 0 is the sink; rows 1 and 2 of a 3-token head
    a = torch.tensor([[[[1.0, 0, 0], [0.5, 0.5, 0], [0.5, 0.25, 0.25]]]], dtype=torch.float64)
    keys = torch.tensor([[[True, False, False]]])
    diagonal = handle_sinks(a[:, :, 1:], keys, 1, "diagonal")  # rows 1..2 as one block
    assert diagonal[0, 0].tolist() == [[0.0, 1.0, 0.0], [0.0, 0.25, 0.75]]
    assert handle_sinks(a[:, :, 1:], keys, 1, "drop")[0, 0].tolist() == [[0.0, 1.0, 0.0], [0.0, 0.5, 0.5]]
    assert handle_sinks(a[:, :, :1], keys, 0, "diagonal")[0, 0].tolist() == [[1.0, 0.0, 0.0]]  # self is kept
    with pytest.raises(ValueError, match="sink mode"):
        handle_sinks(a, keys, 0, "none")


def test_a_sink_mask_of_the_wrong_shape_is_refused():
    model, batch = MODELS["llama"], _batch()
    with pytest.raises(ValueError, match=r"sinks must be a \(batch, layer, head, key\)"):
        stream_maps(model, batch, [0], sinks=np.zeros((2, 3, 12), dtype=bool), sink_mode="drop")
    with pytest.raises(ValueError, match="sink_mode must be"):
        stream_maps(model, batch, [0], sink_mode="auto")


@pytest.mark.parametrize("family", sorted(MODELS))
@pytest.mark.parametrize("sinks", ["none", "diagonal", "drop"])
def test_explain_streams_the_gradient_methods_with_sinks_as_the_classic_path_computes_them(family, sinks):
    """`explain_batch` routes Chefer and Grad-SAM through the gradient stream (∇A reduced over heads
    in the backward, each head's attention sink-handled in the product), with the classic path's
    numbers: the model is float32, so both sides differ by its batch's float32 rounding only."""
    from attnflow.hf.text import explain_batch

    model, batch = MODELS[family], _batch()
    kw = dict(methods=["chefer", "grad_sam"], layer=-1, rows="auto", residual=0.5, heads="mean", target="predicted",
              extra_inputs=None, sinks=sinks, sink_positions=[0, 3] if sinks != "none" else "auto")  # fmt: skip
    classic = explain_batch(model, batch, stream=False, **kw)[1]
    streamed = explain_batch(model, batch, **kw)[1]
    for a, b in zip(classic, streamed, strict=True):
        for name in ("chefer", "grad_sam"):
            scale = np.abs(a["maps"][name]).max()
            np.testing.assert_allclose(
                b["maps"][name], a["maps"][name], atol=1e-6 * scale, rtol=0, err_msg=name
            )
    if sinks != "none":  # the handling did something
        plain = explain_batch(model, batch, **{**kw, "sinks": "none", "sink_positions": "auto"})[1]
        assert not np.allclose(plain[0]["maps"]["chefer"], streamed[0]["maps"]["chefer"])


def test_explain_takes_the_gradient_stream(monkeypatch):
    """The default path of a causal LM's Chefer is the stream (no (B, L, H, T, T) gradient captured)."""
    import attnflow.stream as stream
    from attnflow.hf.text import explain_batch

    calls = []
    real = stream.stream_gradient_maps
    monkeypatch.setattr(stream, "stream_gradient_maps", lambda *a, **k: calls.append(k) or real(*a, **k))
    explain_batch(MODELS["llama"], _batch(), methods=["chefer"], layer=-1, rows="auto", residual=0.5, heads="mean",
                  target="predicted", extra_inputs=None, sinks="auto")  # fmt: skip
    assert len(calls) == 1 and calls[0]["dtype"] == torch.float64
