"""Every device-native method on torch tensors: computed with torch on the tensors' device.

raw, rollout, both Chefer rules, Grad-SAM (plain and through their records, i.e. the method kit)
and AttnLRP's map. The numpy path (float64) is the oracle: float64 tensors agree to 1e-12,
float32 ones to float32 rounding (1e-5 relative), and nothing leaves the device (no .numpy(),
.cpu() or .tolist()).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnflow.explain import attention_rollout, chefer_generic, chefer_lrp, raw_attention
from attnflow.methods import METHODS

# float32 against the float64 numpy path, relative to the map's largest entry: softmax rows,
# gradients and relevances in float32, averaged over heads and multiplied over 4 layers
# (measured: ~3e-7 for Chefer's generic rule, whose maps grow with depth)
F32_TOL = 1e-5
F64_TOL = 1e-12


def _inputs(dtype=torch.float64):
    """attn (B=2, L=4, H=3, T=7, T) probabilities, ∇A and R(A) of the same shape (signed), and the
    mask: sample 2 has 5 real tokens (its padding keys get 0)."""
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[1, 5:] = False
    logits = torch.randn(2, 4, 3, 7, 7, generator=g, dtype=torch.float64)
    attn = torch.softmax(logits.masked_fill(~mask[:, None, None, None, :], -torch.inf), dim=-1)
    grad = torch.randn(attn.shape, generator=g, dtype=torch.float64)
    relevance = torch.randn(attn.shape, generator=g, dtype=torch.float64) * attn
    return {"attn": attn.to(dtype), "grad": grad.to(dtype), "rel": relevance.to(dtype), "mask": mask}


def _record(name, **options):
    """The method's record called as the study and the API call it (the kit)."""

    def call(x):
        needs = {"attn_grad": x["grad"], "attn_relevance": x["rel"]}
        return METHODS[name].function(
            x["attn"], mask=x["mask"], **{n: needs[n] for n in METHODS[name].needs}, **options
        )

    return call


METHODS_ON_TENSORS = {
    "raw": lambda x: raw_attention(x["attn"], mask=x["mask"]),
    "raw, head 2": lambda x: raw_attention(x["attn"], heads=2, mask=x["mask"]),
    "raw, max": lambda x: raw_attention(x["attn"], heads="max", mask=x["mask"]),
    "rollout": lambda x: attention_rollout(x["attn"], mask=x["mask"]),
    "rollout, residual 0": lambda x: attention_rollout(x["attn"], residual=0.0, mask=x["mask"]),
    "rollout, sum": lambda x: attention_rollout(x["attn"], heads="sum", renormalize=True, mask=x["mask"]),
    "chefer_generic": lambda x: chefer_generic(x["attn"], x["grad"], mask=x["mask"]),
    "chefer_generic, max, min, from layer 2": lambda x: chefer_generic(
        x["attn"], x["grad"], heads="max", cls_self="min", start_layer=1, mask=x["mask"]
    ),
    "chefer_generic, head 1, zero": lambda x: chefer_generic(
        x["attn"], x["grad"], heads=1, cls_self="zero", mask=x["mask"]
    ),
    "chefer_lrp": lambda x: chefer_lrp(x["rel"], x["grad"], mask=x["mask"]),
    "chefer_lrp, sum, min": lambda x: chefer_lrp(
        x["rel"], x["grad"], heads="sum", cls_self="min", mask=x["mask"]
    ),
    "record raw": _record("raw"),
    "record rollout, rows 0 and 3": _record("rollout", rows=[0, 3]),
    "record chefer, zero": _record("chefer", cls_self="zero"),
    "record chefer_lrp, rows 1": _record("chefer_lrp", rows=[1]),
    "record grad_sam": _record("grad_sam"),
    "record grad_sam, max, rows 0": _record("grad_sam", heads="max", rows=[0]),
}


def _assert_close(got, want, tol):
    """|got - want| <= tol * max(1, max |want|) elementwise: relative to the map's scale."""
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def _numpy(x):
    return {k: v.double().numpy() if v.is_floating_point() else v.numpy() for k, v in x.items()}


@pytest.mark.parametrize("name", sorted(METHODS_ON_TENSORS))
@pytest.mark.parametrize("dtype, tol", [(torch.float64, F64_TOL), (torch.float32, F32_TOL)])
def test_torch_in_equals_the_numpy_path_without_leaving_the_device(name, dtype, tol, no_host_copies):
    x = _inputs(dtype)
    got = METHODS_ON_TENSORS[name](x)
    no_host_copies.undo()
    want = METHODS_ON_TENSORS[name](_numpy(x))
    assert isinstance(want, np.ndarray) and want.dtype == np.float64
    assert isinstance(got, torch.Tensor) and got.dtype == dtype and got.device == x["attn"].device
    _assert_close(got.double().numpy(), want, tol)


def test_float64_tensors_give_the_numpy_numbers():
    """The study's float64 numbers: torch float64 agrees with numpy to rounding (1e-12)."""
    x = _inputs()
    for name, method in METHODS_ON_TENSORS.items():
        np.testing.assert_allclose(method(x).numpy(), method(_numpy(x)), rtol=0, atol=F64_TOL, err_msg=name)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_computed_in_float32_and_returned_in_its_dtype(dtype):
    x = _inputs(dtype)
    for name, method in [("rollout", METHODS_ON_TENSORS["rollout"]), ("grad_sam", _record("grad_sam")),
                         ("chefer", _record("chefer"))]:  # fmt: skip
        got = method(x)
        assert got.dtype == dtype, name
        ref = {**_numpy(x), "attn": _numpy(x)["attn"] / _numpy(x)["attn"].sum(-1, keepdims=True).clip(1e-300)}
        want = method(ref)
        # the input's own rounding (2^-8 for bfloat16) dominates
        _assert_close(got.double().numpy(), want, 3e-2)


def test_one_unbatched_sample_and_lengths():
    x = _inputs()
    one = {k: v[0] for k, v in x.items() if k != "mask"}
    np.testing.assert_allclose(attention_rollout(one["attn"]).numpy(), attention_rollout(one["attn"].numpy()),
                               atol=F64_TOL)  # fmt: skip
    np.testing.assert_allclose(
        chefer_generic(one["attn"], one["grad"]).numpy(),
        chefer_generic(one["attn"].numpy(), one["grad"].numpy()),
        atol=F64_TOL,
    )
    np.testing.assert_allclose(
        chefer_lrp(x["rel"], x["grad"], lengths=torch.tensor([7, 5])).numpy(),
        chefer_lrp(x["rel"].numpy(), x["grad"].numpy(), lengths=[7, 5]),
        atol=F64_TOL,
    )
    np.testing.assert_allclose(
        raw_attention(x["attn"], lengths=torch.tensor([7, 5])).numpy(),
        raw_attention(x["attn"].numpy(), lengths=[7, 5]),
        atol=F64_TOL,
    )


def test_a_numpy_companion_goes_to_the_attentions_device_and_type():
    x = _inputs(torch.float32)
    got = chefer_generic(x["attn"], x["grad"].numpy(), mask=x["mask"])
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    np.testing.assert_allclose(
        got.numpy(), chefer_generic(x["attn"], x["grad"], mask=x["mask"]).numpy(), rtol=0
    )


@pytest.mark.parametrize("name", ["chefer_generic", "chefer_lrp", "record grad_sam", "rollout"])
def test_padding_is_exactly_zero(name):
    out = METHODS_ON_TENSORS[name](_inputs())
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
    attn = _inputs()["attn"]
    bad = change(attn)
    for x in (bad, bad.numpy()):
        with pytest.raises(ValueError, match=message):
            attention_rollout(x)


def _with_inf(g):
    """g (numpy or torch) with one real entry set to inf."""
    out = g.clone() if isinstance(g, torch.Tensor) else g.copy()
    out[0, 0, 0, 0, 0] = float("inf")
    return out


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda x: chefer_generic(x["attn"], x["grad"][..., :3, :3]),
            r"attn_grad must have the shape of attn",
        ),
        (lambda x: chefer_generic(x["attn"], _with_inf(x["grad"])), "attn_grad contains NaN or inf"),
        (lambda x: chefer_generic(x["attn"], x["grad"], start_layer=4), "start_layer 4 out of range"),
        (lambda x: chefer_lrp(x["rel"], x["grad"], cls_self="drop"), "cls_self must be one of"),
        (lambda x: chefer_lrp(x["rel"][0, 0], x["grad"]), "attn_relevance must have 4 dims"),
        (lambda x: _record("grad_sam", rows=[6])({**x, "grad": x["grad"]}), "padding in sample 1"),
        (lambda x: METHODS["grad_sam"].function(x["attn"]), "grad_sam needs attn_grad"),
    ],
)
def test_the_gradient_methods_refuse_on_torch_what_they_refuse_on_numpy(call, message):
    x = _inputs()
    for given in (x, _numpy(x)):
        with pytest.raises(ValueError, match=message):
            call(given)


def test_the_attnlrp_map_is_read_on_the_results_device(no_host_copies):
    from attnflow.attnlrp import attnlrp
    from attnflow.attnlrp.maps import attnlrp_map, relevance_map
    from tests.unit.attnlrp._attnlrp_models import tiny

    no_host_copies.undo()  # the AttnLRP pass itself may read token ids on the host
    model, ids = tiny("bert"), torch.tensor([2, 7, 9, 11, 3])
    res = attnlrp(model, ids, target=1)
    want = attnlrp_map(model, ids, target=1, attention="eager")  # (L, T) float64 numpy, res's attention
    for name in ("numpy", "cpu", "tolist"):
        no_host_copies.setattr(torch.Tensor, name, _refuse(name))
    got = relevance_map(res)
    no_host_copies.undo()
    assert got.dtype == res.hidden_relevance.dtype and got.device == res.hidden_relevance.device
    np.testing.assert_array_equal(got.double().numpy(), want)  # rows picked, values untouched


def _refuse(name):
    def call(self, *args, **kwargs):
        raise AssertionError(f"Tensor.{name}() in code that must stay on the tensors' device")

    return call


@pytest.mark.gpu
def test_every_device_native_method_on_cuda_stays_there_and_equals_the_cpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: this test compares the methods on a GPU with the CPU")
    for dtype, tol in ((torch.float64, F64_TOL), (torch.float32, F32_TOL)):
        x = _inputs(dtype)
        on_gpu = {k: v.cuda() for k, v in x.items()}
        for name, method in METHODS_ON_TENSORS.items():
            got = method(on_gpu)
            assert got.device.type == "cuda" and got.dtype == dtype, name
            _assert_close(got.double().cpu().numpy(), method(x).double().numpy(), tol)
