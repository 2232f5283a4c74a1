"""The AttnLRP rules as gradient modifications ("gradient x input with a modified backward").

Achtibat et al., "AttnLRP: Attention-Aware Layer-Wise Relevance Propagation for Transformers"
(ICML 2024). In a network whose every step is linear and bias-free, relevance R(x) = x ⊙ ∂f/∂x
is LRP-0 (ε-LRP with ε = 0). Each non-linear step gets a rule by changing only its backward,
so that x ⊙ ∂x stays the relevance that the rule assigns:

- identity rule (element-wise f: GELU, SiLU, tanh):   ∂x = ∂y · f(x) / (x + 1e-10)   so R(x) = R(y)
- uniform rule (product of two activations, y = a·b): ∂y / 2 before the product, so R(a) = R(b) = R(y) / 2
- ε rule (linear z = Wx + b):                        ∂z · z / (z + ε·sign z)
- normalisation (LayerNorm, RMSNorm): the normaliser σ is detached, so the norm is the linear map
  x ↦ (x − mean x) · w / σ (+ b) and conserves (bar its shift b)
- softmax: the plain gradient; x ⊙ ∂x = x ⊙ (R(s) − s Σ R(s)) is the paper's softmax rule (not conservative)

The functions here are pure: tensors in, tensors out; the model plumbing lives in ``patch``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = [
    "IDENTITY_EPS",
    "epsilon_rule",
    "identity_rule",
    "layer_norm_identity",
    "rms_norm_identity",
    "scale_gradient",
]

IDENTITY_EPS = 1e-10  # keeps f(x) / x finite at x = 0 (lxt's value, so that its numbers are matched)


class _IdentityRule(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
        y = fn(x)
        ctx.save_for_backward(y / (x + IDENTITY_EPS))
        return y

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[None, Tensor]:
        (ratio,) = ctx.saved_tensors
        return None, grad * ratio


class _ScaleGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, factor: Tensor | float) -> Tensor:
        ctx.factor = factor
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        return grad * ctx.factor, None


class _EpsilonRule(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z: Tensor, epsilon: float) -> Tensor:
        sign = torch.where(z >= 0, 1.0, -1.0).to(z.dtype)  # sign(0) = +1: never divide by 0
        ctx.save_for_backward(z / (z + epsilon * sign))
        return z.view_as(z)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        (ratio,) = ctx.saved_tensors
        return grad * ratio, None


def identity_rule(fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """y = fn(x) forward; backward ∂x = ∂y · fn(x) / (x + 1e-10), so x ⊙ ∂x = y ⊙ ∂y (identity rule).

    AttnLRP eq. 9 for element-wise non-linearities: each unit passes its relevance on unchanged.

    >>> x = torch.tensor([-1.0, 2.0], dtype=torch.float64, requires_grad=True)
    >>> y = identity_rule(torch.tanh, x)
    >>> (g,) = torch.autograd.grad(y.sum(), x)
    >>> torch.allclose(x * g, y.detach())  # R(x) = R(y) with R(y) = y * 1
    True
    """
    return _IdentityRule.apply(fn, x)


def scale_gradient(x: Tensor, factor: Tensor | float) -> Tensor:
    """Identity forward; backward ∂x = factor · ∂y (factor broadcasts against ∂y).

    The uniform rule (AttnLRP eq. 7) for y = a · b: R(a) = a ⊙ ∂a is the full R(y) under
    gradient x input (a bilinear product is homogeneous in each factor), so halving ∂y gives
    each factor half. For q·kᵀ followed by softmax and A·V, halving at both products equals
    scaling ∂q, ∂k by 1/4 and ∂v by 1/2 (softmax's backward and the maps in between are linear in ∂).

    >>> a = torch.tensor([3.0], dtype=torch.float64, requires_grad=True)
    >>> b = torch.tensor([2.0], dtype=torch.float64, requires_grad=True)
    >>> y = scale_gradient(a * b, 0.5)
    >>> ga, gb = torch.autograd.grad(y.sum(), (a, b))
    >>> (a * ga).item(), (b * gb).item()  # R(y) = 6 split 3 / 3
    (3.0, 3.0)
    """
    return _ScaleGradient.apply(x, factor)


def epsilon_rule(z: Tensor, epsilon: float) -> Tensor:
    """Identity forward on a linear output z = Wx + b; backward ∂z · z / (z + ε·sign z).

    ε-LRP: R(x_i) = Σ_j x_i W_ji R(z_j) / (z_j + ε·sign z_j) with R(z) = z ⊙ ∂z; ε = 0 is
    gradient x input (returned unchanged). Larger ε absorbs the relevance of weak, noisy z_j.

    >>> z = torch.tensor([1.0, -1.0], dtype=torch.float64, requires_grad=True)
    >>> (g,) = torch.autograd.grad(epsilon_rule(z, 1.0).sum(), z)
    >>> g.tolist()  # z / (z + sign z): half the gradient at |z| = ε
    [0.5, 0.5]
    """
    if epsilon == 0:
        return z
    return _EpsilonRule.apply(z, float(epsilon))


def layer_norm_identity(x: Tensor, weight: Tensor | None, bias: Tensor | None, *, eps: float) -> Tensor:
    """LayerNorm with the standard deviation detached: y = (x − mean x) / sg(σ) · w + b.

    σ = sqrt(var x + eps) over the last axis (biased variance, as torch). The forward equals
    ``F.layer_norm``; the backward treats 1/σ as a constant, so the centring and the gain are
    linear maps and relevance is conserved except the share of the shift b (identity rule on the division).

    >>> x = torch.tensor([[1.0, 2.0, 4.0]], dtype=torch.float64, requires_grad=True)
    >>> y = layer_norm_identity(x, None, None, eps=0.0)
    >>> (g,) = torch.autograd.grad((y * y.detach()).sum(), x)
    >>> torch.isclose((x * g).sum(), (y * y).sum()).item()  # conserved: Σ R(x) = Σ R(y)
    True
    """
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    y = (x - mean) / (var + eps).sqrt().detach()
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def rms_norm_identity(x: Tensor, weight: Tensor, *, eps: float) -> Tensor:
    """Llama's RMSNorm with 1/rms detached: y = w · (x · sg(rsqrt(mean x² + eps))), in float32 as HF.

    The forward equals ``LlamaRMSNorm`` (which computes the normalisation in float32 and casts
    back before the gain); the backward is that of the linear map x ↦ w · x / rms (conservative).
    """
    dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps).detach()
    return weight * h.to(dtype)
