"""raw_attention and attention_rollout on torch tensors: computed with torch on the tensors' device.

The numpy path (float64) is the oracle: float64 tensors agree to 1e-15, float32 ones to float32
rounding, and nothing leaves the device (no .numpy(), .cpu() or .tolist()).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnflow.explain import attention_rollout, raw_attention

# float32 softmax rows, averaged and multiplied over 4 layers: well within this
F32_TOL = 2e-6
F64_TOL = 1e-14


def _attn(dtype=torch.float64):
    """(B=2, L=4, H=3, T=7, T) probabilities; sample 2 has 5 real tokens (its padding keys get 0)."""
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[1, 5:] = False
    logits = torch.randn(2, 4, 3, 7, 7, generator=g, dtype=torch.float64)
    attn = torch.softmax(logits.masked_fill(~mask[:, None, None, None, :], -torch.inf), dim=-1)
    return attn.to(dtype), mask


METHODS = {
    "raw": lambda a, **kw: raw_attention(a, **kw),
    "raw, head 2": lambda a, **kw: raw_attention(a, heads=2, **kw),
    "raw, max": lambda a, **kw: raw_attention(a, heads="max", **kw),
    "rollout": lambda a, **kw: attention_rollout(a, **kw),
    "rollout, residual 0": lambda a, **kw: attention_rollout(a, residual=0.0, **kw),
    "rollout, sum": lambda a, **kw: attention_rollout(a, heads="sum", renormalize=True, **kw),
}


@pytest.mark.parametrize("name", sorted(METHODS))
@pytest.mark.parametrize("dtype, tol", [(torch.float64, F64_TOL), (torch.float32, F32_TOL)])
def test_torch_in_equals_the_numpy_path_without_leaving_the_device(name, dtype, tol, no_host_copies):
    attn, mask = _attn(dtype)
    got = METHODS[name](attn, mask=mask)
    no_host_copies.undo()
    want = METHODS[name](attn.double().numpy(), mask=mask.numpy())
    assert isinstance(got, torch.Tensor) and got.dtype == dtype and got.device == attn.device
    np.testing.assert_allclose(got.double().numpy(), want, atol=tol, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_mixed_in_float32_and_returned_in_its_dtype(dtype):
    attn, mask = _attn(dtype)
    got = attention_rollout(attn, mask=mask)
    assert got.dtype == dtype
    want = attention_rollout(attn.double().numpy(), mask=mask.numpy(), renormalize=True)
    # the input's own rounding (2^-8 for bfloat16) dominates
    np.testing.assert_allclose(got.double().numpy(), want, atol=3e-2, rtol=0)


def test_one_unbatched_sample_and_lengths():
    attn, _ = _attn()
    one = attn[0]  # (L, H, T, T)
    np.testing.assert_allclose(attention_rollout(one).numpy(), attention_rollout(one.numpy()), atol=F64_TOL)
    np.testing.assert_allclose(
        raw_attention(attn, lengths=torch.tensor([7, 5])).numpy(),
        raw_attention(attn.numpy(), lengths=[7, 5]),
        atol=F64_TOL,
    )


def test_padding_is_exactly_zero():
    attn, mask = _attn()
    out = attention_rollout(attn, mask=mask)
    assert (out[1, :, 5:] == 0).all() and (out[1, :, :, 5:] == 0).all()


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda a: a.masked_fill(
                torch.zeros_like(a, dtype=torch.bool).index_fill_(-1, torch.tensor([0]), True), float("nan")
            ),
            "NaN or inf",
        ),
        (lambda a: a * 2, "must sum to 1"),
        (lambda a: a - 0.5, "negative weights"),
        (lambda a: a[..., :3], "square"),
        (lambda a: a[0, 0], "4 dims"),
    ],
)
def test_the_torch_path_refuses_what_the_numpy_path_refuses_with_the_same_words(change, message):
    attn, _ = _attn()
    bad = change(attn)
    for x in (bad, bad.numpy()):
        with pytest.raises(ValueError, match=message):
            attention_rollout(x)


@pytest.mark.gpu
def test_cuda_tensors_stay_on_cuda_and_equal_the_cpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    attn, mask = _attn()
    for name, method in METHODS.items():
        got = method(attn.cuda(), mask=mask.cuda())
        assert got.device.type == "cuda", name
        np.testing.assert_allclose(got.cpu().numpy(), method(attn.numpy(), mask=mask.numpy()), atol=1e-12)
