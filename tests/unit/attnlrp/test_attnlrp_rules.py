"""The AttnLRP rules as modified gradients: each one, on a hand-sized case, assigns the relevance
x ⊙ ∂x that the paper's equation gives."""

from __future__ import annotations

import math

import torch

from attnflow.attnlrp import (
    epsilon_rule,
    identity_rule,
    layer_norm_identity,
    rms_norm_identity,
    scale_gradient,
)
from tests.unit.attnlrp._attnlrp_models import transformers

EXACT = 1e-12  # float64 arithmetic on a handful of numbers


def _f64(values, grad=True):
    return torch.tensor(values, dtype=torch.float64, requires_grad=grad)


def test_identity_rule_passes_each_units_relevance_unchanged():
    # eq. 9: R(x_i) = R(y_i) for y = gelu(x); with ∂logit/∂y = w, R(y) = y ⊙ w
    x = _f64([-1.5, 0.25, 2.0])
    w = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    y = identity_rule(torch.nn.functional.gelu, x)
    (g,) = torch.autograd.grad((y * w).sum(), x)
    assert torch.allclose(x * g, y.detach() * w, atol=1e-9)  # 1e-10 stabiliser in f(x)/(x + 1e-10)
    assert torch.equal(y.detach(), torch.nn.functional.gelu(x.detach()))  # forward untouched


def test_uniform_rule_gives_each_factor_of_a_product_half():
    # eq. 7: y = a·b = 3·2 = 6, R(y) = 6 (∂/∂y = 1) -> R(a) = R(b) = 3, binary exact
    a, b = _f64([3.0]), _f64([2.0])
    ga, gb = torch.autograd.grad(scale_gradient(a * b, 0.5).sum(), (a, b))
    assert (a * ga).item() == 3.0 and (b * gb).item() == 3.0


def test_uniform_rule_on_a_matrix_product_conserves():
    # A·V bilinear: Σ A ⊙ ∂A = Σ V ⊙ ∂V = Σ R(C); halved, R(A) + R(V) = R(C)
    torch.manual_seed(0)
    a, v = _f64(torch.rand(3, 3).tolist()), _f64(torch.randn(3, 2).tolist())
    c = scale_gradient(a @ v, 0.5)
    w = torch.randn(3, 2, dtype=torch.float64)
    ga, gv = torch.autograd.grad((c * w).sum(), (a, v))
    r_a, r_v = (a.detach() * ga).sum(), (v.detach() * gv).sum()
    assert math.isclose(r_a + r_v, (c.detach() * w).sum(), abs_tol=EXACT)


def test_softmax_gradient_times_input_is_the_paper_softmax_rule():
    # x = [0, ln 3] -> s = [1/4, 3/4]; explaining s_0 (R(s) = [1/4, 0]) the rule gives
    # R(x) = x ⊙ (R(s) − s ΣR(s)) = [0, ln 3 · (0 − 3/4 · 1/4)] = [0, −3/16 ln 3]; not conservative
    x = _f64([0.0, math.log(3.0)])
    (g,) = torch.autograd.grad(torch.softmax(x, -1)[0], x)
    assert torch.allclose(
        x * g, torch.tensor([0.0, -3 / 16 * math.log(3.0)], dtype=torch.float64), atol=EXACT
    )


def test_epsilon_rule_is_epsilon_lrp_on_a_linear_layer():
    # z = [1 1]·[1, 2] + 1 = 4, R(z) = 4; ε = 4: R(x_i) = x_i w_i R(z) / (z + ε) = [1, 2] · 4/8 = [.5, 1]
    layer = torch.nn.Linear(2, 1).double()
    with torch.no_grad():
        layer.weight.fill_(1.0)
        layer.bias.fill_(1.0)
    x = _f64([[1.0, 2.0]])
    (g,) = torch.autograd.grad(epsilon_rule(layer(x), 4.0).sum(), x)
    assert (x * g).tolist() == [[0.5, 1.0]]
    (g0,) = torch.autograd.grad(epsilon_rule(layer(x), 0.0).sum(), x)
    assert (x * g0).tolist() == [[1.0, 2.0]]  # ε = 0: gradient x input, the bias keeps 1 of 4


def test_layer_norm_with_detached_std_is_layer_norm_and_conserves_without_shift():
    # forward = F.layer_norm; backward of the linear map (x − mean)·w/σ: Σ R(x) = Σ R(y)
    torch.manual_seed(1)
    x = _f64(torch.randn(2, 5).tolist())
    w = torch.randn(5, dtype=torch.float64)
    y = layer_norm_identity(x, w, None, eps=1e-5)
    assert torch.allclose(y, torch.nn.functional.layer_norm(x, (5,), w, None, eps=1e-5), atol=EXACT)
    up = torch.randn(2, 5, dtype=torch.float64)
    (g,) = torch.autograd.grad((y * up).sum(), x)
    assert math.isclose((x.detach() * g).sum(), (y.detach() * up).sum(), abs_tol=EXACT)


def test_rms_norm_with_detached_rms_is_llamas_rmsnorm_and_conserves():
    # forward = LlamaRMSNorm (float32 inside); backward of x·w/rms: Σ R(x) = Σ R(y) up to float32 rounding
    torch.manual_seed(2)
    norm = transformers.models.llama.modeling_llama.LlamaRMSNorm(6, eps=1e-6).double()
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.1)
    x = _f64(torch.randn(3, 6).tolist())
    y = rms_norm_identity(x, norm.weight, eps=norm.variance_epsilon)
    assert torch.equal(y.detach(), norm(x).detach())
    (g,) = torch.autograd.grad(y.sum(), x)
    assert math.isclose((x.detach() * g).sum(), y.detach().sum(), rel_tol=1e-6)  # float32 normalisation
