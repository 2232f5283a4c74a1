"""Streaming capture (attnflow.stream): the maps of the classic capture, without (L, H, T, T) in memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    BertModel,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
)

from attnflow.bridge import forward
from attnflow.explain import attention_flow, attention_rollout, chefer_generic, raw_attention
from attnflow.methods.grad_sam import grad_sam_map
from attnflow.stream import (
    GRAD_STREAM_METHODS,
    STREAM_METHODS,
    stream_gradient_maps,
    stream_maps,
    tril_matmul,
)

# float64 maps: the same float64 operations as attnflow.explain up to the order of a few sums
F64_TOL = 1e-12
# ... of the tiny float32 models' attention where the stream's forward and the classic capture's
# are not bit-identical. On an AVX2 CPU (AMD EPYC, 2026-11-27) GPT-2's are not, even on the same
# batch of two: the first layer's probabilities agree bit for bit, its attention outputs by 4.7e-10,
# the last layer's probabilities by 1.9e-9 (Llama's and BERT's agree bit for bit); a sample's
# probabilities also differ by 7.5e-9 between a batch of two and the sample alone. On the AVX-512
# CPUs before, all were bit-identical. Such maps agree to the float32 rounding of the
# probabilities, not to F64_TOL.
F32_FORWARD_TOL = 1e-8
# float32 maps: softmax rows are off by ~1e-7; products of 3 layers stay well within this
F32_TOL = 1e-6


def _forward_tol(family: str, tol: float) -> float:
    """`tol` for a comparison of the two captures' maps; at least F32_FORWARD_TOL for GPT-2, whose two
    float32 forwards are not bit-identical on every CPU (above)."""
    return max(tol, F32_FORWARD_TOL) if family == "gpt2" else tol


def _models():
    """The tiny models in eval mode: a test's own plain forward (the reference) must not drop out
    (in training mode GPT-2's dropout made the blocks test fail when it ran alone)."""
    torch.manual_seed(0)
    small = dict(vocab_size=50, num_hidden_layers=3)
    models = {
        "llama": LlamaForCausalLM(
            LlamaConfig(
                hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, **small
            )
        ),
        "bert": BertModel(BertConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, **small)),
        "gpt2": GPT2LMHeadModel(
            GPT2Config(n_embd=32, n_layer=3, n_head=4, vocab_size=50, bos_token_id=0, eos_token_id=0)
        ),
    }
    return {name: model.eval() for name, model in models.items()}


MODELS = _models()


def _batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 50, (2, 9), generator=g)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0  # the second sample is padded (right)
    return {"input_ids": ids, "attention_mask": mask}


ROWS = torch.tensor([[0, 8], [0, 5]])  # per sample: the first token and the last real one


def _classic(model, batch):
    """Every method on the classic capture (B, L, H, T, T), at ROWS: raw / rollout (B, L, R, T), flow (B, 1, R, T)."""
    attn = forward(model.eval(), batch, ("attentions",), target=None).attentions.double()
    mask = batch["attention_mask"].bool()
    take = ROWS[:, None, :, None].expand(-1, attn.shape[1], -1, attn.shape[-1])
    flow = [
        attention_flow(attn[b : b + 1], sources=ROWS[b].tolist(), layers=[2], mask=mask[b : b + 1])[0]
        for b in range(attn.shape[0])
    ]
    return {
        "raw": raw_attention(attn, mask=mask).gather(2, take),
        "rollout": attention_rollout(attn, mask=mask).gather(2, take),
        "flow": torch.stack(flow),
    }


@pytest.mark.parametrize("family", sorted(MODELS))
@pytest.mark.parametrize("dtype, tol", [(torch.float64, F64_TOL), (torch.float32, F32_TOL)])
def test_streaming_and_classic_captures_agree_on_every_method(family, dtype, tol):
    model, batch, tol = MODELS[family], _batch(), _forward_tol(family, tol)
    want = _classic(model, batch)
    got = stream_maps(model, batch, ROWS, STREAM_METHODS, dtype=dtype, flow_layers=[2])
    for method in STREAM_METHODS:
        assert got[method].dtype == dtype
        np.testing.assert_allclose(got[method].double(), want[method], atol=tol, rtol=0, err_msg=method)


@pytest.mark.parametrize("family", sorted(MODELS))
def test_query_blocks_change_neither_the_maps_nor_the_logits(family):
    """The model's eager attention over blocks of one query row gives what one block gives."""
    model, batch = MODELS[family], _batch()
    whole = stream_maps(model, batch, ROWS, dtype=torch.float64)
    rows_of_one = stream_maps(model, batch, ROWS, dtype=torch.float64, block_bytes=1)
    for method in STREAM_METHODS:
        np.testing.assert_allclose(rows_of_one[method], whole[method], atol=1e-7, rtol=0, err_msg=method)
    with torch.no_grad():
        plain = model(**batch)
    if getattr(plain, "logits", None) is not None:  # a language model's logits at the rows (B, R, V)
        at_rows = plain.logits.gather(1, ROWS[:, :, None].expand(-1, -1, plain.logits.shape[-1]))
        torch.testing.assert_close(rows_of_one["logits"], at_rows, atol=1e-6, rtol=0)


def test_the_model_keeps_its_attention_implementation_also_when_the_stream_fails():
    model = MODELS["llama"]
    before = model.config._attn_implementation
    with pytest.raises(ValueError, match="rows must be real tokens"):
        stream_maps(model, _batch(), [7])  # position 7 is padding in sample 2
    assert model.config._attn_implementation == before
    bad = _batch()
    bad["input_ids"] = bad["input_ids"][:, :0]
    with pytest.raises(Exception):  # noqa: B017 - whatever the model raises on an empty input
        stream_maps(model, bad, [0])
    assert model.config._attn_implementation == before


@pytest.fixture
def classic_llama():
    """The classic capture's maps of the Llama (the oracle, computed before any device guard)."""
    return _classic(MODELS["llama"], _batch())


def test_the_stream_never_leaves_the_tensors_device(classic_llama, no_host_copies):
    """raw and rollout are computed in torch: no .numpy(), .cpu() or .tolist() while they run."""
    got = stream_maps(MODELS["llama"], _batch(), ROWS, ("raw", "rollout"), dtype=torch.float64)
    no_host_copies.undo()
    for method in ("raw", "rollout"):
        np.testing.assert_allclose(got[method], classic_llama[method], atol=F64_TOL, rtol=0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(methods=("chefer",)), "streaming capture computes"),
        (dict(residual=1.5), "residual must be"),
        (dict(dtype=torch.float16), "dtype must be"),
        (dict(flow_layers=[3]), "flow_layers must be"),
    ],
)
def test_bad_options_are_refused_naming_them(kwargs, message):
    with pytest.raises(ValueError, match=message):
        stream_maps(MODELS["llama"], _batch(), ROWS, **kwargs)


def test_rows_out_of_range_are_refused():
    with pytest.raises(ValueError, match="rows must be"):
        stream_maps(MODELS["llama"], _batch(), [9])


@pytest.mark.gpu
def test_the_stream_on_cuda_equals_the_cpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    cpu = stream_maps(MODELS["llama"], _batch(), ROWS, dtype=torch.float64)
    model = MODELS["llama"].to("cuda")
    try:
        gpu = stream_maps(model, {k: v.cuda() for k, v in _batch().items()}, ROWS.cuda(), dtype=torch.float64)
    finally:
        model.to("cpu")
    for method in STREAM_METHODS:
        assert gpu[method].device.type == "cuda"
        np.testing.assert_allclose(gpu[method].cpu(), cpu[method], atol=1e-10, rtol=0)


def test_the_blocked_product_of_lower_triangular_matrices_is_the_product():
    g = torch.Generator().manual_seed(0)
    a, b = (torch.rand(2, 37, 37, generator=g, dtype=torch.float64).tril() for _ in range(2))
    for block in (1, 5, 36, 37, 64):
        torch.testing.assert_close(tril_matmul(a, b, block), a @ b, atol=1e-13, rtol=0)


def test_causal_rollout_takes_the_triangular_path_and_agrees(monkeypatch):
    """A causal LM's rollout runs the blocked triangular product (block of 2 rows here)."""
    import attnflow.stream_state as stream_state

    calls = []
    real = stream_state.tril_matmul
    monkeypatch.setattr(stream_state, "tril_matmul", lambda a, b: calls.append(1) or real(a, b, 2))
    model, batch = MODELS["llama"], _batch()
    got = stream_maps(model, batch, ROWS, ("rollout",), dtype=torch.float64)
    assert len(calls) == 2  # layers 2 and 3
    np.testing.assert_allclose(got["rollout"], _classic(model, batch)["rollout"], atol=F64_TOL, rtol=0)


def _classifier():
    torch.manual_seed(2)
    config = BertConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                        num_attention_heads=4, num_labels=3)  # fmt: skip
    return BertForSequenceClassification(config).eval()


GRAD_MODELS = {"llama": MODELS["llama"], "gpt2": MODELS["gpt2"], "bert classifier": _classifier()}


@pytest.mark.parametrize("family", sorted(GRAD_MODELS))
@pytest.mark.parametrize("block_bytes, tol", [(2**30, F64_TOL), (1, 1e-8)])
def test_gradients_reduced_in_the_backward_equal_the_classic_chefer_and_grad_sam(family, block_bytes, tol):
    """Ā(l) and G(l) from hooks on each layer's probabilities vs the full (B, L, H, T, T) ∇A.

    One block: the same float64 products (to 1e-12; GPT-2 to its forwards' rounding,
    F32_FORWARD_TOL). Blocks of one query row: the model's float32 forward changes by rounding, so
    the maps by ~1e-9."""
    model, batch, tol = GRAD_MODELS[family].eval(), _batch(), _forward_tol(family, tol)
    cap = forward(model, batch, ("attentions", "attn_grad"), target="predicted")
    attn, grad, mask = cap.attentions.double(), cap.attention_grads.double(), batch["attention_mask"].bool()
    take = ROWS[:, None, :, None].expand(-1, attn.shape[1], -1, attn.shape[-1])
    want = {
        "chefer": chefer_generic(attn, grad, mask=mask).gather(2, take),
        "grad_sam": grad_sam_map(attn, attn_grad=grad, mask=mask).gather(2, take),
    }
    got = stream_gradient_maps(model, batch, ROWS, dtype=torch.float64, block_bytes=block_bytes)
    assert got["target"].tolist() == cap.target.tolist()
    for method in GRAD_STREAM_METHODS:
        np.testing.assert_allclose(got[method], want[method], atol=tol, rtol=0, err_msg=method)


def test_gradient_stream_leaves_no_gradient_on_the_parameters():
    model = GRAD_MODELS["bert classifier"]
    stream_gradient_maps(model, _batch(), ROWS, target=1)
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("family", sorted(MODELS))
@pytest.mark.parametrize("rows", ["auto", "cls", "last", 2])
def test_the_api_streams_raw_rollout_and_flow_with_the_numbers_of_the_classic_capture(family, rows):
    """explain_batch streams when it can (no (B, L, H, T, T) captured) and says the same, to 1e-15
    (GPT-2 to its forwards' rounding, F32_FORWARD_TOL)."""
    from attnflow.hf import explain_batch

    options = dict(methods=["raw", "rollout", "flow"], layer=-1, rows=rows, residual=0.5, heads="mean",
                   target="predicted", extra_inputs=None)  # fmt: skip
    streamed_out, streamed = explain_batch(MODELS[family], _batch(), **options)
    classic_out, classic = explain_batch(MODELS[family], _batch(), stream=False, **options)
    assert streamed_out.attentions is None and classic_out.attentions is not None
    for s, c in zip(streamed, classic, strict=True):
        assert (s["row"], s["layer"], s["lm"]) == (c["row"], c["layer"], c["lm"])
        for method in ("raw", "rollout", "flow"):
            np.testing.assert_allclose(
                s["maps"][method], c["maps"][method], atol=_forward_tol(family, 1e-15), rtol=0
            )
        if c["logits"] is not None:
            np.testing.assert_allclose(s["logits"], c["logits"], atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_a_large_causal_graph_is_kept_packed_and_gives_the_dense_flow(monkeypatch, family):
    """Past FLOW_PACKED_BYTES (0 here) an unpadded causal model's capacities are kept as lower
    triangles and flow is read from them in place; the values are the dense solver's (on the
    classic capture) to 1e-12 (GPT-2 to its forwards' rounding, F32_FORWARD_TOL)."""
    import attnflow.explain.flow as flow_module
    import attnflow.stream_state as stream_state

    model, batch = MODELS[family].eval(), _batch()  # eval: GPT-2's attention dropout off
    batch = {"input_ids": batch["input_ids"], "attention_mask": torch.ones_like(batch["attention_mask"])}
    attn = forward(model, batch, ("attentions",), target=None).attentions.double()
    dense = [attention_flow(attn[b : b + 1], sources=ROWS[b].tolist(), layers=[1, 2])[0] for b in range(2)]
    calls = []
    real = flow_module.flow_rows_packed
    monkeypatch.setattr(flow_module, "flow_rows_packed", lambda *a: calls.append(a[0].shape) or real(*a))
    monkeypatch.setattr(stream_state, "FLOW_PACKED_BYTES", 0)
    packed = stream_maps(model, batch, ROWS, ("flow",), dtype=torch.float64, flow_layers=[1, 2])["flow"]
    assert calls == [(3, 9 * 10 // 2)] * 2  # one call per sample, (layers, T (T + 1) / 2)
    np.testing.assert_allclose(packed, torch.stack(dense), atol=_forward_tol(family, F64_TOL), rtol=0)


def test_a_small_graph_a_padded_batch_or_an_encoder_keeps_the_dense_layout(monkeypatch):
    """The study's short inputs keep the dense solver's numbers bit for bit."""
    import attnflow.stream_state as stream_state

    batch = {"input_ids": _batch()["input_ids"]}
    seen = []
    real = stream_state.StreamState.keep_caps
    monkeypatch.setattr(
        stream_state.StreamState, "keep_caps", lambda self, a: real(self, a) or seen.append(self.packed)
    )
    stream_maps(MODELS["llama"], batch, ROWS, ("flow",), dtype=torch.float64, flow_layers=[2])  # 9 tokens
    assert seen == [False] * 3
    monkeypatch.setattr(stream_state, "FLOW_PACKED_BYTES", 0)
    seen.clear()
    for family in ("llama", "bert"):  # padded; not causal
        batch = _batch() if family == "llama" else {"input_ids": _batch()["input_ids"]}
        stream_maps(MODELS[family], batch, ROWS, ("flow",), dtype=torch.float64, flow_layers=[2])
    assert seen == [False] * 6


def test_a_layer_that_sees_ahead_turns_the_packed_layers_back_to_dense(monkeypatch):
    import attnflow.stream_state as stream_state

    monkeypatch.setattr(stream_state, "FLOW_PACKED_BYTES", 0)
    state = stream_state.StreamState(torch.tensor([[3]]), torch.ones(1, 4, dtype=torch.bool), ("flow",), 3)
    g = torch.Generator().manual_seed(0)
    layers = [torch.rand(1, 4, 4, generator=g, dtype=torch.float64) for _ in range(3)]
    layers[0], layers[1] = layers[0].tril(), layers[1].tril()  # the third sees ahead
    for a in layers:
        state.keep_caps(a)
        state.layer += 1
        assert state.packed == (state.layer < 3)
    np.testing.assert_array_equal(state.caps[0], torch.cat(layers).numpy())


def test_streaming_runs_a_model_in_training_mode_without_dropout_and_gives_its_flags_back():
    """A model left in training mode (dropout on) streams the maps of eval mode, as the capturing path
    does, and every submodule gets its own flag back (one of them set apart by the caller)."""
    from attnflow.hf import explain_batch

    model = MODELS["bert"]
    before = [m.training for m in model.modules()]
    options = dict(methods=["raw", "rollout", "flow"], layer=-1, rows="cls", residual=0.5, heads="mean",
                   target="predicted", extra_inputs=None)  # fmt: skip
    try:
        model.train()
        model.embeddings.eval()  # the caller's own choice for one part
        flags = [m.training for m in model.modules()]
        _, streamed = explain_batch(model, _batch(), **options)
        assert [m.training for m in model.modules()] == flags
        _, classic = explain_batch(model.eval(), _batch(), stream=False, **options)
    finally:
        for m, flag in zip(model.modules(), before, strict=True):
            m.training = flag
    for s, c in zip(streamed, classic, strict=True):
        for method in ("raw", "rollout", "flow"):
            np.testing.assert_allclose(s["maps"][method], c["maps"][method], atol=1e-15, rtol=0)


def test_the_default_block_is_cache_sized_on_the_cpu_and_a_share_of_free_memory_on_a_gpu(monkeypatch):
    """On a GPU a block of 16 MiB was 10 query rows of an 8,192-token layer of 32 heads: 820 blocks
    a layer, the kernel launches the whole cost; there the block is a share of the free memory."""
    from attnflow import stream_state

    assert stream_state.block_bytes_for("cpu") == stream_state.BLOCK_BYTES
    free = {"bytes": 120 * 2**30}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free["bytes"], 141 * 2**30))
    assert stream_state.block_bytes_for("cuda") == stream_state.GPU_BLOCK_BYTES  # capped
    free["bytes"] = 4 * 2**30
    assert stream_state.block_bytes_for("cuda") == 4 * 2**30 // stream_state.GPU_BLOCK_SHARE
    free["bytes"] = 2**20  # a nearly full card: never below the CPU's block
    assert stream_state.block_bytes_for("cuda") == stream_state.BLOCK_BYTES
